package fleet_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/assistant"
	"github.com/fleetwright/fleetwright/modules/assistant/eval"
	"github.com/fleetwright/fleetwright/modules/assistant/model/stub"
	"github.com/fleetwright/fleetwright/modules/assistant/store"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/limit"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// An assistant enrolled with an agent token (protocol v4) reports its task
// to the panel: the fleet page shows the task, its progress across three
// tabs, its spend and the approval waiting on the person's machine; the
// tenant's pause stops the assistant's next task, and resuming lets it run.
func TestEnrolledAssistantShowsItsTaskAndObeysThePause(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	_, url := b.replica(t, "a")
	id, token := b.agent(t, "assistant-home")
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tok, []byte(token+"\n"), 0o600))

	h, err := eval.StartStudio()
	require.NoError(t, err)
	t.Cleanup(h.Close)
	m := stub.New(stub.Scripts["post"], nil)
	ms := httptest.NewServer(m.Handler())
	t.Cleanup(ms.Close)
	cfg := assistant.Config{ModelURL: ms.URL, Model: "stub", StateDir: filepath.Join(dir, "state"), Panel: url, TokenFile: tok,
		ReportEvery: 200 * time.Millisecond, Limits: store.Limits{Steps: 40, WallTime: 5 * time.Minute, Tabs: 6},
		EgressAllow: []string{"127.0.0.1/32"}, EgressPorts: []string{eval.Port(h.StudioURL)}}
	require.NoError(t, h.StartAssistant(ctx, cfg, testenv.Logger(t)))

	report := func() *wire.AssistantReport {
		f, err := b.store.List(ctx, b.tenant)
		require.NoError(t, err)
		for _, a := range f.Agents {
			if a.ID == id {
				return a.Assistant
			}
		}
		return nil
	}
	require.Eventually(t, func() bool { return b.read(t, id).Connected && report() != nil }, 30*time.Second, 100*time.Millisecond)

	urls := []string{h.StudioURL + "/brief", h.StudioURL + "/drafts", h.StudioURL + "/calendar"}
	task, err := h.Submit("Draft the launch post from the brief and publish it.", urls, nil)
	require.NoError(t, err)
	_, err = h.Wait(task, 90*time.Second, true)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r := report()
		return r != nil && len(r.Tasks) == 1 && r.Tasks[0].PendingApproval != ""
	}, 10*time.Second, 100*time.Millisecond)
	r := report()
	require.Equal(t, store.StatusWaiting, r.Tasks[0].Status)
	require.Contains(t, r.Tasks[0].Progress, "opened 3 tabs: brief, drafts, calendar")
	require.Contains(t, r.Tasks[0].Progress, "labelled as AI-generated")
	require.Contains(t, r.Tasks[0].PendingApproval, "Publish")
	require.Positive(t, r.TokensToday)

	f, err := b.store.List(ctx, b.tenant)
	require.NoError(t, err)
	var page bytes.Buffer
	require.NoError(t, fleet.Rows(fleet.PageModel{Slug: "acme", Fleet: f, Now: time.Now()}).Render(ctx, &page))
	html := page.String()
	for _, want := range []string{`data-testid="assistant-agent-assistant-home"`, "task 1 of 1", "awaiting approval", "opened 3 tabs: brief, drafts, calendar", "Publish"} {
		require.True(t, strings.Contains(html, want), "the fleet page shows %q", want)
	}

	tj, err := h.Task(task)
	require.NoError(t, err)
	require.NoError(t, h.Decide(tj.Pending[0], false))
	_, err = h.Wait(task, 60*time.Second, false, store.StatusDone)
	require.NoError(t, err)

	// The tenant's pause reaches the assistant: its next task waits paused.
	claims := claim.NewStore(b.db.App, nil)
	claims.SetAgentNotifier(fleet.PauseNotifier{})
	require.NoError(t, claims.SetPaused(ctx, ops, b.tenant, true))
	require.Eventually(t, func() bool { r := report(); return r != nil && r.Paused }, 15*time.Second, 100*time.Millisecond)
	require.Eventually(t, func() bool { return len(b.pending(t, id)) == 0 }, 10*time.Second, 50*time.Millisecond, "acknowledged")
	m.SetScript(stub.Script{Steps: []stub.Step{{Tool: "open_tab", Args: map[string]any{"name": "brief", "url": "$url:/brief"}}}})
	task2, err := h.Submit("Read the brief.", urls[:1], nil)
	require.NoError(t, err)
	t2, err := h.Wait(task2, 30*time.Second, false, store.StatusPaused)
	require.NoError(t, err)
	require.Contains(t, t2.StopReason, "paused by the panel")
	require.Zero(t, t2.Steps)

	require.NoError(t, claims.SetPaused(ctx, ops, b.tenant, false))
	_, err = h.Wait(task2, 30*time.Second, false, store.StatusDone)
	require.NoError(t, err)
	require.Eventually(t, func() bool { r := report(); return r != nil && !r.Paused && len(r.Tasks) == 2 }, 15*time.Second, 100*time.Millisecond)
}

// An enrolled assistant whose model spend today reaches its tenant's
// model_spend_day limit (modules/limit) is paused by the panel with the
// limit as the reason: audited, a limit.reached alarm, and its next task
// waits paused.
func TestAssistantOverItsSpendLimitIsPaused(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	_, url := b.replica(t, "a")
	id, token := b.agent(t, "assistant-spend")
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tok, []byte(token+"\n"), 0o600))
	require.NoError(t, limit.Set(ctx, b.db.App, ops, b.tenant, limit.ModelSpendPerDay, 1, true)) // one micro-dollar

	h, err := eval.StartStudio()
	require.NoError(t, err)
	t.Cleanup(h.Close)
	m := stub.New(stub.Script{Steps: []stub.Step{{Tool: "open_tab", Args: map[string]any{"name": "brief", "url": "$url:/brief"}}}}, nil)
	ms := httptest.NewServer(m.Handler())
	t.Cleanup(ms.Close)
	cfg := assistant.Config{ModelURL: ms.URL, Model: "stub", StateDir: filepath.Join(dir, "state"), Panel: url, TokenFile: tok,
		PriceIn: 1000, PriceOut: 1000, // USD per million tokens: any step costs more than the limit
		ReportEvery: 200 * time.Millisecond, Limits: store.Limits{Steps: 40, WallTime: 5 * time.Minute, Tabs: 6},
		EgressAllow: []string{"127.0.0.1/32"}, EgressPorts: []string{eval.Port(h.StudioURL)}}
	require.NoError(t, h.StartAssistant(ctx, cfg, testenv.Logger(t)))
	require.Eventually(t, func() bool { return b.read(t, id).Connected }, 30*time.Second, 100*time.Millisecond)

	task, err := h.Submit("Read the brief.", []string{h.StudioURL + "/brief"}, nil)
	require.NoError(t, err)
	_, err = h.Wait(task, 60*time.Second, false, store.StatusDone)
	require.NoError(t, err)
	report := func() *wire.AssistantReport {
		f, err := b.store.List(ctx, b.tenant)
		require.NoError(t, err)
		for _, a := range f.Agents {
			if a.ID == id {
				return a.Assistant
			}
		}
		return nil
	}
	require.Eventually(t, func() bool { r := report(); return r != nil && r.Paused }, 15*time.Second, 100*time.Millisecond,
		"the panel paused the assistant")
	open, err := alarm.ListTenant(ctx, b.db.App, b.tenant, true, 10)
	require.NoError(t, err)
	require.Len(t, open, 1)
	require.Equal(t, limit.AlarmKind, open[0].Kind)
	require.Contains(t, open[0].Summary, "assistant agent-assistant-spend stopped: limit: model_spend_day $0.000001 (tenant limit)")

	task2, err := h.Submit("Read the brief.", []string{h.StudioURL + "/brief"}, nil)
	require.NoError(t, err)
	t2, err := h.Wait(task2, 30*time.Second, false, store.StatusPaused)
	require.NoError(t, err)
	require.Contains(t, t2.StopReason, "paused by the panel")
	require.Zero(t, t2.Steps)
}
