package web_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
)

// TestRetiringAnAgentAsksFirst: retiring stops an agent for good, so the
// server refuses it without the confirmation field and answers with a page
// that names the agent and says what happens; confirmed, it is retired.
func TestRetiringAnAgentAsksFirst(t *testing.T) {
	c := paneltest.New(t)
	alpha := c.Tenant(t, "alpha")
	id := c.Agent(t, alpha)
	const pw = "Quiet-Harbour-Lantern-42"
	op := c.User(t, "operator@fleet.test", auth.Operator, pw)
	c.Grant(t, op, alpha)
	oc := paneltest.Browserless()
	c.Enrolled(t, oc, "operator@fleet.test", pw)
	retired := func() bool {
		var r bool
		require.NoError(t, db.TenantRow(context.Background(), c.DB.App, alpha.ID, `SELECT retired_at IS NOT NULL FROM agents WHERE id = $1`, id).Scan(&r))
		return r
	}
	_, page := paneltest.Do(t, oc, "GET", c.Server.URL+"/t/alpha/fleet/agents/"+id, nil)
	require.Contains(t, page, `data-testid="retire"`, "the agent's page holds its actions")
	require.NotContains(t, page, "onsubmit", "no inline script: the page's policy would block it")

	retire := c.Server.URL + "/t/alpha/fleet/agents/" + id + "/retire"
	res, body := paneltest.Do(t, oc, "POST", retire, url.Values{})
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "Retire agent agent-alpha?", paneltest.TestIDText(t, body, "confirm-question"))
	require.Contains(t, body, "wipes its board credentials")
	require.False(t, retired(), "nothing retired without the confirmation")

	res, _ = paneltest.Do(t, oc, "POST", retire, url.Values{"confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.True(t, retired())
}
