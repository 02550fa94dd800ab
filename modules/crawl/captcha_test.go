package crawl_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"net/http/httptest"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/agent"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/crawl"
	"github.com/fleetwright/fleetwright/modules/factory"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/fleet/gateway"
	"github.com/fleetwright/fleetwright/modules/notify"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// rig is a panel's crawl side in-process — the fleet gateway, the run
// executor, the store — with one real agent (in-process, its crawler
// worker) connected over a real WebSocket. It lets a test give the runner
// what only code can give it: a captcha solver adapter.
type rig struct {
	d      *testenv.Database
	tenant string
	svc    *crawl.Service
	runner *crawl.Runner
	// a holds the agent's connection; b is a second replica without one.
	a, b *gateway.Gateway
}

func newRig(t *testing.T, ctx context.Context, solvers map[string]crawl.SolverFactory) *rig {
	d := testenv.DB(t)
	v := testenv.Vault(t)
	r := &rig{d: d}
	r.tenant = factory.Tenant(t, d, "acme", "Acme")
	fst := fleet.NewStore(d.App, v)
	acct := factory.Account(t, fst, r.tenant, fleet.AccountInput{Key: "crawler-1", Workers: []wire.WorkerSpec{{Name: "crawler-1", Kind: agent.KindCrawler}}})
	_, token := factory.Agent(t, fst, r.tenant, acct, "agent-1")

	var inst string
	require.NoError(t, d.App.QueryRow(ctx, "SELECT id::text FROM installation").Scan(&inst))
	lctx, lcancel := context.WithCancel(context.Background())
	var lwg sync.WaitGroup
	replica := func(name string) *gateway.Gateway {
		var id string
		require.NoError(t, d.Owner.QueryRow(ctx, `INSERT INTO panel_replicas (id, host, listen, version, pid, started_at, last_seen)
			VALUES (gen_random_uuid(), $1, '', 'test', 1, now(), now() + interval '1 hour') RETURNING id::text`, name).Scan(&id))
		g := gateway.New(fst, nil, gateway.Config{ReplicaID: id, InstallationID: inst, PollEvery: time.Hour}, testenv.Logger(t).With("replica", name))
		lwg.Add(1)
		go func() { defer lwg.Done(); g.Listen(lctx, d.AppURL) }()
		return g
	}
	g := replica("a")
	r.a, r.b = g, replica("b")
	mux := chi.NewRouter()
	mux.Get("/agent/ws", g.ServeHTTP)
	srv := httptest.NewServer(mux)

	dir := filepath.Join(t.TempDir(), "state")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	tok := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tok, []byte(token+"\n"), 0o600))
	actx, acancel := context.WithCancel(context.Background())
	adone := make(chan error, 1)
	go func() {
		adone <- agent.Run(actx, agent.Config{PanelURL: srv.URL, TokenFile: tok, StateDir: dir, StateEvery: 200 * time.Millisecond,
			IOTimeout: 5 * time.Second}, slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() {
		acancel()
		select {
		case <-adone:
		case <-time.After(15 * time.Second):
		}
		g.CloseAll()
		srv.Close()
		lcancel()
		lwg.Wait()
	})
	require.Eventually(t, func() bool {
		fl, err := fst.List(ctx, r.tenant)
		if err != nil || len(fl.Agents) == 0 {
			return false
		}
		for _, w := range fl.Agents[0].State.Workers {
			if w.State == wire.WorkerRunning {
				return len(g.CrawlAgents(r.tenant)) == 1
			}
		}
		return false
	}, time.Minute, 100*time.Millisecond, "the crawler worker runs")

	rc, err := river.NewClient(riverpgxv5.New(d.App), &river.Config{})
	require.NoError(t, err)
	r.svc = crawl.NewService(d.App, rc, nil)
	r.svc.Store.SetVault(v)
	rdb := testenv.Redis(t)
	r.runner = &crawl.Runner{Store: r.svc.Store, Disp: g, Egress: r.svc.Store.Egress, Clock: clock.Real{}, Log: testenv.Logger(t),
		Budget:   crawl.NewBudget(func(context.Context, string) (*redis.Client, error) { return rdb, nil }, clock.Real{}),
		OnFinish: (&crawl.Rules{Store: r.svc.Store, Log: testenv.Logger(t), Egress: r.svc.Store.Egress}).OnFinish, Solvers: solvers, NoAgentWait: 10 * time.Second}
	r.runner.Ready()
	return r
}

// run executes one run of the job to its end, in this process.
func (r *rig) run(t *testing.T, ctx context.Context, job string) crawl.Run {
	t.Helper()
	j, err := r.svc.Store.JobByName(ctx, r.tenant, job)
	require.NoError(t, err)
	id, err := r.svc.QueueRun(ctx, r.tenant, j.ID, "test", ops)
	require.NoError(t, err)
	require.NoError(t, r.runner.Execute(ctx, r.tenant, id))
	run, err := r.svc.Store.Run(ctx, r.tenant, id)
	require.NoError(t, err)
	return run
}

func (r *rig) audit(t *testing.T, ctx context.Context, action string) []map[string]any {
	t.Helper()
	var out []map[string]any
	require.NoError(t, db.InTenant(ctx, r.d.App, r.tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT detail || jsonb_build_object('_id', id, '_actor', actor, '_at', at) FROM audit_log WHERE action = $1 ORDER BY id`, action)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowTo[map[string]any])
		return err
	}))
	return out
}

var ops = audit.Entry{Actor: "ops@example.com"}

// captchaShop is a site whose listing sits behind a reCAPTCHA-style form:
// the form posts the token in g-recaptcha-response; only the fake solver's
// token passes.
func captchaShop(t *testing.T) (base string, port int) {
	ln, err := net.Listen("tcp", "127.0.0.27:0")
	require.NoError(t, err)
	mux := http.NewServeMux()
	gate := `<html><body><h1>Are you a person?</h1><form method="post" action="/shop/verify">
<input type="hidden" name="next" value="/shop"><div class="g-recaptcha" data-sitekey="6LcSITEKEY"></div><button>Go</button></form></body></html>`
	mux.HandleFunc("GET /shop", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, gate) })
	mux.HandleFunc("POST /shop/verify", func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("g-recaptcha-response") != "TOKEN-OK" || r.FormValue("next") != "/shop" {
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, gate)
			return
		}
		fmt.Fprint(w, `<html><body><ul>`)
		for i := 1; i <= 3; i++ {
			fmt.Fprintf(w, `<li class="product"><a class="title" href="/p/%d">Item %d</a><span class="price">$%d.00</span></li>`, i, i, i)
		}
		fmt.Fprint(w, `</ul></body></html>`)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String(), ln.Addr().(*net.TCPAddr).Port
}

// fakeSolver is a solver service on loopback speaking a small JSON API:
// POST /solve with a bearer API key and the challenge; the token back.
type fakeSolver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	asks []map[string]string
}

func newFakeSolver(t *testing.T) *fakeSolver {
	f := &fakeSolver{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in map[string]string
		_ = json.NewDecoder(r.Body).Decode(&in)
		in["auth"] = r.Header.Get("Authorization")
		f.mu.Lock()
		f.asks = append(f.asks, in)
		f.mu.Unlock()
		if r.URL.Path != "/solve" || in["auth"] != "Bearer solver-key-123" || in["site_key"] != "6LcSITEKEY" {
			http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"field": "g-recaptcha-response", "token": "TOKEN-OK"})
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeSolver) seen() []map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]string(nil), f.asks...)
}

// httpSolver is the test's solver adapter: the seam's interface over the
// fake service's HTTP protocol, through the client the runner hands it
// (the egress guard's).
type httpSolver struct{ cfg crawl.SolverConfig }

func (s httpSolver) Solve(ctx context.Context, c wire.CaptchaChallenge) (wire.CaptchaSolution, error) {
	body, _ := json.Marshal(map[string]string{"kind": c.Kind, "site_key": c.SiteKey, "page_url": c.PageURL})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.Endpoint+"/solve", strings.NewReader(string(body)))
	if err != nil {
		return wire.CaptchaSolution{}, err
	}
	req.Header.Set("Authorization", "Bearer "+s.cfg.APIKey.Reveal())
	resp, err := s.cfg.HTTP.Do(req)
	if err != nil {
		return wire.CaptchaSolution{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return wire.CaptchaSolution{}, fmt.Errorf("solver: %s", resp.Status)
	}
	var out wire.CaptchaSolution
	return out, json.NewDecoder(resp.Body).Decode(&out)
}

// TestCaptchaSeam: a captcha stops the page and asks a person (an alarm)
// while no authorisation is recorded; an authorisation needs a solver this
// binary has, the person who gives it and the reference to the written
// permission, and is audited; with it the solver (a fake service over real
// HTTP, reached through the egress guard) answers and the crawl gets
// through, each use audited after the authorisation; an authorisation
// without its audit entry, or a revoked one, is refused.
func TestCaptchaSeam(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	solver := newFakeSolver(t)
	r := newRig(t, ctx, map[string]crawl.SolverFactory{"test-solver": func(c crawl.SolverConfig) (crawl.Solver, error) { return httpSolver{c}, nil }})
	shop, shopPort := captchaShop(t)
	// The job's own webhook: a receiver on loopback, reached through the
	// egress guard like any target that comes from data.
	var hookMu sync.Mutex
	var hooks []notify.Message
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m notify.Message
		_ = json.NewDecoder(r.Body).Decode(&m)
		hookMu.Lock()
		hooks = append(hooks, m)
		hookMu.Unlock()
	}))
	defer hook.Close()
	hooked := func() map[string]string {
		hookMu.Lock()
		defer hookMu.Unlock()
		out := map[string]string{}
		for _, m := range hooks {
			out[m.Alarm.Kind] = m.Event
		}
		return out
	}
	port := func(u string) int {
		_, p, _ := net.SplitHostPort(strings.TrimPrefix(u, "http://"))
		var n int
		fmt.Sscan(p, &n)
		return n
	}
	require.NoError(t, r.svc.Store.SetEgress(ctx, r.tenant, ops, crawl.EgressPolicy{Allow: []string{
		fmt.Sprintf("127.0.0.0/8:%d", shopPort), fmt.Sprintf("127.0.0.0/8:%d", port(solver.srv.URL)), fmt.Sprintf("127.0.0.0/8:%d", port(hook.URL))}}))
	_, _, err := r.svc.Apply(ctx, r.tenant, ops, "shop.yaml", []byte(fmt.Sprintf(`version: 1
name: shop
start: {urls: ["%s/shop"]}
allowed_domains: [127.0.0.27]
extract:
  items: li.product
  fields:
    url: {css: a.title, attr: href, transform: [absolute_url], required: true}
    price: {css: .price, transform: [number]}
item_key: url
politeness: {delay: 10ms, retries: 0}
alarms: {webhook: "%s/hook"}
`, shop, hook.URL)))
	require.NoError(t, err)

	// 1. No authorisation: the page stops, a person is asked, nothing is solved.
	run := r.run(t, ctx, "shop")
	require.Equal(t, 1, run.Captchas)
	require.Zero(t, run.Items)
	require.Empty(t, solver.seen(), "no solver is asked without an authorisation")
	open, err := alarm.ListTenant(ctx, r.d.App, r.tenant, true, 20)
	require.NoError(t, err)
	var summaries []string
	for _, a := range open {
		summaries = append(summaries, a.Kind+": "+a.Summary)
	}
	require.Contains(t, strings.Join(summaries, "\n"), crawl.AlarmCaptcha+": Captcha in crawl shop: 1 page(s) ask for a person")
	require.Equal(t, "raised", hooked()[crawl.AlarmCaptcha], "the job's webhook heard the alarm")

	// 2. What an authorisation needs.
	admin := audit.Entry{Actor: "admin@example.com"}
	in := crawl.CaptchaAuthInput{Solver: "test-solver", Endpoint: solver.srv.URL, APIKey: "solver-key-123",
		Reference: "Contract 2026-117 with Shop Ltd, section 4: captcha solving permitted for its catalogue"}
	known := []string{"test-solver"}
	_, err = r.svc.Store.AuthoriseCaptcha(ctx, r.tenant, admin, crawl.CaptchaAuthInput{Solver: "other", Endpoint: solver.srv.URL, Reference: in.Reference}, known)
	require.ErrorIs(t, err, crawl.ErrNoSolver)
	_, err = r.svc.Store.AuthoriseCaptcha(ctx, r.tenant, admin, crawl.CaptchaAuthInput{Solver: "test-solver", Endpoint: solver.srv.URL}, known)
	require.ErrorContains(t, err, "written permission")
	_, err = r.svc.Store.AuthoriseCaptcha(ctx, r.tenant, audit.Entry{}, in, known)
	require.ErrorContains(t, err, "person who gives it")
	_, err = r.svc.Store.CaptchaAuthorisation(ctx, r.tenant)
	require.ErrorIs(t, err, crawl.ErrCaptchaNotAuthorised)

	auth, err := r.svc.Store.AuthoriseCaptcha(ctx, r.tenant, admin, in, known)
	require.NoError(t, err)
	require.Equal(t, "admin@example.com", auth.AuthorisedBy)
	require.Equal(t, in.Reference, auth.Reference)
	require.WithinDuration(t, time.Now(), auth.AuthorisedAt, time.Minute)
	authorised := r.audit(t, ctx, "crawl.captcha.authorise")
	require.Len(t, authorised, 1)
	require.Equal(t, in.Reference, authorised[0]["reference"])
	require.Equal(t, "admin@example.com", authorised[0]["_actor"])
	require.NotContains(t, fmt.Sprint(authorised), "solver-key-123", "the API key never reaches the audit log")

	// 3. Authorised: the solver answers through the egress guard, the form
	// is submitted with its token, the items come through.
	run = r.run(t, ctx, "shop")
	require.Equal(t, "succeeded", run.State, run.Reason)
	require.Equal(t, 3, run.Items)
	require.Zero(t, run.Captchas)
	asks := solver.seen()
	require.Len(t, asks, 1)
	require.Equal(t, "recaptcha", asks[0]["kind"])
	require.Equal(t, shop+"/shop", asks[0]["page_url"])
	uses := r.audit(t, ctx, "crawl.captcha.solve")
	require.Len(t, uses, 1)
	require.Equal(t, auth.ID, uses[0]["authorisation"])
	require.Equal(t, in.Reference, uses[0]["reference"])
	require.Greater(t, uses[0]["_id"], authorised[0]["_id"], "the authorisation was audited before the use")
	open, err = alarm.ListTenant(ctx, r.d.App, r.tenant, true, 20)
	require.NoError(t, err)
	for _, a := range open {
		require.NotEqual(t, crawl.AlarmCaptcha, a.Kind, "resolved by the run that got through")
	}
	require.Equal(t, "resolved", hooked()[crawl.AlarmCaptcha], "and the webhook heard that too")

	// Browser mode: the solution goes into the captcha's form in the page.
	_, _, err = r.svc.Apply(ctx, r.tenant, ops, "shop-js.yaml", []byte(fmt.Sprintf(`version: 1
name: shop-js
start: {urls: ["%s/shop"]}
allowed_domains: [127.0.0.27]
render: browser
extract:
  items: li.product
  fields:
    url: {css: a.title, attr: href, transform: [absolute_url], required: true}
item_key: url
politeness: {delay: 10ms, retries: 0}
`, shop)))
	require.NoError(t, err)
	run = r.run(t, ctx, "shop-js")
	require.Equal(t, "succeeded", run.State, run.Reason)
	require.Equal(t, 3, run.Items, "the browser submitted the form with the token")
	require.Len(t, solver.seen(), 2)
	require.Len(t, r.audit(t, ctx, "crawl.captcha.solve"), 2)

	// 4. Revoked: refused again.
	require.NoError(t, r.svc.Store.RevokeCaptcha(ctx, r.tenant, admin))
	require.Len(t, r.audit(t, ctx, "crawl.captcha.revoke"), 1)
	run = r.run(t, ctx, "shop")
	require.Equal(t, 1, run.Captchas)
	require.Len(t, solver.seen(), 2, "no use after the revocation")

	// 5. An authorisation written behind the audit log's back counts for
	// nothing: recorded and audited, or not at all.
	require.NoError(t, db.InTenant(ctx, r.d.App, r.tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO crawl_captcha_auth (tenant_id, solver, endpoint, reference, authorised_by)
			VALUES (app_tenant(), 'test-solver', $1, 'forged reference', 'nobody')`, solver.srv.URL)
		return err
	}))
	_, err = r.svc.Store.CaptchaAuthorisation(ctx, r.tenant)
	require.ErrorIs(t, err, crawl.ErrCaptchaNotAuthorised)
	run = r.run(t, ctx, "shop")
	require.Equal(t, 1, run.Captchas)
	require.Len(t, solver.seen(), 2)
}
