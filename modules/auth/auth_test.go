package auth

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSafeNextStaysOnThisSite(t *testing.T) {
	for _, ok := range []string{"/", "/audit?x=1", "/t/acme/fleet", "/t/acme/fleet?q=hello%20world&sort=-name",
		"/audit#top", "/account/sessions", "/t/a%2Db/fleet", "/@user", "/https://not-a-host-here"} {
		require.Equal(t, ok, SafeNext(ok), ok)
	}
	// Known open-redirect forms: each must fall back to "/".
	bypasses := []string{
		"", "audit", "//evil.example", "///evil.example", "////evil.example",
		`/\evil.example`, `\\evil.example`, `/\/evil.example`, `\/evil.example`,
		"/\t/evil.example", "/%09/evil.example", "/%0a/evil.example", "/%0d/evil.example", "/%0D%0A/evil.example",
		"/\n/evil.example", "/\r/evil.example", "/ /evil.example", " /evil.example", "/%20/evil.example",
		"/%2f/evil.example", "/%2F%2Fevil.example", "/%5cevil.example", "/%5C%5Cevil.example",
		"/%252f%252fevil.example", "/%25252f%25252fevil.example", "/%2525252f%2525252fevil.example",
		"https://evil.example", "http:evil.example", "https:/evil.example", "javascript:alert(1)",
		"JavaScript:alert(1)", "data:text/html,<script>alert(1)</script>", "//evil.example/%2f..",
		"/\x00/evil.example", "/%00/evil.example", "/./evil.example", "/../evil.example", "/%2e%2e/%2e%2e//evil.example",
		"/.%2e/evil.example", "/\u3000/evil.example", "/\uff0f/evil.example", "/%E3%80%80/evil.example",
		"/\x7f/evil.example", "/%7f/evil.example", "/%zz", "//user@evil.example", "/%2F%5Cevil.example",
	}
	require.GreaterOrEqual(t, len(bypasses), 30)
	for _, in := range bypasses {
		require.Equal(t, "/", SafeNext(in), "%q", in)
	}
	// Whatever SafeNext lets through, the standard library resolves to this
	// site, as a browser would.
	base, _ := url.Parse("https://panel.example/signin/mfa")
	for _, in := range bypasses {
		got, err := base.Parse(SafeNext(in))
		require.NoError(t, err)
		require.Equal(t, "panel.example", got.Host, "%q", in)
	}
}

func TestRequireRefusesByRoleAndTenant(t *testing.T) {
	ok := func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }
	call := func(p Perm, u *User, method string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "/admin/x", nil)
		if u != nil {
			r = r.WithContext(WithUser(r.Context(), u))
		}
		w := httptest.NewRecorder()
		Require(p, ok).ServeHTTP(w, r)
		return w
	}
	require.Equal(t, http.StatusSeeOther, call(UsersManage, nil, "GET").Code)
	require.Equal(t, "/signin?next=%2Fadmin%2Fx", call(UsersManage, nil, "GET").Header().Get("Location"))
	require.Equal(t, http.StatusUnauthorized, call(UsersManage, nil, "POST").Code)
	pending := &User{Role: Admin}
	require.Equal(t, MFAPath, call(UsersManage, pending, "GET").Header().Get("Location"))
	require.Equal(t, http.StatusForbidden, call(UsersManage, pending, "POST").Code)
	require.Equal(t, http.StatusTeapot, call(MFA, pending, "POST").Code)
	require.Equal(t, http.StatusForbidden, call(UsersManage, &User{Role: Operator, MFAOK: true}, "GET").Code)
	require.Equal(t, http.StatusTeapot, call(UsersManage, &User{Role: Admin, MFAOK: true}, "GET").Code)
	// Tenant scope without the {tenant} of the route among the user's tenants.
	require.Equal(t, http.StatusForbidden, call(FleetRead, &User{Role: Admin, MFAOK: true}, "GET").Code)
	require.Panics(t, func() { Require("made.up", ok) })
}

// Error pages render through the renderer Pages injects (the console's
// layout in the panel); without one, a plain page says the same, escaped.
func TestErrorPagesRenderThroughTheInjectedRenderer(t *testing.T) {
	forbidden := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { Forbidden(w, r) })

	rec := httptest.NewRecorder()
	forbidden.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
	require.Equal(t, http.StatusForbidden, rec.Code)
	require.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
	require.Contains(t, rec.Body.String(), "<h1>Not allowed</h1>")

	var got []string
	render := func(w http.ResponseWriter, r *http.Request, code int, title, msg string) {
		got = append(got, fmt.Sprint(code, " ", title, ": ", msg))
		_, _ = w.Write([]byte("layout"))
	}
	rec = httptest.NewRecorder()
	Pages(render)(forbidden).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
	require.Equal(t, http.StatusForbidden, rec.Code)
	require.Equal(t, "layout", rec.Body.String())
	require.Equal(t, []string{"403 Not allowed: Your role does not give access to this page or action."}, got)

	rec = httptest.NewRecorder()
	ErrorPage(rec, httptest.NewRequest(http.MethodGet, "/x", nil), http.StatusBadRequest, "Bad <input>", "a & b")
	require.Contains(t, rec.Body.String(), "<h1>Bad &lt;input&gt;</h1><p>a &amp; b</p>")
}
