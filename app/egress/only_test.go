package egress_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/egress"
)

// TestOnlyDialsTheBoard: a guard whose policy names only the board's
// host:port dials it (on loopback: it is configuration, not data), in any
// spelling of its address, and refuses another port of the same address, a
// redirect to it, and any name, before a byte is sent.
func TestOnlyDialsTheBoard(t *testing.T) {
	var other atomic.Int64
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { other.Add(1) }))
	defer elsewhere.Close()
	board := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/go" {
			http.Redirect(w, r, elsewhere.URL+"/steal", http.StatusTemporaryRedirect)
			return
		}
		_, _ = w.Write([]byte("board"))
	}))
	defer board.Close()
	only, err := egress.OnlyTargets([]string{board.URL})
	require.NoError(t, err)
	g, err := egress.New(egress.Config{Policy: egress.Policy{Only: only}})
	require.NoError(t, err)
	c := g.Client(egress.ClientOptions{})

	res, err := c.Get(board.URL + "/")
	require.NoError(t, err)
	_ = res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	bu, _ := url.Parse(board.URL)
	res, err = c.Get("http://0x7f.1:" + bu.Port() + "/")
	require.NoError(t, err, "the board's address in another spelling")
	_ = res.Body.Close()

	for _, u := range []string{elsewhere.URL + "/", board.URL + "/go", "http://localhost:" + bu.Port() + "/", "http://example.com/"} {
		_, err := c.Get(u)
		require.ErrorIs(t, err, egress.ErrRefused, u)
		require.ErrorContains(t, err, "not the platform's origin", u)
	}
	_, err = g.DialContext(context.Background(), "tcp", "127.0.0.1:1")
	require.ErrorIs(t, err, egress.ErrRefused)
	require.Zero(t, other.Load(), "the other loopback port received a request")

	_, err = egress.OnlyTargets([]string{"board.example"})
	require.Error(t, err)
	only, err = egress.OnlyTargets([]string{"https://Board.Example", "http://[::1]"})
	require.NoError(t, err)
	require.Equal(t, []string{"Board.Example:443", "[::1]:80"}, only)
}
