// Package paneltest starts the panel's real HTTP side for tests: the router
// the panel serves, over a real Postgres (testenv), with the fleet store, a
// claim engine without River or cells, a scheduler on a fake clock and a
// notifier behind the egress guard. Each capability's web package tests its
// own pages through it, signed in as a person would be (password, TOTP).
package paneltest

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

	"github.com/jackc/pgx/v5"
	"github.com/pquerna/otp/totp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/db"
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
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Console is the panel's real HTTP side (panel.NewHTTP, the router the
// panel serves) over a test database, with the services behind it.
type Console struct {
	DB     *testenv.Database
	HTTP   *panel.HTTP
	Server *httptest.Server
	// Logs holds every line the panel wrote, at every level, through the
	// binary's redacting layer.
	Logs   *testenv.SyncBuffer
	Fleet  *fleet.Store
	Claims *claim.Engine
	// Schedules runs on Clock, a fake clock: tests advance it to make runs due.
	Schedules *schedule.Scheduler
	Clock     *clock.Fake
	Vault     *vault.Vault
}

// New starts a console; the server stops when the test ends.
func New(t *testing.T) *Console { return NewTrusting(t, nil) }

// NewTrusting is New behind the given trusted proxies.
func NewTrusting(t *testing.T, trusted []netip.Prefix) *Console {
	return NewClock(t, trusted, clock.Real{})
}

// NewClock is NewTrusting with the console's own clock (sessions,
// throttles) given: a fake one makes time rules independent of how fast the
// machine answers.
func NewClock(t *testing.T, trusted []netip.Prefix, panelClock clock.Clock) *Console {
	d := testenv.DB(t)
	logs := &testenv.SyncBuffer{}
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
	return &Console{DB: d, HTTP: h, Server: srv, Logs: logs, Fleet: fl, Claims: eng, Schedules: sched, Clock: clk, Vault: v}
}

// User creates a console user.
func (c *Console) User(t *testing.T, email string, role auth.Role, password string) account.User {
	u, err := account.CreateUser(context.Background(), c.DB.App, account.NewUser{Email: email, Role: role, Password: password}, audit.Entry{Actor: "test"})
	require.NoError(t, err)
	return u
}

// Tenant creates a tenant named after its slug ("alpha" → "Alpha Freight").
func (c *Console) Tenant(t *testing.T, slug string) tenant.Tenant {
	tn, err := tenant.Create(context.Background(), c.DB.App, slug, strings.ToUpper(slug[:1])+slug[1:]+" Freight", audit.Entry{Actor: "test"})
	require.NoError(t, err)
	return tn
}

// Grant gives u access to the tenants.
func (c *Console) Grant(t *testing.T, u account.User, tenants ...tenant.Tenant) {
	var ids []string
	for _, tn := range tenants {
		ids = append(ids, tn.ID)
	}
	require.NoError(t, account.SetGrants(context.Background(), c.DB.App, u.ID, ids, audit.Entry{Actor: "test"}))
}

// Browserless is an HTTP client with a cookie jar that does not follow redirects.
func Browserless() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// Do sends a request (a form when form is not nil) and returns the
// response with its body read.
func Do(t *testing.T, c *http.Client, method, u string, form url.Values) (*http.Response, string) {
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

// SignIn passes the password step; it returns the TOTP secret when the user
// enrols (read from the page, as a person would).
func (c *Console) SignIn(t *testing.T, cl *http.Client, email, password string) string {
	t.Helper()
	res, _ := Do(t, cl, "POST", c.Server.URL+"/signin", url.Values{"email": {email}, "password": {password}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, auth.MFAPath, res.Header.Get("Location"))
	res, body := Do(t, cl, "GET", c.Server.URL+auth.MFAPath, nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	if m := secretRe.FindStringSubmatch(body); m != nil {
		return strings.ReplaceAll(m[1], " ", "")
	}
	return ""
}

// Code answers the MFA step with code.
func (c *Console) Code(t *testing.T, cl *http.Client, code string) (*http.Response, string) {
	return Do(t, cl, "POST", c.Server.URL+auth.MFAPath, url.Values{"code": {code}})
}

// Enrolled signs a new user in through enrolment and returns their secret.
func (c *Console) Enrolled(t *testing.T, cl *http.Client, email, password string) string {
	t.Helper()
	secret := c.SignIn(t, cl, email, password)
	require.NotEmpty(t, secret)
	code, err := totp.GenerateCode(secret, time.Now())
	require.NoError(t, err)
	res, _ := c.Code(t, cl, code)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	return secret
}

// By is the actor of the tests' own changes.
var By = audit.Entry{Actor: "test"}

// Claimed gives the tenant a filter that wants everything and runs one claim
// through lease, act and a confirmed outcome.
func (c *Console) Claimed(t *testing.T, tn tenant.Tenant, key, worker string) {
	t.Helper()
	ctx := context.Background()
	fs, err := c.Claims.Store().Filters(ctx, tn.ID)
	require.NoError(t, err)
	if len(fs) == 0 {
		_, err := c.Claims.PutFilter(ctx, By, tn.ID, claim.Filter{Name: "everything", Enabled: true})
		require.NoError(t, err)
	}
	c.Job(t, tn, key, 235000)
	h := claim.Holder{Agent: "00000000-0000-4000-8000-0000000000a1", Worker: worker}
	lr := c.Claims.Lease(ctx, tn.ID, h, wire.LeaseRequest{RequestID: "l-" + key, Worker: worker, Key: key})
	require.True(t, lr.Granted, lr.Reason)
	require.True(t, c.Claims.Act(ctx, tn.ID, h, wire.ActRequest{RequestID: "a-" + key, Worker: worker, Key: key, Token: lr.Token}).OK)
	sent := time.Now()
	ok := sent.Add(140 * time.Millisecond)
	require.True(t, c.Claims.Outcome(ctx, tn.ID, h, wire.Outcome{RequestID: "o-" + key, Worker: worker, Key: key, Token: lr.Token,
		Result: wire.ResultConfirmed, SentAt: &sent, ConfirmedAt: &ok}, claim.Offset{}).OK)
}

// Job records a queued job the way the cell dispatcher does.
func (c *Console) Job(t *testing.T, tn tenant.Tenant, key string, rateCents int64) {
	t.Helper()
	now := time.Now()
	_, err := c.Claims.Store().RecordJob(context.Background(), claim.QueuedJob{Tenant: tn.ID, Cell: "default",
		Job: wire.Job{Key: key, PublishedAt: now.Add(-900 * time.Millisecond), ExpiresAt: now.Add(time.Hour), Origin: "Dallas, TX",
			Destination: "Atlanta, GA", Equipment: "Dry Van", WeightLbs: 40000, Miles: 780, RateCents: rateCents},
		SeenAt: now.Add(-600 * time.Millisecond), QueuedAt: now.Add(-550 * time.Millisecond), ClockErrorMS: 3})
	require.NoError(t, err)
}

// AuditRow is one audit entry as the tests read it.
type AuditRow struct{ Actor, Action, Target, Detail string }

// Audited reads a chain's entries of one action, newest first.
func (c *Console) Audited(t *testing.T, chain, action string) []AuditRow {
	t.Helper()
	var out []AuditRow
	require.NoError(t, db.InTenant(context.Background(), c.DB.App, chain, func(tx pgx.Tx) error {
		rows, err := tx.Query(context.Background(), `SELECT actor, action, target, detail::text FROM audit_log
			WHERE action = $1 ORDER BY id DESC`, action)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowToStructByPos[AuditRow])
		return err
	}))
	return out
}

// Agent creates an account and its agent in the tenant.
func (c *Console) Agent(t *testing.T, tn tenant.Tenant) string {
	t.Helper()
	ctx := context.Background()
	acct, err := c.Fleet.CreateAccount(ctx, tn.ID, fleet.AccountInput{Key: "acct-" + tn.Slug, BoardURL: "http://127.0.0.1:9", Client: tn.Slug,
		Username: "dispatch", Password: "Board-Password-1", TOTPSecret: "JBSWY3DPEHPK3PXP"}, By)
	require.NoError(t, err)
	id, _, err := c.Fleet.CreateAgent(ctx, tn.ID, acct, "agent-"+tn.Slug, By)
	require.NoError(t, err)
	return id
}

// TestIDText is the text of the element with data-testid id; the test fails
// when the page has none.
func TestIDText(t *testing.T, body, id string) string {
	t.Helper()
	m := regexp.MustCompile(`data-testid="` + regexp.QuoteMeta(id) + `"[^>]*>([^<]*)<`).FindStringSubmatch(body)
	require.NotNil(t, m, "no element %q in the page", id)
	return strings.TrimSpace(m[1])
}

// SessionCookie returns the console session cookie cl holds for the panel
// at serverURL, for a browser test to hand to Chromium; it fails t when cl
// is not signed in.
func SessionCookie(t *testing.T, cl *http.Client, serverURL string) string {
	t.Helper()
	u, err := url.Parse(serverURL)
	require.NoError(t, err)
	for _, ck := range cl.Jar.Cookies(u) {
		if ck.Name == account.DevCookieName {
			return ck.Value
		}
	}
	t.Fatalf("paneltest: no %s cookie for %s: the client is not signed in", account.DevCookieName, serverURL)
	return ""
}
