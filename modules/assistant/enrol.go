package assistant

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/fleetwright/fleetwright/modules/agent"
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
	// client dials the panel (a private CA from --panel-ca-file; no redirects).
	client *http.Client
	// caFile is --panel-ca-file ("": the system's CAs), named in errors.
	caFile string
	// acceptTasks: the person allows tasks started from the console.
	acceptTasks bool

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

// wsURL is the panel's agent endpoint. The token travels in the hello, so
// a cleartext panel (http://, ws://) is refused unless it is this machine.
func wsURL(panel string) (string, error) {
	if u, err := url.Parse(strings.TrimSpace(panel)); err == nil && (u.Scheme == "http" || u.Scheme == "ws") && u.Hostname() != "" &&
		!agent.IsLoopbackHost(u.Hostname()) {
		return "", fmt.Errorf("assistant: --panel %s is cleartext (%s://) to %s, which is not this machine: the assistant's token and its reports would cross the network readable; use https:// or wss:// (cleartext is accepted only on loopback)",
			u.Redacted(), u.Scheme, u.Hostname())
	}
	s, err := agent.WebSocketURL(panel)
	if err != nil {
		return "", fmt.Errorf("assistant: %w", err)
	}
	return s, nil
}

// retireAfter is how many "unknown token" answers in a row, from the
// panel installation that welcomed this assistant before, retire it (its
// agent was deleted without a tombstone): the agent's rule.
const retireAfter = 20

// rejected is the panel's refusal of the hello.
type rejected struct{ wire.Reject }

func (r rejected) Error() string {
	return fmt.Sprintf("the panel refused the assistant: %s: %s", r.Reason, r.Message)
}

// errRetired ends the enrolment for good (see retire).
type errRetired struct{ reason string }

func (e errRetired) Error() string { return "retired by the panel: " + e.reason }

func (e *enroller) run(ctx context.Context) {
	attempt, unknown := 0, 0
	for {
		welcomed, err := e.session(ctx)
		e.connected.Store(false)
		if ctx.Err() != nil {
			return
		}
		var rej rejected
		switch {
		case errors.As(err, &rej) && rej.Reason == wire.RejectRetired:
			err = errRetired{"the panel answers that this assistant's agent was deleted"}
		case errors.As(err, &rej) && rej.Reason == wire.RejectUnknownToken &&
			rej.InstallationID != "" && rej.InstallationID == e.r.setting(ctx, keyPanelInstallation, ""):
			if unknown++; unknown >= retireAfter {
				err = errRetired{fmt.Sprintf("the panel that enrolled it answered %d times in a row that it does not know its token", unknown)}
			}
		case errors.As(err, &rej) || welcomed:
			unknown = 0 // another answer breaks the run (a failed dial is no answer)
		}
		var ret errRetired
		if errors.As(err, &ret) {
			e.r.retire(ctx, ret.reason, e.fingerprint())
			return
		}
		if welcomed {
			attempt = 0
		}
		attempt++
		pause := time.Duration(1<<min(attempt, 6)) * time.Second // 2 s … 64 s
		e.r.setPanelState("disconnected from the panel: " + err.Error())
		e.r.Log.Warn("assistant: disconnected from the panel; reconnecting", "err", err, "retry_in", pause)
		select {
		case <-ctx.Done():
			return
		case <-e.r.Clock.After(pause):
		}
	}
}

// fingerprint names the token without revealing it (the retirement mark
// keeps it, so a new token enrols again and the retired one never does).
func (e *enroller) fingerprint() string {
	h := sha256.Sum256([]byte(e.token.Reveal()))
	return hex.EncodeToString(h[:8])
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
	conn, _, err := websocket.Dial(dctx, e.wsURL, &websocket.DialOptions{HTTPClient: e.client,
		HTTPHeader: http.Header{"User-Agent": {"fleetwright-assistant/" + e.build}}})
	if err != nil {
		return false, fmt.Errorf("dial %s: %w%s", e.wsURL, err, e.trustHint(err))
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
		return false, rejected{m}
	case wire.Welcome:
		if m.Version < wire.V4 {
			return false, fmt.Errorf("the panel chose protocol %d; enrolment needs 4", m.Version)
		}
		s.version = m.Version
		if err := e.r.St.SetSetting(ctx, keyPanelInstallation, m.InstallationID); err != nil {
			return false, err
		}
		if err := e.r.setPanelLimits(ctx, m.AssistantLimits); err != nil {
			return false, err
		}
		e.r.setPanelPause(ctx, m.Config.Paused, "paused by the panel")
		e.r.setPanelState("enrolled in the panel (agent " + m.AgentID + ")")
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

// trustHint says what to do when the panel's certificate is not trusted:
// no token left this machine, the TLS handshake failed first.
func (e *enroller) trustHint(err error) string {
	var ua x509.UnknownAuthorityError
	var ve *tls.CertificateVerificationError
	if !errors.As(err, &ua) && !(errors.As(err, &ve) && errors.As(ve.Err, &ua)) {
		return ""
	}
	if e.caFile == "" {
		return "; the panel's certificate is signed by a CA this machine does not trust (a private CA such as Caddy's \"tls internal\"?): give that CA's certificate with --panel-ca-file; the token was not sent"
	}
	return "; the panel's certificate is not signed by the CA in --panel-ca-file " + e.caFile + ": give the CA that signs the panel's certificate (Caddy: /var/lib/caddy/.local/share/caddy/pki/authorities/local/root.crt); the token was not sent"
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
			_ = s.send(ctx, wire.CommandResult{CommandID: id, OK: true})
			reason := "the panel retired it"
			if m.Reason != "" {
				reason += ": " + m.Reason
			}
			return errRetired{reason}
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
