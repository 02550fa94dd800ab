package assistant

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/modules/assistant/store"
	"github.com/fleetwright/fleetwright/modules/wire"
)

func newTestRunner(t *testing.T) (*Runner, *clock.Fake) {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	clk := clock.NewFake(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	return &Runner{St: st, Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, clk
}

// addSteps records n steps of tokens each on a task.
func addSteps(t *testing.T, r *Runner, id int64, from, n, tokens int) {
	t.Helper()
	for i := range n {
		require.NoError(t, r.St.AddStep(context.Background(), store.Step{TaskID: id, N: from + i + 1, Tool: "list_tabs", Args: "{}",
			TokensIn: tokens, CreatedAt: r.Clock.Now()}))
	}
}

// Per limit, the lowest of the task's, the tenant's and the global one
// applies, and the stop reason names a panel's limit as such; the panel's
// limits hold after they arrive, and clearing them restores the task's.
func TestLowestOfTaskTenantAndGlobalLimitApplies(t *testing.T) {
	ctx := context.Background()
	r, _ := newTestRunner(t)
	id, err := r.St.CreateTask(ctx, "loop", []string{"http://127.0.0.1/"}, "stub", store.Limits{Steps: 10, Tokens: 1000}, r.Clock.Now())
	require.NoError(t, err)
	task, err := r.St.Task(ctx, id)
	require.NoError(t, err)
	ru := &run{task: task, started: r.Clock.Now()}
	addSteps(t, r, id, 0, 4, 10)

	reason, err := r.limit(ctx, ru)
	require.NoError(t, err)
	require.Empty(t, reason, "4 steps of 10: nothing stops yet")

	require.NoError(t, r.setPanelLimits(ctx, &wire.AssistantLimits{Tenant: wire.AssistantLimitSet{TaskSteps: 6}, Global: wire.AssistantLimitSet{TaskSteps: 4}}))
	reason, err = r.limit(ctx, ru)
	require.NoError(t, err)
	require.Equal(t, "limit reached: steps (4 of 4, the global limit)", reason)

	require.NoError(t, r.setPanelLimits(ctx, &wire.AssistantLimits{Tenant: wire.AssistantLimitSet{TaskSteps: 3}, Global: wire.AssistantLimitSet{TaskSteps: 4}}))
	reason, err = r.limit(ctx, ru)
	require.NoError(t, err)
	require.Equal(t, "limit reached: steps (4 of 3, the tenant's limit)", reason)

	// The panel's tokens cap is above the task's: the task's applies.
	require.NoError(t, r.setPanelLimits(ctx, &wire.AssistantLimits{Tenant: wire.AssistantLimitSet{TaskTokens: 5000}}))
	addSteps(t, r, id, 4, 6, 160) // 40 + 960 = 1000 tokens
	reason, err = r.limit(ctx, ru)
	require.NoError(t, err)
	require.Equal(t, "limit reached: steps (10 of 10, the task's limit)", reason, "the task's own limit")
	require.NoError(t, r.setPanelLimits(ctx, nil))
	require.Equal(t, wire.AssistantLimits{}, r.PanelLimits(ctx), "cleared")

	// Per day: the person's, the tenant's and the global daily limits.
	id2, err := r.St.CreateTask(ctx, "loop", []string{"http://127.0.0.1/"}, "stub", store.Limits{}, r.Clock.Now())
	require.NoError(t, err)
	task2, err := r.St.Task(ctx, id2)
	require.NoError(t, err)
	ru2 := &run{task: task2, started: r.Clock.Now()}
	require.NoError(t, r.St.SetSetting(ctx, keyDaySteps, "50"))
	reason, err = r.limit(ctx, ru2)
	require.NoError(t, err)
	require.Empty(t, reason)
	require.NoError(t, r.setPanelLimits(ctx, &wire.AssistantLimits{Global: wire.AssistantLimitSet{DaySteps: 10, DayTokens: 100000}}))
	reason, err = r.limit(ctx, ru2)
	require.NoError(t, err)
	require.Equal(t, "limit reached: steps today (10 of 10, the global limit)", reason)
	require.NoError(t, r.setPanelLimits(ctx, &wire.AssistantLimits{Tenant: wire.AssistantLimitSet{DayCostUSD: 0.5}}))
	reason, err = r.limit(ctx, ru2)
	require.NoError(t, err)
	require.Empty(t, reason, "no spend yet")

	// Spend per day: the panel's is its model_spend_day limit, named so;
	// the person's own is named as theirs.
	require.NoError(t, r.St.AddStep(ctx, store.Step{TaskID: id2, N: 1, Tool: "list_tabs", Args: "{}", CostMicro: 600000, CreatedAt: r.Clock.Now()}))
	reason, err = r.limit(ctx, ru2)
	require.NoError(t, err)
	require.Equal(t, "limit reached: spend today, UTC ($0.60 of $0.50, the tenant's model_spend_day limit)", reason)
	require.NoError(t, r.setPanelLimits(ctx, &wire.AssistantLimits{Tenant: wire.AssistantLimitSet{DayCostUSD: 0.7}, Global: wire.AssistantLimitSet{DayCostUSD: 0.000001}}))
	reason, err = r.limit(ctx, ru2)
	require.NoError(t, err)
	require.Equal(t, "limit reached: spend today, UTC ($0.60 of $0.000001, the global model_spend_day limit)", reason)
	require.NoError(t, r.setPanelLimits(ctx, nil))
	require.NoError(t, r.St.SetSetting(ctx, keyDayCost, "0.25"))
	reason, err = r.limit(ctx, ru2)
	require.NoError(t, err)
	require.Equal(t, "limit reached: spend today ($0.60 of $0.25, the person's limit)", reason)
	require.NoError(t, r.St.SetSetting(ctx, keyDayCost, "0"))

	// Tabs: the lowest cap and its note.
	ru2.task.Limits.Tabs = 5
	require.NoError(t, r.setPanelLimits(ctx, &wire.AssistantLimits{Tenant: wire.AssistantLimitSet{TaskTabs: 2}}))
	n, note := r.tabLimit(ctx, ru2)
	require.Equal(t, 2, n)
	require.Equal(t, ", the tenant's limit", note)
}

// A task from the console is taken only when the person allows it; then
// it is queued like any task and says where it came from.
func TestPanelTasksNeedThePersonsConsent(t *testing.T) {
	ctx := context.Background()
	r, _ := newTestRunner(t)
	r.init()
	m := wire.AssistantTaskStart{CommandID: "c1", Goal: "Read the brief", StartURLs: []string{"http://127.0.0.1:8075/brief"}, By: "ops@acme.test"}
	err := (&enroller{r: r}).panelTask(ctx, m)
	require.ErrorContains(t, err, "--accept-panel-tasks")
	ts, err := r.St.Tasks(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, ts, "nothing queued without consent")

	require.NoError(t, (&enroller{r: r, acceptTasks: true}).panelTask(ctx, m))
	ts, err = r.St.Tasks(ctx, 10)
	require.NoError(t, err)
	require.Len(t, ts, 1)
	require.Equal(t, store.StatusQueued, ts[0].Status)
	require.Equal(t, "the panel, by ops@acme.test", ts[0].Origin)

	m.StartURLs = []string{"file:///etc/passwd"}
	require.Error(t, (&enroller{r: r, acceptTasks: true}).panelTask(ctx, m), "the same URL checks as the person's tasks")
}

// Retirement: the retired token never enrols again; a new token does, and
// the panel's limits and pause no longer apply once retired.
func TestRetiredTokenNeverEnrolsAgain(t *testing.T) {
	ctx := context.Background()
	r, _ := newTestRunner(t)
	r.init()
	require.NoError(t, r.setPanelLimits(ctx, &wire.AssistantLimits{Tenant: wire.AssistantLimitSet{TaskSteps: 3}}))
	r.setPanelPause(ctx, true, "paused by the panel")
	r.retire(ctx, "the panel retired it: retired from the console", "fp-old")
	require.False(t, r.panelPaused.Load(), "the panel's pause is lifted")
	require.Equal(t, wire.AssistantLimits{}, r.PanelLimits(ctx), "the panel's limits are dropped")
	m, ok := r.Retired(ctx)
	require.True(t, ok)
	require.Equal(t, "fp-old", m.Token)
	require.Contains(t, r.PanelState(), "retired from the panel")

	ok, err := r.mayEnrol(ctx, "fp-old")
	require.NoError(t, err)
	require.False(t, ok, "the retired token is not used again")
	ok, err = r.mayEnrol(ctx, "fp-new")
	require.NoError(t, err)
	require.True(t, ok, "a new token enrols again")
	_, ok = r.Retired(ctx)
	require.False(t, ok, "and clears the mark")
}

// A cleartext panel is accepted only on this machine; elsewhere it is
// refused at start, before the state, the browser or the UI exist.
func TestCleartextRemotePanelIsRefused(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8080":        "ws://127.0.0.1:8080/agent/ws",
		"http://localhost:8080/":       "ws://localhost:8080/agent/ws",
		"http://[::1]:8080":            "ws://[::1]:8080/agent/ws",
		"https://panel.example":        "wss://panel.example/agent/ws",
		"wss://panel.example/agent/ws": "wss://panel.example/agent/ws",
	} {
		got, err := wsURL(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"http://panel.example", "http://192.0.2.10:8080", "ws://10.0.0.1/agent/ws", "http://127.0.0.1.example.com"} {
		_, err := wsURL(in)
		require.ErrorContains(t, err, "which is not this machine", in)
		require.ErrorContains(t, err, "use https:// or wss://", in)
	}
	_, err := wsURL("ftp://panel.example")
	require.ErrorContains(t, err, "https:// or wss://")

	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tok, []byte("tok\n"), 0o600))
	state := filepath.Join(dir, "state")
	err = Run(context.Background(), Config{Listen: "127.0.0.1:0", StateDir: state, Panel: "http://192.0.2.10:8080", TokenFile: tok},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.ErrorContains(t, err, "assistant: --panel http://192.0.2.10:8080 is cleartext (http://) to 192.0.2.10, which is not this machine")
	require.NoDirExists(t, state, "refused before anything was created")
}
