package panel_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pquerna/otp/totp"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/server"
	"github.com/fleetwright/fleetwright/modules/account"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
)

// viaProxy is a client whose requests carry the headers a reverse proxy
// adds, claiming the client is at ip.
func viaProxy(ip string) *http.Client {
	cl := paneltest.Browserless()
	cl.Transport = headerTransport{"X-Real-IP": ip, "X-Forwarded-For": ip, "X-Forwarded-Proto": "http"}
	return cl
}

type headerTransport map[string]string

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// ips returns the clear addresses recorded beside a chain's entries of one
// action; an entry with an address in clear in the chained row, or without
// its keyed hash, shows as "unkeyed".
func ips(t *testing.T, c *paneltest.Console, chain, action string) []string {
	t.Helper()
	var out []string
	require.NoError(t, db.InTenant(context.Background(), c.DB.App, chain, func(tx pgx.Tx) error {
		rows, err := tx.Query(context.Background(), `SELECT CASE WHEN l.ip = '' AND l.ip_mac <> '' THEN COALESCE(a.ip, 'no clear row') ELSE 'unkeyed' END
			FROM audit_log l LEFT JOIN audit_addresses a ON a.entry_id = l.id WHERE l.action = $1 ORDER BY l.id`, action)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}))
	return out
}

// Items 13 and 15 of issue 12: forwarded addresses are believed from
// configured proxies only, and fleet, claim and sign-in audit entries record
// the client's address (no port), not the proxy's.
func TestAuditRecordsTheClientsAddressAndTrustsOnlyConfiguredProxies(t *testing.T) {
	const pw = "correct horse battery"
	run := func(t *testing.T, trusted string, wantIP string) {
		prefixes, err := server.ParseTrustedProxies(trusted)
		require.NoError(t, err)
		c := paneltest.NewTrusting(t, prefixes)
		alpha := c.Tenant(t, "alpha")
		op := c.User(t, "op@fleet.test", auth.Operator, pw)
		c.Grant(t, op, alpha)
		agentID := c.Agent(t, alpha)
		cl := viaProxy("203.0.113.9")
		c.Enrolled(t, cl, "op@fleet.test", pw)

		res, _ := paneltest.Do(t, cl, "POST", c.Server.URL+"/t/alpha/fleet/agents/"+agentID+"/pause", url.Values{})
		require.Equal(t, http.StatusSeeOther, res.StatusCode)
		res, _ = paneltest.Do(t, cl, "POST", c.Server.URL+"/t/alpha/claims/pause", url.Values{"paused": {"true"}, "confirm": {"yes"}})
		require.Equal(t, http.StatusSeeOther, res.StatusCode)

		require.Equal(t, []string{wantIP}, ips(t, c, alpha.ID, "fleet.agent.pause"))
		require.Equal(t, []string{wantIP}, ips(t, c, alpha.ID, "claim.pause"))
		require.Equal(t, []string{wantIP}, ips(t, c, audit.System, "signin.succeeded"))

		// The audit page shows the clear address while it is kept, then
		// "expired" with the start of the keyed hash (issue 15, item 7).
		res, body := paneltest.Do(t, cl, "GET", c.Server.URL+"/audit?tenant=alpha", nil)
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.Contains(t, body, ">"+wantIP+"<")
		require.NoError(t, db.InTenant(context.Background(), c.DB.App, alpha.ID, func(tx pgx.Tx) error {
			_, err := tx.Exec(context.Background(), `DELETE FROM audit_addresses`)
			return err
		}))
		_, body = paneltest.Do(t, cl, "GET", c.Server.URL+"/audit?tenant=alpha", nil)
		require.NotContains(t, body, ">"+wantIP+"<")
		require.Regexp(t, `>expired \(\d{4}-\d{2} [0-9a-f]{12}…\)<`, body)
	}
	t.Run("no trusted proxies: the peer, without its port", func(t *testing.T) { run(t, "", "127.0.0.1") })
	t.Run("behind a trusted proxy: the client it reports", func(t *testing.T) { run(t, "127.0.0.1,::1", "203.0.113.9") })
	t.Run("another proxy is trusted, not this peer", func(t *testing.T) { run(t, "10.0.0.0/8", "127.0.0.1") })
}

// Item 12 of issue 12: a fleet command on another tenant's agent, or on an
// id that is no agent at all, answers 404, changes and audits nothing, and
// never shows a database error.
func TestFleetCommandsOnAnotherTenantsAgentAnswerNotFound(t *testing.T) {
	const pw = "correct horse battery"
	c := paneltest.New(t)
	alpha, beta := c.Tenant(t, "alpha"), c.Tenant(t, "beta")
	op := c.User(t, "op@fleet.test", auth.Operator, pw)
	c.Grant(t, op, alpha)
	c.Agent(t, alpha)
	betaAgent := c.Agent(t, beta)
	cl := paneltest.Browserless()
	c.Enrolled(t, cl, "op@fleet.test", pw)
	for _, id := range []string{betaAgent, "00000000-0000-0000-0000-000000000001", "not-a-uuid", "1;DROP"} {
		for _, action := range []string{"pause", "resume", "restart-worker", "retire", "rotate-token"} {
			res, body := paneltest.Do(t, cl, "POST", c.Server.URL+"/t/alpha/fleet/agents/"+url.PathEscape(id)+"/"+action, url.Values{"worker": {"w-1"}})
			want := http.StatusNotFound
			if action == "rotate-token" {
				want = http.StatusForbidden // a new token is for admins alone (issue 12, item 4)
			}
			require.Equal(t, want, res.StatusCode, "%s %s", action, id)
			for _, leak := range []string{"SQLSTATE", "invalid input syntax", "violates", "pgx", "ERROR:"} {
				require.NotContains(t, body, leak)
			}
		}
	}
	for _, chain := range []string{alpha.ID, beta.ID} {
		for _, action := range []string{"fleet.agent.pause", "fleet.agent.resume", "fleet.agent.restart_worker", "fleet.agent.retire", "fleet.agent.rotate_token"} {
			require.Empty(t, ips(t, c, chain, action), "%s audited in %s", action, chain)
		}
	}
	cmds, err := c.Fleet.Pending(context.Background(), beta.ID, betaAgent)
	require.NoError(t, err)
	require.Empty(t, cmds, "nothing queued for the other tenant's agent")
}

// Item 7 of issue 12: a password someone else chose is one-time: at the
// first sign-in its user reaches nothing but the account page until they
// choose their own.
func TestOneTimePasswordMustBeChangedAtFirstSignIn(t *testing.T) {
	const pw, mine = "correct horse battery", "Quiet-Harbour-Lantern-42"
	c := paneltest.New(t)
	alpha := c.Tenant(t, "alpha")
	// As `admin create-user` and the Users page create them.
	u, err := account.CreateUser(context.Background(), c.DB.App, account.NewUser{Email: "new@fleet.test", Role: auth.Operator,
		Password: pw, MustChange: true}, audit.Entry{Actor: "test"})
	require.NoError(t, err)
	c.Grant(t, u, alpha)
	cl := paneltest.Browserless()
	c.Enrolled(t, cl, "new@fleet.test", pw)
	for _, path := range []string{"/", "/audit", "/t/alpha/fleet", "/t/alpha/claims"} {
		res, _ := paneltest.Do(t, cl, "GET", c.Server.URL+path, nil)
		require.Equal(t, http.StatusSeeOther, res.StatusCode, path)
		require.Equal(t, "/account", res.Header.Get("Location"), path)
	}
	res, _ := paneltest.Do(t, cl, "POST", c.Server.URL+"/t/alpha/claims/pause", url.Values{"paused": {"true"}})
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	res, body := paneltest.Do(t, cl, "GET", c.Server.URL+"/account", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="must-change"`)

	res, _ = paneltest.Do(t, cl, "POST", c.Server.URL+"/account/password", url.Values{"current": {pw}, "password": {mine}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	res, _ = paneltest.Do(t, cl, "GET", c.Server.URL+"/audit", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	res, body = paneltest.Do(t, cl, "GET", c.Server.URL+"/account", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.NotContains(t, body, `data-testid="must-change"`)
}

// Item 8 of issue 12: changing one's password signs out one's other
// sessions, and the current-password check is throttled like a sign-in.
func TestChangingPasswordEndsOtherSessionsAndIsThrottled(t *testing.T) {
	const pw, next = "correct horse battery", "Quiet-Harbour-Lantern-42"
	c := paneltest.New(t)
	c.User(t, "ops@fleet.test", auth.Operator, pw)
	here, elsewhere := paneltest.Browserless(), paneltest.Browserless()
	secret := c.Enrolled(t, here, "ops@fleet.test", pw)
	require.Empty(t, c.SignIn(t, elsewhere, "ops@fleet.test", pw))
	code, err := totp.GenerateCode(secret, time.Now().Add(30*time.Second))
	require.NoError(t, err)
	res, _ := c.Code(t, elsewhere, code)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	res, _ = paneltest.Do(t, elsewhere, "GET", c.Server.URL+"/audit", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)

	// Guessing the current password from a stolen session: five tries,
	// then the wait.
	for range account.AccountFree {
		res, _ = paneltest.Do(t, here, "POST", c.Server.URL+"/account/password", url.Values{"current": {"Wrong-Guess-Kettle-77"}, "password": {next}})
		require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	}
	res, body := paneltest.Do(t, here, "POST", c.Server.URL+"/account/password", url.Values{"current": {pw}, "password": {next}})
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode)
	require.Equal(t, "1", res.Header.Get("Retry-After"))
	require.Contains(t, body, "too many attempts")
	// Real time: the throttle's window is counted in Postgres by the
	// database's clock, and the answer said to retry after 1 s.
	time.Sleep(1100 * time.Millisecond)

	res, _ = paneltest.Do(t, here, "POST", c.Server.URL+"/account/password", url.Values{"current": {pw}, "password": {next}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	res, _ = paneltest.Do(t, here, "GET", c.Server.URL+"/audit", nil)
	require.Equal(t, http.StatusOK, res.StatusCode, "this session stays")
	res, _ = paneltest.Do(t, elsewhere, "GET", c.Server.URL+"/audit", nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode, "the other one is signed out")
	require.Contains(t, res.Header.Get("Location"), "/signin")
}

// Item 10 of issue 12: operators' TOTP seeds are sealed with the panel's
// key, the enrolment copy is gone once enrolment ends, and seeds stored in
// clear by an older version are sealed at start and keep working.
func TestOperatorTOTPSeedsAreSealedAndEnrolmentCopiesCleared(t *testing.T) {
	ctx := context.Background()
	const pw = "correct horse battery"
	c := paneltest.New(t)
	c.User(t, "ops@fleet.test", auth.Operator, pw)
	super, err := pgx.Connect(ctx, c.DB.SuperURL)
	require.NoError(t, err)
	defer super.Close(ctx)
	column := func(q string, args ...any) []string {
		rows, err := super.Query(ctx, q, args...)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return out
	}

	cl := paneltest.Browserless()
	secret := c.SignIn(t, cl, "ops@fleet.test", pw)
	require.NotEmpty(t, secret)
	pending := column(`SELECT enrol_secret FROM sessions WHERE enrol_secret IS NOT NULL`)
	require.Len(t, pending, 1)
	require.True(t, strings.HasPrefix(pending[0], "sealed:v1:"), "the enrolment copy is sealed")
	require.NotContains(t, pending[0], secret)
	code, err := totp.GenerateCode(secret, time.Now())
	require.NoError(t, err)
	res, _ := c.Code(t, cl, code)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)

	stored := column(`SELECT totp_secret FROM users WHERE email = 'ops@fleet.test'`)
	require.True(t, strings.HasPrefix(stored[0], "sealed:v1:"), stored[0])
	require.NotContains(t, stored[0], secret)
	require.Empty(t, column(`SELECT enrol_secret FROM sessions WHERE enrol_secret IS NOT NULL`), "enrolment ended: no copy left")
	// Copied onto another user, a sealed seed does not open.
	other := c.User(t, "other@fleet.test", auth.Operator, pw)
	_, err = super.Exec(ctx, `UPDATE users SET totp_secret = $2 WHERE id::text = $1`, other.ID, stored[0])
	require.NoError(t, err)
	otherCl := paneltest.Browserless()
	res, _ = paneltest.Do(t, otherCl, "POST", c.Server.URL+"/signin", url.Values{"email": {"other@fleet.test"}, "password": {pw}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	res, _ = paneltest.Do(t, otherCl, "GET", c.Server.URL+auth.MFAPath, nil)
	require.Equal(t, http.StatusInternalServerError, res.StatusCode, "a seed bound to another user is refused")

	// The same person signs in again: the sealed seed is opened to check.
	cl2 := paneltest.Browserless()
	require.Empty(t, c.SignIn(t, cl2, "ops@fleet.test", pw))
	code, err = totp.GenerateCode(secret, time.Now().Add(30*time.Second))
	require.NoError(t, err)
	res, _ = c.Code(t, cl2, code)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)

	// Rows from before: a clear seed, and a clear enrolment copy in an ended
	// session (written with triggers off, as an older version left them).
	legacy := c.User(t, "legacy@fleet.test", auth.Operator, pw)
	const legacySeed = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"
	_, err = super.Exec(ctx, "SET session_replication_role = replica")
	require.NoError(t, err)
	_, err = super.Exec(ctx, `UPDATE users SET totp_secret = $2 WHERE id::text = $1`, legacy.ID, legacySeed)
	require.NoError(t, err)
	_, err = super.Exec(ctx, `UPDATE sessions SET enrol_secret = 'KRSXG5CTMVRXEZLUKRSXG5CTMVRXEZLU' WHERE ended_at IS NOT NULL`)
	require.NoError(t, err)
	_, err = super.Exec(ctx, "SET session_replication_role = origin")
	require.NoError(t, err)
	n, err := account.SealStoredSeeds(ctx, c.DB.App, c.Vault)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Empty(t, column(`SELECT enrol_secret FROM sessions WHERE enrol_secret IS NOT NULL`))
	require.Empty(t, column(`SELECT totp_secret FROM users WHERE totp_secret NOT LIKE 'sealed:v1:%'`), "no seed left in clear")
	cl3 := paneltest.Browserless()
	require.Empty(t, c.SignIn(t, cl3, "legacy@fleet.test", pw))
	code, err = totp.GenerateCode(legacySeed, time.Now())
	require.NoError(t, err)
	res, _ = c.Code(t, cl3, code)
	require.Equal(t, http.StatusSeeOther, res.StatusCode, "the legacy authenticator still works")
}
