package auth

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSafeNextStaysOnThisSite(t *testing.T) {
	for in, want := range map[string]string{"/audit?x=1": "/audit?x=1", "//evil.example": "/", `/\evil.example`: "/",
		"https://evil.example": "/", "": "/", "audit": "/"} {
		require.Equal(t, want, SafeNext(in), in)
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
