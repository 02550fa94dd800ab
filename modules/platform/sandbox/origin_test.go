package sandbox_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/platform/sandbox"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// TestLoginSendsCredentialsOnlyToTheirOrigin: the adapter itself refuses to
// sign in at a board the credentials were not sealed for, and a sign-in
// form that redirects (307: the browser would post the form again) to
// another origin gets nothing there.
func TestLoginSendsCredentialsOnlyToTheirOrigin(t *testing.T) {
	ctx := context.Background()
	var captured atomic.Int64
	trap := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { captured.Add(1) }))
	defer trap.Close()
	creds := wire.Credentials{Username: "acme-1", Password: wire.NewSecret(password), TOTPSecret: wire.NewSecret("JBSWY3DPEHPK3PXP")}

	// Sealed for another board: nothing is sent to this one.
	ad, err := sandbox.New(trap.URL)
	require.NoError(t, err)
	sess, err := ad.NewSession(platform.SessionOptions{})
	require.NoError(t, err)
	bound := creds
	bound.Origins = []string{"http://127.0.0.1:1"}
	err = sess.Login(ctx, bound, &platform.TOTP{Secret: creds.TOTPSecret})
	require.ErrorIs(t, err, wire.ErrOriginNotBound)
	require.ErrorContains(t, err, "sealed for http://127.0.0.1:1, not "+trap.URL)
	require.NotContains(t, err.Error(), password)
	require.Zero(t, captured.Load())

	// Sealed for this board, whose sign-in redirects elsewhere.
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, trap.URL+"/login", http.StatusTemporaryRedirect)
	}))
	defer front.Close()
	ad, err = sandbox.New(front.URL)
	require.NoError(t, err)
	sess, err = ad.NewSession(platform.SessionOptions{})
	require.NoError(t, err)
	bound.Origins = []string{front.URL}
	err = sess.Login(ctx, bound, &platform.TOTP{Secret: creds.TOTPSecret})
	require.ErrorIs(t, err, wire.ErrOriginNotBound)
	require.Zero(t, captured.Load(), "the redirect's target received the sign-in form")
}
