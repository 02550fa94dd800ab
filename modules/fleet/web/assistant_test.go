package web_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/assistant"
	"github.com/fleetwright/fleetwright/modules/assistant/eval"
	"github.com/fleetwright/fleetwright/modules/assistant/model/stub"
	"github.com/fleetwright/fleetwright/modules/assistant/store"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/fleet/gateway"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// post sends a form as a browser on the console's own page does: the
// Origin and Sec-Fetch-Site the cross-origin protection reads.
func post(t *testing.T, c *paneltest.Console, cl *http.Client, path string, form url.Values, site string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.Server.URL+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", site)
	if site == "same-origin" {
		req.Header.Set("Origin", c.Server.URL)
	} else {
		req.Header.Set("Origin", "https://evil.example")
	}
	res, err := cl.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// TestAssistantConsoleRoutes drives the console's assistant routes through
// the panel's real router with signed-in sessions: a task started from the
// fleet page reaches an enrolled assistant as a v4 assistant_task and runs
// only once its person allows tasks from the panel; the tenant's and the
// global limits are set through the forms and reach the assistant; a
// viewer, an operator on the global limits and a cross-site post are
// refused (403); bad values are refused (422) with what is wrong, and
// change nothing.
func TestAssistantConsoleRoutes(t *testing.T) {
	c := paneltest.New(t)
	ctx := context.Background()
	a := c.Tenant(t, "alpha")
	const pw = "correct horse battery"
	c.User(t, "admin@fleet.test", auth.Admin, pw)
	op := c.User(t, "op@fleet.test", auth.Operator, pw)
	viewer := c.User(t, "viewer@fleet.test", auth.Viewer, pw)
	c.Grant(t, op, a)
	c.Grant(t, viewer, a)
	admin, oper, view := paneltest.Browserless(), paneltest.Browserless(), paneltest.Browserless()
	c.Enrolled(t, admin, "admin@fleet.test", pw)
	c.Enrolled(t, oper, "op@fleet.test", pw)
	c.Enrolled(t, view, "viewer@fleet.test", pw)

	// The panel's agent gateway on the console's database.
	var inst, replica string
	require.NoError(t, c.DB.App.QueryRow(ctx, "SELECT id::text, gen_random_uuid()::text FROM installation").Scan(&inst, &replica))
	g := gateway.New(c.Fleet, nil, gateway.Config{ReplicaID: replica, InstallationID: inst, PollEvery: time.Hour}, testenv.Logger(t))
	r := chi.NewRouter()
	r.Get("/agent/ws", g.ServeHTTP)
	gw := httptest.NewServer(r)
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); g.Listen(lctx, c.DB.AppURL) }()
	t.Cleanup(func() { g.CloseAll(); gw.Close(); cancel(); <-done })

	acct, err := c.Fleet.CreateAccount(ctx, a.ID, fleet.AccountInput{Key: "home", BoardURL: "http://127.0.0.1:9", Client: "alpha",
		Username: "dispatch", Password: "Board-Password-1", TOTPSecret: "JBSWY3DPEHPK3PXP"}, paneltest.By)
	require.NoError(t, err)
	id, token, err := c.Fleet.CreateAgent(ctx, a.ID, acct, "agent-home", paneltest.By)
	require.NoError(t, err)
	dir := testenv.SharedTempDir(t) // the browser's user reaches the profile under it
	tok := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tok, []byte(token+"\n"), 0o600))
	h, err := eval.StartStudio()
	require.NoError(t, err)
	t.Cleanup(h.Close)
	ms := httptest.NewServer(stub.New(stub.Script{}, nil).Handler()) // the model finishes at once
	t.Cleanup(ms.Close)
	cfg := assistant.Config{ModelURL: ms.URL, Model: "stub", StateDir: filepath.Join(dir, "state"), Panel: gw.URL, TokenFile: tok,
		ReportEvery: 200 * time.Millisecond, Limits: store.Limits{Steps: 10, WallTime: 5 * time.Minute, Tabs: 4},
		EgressAllow: []string{"127.0.0.1/32"}, EgressPorts: []string{eval.Port(h.StudioURL)}}
	// Enrolled: the assistant says so, and the panel holds its report.
	reported := func() bool {
		_, home, err := h.Get("/")
		require.NoError(t, err)
		if !strings.Contains(home, "enrolled in the panel") {
			return false
		}
		f, err := c.Fleet.List(ctx, a.ID)
		require.NoError(t, err)
		for _, ag := range f.Agents {
			if ag.ID == id {
				return ag.Assistant != nil
			}
		}
		return false
	}
	require.NoError(t, h.StartAssistant(ctx, cfg, testenv.Logger(t)))
	require.Eventually(t, reported, 60*time.Second, 100*time.Millisecond)

	type command struct {
		OK    *bool
		Error *string
	}
	taskCommands := func() []command {
		var out []command
		require.NoError(t, db.InTenant(ctx, c.DB.App, a.ID, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT ok, error FROM agent_commands WHERE agent_id = $1 AND kind = $2 ORDER BY created_at, id`, id, fleet.CmdAssistantTask)
			if err != nil {
				return err
			}
			out, err = pgx.CollectRows(rows, pgx.RowToStructByPos[command])
			return err
		}))
		return out
	}
	home := func() string {
		_, body, err := h.Get("/")
		require.NoError(t, err)
		return body
	}

	res, body := paneltest.Do(t, oper, "GET", c.Server.URL+"/t/alpha/fleet/assistants", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="assistant-start-agent-home"`)
	require.Contains(t, body, `data-testid="assistant-spend-tenant"`)
	require.NotContains(t, body, `name="day_cost_usd"`, "spend per day has no field of its own here")

	// Starting a task.
	taskPath := "/t/alpha/fleet/agents/" + id + "/assistant-task"
	good := url.Values{"goal": {"Read the brief"}, "urls": {h.StudioURL + "/brief\n"}}
	res, _ = post(t, c, oper, taskPath, good, "cross-site")
	require.Equal(t, http.StatusForbidden, res.StatusCode, "a cross-site post is refused before any handler")
	res, _ = post(t, c, view, taskPath, good, "same-origin")
	require.Equal(t, http.StatusForbidden, res.StatusCode, "a viewer may not start a task")
	for _, bad := range []struct {
		form url.Values
		want string
	}{
		{url.Values{"goal": {"  "}, "urls": {h.StudioURL + "/brief"}}, "The task was not started: the task needs a goal of at most 2,000 characters."},
		{url.Values{"goal": {"Read"}, "urls": {"file:///etc/passwd"}}, "start URL &#34;file:///etc/passwd&#34; is not an absolute http(s) URL without user info"},
		{url.Values{"goal": {"Read"}, "urls": {""}}, "give one to ten start URLs"},
	} {
		res, body = post(t, c, oper, taskPath, bad.form, "same-origin")
		require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode, bad.form)
		require.Contains(t, body, `data-testid="form-error"`)
		require.Contains(t, body, bad.want)
	}
	require.Empty(t, taskCommands(), "nothing refused was sent")

	// Sent, but the person has not allowed tasks from the panel.
	res, _ = post(t, c, oper, taskPath, good, "same-origin")
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "/t/alpha/fleet", res.Header.Get("Location"))
	require.Eventually(t, func() bool { cs := taskCommands(); return len(cs) == 1 && cs[0].OK != nil }, 30*time.Second, 100*time.Millisecond)
	cs := taskCommands()
	require.False(t, *cs[0].OK)
	require.Contains(t, *cs[0].Error, "--accept-panel-tasks")
	ts, err := h.Tasks()
	require.NoError(t, err)
	require.Empty(t, ts, "the assistant took no task")

	// Restarted with --accept-panel-tasks, it takes the next one.
	require.NoError(t, h.StopAssistant())
	cfg.AcceptPanelTasks = true
	require.NoError(t, h.StartAssistant(ctx, cfg, testenv.Logger(t)))
	require.Eventually(t, reported, 60*time.Second, 100*time.Millisecond)
	res, _ = post(t, c, oper, taskPath, good, "same-origin")
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Eventually(t, func() bool { cs := taskCommands(); return len(cs) == 2 && cs[1].OK != nil }, 30*time.Second, 100*time.Millisecond)
	require.True(t, *taskCommands()[1].OK)
	ts, err = h.Tasks()
	require.NoError(t, err)
	require.Len(t, ts, 1)
	require.Equal(t, "Read the brief", ts[0].Goal)
	require.Equal(t, "the panel, by op@fleet.test", ts[0].Origin)

	// The tenant's limits, by an operator; pushed to the assistant.
	tenantPath, globalPath := "/t/alpha/fleet/assistant-limits", "/admin/assistant-limits"
	res, _ = post(t, c, oper, tenantPath, url.Values{"task_steps": {"5"}, "task_wall": {"30m"}}, "same-origin")
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Eventually(t, func() bool { return strings.Contains(home(), "tenant per task 5 steps, 30m0s") }, 30*time.Second, 100*time.Millisecond)
	want := wire.AssistantLimits{Tenant: wire.AssistantLimitSet{TaskSteps: 5, TaskWallSeconds: 1800}}
	lim := func() wire.AssistantLimits {
		l, err := c.Fleet.AssistantLimits(ctx, a.ID)
		require.NoError(t, err)
		if l == nil {
			return wire.AssistantLimits{}
		}
		return *l
	}
	require.Equal(t, want, lim())

	// Refusals: the global limits are an admin's; bad values say what is
	// wrong; a cross-site post never reaches the handler.
	res, _ = post(t, c, oper, globalPath, url.Values{"task_steps": {"2"}}, "same-origin")
	require.Equal(t, http.StatusForbidden, res.StatusCode, "an operator may not set the global limits")
	res, _ = post(t, c, view, tenantPath, url.Values{"task_steps": {"2"}}, "same-origin")
	require.Equal(t, http.StatusForbidden, res.StatusCode, "a viewer may not set the tenant's limits")
	res, _ = post(t, c, admin, globalPath, url.Values{"task_steps": {"2"}}, "cross-site")
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	for _, bad := range []struct {
		cl   *http.Client
		path string
		form url.Values
		want string
	}{
		{oper, tenantPath, url.Values{"task_steps": {"-1"}}, "The limits were not saved: steps per task must be between 0 (no limit) and 100000, not -1."},
		{oper, tenantPath, url.Values{"task_steps": {"lots"}}, "task steps: &#34;lots&#34; is not a whole number"},
		{oper, tenantPath, url.Values{"task_wall": {"soon"}}, "wall time per task: &#34;soon&#34; is not a duration in whole seconds like 30m or 1h30m"},
		{oper, tenantPath, url.Values{"task_cost_usd": {"NaN"}}, "task cost usd: &#34;NaN&#34; is not an amount in USD"},
		{oper, tenantPath, url.Values{"day_cost_usd": {"5"}}, "spend per day is the model_spend_day limit: set it on the Limits page"},
		{admin, globalPath, url.Values{"task_tabs": {"1000"}}, "open tabs per task must be between 0 (no limit) and 100, not 1000"},
	} {
		res, body = post(t, c, bad.cl, bad.path, bad.form, "same-origin")
		require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode, bad.form)
		require.Contains(t, body, `data-testid="form-error"`)
		require.Contains(t, body, bad.want)
	}
	require.Equal(t, want, lim(), "nothing refused changed a limit")
	require.Len(t, c.Audited(t, a.ID, "fleet.assistant_limits"), 1, "one change audited, no refusal")

	// The global limits, by an admin; pushed too.
	res, _ = post(t, c, admin, globalPath, url.Values{"task_tabs": {"3"}}, "same-origin")
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Eventually(t, func() bool { return strings.Contains(home(), "global per task 3 tabs") }, 30*time.Second, 100*time.Millisecond)
	want.Global.TaskTabs = 3
	require.Equal(t, want, lim())

	// Spend per day: model_spend_day on /limits, the one source of truth.
	res, _ = post(t, c, oper, "/admin/limits", url.Values{"scope": {"alpha"}, "name": {"model_spend_day"}, "value": {"1"}}, "same-origin")
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	for value, msg := range map[string]string{"0": "would allow no spend at all", "lots": "is not an amount in USD"} {
		res, body = post(t, c, admin, "/admin/limits", url.Values{"scope": {"alpha"}, "name": {"model_spend_day"}, "value": {value}}, "same-origin")
		require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode, value)
		require.Contains(t, body, msg)
	}
	require.Equal(t, want, lim())
	res, _ = post(t, c, admin, "/admin/limits", url.Values{"scope": {"alpha"}, "name": {"model_spend_day"}, "value": {"2.50"}}, "same-origin")
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Eventually(t, func() bool { return strings.Contains(home(), "per day $2.50 spend (model_spend_day)") }, 30*time.Second, 100*time.Millisecond)
	want.Tenant.DayCostUSD = 2.5
	require.Equal(t, want, lim())
	res, body = paneltest.Do(t, oper, "GET", c.Server.URL+"/t/alpha/fleet/assistants", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Regexp(t, `data-testid="assistant-spend-tenant">\s*Spend per day:\s*<span class="mono">\$2\.5</span>`, body)
}
