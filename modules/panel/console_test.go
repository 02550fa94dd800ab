package panel_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/pquerna/otp/totp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/egress"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/app/server"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/account"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/crawl"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/notify"
	"github.com/fleetwright/fleetwright/modules/panel"
	"github.com/fleetwright/fleetwright/modules/schedule"
	"github.com/fleetwright/fleetwright/modules/tenant"
)

// console is the panel's real HTTP side over a test database.
type console struct {
	d      *testenv.Database
	h      *panel.HTTP
	srv    *httptest.Server
	logs   *syncBuffer
	fleet  *fleet.Store
	claims *claim.Engine
	sched  *schedule.Scheduler
	clk    *clock.Fake
	vault  *vault.Vault
}

type syncBuffer = testenv.SyncBuffer

func newConsole(t *testing.T) *console { return newConsoleWith(t, nil) }

// newConsoleWith is newConsole behind the given trusted proxies.
func newConsoleWith(t *testing.T, trusted []netip.Prefix) *console {
	return newConsoleClock(t, trusted, clock.Real{})
}

// newConsoleClock is newConsoleWith with the console's own clock (sessions,
// throttles) given: a fake one makes time rules independent of how fast the
// machine answers.
func newConsoleClock(t *testing.T, trusted []netip.Prefix, panelClock clock.Clock) *console {
	d := testenv.DB(t)
	logs := &syncBuffer{}
	// Every line the panel writes, at every level, through the same
	// redacting layer the binary uses.
	log := slog.New(logging.Wrap(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	reg := prometheus.NewRegistry()
	v, err := vault.New(make([]byte, vault.KeySize))
	require.NoError(t, err)
	fl := fleet.NewStore(d.App, v)
	// The claim engine without River or cells: the pages read and change
	// settings; UNKNOWN (which needs River) is not reached here.
	st := claim.NewStore(d.App, nil)
	st.SetAgentNotifier(fleet.PauseNotifier{})
	eng, err := claim.NewEngine(st, claim.Config{Log: log, Registerer: reg})
	require.NoError(t, err)
	// The scheduler on its own fake clock: tests advance it to make runs due.
	clk := clock.NewFake(time.Now())
	sched := schedule.New(d.App, schedule.Config{Clock: clk, Log: log, Owner: "test"})
	// Webhooks may reach loopback receivers on any unprivileged port here
	// (an admin's allowlist; test servers take ephemeral ports).
	var ports []int
	for p := 1024; p <= 65535; p++ {
		ports = append(ports, p)
	}
	g, err := egress.New(egress.Config{Policy: egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Ports: ports}})
	require.NoError(t, err)
	notifier := notify.New(d.App, v, notify.Config{Log: log, HTTP: g.Client(egress.ClientOptions{MaxRedirects: -1})})
	crawlSvc := crawl.NewService(d.App, nil, nil)
	crawlSvc.Store.SetVault(v)
	h := panel.NewHTTP(panel.HTTPDeps{DB: d.App, Health: server.NewHealth(reg), Reg: reg, Log: log, Version: "test",
		Clock: panelClock, Session: account.Config{SessionIdle: 30 * time.Minute, SessionMax: 12 * time.Hour},
		Fleet: fl, Claims: eng, Schedules: sched, TrustedProxies: trusted, Vault: v, Notifier: notifier, Crawl: crawlSvc})
	srv := httptest.NewServer(h.Handler)
	t.Cleanup(srv.Close)
	return &console{d: d, h: h, srv: srv, logs: logs, fleet: fl, claims: eng, sched: sched, clk: clk, vault: v}
}

func (c *console) user(t *testing.T, email string, role auth.Role, password string) account.User {
	u, err := account.CreateUser(context.Background(), c.d.App, account.NewUser{Email: email, Role: role, Password: password}, audit.Entry{Actor: "test"})
	require.NoError(t, err)
	return u
}

func (c *console) tenant(t *testing.T, slug string) tenant.Tenant {
	tn, err := tenant.Create(context.Background(), c.d.App, slug, strings.ToUpper(slug[:1])+slug[1:]+" Freight", audit.Entry{Actor: "test"})
	require.NoError(t, err)
	return tn
}

func (c *console) grant(t *testing.T, u account.User, tenants ...tenant.Tenant) {
	var ids []string
	for _, tn := range tenants {
		ids = append(ids, tn.ID)
	}
	require.NoError(t, account.SetGrants(context.Background(), c.d.App, u.ID, ids, audit.Entry{Actor: "test"}))
}

// browserless is an HTTP client with a cookie jar that does not follow redirects.
func browserless() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func do(t *testing.T, c *http.Client, method, u string, form url.Values) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	require.NoError(t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	res, err := c.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

var secretRe = regexp.MustCompile(`data-testid="totp-secret">([A-Z2-7 ]+)<`)

// signIn passes the password step; it returns the TOTP secret when the user
// enrols (read from the page, as a person would).
func (c *console) signIn(t *testing.T, cl *http.Client, email, password string) string {
	t.Helper()
	res, _ := do(t, cl, "POST", c.srv.URL+"/signin", url.Values{"email": {email}, "password": {password}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, auth.MFAPath, res.Header.Get("Location"))
	res, body := do(t, cl, "GET", c.srv.URL+auth.MFAPath, nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	if m := secretRe.FindStringSubmatch(body); m != nil {
		return strings.ReplaceAll(m[1], " ", "")
	}
	return ""
}

func (c *console) code(t *testing.T, cl *http.Client, code string) (*http.Response, string) {
	return do(t, cl, "POST", c.srv.URL+auth.MFAPath, url.Values{"code": {code}})
}

// enrolled signs a new user in through enrolment and returns their secret.
func (c *console) enrolled(t *testing.T, cl *http.Client, email, password string) string {
	t.Helper()
	secret := c.signIn(t, cl, email, password)
	require.NotEmpty(t, secret)
	code, err := totp.GenerateCode(secret, time.Now())
	require.NoError(t, err)
	res, _ := c.code(t, cl, code)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	return secret
}

type route struct {
	method, pattern string
	perm            auth.Perm
}

func walk(t *testing.T, r chi.Router) (declared []route, missing []string) {
	err := chi.Walk(r, func(method, pattern string, h http.Handler, _ ...func(http.Handler) http.Handler) error {
		if p, ok := auth.PermOf(h); ok {
			declared = append(declared, route{method, pattern, p})
		} else if !panel.KernelRoutes[method+" "+pattern] {
			missing = append(missing, method+" "+pattern)
		}
		return nil
	})
	require.NoError(t, err)
	return declared, missing
}

var paramRe = regexp.MustCompile(`\{([^}:]+)(:[^}]*)?\}`)

// TestEveryRouteDeclaresAPermissionAndRefusesWhoLacksIt walks the panel's
// real router, so routes that later modules add are covered without being
// listed here.
func TestEveryRouteDeclaresAPermissionAndRefusesWhoLacksIt(t *testing.T) {
	c := newConsole(t)
	routes, missing := walk(t, c.h.Router)
	require.Empty(t, missing, "routes without a declared permission (use auth.Require)")
	require.Greater(t, len(routes), 15)
	// The claim engine's pages are mounted from NewHTTP with these
	// permissions (a page that vanished or lost its tenant scope fails here).
	declared := map[string]auth.Perm{}
	for _, rt := range routes {
		declared[rt.method+" "+rt.pattern] = rt.perm
	}
	for route, perm := range map[string]auth.Perm{
		"GET /t/{tenant}/claims": auth.FleetRead, "GET /t/{tenant}/claims/rows": auth.FleetRead,
		"GET /t/{tenant}/claims/latency": auth.FleetRead, "GET /t/{tenant}/claims/latency.csv": auth.FleetRead,
		"GET /t/{tenant}/claims/settings": auth.FleetRead, "POST /t/{tenant}/claims/pause": auth.FleetSteer,
		"POST /t/{tenant}/claims/limits": auth.FleetSteer, "POST /t/{tenant}/claims/filters": auth.FleetSteer,
		"POST /t/{tenant}/claims/filters/delete": auth.FleetSteer, "POST /t/{tenant}/claims/reviews": auth.FleetSteer,
		"GET /admin/cells": auth.CellsManage, "POST /admin/cells": auth.CellsManage,
		"POST /admin/cells/delete": auth.CellsManage, "POST /admin/cells/route": auth.CellsManage,
		"GET /admin/settings": auth.SettingsManage, "POST /admin/settings/pause": auth.SettingsManage,
	} {
		require.Equal(t, perm, declared[route], route)
	}

	a, b := c.tenant(t, "alpha"), c.tenant(t, "bravo")
	const pw = "correct horse battery"
	viewer, operator := c.user(t, "viewer@fleet.test", auth.Viewer, pw), c.user(t, "operator@fleet.test", auth.Operator, pw)
	c.user(t, "pending@fleet.test", auth.Operator, pw)
	c.grant(t, viewer, a)
	c.grant(t, operator, a)
	clients := map[string]*http.Client{"anonymous": browserless(), "pending": browserless(), "viewer": browserless(), "operator-of-alpha": browserless()}
	c.signIn(t, clients["pending"], "pending@fleet.test", pw)
	c.enrolled(t, clients["viewer"], "viewer@fleet.test", pw)
	c.enrolled(t, clients["operator-of-alpha"], "operator@fleet.test", pw)

	calls := 0
	for _, rt := range routes {
		path := paramRe.ReplaceAllStringFunc(rt.pattern, func(p string) string {
			switch paramRe.FindStringSubmatch(p)[1] {
			case auth.TenantParam:
				return b.Slug // nobody here reaches bravo
			case "id":
				return "00000000-0000-4000-8000-000000000001"
			}
			return "x"
		})
		mutating := rt.method != http.MethodGet && rt.method != http.MethodHead
		for _, who := range []string{"anonymous", "pending", "viewer", "operator-of-alpha"} {
			name := who + " " + rt.method + " " + rt.pattern + " (" + string(rt.perm) + ")"
			want, wantLoc := 0, ""
			switch {
			case rt.perm == auth.Public:
				continue
			case who == "anonymous":
				want, wantLoc = http.StatusUnauthorized, ""
				if !mutating {
					want, wantLoc = http.StatusSeeOther, auth.SignInPath
				}
			case rt.perm == auth.MFA:
				continue // the MFA step is what a pending session is for
			case who == "pending":
				want = http.StatusForbidden
				if !mutating {
					want, wantLoc = http.StatusSeeOther, auth.MFAPath
				}
			case rt.perm.TenantScoped():
				want = http.StatusForbidden // bravo is not theirs
			case who == "viewer" && mutating && rt.perm != auth.Self:
				want = http.StatusForbidden // a viewer changes nothing but their own account
			case (&auth.User{Role: map[string]auth.Role{"viewer": auth.Viewer, "operator-of-alpha": auth.Operator}[who], MFAOK: true}).Has(rt.perm):
				if mutating {
					continue // allowed and would change state; covered by the module's own tests
				}
				want = http.StatusOK
			default:
				want = http.StatusForbidden
			}
			res, _ := do(t, clients[who], rt.method, c.srv.URL+path, url.Values{})
			calls++
			require.Equal(t, want, res.StatusCode, name)
			if wantLoc != "" {
				require.True(t, strings.HasPrefix(res.Header.Get("Location"), wantLoc), "%s: redirected to %q", name, res.Header.Get("Location"))
			}
		}
	}
	require.Greater(t, calls, 40)
	// The viewer is still signed in and reaches alpha: the refusals above
	// were about permissions, not a broken session.
	res, _ := do(t, clients["viewer"], "GET", c.srv.URL+"/t/"+a.Slug, nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
}

// TestSignInLogsNoSecret runs sign-in, enrolment and failed attempts with
// known secrets and searches every line the panel logged for them.
func TestSignInLogsNoSecret(t *testing.T) {
	c := newConsole(t)
	const password = "Quiet-Harbour-Lantern-42"
	const wrongPassword = "Wrong-Guess-Kettle-77"
	c.user(t, "ops@fleet.test", auth.Admin, password)

	cl := browserless()
	// A failed password, an unknown user.
	res, body := do(t, cl, "POST", c.srv.URL+"/signin", url.Values{"email": {"ops@fleet.test"}, "password": {wrongPassword}})
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	require.NotContains(t, body, wrongPassword, "the page does not echo the password")
	do(t, cl, "POST", c.srv.URL+"/signin", url.Values{"email": {"nobody@fleet.test"}, "password": {password}})

	secret := c.signIn(t, cl, "ops@fleet.test", password)
	require.NotEmpty(t, secret)
	now := time.Now()
	good, _ := totp.GenerateCode(secret, now)
	wrong, _ := totp.GenerateCode(secret, now.Add(-10*time.Minute))
	res, _ = c.code(t, cl, wrong)
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	res, _ = c.code(t, cl, good)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	u, _ := url.Parse(c.srv.URL)
	var cookies []string
	for _, ck := range cl.Jar.Cookies(u) {
		if ck.Name == account.DevCookieName {
			cookies = append(cookies, ck.Value)
		}
	}
	require.NotEmpty(t, cookies)
	res, _ = do(t, cl, "GET", c.srv.URL+"/audit", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	// The replayed code is refused and logged too.
	c.signIn(t, cl, "ops@fleet.test", password)
	res, _ = c.code(t, cl, good)
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)

	logs := c.logs.String()
	require.Contains(t, logs, `"action":"signin.failed"`, "the capture sees the sign-in log")
	require.Contains(t, logs, `"action":"signin.succeeded"`)
	for name, v := range map[string]string{"password": password, "wrong password": wrongPassword, "totp secret": secret,
		"accepted code": good, "wrong code": wrong, "session cookie": cookies[0]} {
		require.NotContains(t, logs, v, "%s reached the log", name)
	}
	grouped := regexp.MustCompile(`.{4}`).FindAllString(secret, -1)
	require.NotContains(t, logs, strings.Join(grouped, " "), "grouped secret reached the log")
}

func TestSignInIsThrottledPerAccountAndAudited(t *testing.T) {
	// A stopped clock: the sixth attempt is inside the 1 s delay however
	// long the five hashes took on a loaded machine.
	c := newConsoleClock(t, nil, clock.NewFake(time.Now()))
	c.user(t, "ops@fleet.test", auth.Operator, "Quiet-Harbour-Lantern-42")
	cl := browserless()
	for range 5 {
		res, _ := do(t, cl, "POST", c.srv.URL+"/signin", url.Values{"email": {"ops@fleet.test"}, "password": {"not-the-password"}})
		require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	}
	// Now even the right password waits.
	res, body := do(t, cl, "POST", c.srv.URL+"/signin", url.Values{"email": {"ops@fleet.test"}, "password": {"Quiet-Harbour-Lantern-42"}})
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode)
	require.Contains(t, body, "Too many attempts")
	require.NotEmpty(t, res.Header.Get("Retry-After"))
	var failed, throttled int
	require.NoError(t, c.d.App.QueryRow(context.Background(), `SELECT 1`).Scan(new(int)))
	err := auditCount(t, c, "signin.failed", &failed)
	require.NoError(t, err)
	require.NoError(t, auditCount(t, c, "signin.throttled", &throttled))
	require.Equal(t, 5, failed)
	require.Equal(t, 1, throttled)
}

func auditCount(t *testing.T, c *console, action string, n *int) error {
	tx, err := c.d.App.Begin(context.Background())
	require.NoError(t, err)
	defer tx.Rollback(context.Background())
	_, err = tx.Exec(context.Background(), "SELECT set_config('app.tenant_id', $1, true)", audit.System)
	require.NoError(t, err)
	return tx.QueryRow(context.Background(), "SELECT count(*) FROM audit_log WHERE action = $1", action).Scan(n)
}

func TestDisablingAUserEndsTheirSessions(t *testing.T) {
	c := newConsole(t)
	admin := c.user(t, "admin@fleet.test", auth.Admin, "Quiet-Harbour-Lantern-42")
	op := c.user(t, "op@fleet.test", auth.Operator, "Quiet-Harbour-Lantern-43")
	ac, oc := browserless(), browserless()
	c.enrolled(t, ac, "admin@fleet.test", "Quiet-Harbour-Lantern-42")
	c.enrolled(t, oc, "op@fleet.test", "Quiet-Harbour-Lantern-43")
	res, _ := do(t, oc, "GET", c.srv.URL+"/account", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	res, _ = do(t, ac, "POST", c.srv.URL+"/admin/users/"+op.ID+"/disable", url.Values{})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	res, _ = do(t, oc, "GET", c.srv.URL+"/account", nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode, "the operator's session ended")
	require.True(t, strings.HasPrefix(res.Header.Get("Location"), auth.SignInPath))
	// And the password no longer opens a session.
	res, _ = do(t, oc, "POST", c.srv.URL+"/signin", url.Values{"email": {"op@fleet.test"}, "password": {"Quiet-Harbour-Lantern-43"}})
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	_ = admin
}

func TestCrossOriginPostsAreRefused(t *testing.T) {
	c := newConsole(t)
	req, _ := http.NewRequest("POST", c.srv.URL+"/signin", strings.NewReader("email=a%40b.c&password=x"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.Header.Set("Origin", "https://evil.example")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusForbidden, res.StatusCode)
}
