package limit_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/limit"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
)

// TestLimitsPage: an admin sets a tenant's and a global limit on /limits
// (audited by modules/limit), a bad value is refused with what is wrong
// and changes nothing, and an operator sees only the tenants they reach,
// without the change forms.
func TestLimitsPage(t *testing.T) {
	c := paneltest.New(t)
	ctx := context.Background()
	a, b := c.Tenant(t, "alpha"), c.Tenant(t, "bravo")
	const pw = "correct horse battery"
	c.User(t, "admin@fleet.test", auth.Admin, pw)
	op := c.User(t, "operator@fleet.test", auth.Operator, pw)
	c.Grant(t, op, a)
	admin, oper := paneltest.Browserless(), paneltest.Browserless()
	c.Enrolled(t, admin, "admin@fleet.test", pw)
	c.Enrolled(t, oper, "operator@fleet.test", pw)

	res, _ := paneltest.Do(t, admin, "POST", c.Server.URL+"/admin/limits", url.Values{"scope": {"alpha"}, "name": {"run_time"}, "value": {"45m"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	res, _ = paneltest.Do(t, admin, "POST", c.Server.URL+"/admin/limits", url.Values{"scope": {"global"}, "name": {"run_time"}, "value": {"30m"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	res, body := paneltest.Do(t, admin, "POST", c.Server.URL+"/admin/limits", url.Values{"scope": {"bravo"}, "name": {"crawl_pages_day"}, "value": {"lots"}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	require.Contains(t, body, `Crawl pages per day (UTC): &#34;lots&#34; is not a whole number`)
	l, err := limit.Load(ctx, c.DB.App, a.ID)
	require.NoError(t, err)
	require.Equal(t, map[limit.Name]int64{limit.RunTime: 2700}, l.Tenant)
	require.Equal(t, map[limit.Name]int64{limit.RunTime: 1800}, l.Global)
	lb, err := limit.Load(ctx, c.DB.App, b.ID)
	require.NoError(t, err)
	require.Empty(t, lb.Tenant, "the refused value changed nothing")

	res, body = paneltest.Do(t, admin, "GET", c.Server.URL+"/limits", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="limits-bravo"`)
	require.Contains(t, body, `action="/admin/limits"`)
	require.Contains(t, body, `data-testid="alpha-account_requests_hour"`, "the request budget per account is a limit like the others")
	require.Regexp(t, `data-testid="alpha-run_time">(?s:.*?)data-testid="value">\s*45m0s\s*<(?s:.*?)data-testid="effective">\s*30m0s\s*<span class="small muted">\(global\)`, body)

	res, body = paneltest.Do(t, oper, "GET", c.Server.URL+"/limits", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="limits-alpha"`)
	require.NotContains(t, body, `data-testid="limits-bravo"`)
	require.NotContains(t, body, `action="/admin/limits"`)
	res, _ = paneltest.Do(t, oper, "POST", c.Server.URL+"/admin/limits", url.Values{"scope": {"alpha"}, "name": {"run_time"}, "value": {"none"}})
	require.Equal(t, http.StatusForbidden, res.StatusCode)
}
