package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
)

// TestDeletingAFilterAsksFirst: the server refuses to delete a filter
// without the confirmation field and answers with a page that names the
// filter and says what deleting it does; confirmed, it is deleted, audited.
func TestDeletingAFilterAsksFirst(t *testing.T) {
	c := paneltest.New(t)
	ctx := context.Background()
	alpha := c.Tenant(t, "alpha")
	const pw = "correct horse battery"
	op := c.User(t, "op@fleet.test", auth.Operator, pw)
	c.Grant(t, op, alpha)
	oc := paneltest.Browserless()
	c.Enrolled(t, oc, "op@fleet.test", pw)
	fid, err := c.Claims.PutFilter(ctx, paneltest.By, alpha.ID, claim.Filter{Name: "Texas dry vans", Enabled: true, Origins: []string{"tx"}})
	require.NoError(t, err)
	id := strconv.FormatInt(fid, 10)
	base := c.Server.URL + "/t/alpha/claims"

	res, body := paneltest.Do(t, oc, "POST", base+"/filters/delete", url.Values{"id": {id}})
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "Delete the filter “Texas dry vans” of Alpha Freight?", paneltest.TestIDText(t, body, "confirm-question"))
	require.Contains(t, body, "Loads that only this filter wants are no longer claimed")
	require.Contains(t, body, `action="/t/alpha/claims/filters/delete"`)
	require.Contains(t, body, `name="id" value="`+id+`"`)
	require.Contains(t, body, `href="/t/alpha/claims/settings" data-testid="confirm-no"`)
	fs, err := c.Claims.Store().Filters(ctx, alpha.ID)
	require.NoError(t, err)
	require.Len(t, fs, 1, "nothing deleted without the confirmation")

	res, _ = paneltest.Do(t, oc, "POST", base+"/filters/delete", url.Values{"id": {id}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	fs, err = c.Claims.Store().Filters(ctx, alpha.ID)
	require.NoError(t, err)
	require.Empty(t, fs)
}
