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

// TestAddAnAccountKeepsWhatWasTyped: a refused "Add an account" shows the
// form again with every field as typed except the password and TOTP
// secret (asked again, never echoed), the error next to its field; an
// assistant's account (worker kind "assistant", as docs/ASSISTANT.md says)
// is accepted.
func TestAddAnAccountKeepsWhatWasTyped(t *testing.T) {
	c := paneltest.New(t)
	ctx := context.Background()
	alpha := c.Tenant(t, "alpha")
	const pw = "Quiet-Harbour-Lantern-42"
	op := c.User(t, "op@fleet.test", auth.Operator, pw)
	c.Grant(t, op, alpha)
	oc := paneltest.Browserless()
	c.Enrolled(t, oc, "op@fleet.test", pw)
	base := c.Server.URL + "/t/alpha/fleet"
	const secretPW, secretTOTP = "Board-Password-Unique-77", "JBSWY3DPEHPK3PXQ"
	form := url.Values{"key": {"north-7"}, "region": {"us-west"}, "board_url": {"ftp://board.example"}, "client": {"Acme Logistics"},
		"username": {"dispatch-7"}, "password": {secretPW}, "totp_secret": {secretTOTP}, "workers": {"watcher\nhttp_actor"}}

	res, body := paneltest.Do(t, oc, "POST", base+"/accounts", form)
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	require.Equal(t, "board URL must start with http:// or https://", paneltest.TestIDText(t, body, "error-board_url"))
	for _, v := range []string{`name="key" value="north-7"`, `name="region" value="us-west"`, `name="board_url" value="ftp://board.example" class="invalid"`,
		`name="client" value="Acme Logistics"`, `name="username" value="dispatch-7"`} {
		require.Contains(t, body, v)
	}
	require.Contains(t, body, "watcher\nhttp_actor</textarea>")
	require.NotContains(t, body, secretPW, "a password is never sent back")
	require.NotContains(t, body, secretTOTP, "a TOTP secret is never sent back")
	require.Contains(t, body, `data-testid="again-password"`)
	require.Contains(t, body, `data-testid="again-totp"`)

	// A bad worker kind is named next to the workers.
	form.Set("board_url", "http://127.0.0.1:9")
	form.Set("workers", "watcher\nrobot")
	res, body = paneltest.Do(t, oc, "POST", base+"/accounts", form)
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	require.Contains(t, paneltest.TestIDText(t, body, "error-workers"), "unknown worker kind robot")
	require.Contains(t, body, "watcher\nrobot</textarea>")
	f, err := c.Fleet.List(ctx, alpha.ID)
	require.NoError(t, err)
	require.Empty(t, f.Accounts, "nothing created")

	// An assistant's account, as the docs say to add one.
	form.Set("workers", "assistant")
	res, body = paneltest.Do(t, oc, "POST", base+"/accounts", form)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	f, err = c.Fleet.List(ctx, alpha.ID)
	require.NoError(t, err)
	require.Len(t, f.Accounts, 1)
	require.Equal(t, "assistant", f.Accounts[0].Workers[0].Kind)
	// The next account's form starts from the tenant's board and client.
	_, body = paneltest.Do(t, oc, "GET", base+"/accounts", nil)
	require.Contains(t, body, `name="board_url" value="http://127.0.0.1:9"`)
	require.Contains(t, body, `name="client" value="Acme Logistics"`)
}
