package assistant

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fleetwright/fleetwright/modules/assistant/store"
	"github.com/fleetwright/fleetwright/modules/link"
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
	// client dials the panel (link.Client: a private CA from
	// --panel-ca-file; no redirects).
	client *http.Client
	// caFile is --panel-ca-file ("": the system's CAs), named in errors.
	caFile string
	// acceptTasks: the person allows tasks started from the console.
	acceptTasks bool

	connected atomic.Bool
}

// wsURL is the panel's agent endpoint (link.WebSocketURL: a cleartext
// panel is refused unless it is this machine, since the token travels in
// the hello).
func wsURL(panel string) (string, error) {
	s, err := link.WebSocketURL(panel)
	if err != nil {
		return "", fmt.Errorf("assistant: %w", err)
	}
	return s, nil
}

// errRetired ends the enrolment for good (see retire).
type errRetired struct{ reason string }

func (e errRetired) Error() string { return "retired by the panel: " + e.reason }

// run keeps the assistant connected, on the panel link's schedule: the
// network backoff after a drop, the authentication pauses after "unknown
// token" answers, and retirement on the link.RetireAfter-th in a row.
func (e *enroller) run(ctx context.Context) {
	retry := link.Retry{Installation: e.r.setting(ctx, keyPanelInstallation, "")}
	retry.Unknown, _ = strconv.Atoi(e.r.setting(ctx, keyUnknownTokens, "0"))
	for {
		welcome, err := e.session(ctx)
		e.connected.Store(false)
		if ctx.Err() != nil {
			return
		}
		var (
			rej   *link.Rejected
			pause time.Duration
		)
		if welcome != nil {
			retry.Welcomed(welcome.InstallationID)
		}
		switch {
		case errors.As(err, &rej) && rej.Reason == wire.RejectRetired:
			err = errRetired{"the panel answers that this assistant's agent was deleted"}
		case errors.As(err, &rej) && rej.Reason == wire.RejectUnknownToken:
			v := retry.UnknownToken(rej.InstallationID)
			pause = v.Pause
			if v.Counted {
				e.keepUnknown(ctx, retry.Unknown)
			}
			if v.Retire {
				err = errRetired{fmt.Sprintf("the panel that enrolled it answered %d times in a row that it does not know its token", retry.Unknown)}
			}
		default:
			pause = retry.Failed()
		}
		var ret errRetired
		if errors.As(err, &ret) {
			e.r.retire(ctx, ret.reason, e.fingerprint())
			return
		}
		e.r.setPanelState("disconnected from the panel: " + err.Error())
		e.r.Log.Warn("assistant: disconnected from the panel; reconnecting", "err", err, "retry_in", pause)
		select {
		case <-ctx.Done():
			return
		case <-e.r.Clock.After(pause):
		}
	}
}

// keepUnknown keeps the count of "unknown token" answers in the state, so a
// restart does not reset it (a welcome does).
func (e *enroller) keepUnknown(ctx context.Context, n int) {
	if err := e.r.St.SetSetting(ctx, keyUnknownTokens, strconv.Itoa(n)); err != nil {
		e.r.Log.Error("assistant: record the unknown-token count", "err", err)
	}
}

// fingerprint names the token without revealing it (the retirement mark
// keeps it, so a new token enrols again and the retired one never does).
func (e *enroller) fingerprint() string {
	h := sha256.Sum256([]byte(e.token.Reveal()))
	return hex.EncodeToString(h[:8])
}

// session runs one connection. It returns the welcome when there was one
// (nil: the panel did not welcome it) and why the connection ended.
func (e *enroller) session(ctx context.Context) (*wire.Welcome, error) {
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	c, err := link.Dialer{URL: e.wsURL, Client: e.client, CAFile: e.caFile, UserAgent: "fleetwright-assistant/" + e.build,
		WriteTimeout: 10 * time.Second}.Dial(dctx)
	if err != nil {
		return nil, err
	}
	defer c.CloseNow()
	// The assistant's messages exist from version 4 on.
	m, err := c.Hello(dctx, wire.Hello{Version: wire.Current, MinVersion: wire.V4, Build: e.build, Host: e.host, Clock: time.Now(), Token: e.token})
	if err != nil {
		return nil, err
	}
	// The count resets with the welcome (run's link.Retry), here first in
	// the state: a restart must not bring back answers a welcome broke.
	if err := e.r.St.SetSetting(ctx, keyPanelInstallation, m.InstallationID); err != nil {
		return &m, err
	}
	e.keepUnknown(ctx, 0)
	if err := e.r.setPanelLimits(ctx, m.AssistantLimits); err != nil {
		return &m, err
	}
	e.r.setPanelPause(ctx, m.Config.Paused, "paused by the panel")
	e.r.setPanelState("enrolled in the panel (agent " + m.AgentID + ")")
	e.r.Log.Info("assistant: enrolled in the panel", "agent_id", m.AgentID, "protocol", m.Version)
	e.connected.Store(true)
	errc := make(chan error, 1)
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { errc <- e.reader(sctx, c) }()
	tick := time.NewTicker(e.every)
	defer tick.Stop()
	for {
		if err := e.report(sctx, c); err != nil {
			return &m, err
		}
		select {
		case <-sctx.Done():
			return &m, nil
		case err := <-errc:
			return &m, err
		case <-tick.C:
		}
	}
}

func (e *enroller) reader(ctx context.Context, s *link.Conn) error {
	for {
		f, err := s.Read(ctx)
		if err != nil {
			return err
		}
		var id string
		ok, msg := true, ""
		switch m := f.Message.(type) {
		case wire.Ping:
			now := time.Now()
			if err := s.Send(ctx, wire.Pong{CommandID: m.CommandID, PingSentAt: m.SentAt, ReceivedAt: now, SentAt: time.Now()}); err != nil {
				return err
			}
			continue
		case wire.Configure:
			id = m.CommandID
			if err := e.r.setPanelLimits(ctx, m.AssistantLimits); err != nil {
				ok, msg = false, err.Error()
			}
			e.r.setPanelPause(ctx, m.Config.Paused, "paused by the panel")
		case wire.AssistantTaskStart:
			id = m.CommandID
			if err := e.panelTask(ctx, m); err != nil {
				ok, msg = false, err.Error()
			}
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
			_ = s.Send(ctx, wire.CommandResult{CommandID: id, OK: true})
			reason := "the panel retired it"
			if m.Reason != "" {
				reason += ": " + m.Reason
			}
			return errRetired{reason}
		case wire.PageTask:
			// The panel offers page tasks to every v4 connection of the
			// tenant; the assistant crawls nothing and says so at once, so
			// the page goes to a crawler instead of waiting out its timeout.
			if err := s.Send(ctx, wire.PageResult{TaskID: m.TaskID, URL: m.URL, Error: wire.PageNoCrawler}); err != nil {
				return err
			}
			continue
		case wire.Error:
			return fmt.Errorf("the panel reported a protocol error: %s %s", m.Code, m.Message)
		default:
			continue // claim-engine messages are not for the assistant
		}
		if err := s.Send(ctx, wire.CommandResult{CommandID: id, OK: ok, Error: msg}); err != nil {
			return err
		}
		if err := e.report(ctx, s); err != nil {
			return err
		}
	}
}

// report sends the state (paused) and the assistant report.
func (e *enroller) report(ctx context.Context, s *link.Conn) error {
	rep, err := e.r.Report(ctx)
	if err != nil {
		return err
	}
	rep.Model = e.model
	if err := s.Send(ctx, wire.State{Paused: rep.Paused}); err != nil {
		return err
	}
	return s.Send(ctx, rep)
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
	// What it did with the person's approval, so a summary written before
	// the approval ("asked to publish") is not the last word.
	if js, err := r.St.Journal(ctx, t.ID); err == nil {
		for _, e := range js {
			switch {
			case e.FinishedAt == nil:
				parts = append(parts, "approved, outcome unknown: "+clipText(e.What, 120))
			case e.Outcome == "done":
				parts = append(parts, "done with the person's approval: "+clipText(e.What, 120))
			default:
				parts = append(parts, "approved, "+clipText(e.Outcome, 60)+": "+clipText(e.What, 120))
			}
		}
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
