package panel_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/server"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
)

// viaProxy is a client whose requests carry the headers a reverse proxy
// adds, claiming the client is at ip.
func viaProxy(ip string) *http.Client {
	cl := browserless()
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

// ips returns the addresses recorded with a chain's entries of one action.
func (c *console) ips(t *testing.T, chain, action string) []string {
	t.Helper()
	var out []string
	require.NoError(t, db.InTenant(context.Background(), c.d.App, chain, func(tx pgx.Tx) error {
		rows, err := tx.Query(context.Background(), `SELECT ip FROM audit_log WHERE action = $1 ORDER BY id`, action)
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
		c := newConsoleWith(t, prefixes)
		alpha := c.tenant(t, "alpha")
		op := c.user(t, "op@fleet.test", auth.Operator, pw)
		c.grant(t, op, alpha)
		agentID := c.agent(t, alpha)
		cl := viaProxy("203.0.113.9")
		c.enrolled(t, cl, "op@fleet.test", pw)

		res, _ := do(t, cl, "POST", c.srv.URL+"/t/alpha/fleet/agents/"+agentID+"/pause", url.Values{})
		require.Equal(t, http.StatusSeeOther, res.StatusCode)
		res, _ = do(t, cl, "POST", c.srv.URL+"/t/alpha/claims/pause", url.Values{"paused": {"true"}})
		require.Equal(t, http.StatusSeeOther, res.StatusCode)

		require.Equal(t, []string{wantIP}, c.ips(t, alpha.ID, "fleet.agent.pause"))
		require.Equal(t, []string{wantIP}, c.ips(t, alpha.ID, "claim.pause"))
		require.Equal(t, []string{wantIP}, c.ips(t, audit.System, "signin.succeeded"))
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
	c := newConsole(t)
	alpha, beta := c.tenant(t, "alpha"), c.tenant(t, "beta")
	op := c.user(t, "op@fleet.test", auth.Operator, pw)
	c.grant(t, op, alpha)
	c.agent(t, alpha)
	betaAgent := c.agent(t, beta)
	cl := browserless()
	c.enrolled(t, cl, "op@fleet.test", pw)
	for _, id := range []string{betaAgent, "00000000-0000-0000-0000-000000000001", "not-a-uuid", "1;DROP"} {
		for _, action := range []string{"pause", "resume", "restart-worker", "retire", "rotate-token"} {
			res, body := do(t, cl, "POST", c.srv.URL+"/t/alpha/fleet/agents/"+url.PathEscape(id)+"/"+action, url.Values{"worker": {"w-1"}})
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
			require.Empty(t, c.ips(t, chain, action), "%s audited in %s", action, chain)
		}
	}
	cmds, err := c.fleet.Pending(context.Background(), beta.ID, betaAgent)
	require.NoError(t, err)
	require.Empty(t, cmds, "nothing queued for the other tenant's agent")
}
