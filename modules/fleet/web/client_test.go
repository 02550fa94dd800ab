package web_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
)

// TestConsoleKeepsOneClientPerTenant (issue 11, item 8): the fleet page's
// account form asks for the platform client; a second account of another
// client is refused (422) with a message naming the account it conflicts
// with, and nothing is created; the "Board and client" form moves one
// account (refused the same way when it would leave the others) or every
// account at once.
func TestConsoleKeepsOneClientPerTenant(t *testing.T) {
	c := paneltest.New(t)
	ctx := context.Background()
	alpha := c.Tenant(t, "alpha")
	const pw = "Quiet-Harbour-Lantern-42"
	op := c.User(t, "op@fleet.test", auth.Operator, pw)
	c.Grant(t, op, alpha)
	oc := paneltest.Browserless()
	c.Enrolled(t, oc, "op@fleet.test", pw)
	base := c.Server.URL + "/t/alpha/fleet"
	account := func(key, board, client string) url.Values {
		return url.Values{"key": {key}, "region": {"us-east"}, "board_url": {board}, "client": {client},
			"username": {key}, "password": {"Board-Password-1"}, "totp_secret": {"JBSWY3DPEHPK3PXP"}, "workers": {"http_actor"}}
	}

	res, body := paneltest.Do(t, oc, "POST", base+"/accounts", account("acme-1", "http://127.0.0.1:9", "acme"))
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Contains(t, body, `data-testid="client-acme-1"`)

	res, body = paneltest.Do(t, oc, "POST", base+"/accounts", account("acme-2", "http://127.0.0.1:9", "beta"))
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	require.Contains(t, body, `data-testid="form-error"`)
	require.Contains(t, body, "account acme-1 books as client")
	require.Contains(t, body, "every account of a tenant books as the same client on the same board")
	res, body = paneltest.Do(t, oc, "POST", base+"/accounts", account("acme-2", "http://127.0.0.1:9", ""))
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	require.Contains(t, body, "platform client is required")
	f, err := c.Fleet.List(ctx, alpha.ID)
	require.NoError(t, err)
	require.Len(t, f.Accounts, 1, "nothing created")

	res, _ = paneltest.Do(t, oc, "POST", base+"/accounts", account("acme-2", "http://127.0.0.1:9", "acme"))
	require.Equal(t, http.StatusOK, res.StatusCode)
	f, err = c.Fleet.List(ctx, alpha.ID)
	require.NoError(t, err)
	require.Len(t, f.Accounts, 2)
	res, body = paneltest.Do(t, oc, "POST", base+"/accounts/platform", url.Values{"account": {f.Accounts[1].ID},
		"board_url": {"http://127.0.0.1:9"}, "client": {"beta"}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	require.Contains(t, body, "account acme-1 books as client")

	res, _ = paneltest.Do(t, oc, "POST", base+"/accounts/platform", url.Values{"account": {"all"},
		"board_url": {"http://127.0.0.1:10"}, "client": {"beta"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	f, err = c.Fleet.List(ctx, alpha.ID)
	require.NoError(t, err)
	for _, a := range f.Accounts {
		require.Equal(t, "beta", a.Client)
		require.Equal(t, "http://127.0.0.1:10", a.BoardURL)
	}
	require.Len(t, c.Audited(t, alpha.ID, "fleet.account.platform"), 1)
}
