package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"net/url"
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
	fleetweb "github.com/fleetwright/fleetwright/modules/fleet/web"
	"github.com/fleetwright/fleetwright/modules/limit"
	"github.com/fleetwright/fleetwright/modules/wire"
	"github.com/fleetwright/fleetwright/views"
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
	dir := testenv.SharedTempDir(t) // the browser's user reaches the profile under it
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
	require.NoError(t, fleetweb.Rows(fleetweb.PageModel{Slug: "acme", Fleet: f, Now: time.Now()}).Render(ctx, &page))
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

// priced makes the scripted model a priced endpoint: every step then costs
// far more than a micro-dollar.
func priced(c *assistant.Config) { c.PriceIn, c.PriceOut = 1000, 1000 } // USD per million tokens

// enrolledAssistant starts an assistant enrolled in the panel at panelURL
// (a replica of b; "" starts one) with the scripted model and cfg changed
// by tweak, and waits until the panel holds its first report. report reads
// the panel's copy of the latest one.
func (b *bundle) enrolledAssistant(t *testing.T, panelURL, key string, script stub.Script, tweak func(*assistant.Config)) (h *eval.Harness, m *stub.Server, id string, report func() *wire.AssistantReport) {
	t.Helper()
	ctx := context.Background()
	if panelURL == "" {
		_, panelURL = b.replica(t, "a")
	}
	id, token := b.agent(t, key)
	dir := testenv.SharedTempDir(t) // the browser's user reaches the profile under it
	tok := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tok, []byte(token+"\n"), 0o600))
	h, err := eval.StartStudio()
	require.NoError(t, err)
	t.Cleanup(h.Close)
	m = stub.New(script, nil)
	ms := httptest.NewServer(m.Handler())
	t.Cleanup(ms.Close)
	cfg := assistant.Config{ModelURL: ms.URL, Model: "stub", StateDir: filepath.Join(dir, "state"), Panel: panelURL, TokenFile: tok,
		ReportEvery: 200 * time.Millisecond, Limits: store.Limits{Steps: 40, WallTime: 5 * time.Minute, Tabs: 6},
		EgressAllow: []string{"127.0.0.1/32"}, EgressPorts: []string{eval.Port(h.StudioURL)}}
	if tweak != nil {
		tweak(&cfg)
	}
	require.NoError(t, h.StartAssistant(ctx, cfg, testenv.Logger(t)))
	report = func() *wire.AssistantReport {
		f, err := b.store.List(ctx, b.tenant)
		require.NoError(t, err)
		for _, a := range f.Agents {
			if a.ID == id {
				return a.Assistant
			}
		}
		return nil
	}
	require.Eventually(t, func() bool { return b.read(t, id).Connected && report() != nil }, 60*time.Second, 100*time.Millisecond)
	return h, m, id, report
}

// homeShows waits until the assistant's home page shows want.
func homeShows(t *testing.T, h *eval.Harness, want string) {
	t.Helper()
	var home string
	require.Eventually(t, func() bool {
		_, body, err := h.Get("/")
		require.NoError(t, err)
		home = body
		return strings.Contains(home, want)
	}, 30*time.Second, 100*time.Millisecond, "the assistant's home page shows %q", want)
}

// The assistant's spend per day is modules/limit's model_spend_day: set
// with `fleetwright limit set` (the CLI, another process) it reaches the
// connected assistant at once, and the task it stops names the tenant's
// limit, raising an assistant.limit alarm; the global one set through the
// store reaches it the same way. The assistant limits refuse a spend per
// day of their own.
func TestModelSpendDayIsTheAssistantsSpendPerDay(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	loop := stub.Step{Tool: "list_tabs", Args: map[string]any{}}
	h, _, id, report := b.enrolledAssistant(t, "", "assistant-spend", stub.Script{Final: &loop}, priced)
	err := b.store.SetAssistantLimits(ctx, b.tenant, wire.AssistantLimitSet{TaskSteps: 30, DayCostUSD: 5}, ops)
	require.ErrorContains(t, err, "spend per day is the model_spend_day limit")

	// The CLI sets the tenant's limit: the assistant has it without
	// reconnecting (pushed in a configure command).
	bin := testenv.Binary(t)
	p := testenv.Start(t, bin, []string{"limit", "set", "model_spend_day", "0.000001", "--tenant=acme",
		"--database-url=" + b.db.OwnerURL, "--database-app-url=" + b.db.AppURL})
	require.Equal(t, 0, p.Wait(90*time.Second), p.Output())
	require.Contains(t, p.Output(), "tenant acme: model_spend_day set to $0.000001")
	homeShows(t, h, "tenant per day $0.000001 spend (model_spend_day)")
	require.Eventually(t, func() bool { return len(b.pending(t, id)) == 0 }, 15*time.Second, 50*time.Millisecond, "acknowledged")
	lim, err := b.store.AssistantLimits(ctx, b.tenant)
	require.NoError(t, err)
	require.InDelta(t, 0.000001, lim.Tenant.DayCostUSD, 1e-12)
	require.Zero(t, lim.Global.DayCostUSD)

	// A priced task runs one step, then stops at the tenant's limit.
	task, err := h.Submit("List the tabs", []string{h.StudioURL + "/brief"}, nil)
	require.NoError(t, err)
	tj, err := h.Wait(task, 60*time.Second, false, store.StatusStopped)
	require.NoError(t, err)
	require.Regexp(t, `^limit reached: spend today, UTC \(\$[0-9.]+ of \$0\.000001, the tenant's model_spend_day limit\)$`, tj.StopReason)
	require.Equal(t, 1, tj.Steps)
	key := fmt.Sprintf("%s/%d", id, task)
	require.Eventually(t, func() bool {
		open, err := alarm.IsOpen(ctx, b.db.App, b.tenant, fleet.AlarmAssistantLimit, key)
		require.NoError(t, err)
		return open
	}, 15*time.Second, 100*time.Millisecond, "the limit stop raised an alarm")
	open, err := alarm.ListTenant(ctx, b.db.App, b.tenant, true, 10)
	require.NoError(t, err)
	require.Len(t, open, 1, "one alarm: the task's, not a second for the same stop")
	require.Contains(t, open[0].Summary, "the tenant's model_spend_day limit")
	r := report()
	require.False(t, r.Paused, "the task stops; the assistant is not paused")

	// The global limit, through the store with the fleet's notifier.
	require.NoError(t, limit.Set(ctx, b.db.App, ops, limit.Global, limit.ModelSpendPerDay, 500000, true, fleet.LimitNotifier{}))
	homeShows(t, h, "global per day $0.50 spend (model_spend_day)")
	// Removed, it is gone from the assistant too.
	require.NoError(t, limit.Set(ctx, b.db.App, ops, b.tenant, limit.ModelSpendPerDay, 0, false, fleet.LimitNotifier{}))
	require.Eventually(t, func() bool {
		_, home, err := h.Get("/")
		require.NoError(t, err)
		return !strings.Contains(home, "tenant per day") && strings.Contains(home, "global per day $0.50")
	}, 30*time.Second, 100*time.Millisecond)
	require.ErrorContains(t, limit.Set(ctx, b.db.App, ops, b.tenant, limit.ModelSpendPerDay, 0, true), "would allow no spend at all")
}

// The panel's limits reach an enrolled assistant — the tenant's in its
// welcome, the installation's pushed when an admin lowers them — and the
// lowest applies, named in the stop reason; a task stopped at a limit
// raises an alarm. A task started from the console runs there (its person
// allowed it) and says where it came from. Retired from the panel, the
// assistant drops the panel's limits, works alone, and never enrols again
// with the retired token.
func TestPanelLimitsConsoleTaskAlarmAndRetirement(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	_, panelURL := b.replica(t, "a")
	id, token := b.agent(t, "assistant-limits")
	dir := testenv.SharedTempDir(t) // the browser's user reaches the profile under it
	tok := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tok, []byte(token+"\n"), 0o600))
	require.NoError(t, b.store.SetAssistantLimits(ctx, b.tenant, wire.AssistantLimitSet{TaskSteps: 3}, ops))
	require.NoError(t, limit.Set(ctx, b.db.App, ops, b.tenant, limit.ModelSpendPerDay, 5000000, true, fleet.LimitNotifier{}))
	require.Error(t, b.store.SetAssistantLimits(ctx, b.tenant, wire.AssistantLimitSet{TaskSteps: -1}, ops), "a negative limit is refused")

	h, err := eval.StartStudio()
	require.NoError(t, err)
	t.Cleanup(h.Close)
	loop := stub.Step{Tool: "list_tabs", Args: map[string]any{}}
	m := stub.New(stub.Script{Final: &loop}, nil)
	ms := httptest.NewServer(m.Handler())
	t.Cleanup(ms.Close)
	cfg := assistant.Config{ModelURL: ms.URL, Model: "stub", StateDir: filepath.Join(dir, "state"), Panel: panelURL, TokenFile: tok,
		AcceptPanelTasks: true, ReportEvery: 200 * time.Millisecond, Limits: store.Limits{Steps: 40, WallTime: 5 * time.Minute, Tabs: 6},
		EgressAllow: []string{"127.0.0.1/32"}, EgressPorts: []string{eval.Port(h.StudioURL)}}
	require.NoError(t, h.StartAssistant(ctx, cfg, testenv.Logger(t)))
	require.Eventually(t, func() bool {
		if !b.read(t, id).Connected {
			return false
		}
		f, err := b.store.List(ctx, b.tenant)
		require.NoError(t, err)
		for _, a := range f.Agents {
			if a.ID == id {
				return a.Assistant != nil
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond)
	_, home, err := h.Get("/")
	require.NoError(t, err)
	require.Contains(t, home, "tenant per task 3 steps; per day $5.00 spend (model_spend_day)", "the welcome carried the tenant's limits")

	// A task from the console, stopped by the tenant's limit: an alarm.
	_, err = b.store.StartAssistantTask(ctx, b.tenant, id, fleet.AssistantTaskInput{Goal: "List the tabs forever", URLs: []string{h.StudioURL + "/brief"}}, ops)
	require.NoError(t, err)
	var task assistant.TaskJSON
	require.Eventually(t, func() bool {
		ts, err := h.Tasks()
		require.NoError(t, err)
		if len(ts) == 1 {
			task = ts[0]
		}
		return len(ts) == 1 && task.Status == store.StatusStopped
	}, 60*time.Second, 100*time.Millisecond)
	require.Equal(t, "the panel, by ops@example.com", task.Origin)
	require.Equal(t, "limit reached: steps (3 of 3, the tenant's limit)", task.StopReason)
	key := fmt.Sprintf("%s/%d", id, task.ID)
	require.Eventually(t, func() bool {
		open, err := alarm.IsOpen(ctx, b.db.App, b.tenant, fleet.AlarmAssistantLimit, key)
		require.NoError(t, err)
		return open
	}, 15*time.Second, 100*time.Millisecond, "the limit stop raised an alarm")
	open, err := alarm.ListTenant(ctx, b.db.App, b.tenant, true, 10)
	require.NoError(t, err)
	require.Len(t, open, 1)
	require.Contains(t, open[0].Summary, "assistant agent-assistant-limits: task 1 stopped: limit reached: steps (3 of 3, the tenant's limit)")

	// The installation's lower limit is pushed to the connected assistant.
	require.NoError(t, b.store.SetAssistantLimits(ctx, "", wire.AssistantLimitSet{TaskSteps: 2}, ops))
	require.Eventually(t, func() bool {
		_, home, err := h.Get("/")
		require.NoError(t, err)
		return strings.Contains(home, "global per task 2 steps")
	}, 15*time.Second, 100*time.Millisecond)
	t2, err := h.Submit("List the tabs", []string{h.StudioURL + "/brief"}, nil)
	require.NoError(t, err)
	tj, err := h.Wait(t2, 60*time.Second, false, store.StatusStopped)
	require.NoError(t, err)
	require.Equal(t, "limit reached: steps (2 of 2, the global limit)", tj.StopReason)

	// The console shows the limits and the forms.
	lim, err := b.store.AssistantLimits(ctx, b.tenant)
	require.NoError(t, err)
	f, err := b.store.List(ctx, b.tenant)
	require.NoError(t, err)
	var page bytes.Buffer
	require.NoError(t, fleetweb.AssistantsPage(views.Page{Title: "Assistants"}, fleetweb.PageModel{Slug: "acme", Fleet: f, CanSteer: true, CanSettings: true, Limits: *lim, Now: time.Now()}).Render(ctx, &page))
	require.NoError(t, fleetweb.GlobalLimitsPage(views.Page{Title: "Assistant limits"}, lim.Global, true, "").Render(ctx, &page))
	for _, want := range []string{`data-testid="assistant-start-agent-assistant-limits"`, `data-testid="assistant-limits-tenant"`,
		`data-testid="assistant-limits-global"`, `name="task_steps" value="3"`, `name="task_steps" value="2"`, `<span class="mono">$5</span>`} {
		require.Contains(t, page.String(), want)
	}

	// Retired from the console: it works alone, without the panel's limits.
	require.NoError(t, b.store.Retire(ctx, b.tenant, id, "retired from the console", ops))
	require.Eventually(t, func() bool {
		_, home, err := h.Get("/")
		require.NoError(t, err)
		return strings.Contains(home, "retired from the panel")
	}, 15*time.Second, 100*time.Millisecond)
	t3, err := h.Submit("List the tabs", []string{h.StudioURL + "/brief"}, url.Values{"max_steps": {"4"}})
	require.NoError(t, err)
	tj, err = h.Wait(t3, 60*time.Second, false, store.StatusStopped)
	require.NoError(t, err)
	require.Equal(t, "limit reached: steps (4 of 4, the task's limit)", tj.StopReason, "the panel's limits no longer apply")

	// Restarted with the retired token, it does not try to enrol: it says
	// so from its start (a retirement it just lived through reads
	// "retired from the panel: …").
	require.NoError(t, h.StopAssistant())
	require.NoError(t, h.StartAssistant(ctx, cfg, testenv.Logger(t)))
	_, home, err = h.Get("/")
	require.NoError(t, err)
	require.Contains(t, home, "retired from the panel at ")
	require.Contains(t, home, "a new token enrols it again")
}

// A page task the panel offers an enrolled assistant (page tasks go to every
// v4 connection of the tenant) is answered at once with "no crawler", so the
// crawl gives the page to a crawler instead of waiting out the task's
// timeout; unanswered, each page of a run sat 75 s on the assistant.
func TestEnrolledAssistantRefusesPageTasksAtOnce(t *testing.T) {
	b := setup(t)
	g, url := b.replica(t, "a")
	_, _, id, _ := b.enrolledAssistant(t, url, "assistant-crawl", stub.Script{}, nil)
	require.Contains(t, g.CrawlAgents(b.tenant), id, "the assistant's connection is offered page tasks")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := g.Crawl(ctx, b.tenant, id, wire.PageTask{TaskID: "task-1", URL: "http://127.0.0.1:9/catalog", Kind: wire.PageListing, TimeoutMS: 60000})
	require.NoError(t, err)
	require.Equal(t, wire.PageNoCrawler, res.Error)
}
