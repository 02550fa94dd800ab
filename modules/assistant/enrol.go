package assistant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/fleetwright/fleetwright/modules/assistant/store"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// enroller keeps an enrolled assistant connected to the panel as a worker
// of the kind "assistant": it reports its tasks, spend, pending approvals
// and progress, and obeys the panel's pause (global, tenant or its own).
// The panel's welcome may carry the enrolling account's platform
// credentials and worker specs: the assistant ignores and never stores
// them. Approvals stay on the person's machine; the console only shows
// that one is pending.
type enroller struct {
	r     *Runner
	wsURL string
	token wire.Secret
	build string
	host  string
	every time.Duration
	model string

	connected atomic.Bool
}

// readToken reads the enrolment token from a 0600 file.
func readToken(path string) (wire.Secret, error) {
	st, err := os.Stat(path)
	if err != nil {
		return wire.Secret{}, fmt.Errorf("assistant: --token-file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return wire.Secret{}, fmt.Errorf("assistant: %s is readable by others (mode %o): chmod 600 %s", path, st.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return wire.Secret{}, fmt.Errorf("assistant: --token-file: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return wire.Secret{}, fmt.Errorf("assistant: %s is empty", path)
	}
	return wire.NewSecret(t), nil
}

func wsURL(panel string) (string, error) {
	switch {
	case strings.HasPrefix(panel, "http://"):
		return "ws://" + strings.TrimSuffix(strings.TrimPrefix(panel, "http://"), "/") + "/agent/ws", nil
	case strings.HasPrefix(panel, "https://"):
		return "wss://" + strings.TrimSuffix(strings.TrimPrefix(panel, "https://"), "/") + "/agent/ws", nil
	}
	return "", fmt.Errorf("assistant: --panel %q must be an http(s):// URL", panel)
}

func (e *enroller) run(ctx context.Context) {
	attempt := 0
	for {
		welcomed, err := e.session(ctx)
		e.connected.Store(false)
		if ctx.Err() != nil {
			return
		}
		if welcomed {
			attempt = 0
		}
		attempt++
		pause := time.Duration(1<<min(attempt, 6)) * time.Second // 2 s … 64 s
		e.r.Log.Warn("assistant: disconnected from the panel; reconnecting", "err", err, "retry_in", pause)
		select {
		case <-ctx.Done():
			return
		case <-e.r.Clock.After(pause):
		}
	}
}

type wsSession struct {
	conn    *websocket.Conn
	version int
}

func (s *wsSession) send(ctx context.Context, m wire.Message) error {
	b, err := wire.Encode(s.version, wire.Frame{Time: time.Now(), Message: m})
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return s.conn.Write(wctx, websocket.MessageText, b)
}

func (s *wsSession) read(ctx context.Context) (wire.Frame, error) {
	typ, b, err := s.conn.Read(ctx)
	if err != nil {
		return wire.Frame{}, err
	}
	if typ != websocket.MessageText {
		return wire.Frame{}, errors.New("the panel sent a binary message")
	}
	return wire.Decode(b)
}

func (e *enroller) session(ctx context.Context) (bool, error) {
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(dctx, e.wsURL, &websocket.DialOptions{HTTPHeader: http.Header{"User-Agent": {"fleetwright-assistant/" + e.build}}})
	if err != nil {
		return false, fmt.Errorf("dial %s: %w", e.wsURL, err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(wire.MaxMessageBytes)
	s := &wsSession{conn: conn, version: wire.Current}
	// The assistant's messages exist from version 4 on.
	if err := s.send(ctx, wire.Hello{Version: wire.Current, MinVersion: wire.V4, Build: e.build, Host: e.host, Clock: time.Now(), Token: e.token}); err != nil {
		return false, err
	}
	f, err := s.read(dctx)
	if err != nil {
		return false, err
	}
	switch m := f.Message.(type) {
	case wire.Reject:
		return false, fmt.Errorf("the panel refused the assistant: %s: %s", m.Reason, m.Message)
	case wire.Welcome:
		if m.Version < wire.V4 {
			return false, fmt.Errorf("the panel chose protocol %d; enrolment needs 4", m.Version)
		}
		s.version = m.Version
		e.r.setPanelPause(ctx, m.Config.Paused, "paused by the panel")
		e.r.Log.Info("assistant: enrolled in the panel", "agent_id", m.AgentID, "protocol", m.Version)
	default:
		return false, fmt.Errorf("expected welcome, got %s", f.Type)
	}
	e.connected.Store(true)
	errc := make(chan error, 1)
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { errc <- e.reader(sctx, s) }()
	tick := time.NewTicker(e.every)
	defer tick.Stop()
	for {
		if err := e.report(sctx, s); err != nil {
			return true, err
		}
		select {
		case <-sctx.Done():
			return true, nil
		case err := <-errc:
			return true, err
		case <-tick.C:
		}
	}
}

func (e *enroller) reader(ctx context.Context, s *wsSession) error {
	for {
		f, err := s.read(ctx)
		if err != nil {
			return err
		}
		var id string
		ok, msg := true, ""
		switch m := f.Message.(type) {
		case wire.Ping:
			now := time.Now()
			if err := s.send(ctx, wire.Pong{CommandID: m.CommandID, PingSentAt: m.SentAt, ReceivedAt: now, SentAt: time.Now()}); err != nil {
				return err
			}
			continue
		case wire.Configure:
			id = m.CommandID
			e.r.setPanelPause(ctx, m.Config.Paused, "paused by the panel")
		case wire.Pause:
			id = m.CommandID
			e.r.setPanelPause(ctx, true, "paused by the panel: "+m.Reason)
		case wire.Resume:
			id = m.CommandID
			e.r.setPanelPause(ctx, false, "")
		case wire.RestartWorker:
			id, ok, msg = m.CommandID, false, "the assistant runs no platform workers"
		case wire.RotateCredentials:
			id, ok, msg = m.CommandID, false, "the assistant keeps no platform credentials"
		case wire.Retire:
			id = m.CommandID
			_ = s.send(ctx, wire.CommandResult{CommandID: id, OK: true})
			return errors.New("the panel retired this assistant: it works alone until it is enrolled again")
		case wire.Error:
			return fmt.Errorf("the panel reported a protocol error: %s %s", m.Code, m.Message)
		default:
			continue // claim-engine messages are not for the assistant
		}
		if err := s.send(ctx, wire.CommandResult{CommandID: id, OK: ok, Error: msg}); err != nil {
			return err
		}
		if err := e.report(ctx, s); err != nil {
			return err
		}
	}
}

// report sends the state (paused) and the assistant report.
func (e *enroller) report(ctx context.Context, s *wsSession) error {
	rep, err := e.r.Report(ctx)
	if err != nil {
		return err
	}
	rep.Model = e.model
	if err := s.send(ctx, wire.State{Paused: rep.Paused}); err != nil {
		return err
	}
	return s.send(ctx, rep)
}

// Report builds the progress report the panel's console shows: no page
// text beyond a held element's label, no draft, no secret.
func (r *Runner) Report(ctx context.Context) (wire.AssistantReport, error) {
	rep := wire.AssistantReport{Paused: r.setting(ctx, keyPaused, "") == "1" || r.panelPaused.Load()}
	now := r.Clock.Now()
	u, err := r.St.UsageSince(ctx, time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, now.Location()))
	if err != nil {
		return rep, err
	}
	rep.TokensToday, rep.CostTodayUSD = u.Tokens, float64(u.CostMicro)/1e6
	tasks, err := r.St.Tasks(ctx, 20)
	if err != nil {
		return rep, err
	}
	pending, err := r.St.PendingApprovals(ctx)
	if err != nil {
		return rep, err
	}
	for _, t := range tasks {
		at := wire.AssistantTask{ID: t.ID, Goal: clipText(t.Goal, 200), Status: t.Status, StopReason: clipText(t.StopReason, 300), Steps: t.Steps,
			Tokens: t.TokensIn + t.TokensOut, CostUSD: float64(t.CostMicro) / 1e6, UpdatedAt: t.UpdatedAt}
		for n := range t.Tabs {
			at.Tabs = append(at.Tabs, n)
		}
		at.Progress = r.progress(ctx, t)
		for _, a := range pending {
			if a.TaskID == t.ID {
				var act Action
				_ = json.Unmarshal([]byte(a.Action), &act)
				at.PendingApproval = clipText(act.Kind+" “"+act.Text+"” → "+act.Target+"?", 200)
			}
		}
		rep.Tasks = append(rep.Tasks, at)
	}
	return rep, nil
}

// progress says in a few words what the task did: its tabs, drafts and
// label, and its last steps.
func (r *Runner) progress(ctx context.Context, t store.Task) string {
	steps, err := r.St.Steps(ctx, t.ID)
	if err != nil {
		return ""
	}
	var parts []string
	tabs := []string{}
	drafted, labelled := false, false
	for _, s := range steps {
		switch s.Tool {
		case "open_tab":
			var a openTabArgs
			if json.Unmarshal([]byte(s.Args), &a) == nil && s.Error == "" && !strings.HasPrefix(s.Result, "error") {
				tabs = append(tabs, a.Name)
			}
		case "write_draft":
			drafted = true
		case "type":
			labelled = labelled || strings.Contains(s.Result, "with the label")
		}
	}
	if len(tabs) > 0 {
		parts = append(parts, fmt.Sprintf("opened %d tabs: %s", len(tabs), strings.Join(tabs, ", ")))
	}
	if drafted {
		parts = append(parts, "drafted a post")
	}
	if labelled {
		parts = append(parts, "labelled as AI-generated")
	}
	if len(steps) > 0 {
		parts = append(parts, "last step: "+steps[len(steps)-1].Tool)
	}
	return strings.Join(parts, " · ")
}

// setPanelPause applies the panel's pause (global, tenant or this
// assistant's): running tasks stop at their next step; lifting it resumes
// the tasks it paused unless the person's own switch is on.
func (r *Runner) setPanelPause(ctx context.Context, on bool, reason string) {
	r.init()
	was := r.panelPaused.Swap(on)
	if on == was {
		return
	}
	r.mu.Lock()
	r.panelReason = reason
	r.mu.Unlock()
	r.Log.Info("assistant: the panel's pause", "on", on, "reason", reason)
	if on || r.setting(ctx, keyPaused, "") == "1" {
		return
	}
	tasks, err := r.St.Tasks(ctx, 200)
	if err != nil {
		return
	}
	for _, t := range tasks {
		if t.Status == store.StatusPaused {
			_ = r.Resume(ctx, t.ID)
		}
	}
}
