package assistant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fleetwright/fleetwright/modules/wire"
)

// Settings keys of the enrolment.
const (
	// keyPanelInstallation is the installation id of the panel that last
	// welcomed this assistant: only its "unknown token" answers count
	// toward retirement.
	keyPanelInstallation = "panel_installation"
	// keyUnknownTokens counts the "unknown token" answers in a row that
	// count toward retirement (link.Retry); a welcome resets it.
	keyUnknownTokens = "panel_unknown_tokens"
	// keyRetired marks a retirement from the panel (JSON of retiredMark).
	keyRetired = "retired_from_panel"
)

// retiredMark is what the assistant keeps of its retirement: when, why and
// which token (a fingerprint, never the token). That token never enrols
// again; a new one does.
type retiredMark struct {
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
	Token  string    `json:"token"`
}

// Retired returns the retirement mark, if the panel retired this assistant.
func (r *Runner) Retired(ctx context.Context) (retiredMark, bool) {
	var m retiredMark
	v := r.setting(ctx, keyRetired, "")
	if v == "" || json.Unmarshal([]byte(v), &m) != nil {
		return m, false
	}
	return m, true
}

// retire is the rule for an enrolled assistant the panel retires (a retire
// command, a "retired" answer, or 20 "unknown token" answers in a row from
// the panel that enrolled it): it stops connecting, the panel's limits and
// pause no longer apply, and it keeps working alone for its person with
// everything it has — its tasks, drafts, secrets and profile are the
// person's, not the panel's. The retired token is remembered (as a
// fingerprint) and never used again; starting with a new token enrols it
// again. The token file is the person's and is left alone.
func (r *Runner) retire(ctx context.Context, reason, token string) {
	b, _ := json.Marshal(retiredMark{At: r.Clock.Now().UTC(), Reason: reason, Token: token})
	if err := r.St.SetSetting(ctx, keyRetired, string(b)); err != nil {
		r.Log.Error("assistant: record the retirement", "err", err)
	}
	if err := r.setPanelLimits(ctx, nil); err != nil {
		r.Log.Error("assistant: drop the panel's limits", "err", err)
	}
	r.setPanelPause(ctx, false, "")
	r.setPanelState("retired from the panel: " + reason + "; it works alone (a new token enrols it again)")
	r.Log.Warn("assistant: retired from the panel; working alone", "reason", reason)
}

// mayEnrol applies the retirement rule at start: the retired token is
// refused, a new one clears the mark.
func (r *Runner) mayEnrol(ctx context.Context, token string) (bool, error) {
	m, ok := r.Retired(ctx)
	if !ok {
		return true, nil
	}
	if m.Token == token {
		r.setPanelState("retired from the panel at " + m.At.Format(time.RFC3339) + ": " + m.Reason + "; it works alone (a new token enrols it again)")
		r.Log.Warn("assistant: this token was retired by the panel; working alone", "at", m.At, "reason", m.Reason)
		return false, nil
	}
	if err := r.St.SetSetting(ctx, keyRetired, ""); err != nil {
		return false, fmt.Errorf("assistant: %w", err)
	}
	r.Log.Info("assistant: a new token: enrolling again after a retirement", "retired_at", m.At)
	return true, nil
}

func (r *Runner) setPanelState(s string) {
	r.mu.Lock()
	r.panelState = s
	r.mu.Unlock()
}

// PanelState describes the enrolment for the UI ("" when not enrolled).
func (r *Runner) PanelState() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.panelState
}

// panelTask takes a task started from the console, if the person allows
// it: it runs like any other, behind the same gate, and says where it
// came from.
func (e *enroller) panelTask(ctx context.Context, m wire.AssistantTaskStart) error {
	if !e.acceptTasks {
		return errors.New("this assistant does not take tasks from the panel: its person starts it with --accept-panel-tasks to allow them")
	}
	by := strings.TrimSpace(m.By)
	if by == "" {
		by = "an operator"
	}
	id, err := e.r.submit(ctx, m.Goal, m.StartURLs, nil, "the panel, by "+clipText(by, 200))
	if err != nil {
		return err
	}
	e.r.Log.Info("assistant: task from the panel", "task", id, "by", by)
	return nil
}
