package web_test

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
)

// TestNewAgentTokenNeedsAnAdminAndASecondConfirmation (issue 12, 4): a new
// token can unlock an account's credentials, so an operator cannot issue one
// any more, and an admin must type the agent's name on a confirmation page;
// "new installation" also forgets the pinned installation key. Every step
// that did nothing leaves the old token working.
func TestNewAgentTokenNeedsAnAdminAndASecondConfirmation(t *testing.T) {
	c := paneltest.New(t)
	alpha := c.Tenant(t, "alpha")
	id := c.Agent(t, alpha)
	tokenHash := func() []byte {
		var h []byte
		require.NoError(t, db.TenantRow(context.Background(), c.DB.App, alpha.ID, `SELECT token_hash FROM agents WHERE id = $1`, id).Scan(&h))
		return h
	}
	pin := func(key string) {
		require.NoError(t, db.InTenant(context.Background(), c.DB.App, alpha.ID, func(tx pgx.Tx) error {
			_, err := tx.Exec(context.Background(), `UPDATE agents SET install_key = $2 WHERE id = $1`, id, key)
			return err
		}))
	}
	pinned := func() *string {
		var k *string
		require.NoError(t, db.TenantRow(context.Background(), c.DB.App, alpha.ID, `SELECT install_key FROM agents WHERE id = $1`, id).Scan(&k))
		return k
	}
	const key = "hSDwCYkwp1R0i33ctD73Wg2_Og0mOBr066SpjqqbTmo"
	pin(key)
	before := tokenHash()
	rotate := "/t/alpha/fleet/agents/" + id + "/rotate-token"

	const pw = "Quiet-Harbour-Lantern-42"
	op := c.User(t, "operator@fleet.test", auth.Operator, pw)
	c.Grant(t, op, alpha)
	oc := paneltest.Browserless()
	c.Enrolled(t, oc, "operator@fleet.test", pw)
	// The actions live on the agent's own page.
	res, body := paneltest.Do(t, oc, "GET", c.Server.URL+"/t/alpha/fleet/agents/"+id, nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="pause"`)
	require.NotContains(t, body, "rotate-token", "an operator is not offered a new token")
	res, _ = paneltest.Do(t, oc, "POST", c.Server.URL+rotate, url.Values{"confirm": {"agent-alpha"}, "new_installation": {"1"}})
	require.Equal(t, http.StatusForbidden, res.StatusCode, "the old procedure: an operator rotates the token")
	require.Equal(t, before, tokenHash())
	require.Equal(t, key, *pinned())

	c.User(t, "admin@fleet.test", auth.Admin, pw)
	ac := paneltest.Browserless()
	c.Enrolled(t, ac, "admin@fleet.test", pw)
	res, body = paneltest.Do(t, ac, "GET", c.Server.URL+"/t/alpha/fleet/agents/"+id, nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, rotate)

	// Another tenant's agent is not found here, even for an admin.
	bravo := c.Tenant(t, "bravo")
	other := c.Agent(t, bravo)
	res, _ = paneltest.Do(t, ac, "POST", c.Server.URL+"/t/alpha/fleet/agents/"+other+"/rotate-token", url.Values{"confirm": {"agent-bravo"}})
	require.Equal(t, http.StatusNotFound, res.StatusCode)

	// The first POST only asks for the confirmation.
	res, body = paneltest.Do(t, ac, "POST", c.Server.URL+rotate, url.Values{})
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="token-confirm"`)
	require.Contains(t, body, "agent-alpha")
	require.NotContains(t, body, `data-testid="new-token"`)
	require.Equal(t, before, tokenHash())
	// A wrong name changes nothing.
	res, _ = paneltest.Do(t, ac, "POST", c.Server.URL+rotate, url.Values{"confirm": {"agent-bravo"}, "new_installation": {"1"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, before, tokenHash())
	require.Equal(t, key, *pinned())

	// Confirmed: a new token, the pinned key kept.
	res, body = paneltest.Do(t, ac, "POST", c.Server.URL+rotate, url.Values{"confirm": {"agent-alpha"}})
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="new-token"`)
	second := tokenHash()
	require.False(t, bytes.Equal(before, second))
	require.Equal(t, key, *pinned(), "a new token alone does not change whom the credentials are sealed to")

	// Confirmed with "new installation": the key is forgotten, audited.
	res, _ = paneltest.Do(t, ac, "POST", c.Server.URL+rotate, url.Values{"confirm": {"agent-alpha"}, "new_installation": {"1"}})
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Nil(t, pinned())
	require.False(t, bytes.Equal(second, tokenHash()))
	require.Len(t, c.Audited(t, alpha.ID, "fleet.agent.rotate_token"), 2)
	acc := c.Audited(t, alpha.ID, "fleet.agent.new_installation")
	require.Len(t, acc, 1)
	require.Equal(t, "admin@fleet.test", acc[0].Actor)
	require.Contains(t, acc[0].Detail, key)
}
