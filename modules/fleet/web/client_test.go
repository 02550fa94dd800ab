package web_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
	"github.com/fleetwright/fleetwright/modules/wire"
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
	require.Contains(t, body, `data-testid="error-client"`)
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
	// Moving a board is an admin's change: an operator is refused and
	// nothing changes.
	res, _ = paneltest.Do(t, oc, "POST", base+"/accounts/platform", url.Values{"account": {"all"},
		"board_url": {"http://127.0.0.1:9"}, "client": {"beta"}, "confirm": {"every account"}})
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	admin := c.User(t, "admin@fleet.test", auth.Admin, pw)
	c.Grant(t, admin, alpha)
	ac := paneltest.Browserless()
	c.Enrolled(t, ac, "admin@fleet.test", pw)

	res, body = paneltest.Do(t, ac, "POST", base+"/accounts/platform", url.Values{"account": {f.Accounts[1].ID},
		"board_url": {"http://127.0.0.1:9"}, "client": {"beta"}, "confirm": {f.Accounts[1].Key}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	require.Contains(t, body, "account acme-1 books as client")

	// Without the second confirmation nothing changes.
	res, body = paneltest.Do(t, ac, "POST", base+"/accounts/platform", url.Values{"account": {"all"},
		"board_url": {"http://127.0.0.1:9"}, "client": {"beta"}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	require.Contains(t, body, "type &#34;every account&#34; in the confirmation")

	res, _ = paneltest.Do(t, ac, "POST", base+"/accounts/platform", url.Values{"account": {"all"},
		"board_url": {"http://127.0.0.1:9/"}, "client": {"beta"}, "confirm": {"every account"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	f, err = c.Fleet.List(ctx, alpha.ID)
	require.NoError(t, err)
	for _, a := range f.Accounts {
		require.Equal(t, "beta", a.Client)
		require.Equal(t, "http://127.0.0.1:9/", a.BoardURL, "the same origin: the credentials stay")
	}
	require.Len(t, c.Audited(t, alpha.ID, "fleet.account.platform"), 1)
}

// TestBoardURLCannotCollectTheCredentials: the board URL decides where an
// account's credentials go, so an operator cannot change it, an admin's
// change to another board without the credentials typed again is refused,
// and a board URL changed behind the console's back (a script writing the
// row) leaves the credentials sealed: the agent's welcome carries none, and
// the capture server on loopback receives no request.
func TestBoardURLCannotCollectTheCredentials(t *testing.T) {
	c := paneltest.New(t)
	ctx := context.Background()
	alpha := c.Tenant(t, "alpha")
	const pw = "Quiet-Harbour-Lantern-42"
	var captured atomic.Int64
	capture := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { captured.Add(1) }))
	defer capture.Close()

	op := c.User(t, "op@fleet.test", auth.Operator, pw)
	admin := c.User(t, "admin@fleet.test", auth.Admin, pw)
	c.Grant(t, op, alpha)
	c.Grant(t, admin, alpha)
	oc, ac := paneltest.Browserless(), paneltest.Browserless()
	c.Enrolled(t, oc, "op@fleet.test", pw)
	c.Enrolled(t, ac, "admin@fleet.test", pw)
	base := c.Server.URL + "/t/alpha/fleet"
	res, body := paneltest.Do(t, oc, "POST", base+"/accounts", url.Values{"key": {"acme-1"}, "region": {"us-east"}, "board_url": {"http://127.0.0.1:9"},
		"client": {"acme"}, "username": {"acme-1"}, "password": {"Board-Password-1"}, "totp_secret": {"JBSWY3DPEHPK3PXP"}, "workers": {"http_actor"}})
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	f, err := c.Fleet.List(ctx, alpha.ID)
	require.NoError(t, err)
	acct := f.Accounts[0]
	agentID, _, err := c.Fleet.CreateAgent(ctx, alpha.ID, acct.ID, "agent-acme-1", audit.Entry{Actor: "test"})
	require.NoError(t, err)
	welcome := func() (wire.Config, wire.Credentials, error) {
		return c.Fleet.Welcome(ctx, fleet.Agent{ID: agentID, Tenant: alpha.ID, AccountID: acct.ID, Name: "agent-acme-1"})
	}
	move := url.Values{"account": {acct.ID}, "board_url": {capture.URL}, "client": {"acme"}, "confirm": {"acme-1"}}

	res, _ = paneltest.Do(t, oc, "POST", base+"/accounts/platform", move)
	require.Equal(t, http.StatusForbidden, res.StatusCode, "an operator cannot move the board")
	res, body = paneltest.Do(t, ac, "POST", base+"/accounts/platform", move)
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	require.Contains(t, body, "account acme-1 moves to another board ("+capture.URL+"): enter its username, password and TOTP secret again")
	cfg, creds, err := welcome()
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:9", cfg.Account.BoardURL, "nothing changed")
	require.Equal(t, "Board-Password-1", creds.Password.Reveal())

	// A script moves the row: the credentials stay sealed to the old board.
	require.NoError(t, db.InTenant(ctx, c.DB.App, alpha.ID, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE accounts SET board_url = $1`, capture.URL)
		return err
	}))
	_, creds, err = welcome()
	require.ErrorContains(t, err, "the credentials do not open for "+capture.URL)
	require.Empty(t, creds.Password.Reveal())
	require.Zero(t, captured.Load(), "the capture server received a request")

	// With the credentials typed again, the admin's move seals them to the
	// new board.
	move.Set("username", "acme-1-new")
	move.Set("password", "New-Board-Password-2")
	move.Set("totp_secret", "JBSWY3DPEHPK3PXP")
	move.Set("board_url", "http://127.0.0.1:10")
	res, body = paneltest.Do(t, ac, "POST", base+"/accounts/platform", move)
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	cfg, creds, err = welcome()
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:10", cfg.Account.BoardURL)
	require.Equal(t, "acme-1-new", creds.Username)
	require.Equal(t, "New-Board-Password-2", creds.Password.Reveal())
	rows := c.Audited(t, alpha.ID, "fleet.account.platform")
	require.NotEmpty(t, rows)
	require.Zero(t, captured.Load())
}
