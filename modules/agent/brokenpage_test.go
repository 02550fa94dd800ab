package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// A watcher whose jobs page came back as the board's 503 error page (its
// 5xx switch while the page loaded) sits at the right address with no
// script polling the feed: warm-looking and blind. It must notice and load
// the page again. Found by the load test, where a 5xx burst during the
// watchers' warm-up left two tenants blind for the whole run. The fault is
// injected by a proxy in front of the real board that answers the jobs page
// (only the page: the feed and the sign-in pass) with 503 for a while.
func TestWatcherReloadsAnErrorPage(t *testing.T) {
	ctx := context.Background()
	s, creds := boardAccount(t)
	target, err := url.Parse(s.URL())
	require.NoError(t, err)
	var failing atomic.Bool
	var failed atomic.Int32
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() && r.Method == http.MethodGet && r.URL.Path == "/loads" {
			failed.Add(1)
			http.Error(w, "503 Service Unavailable", http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()

	p := newClaimPanel(t, front.URL, creds, wire.WorkerSpec{Name: "w1", Kind: KindWatcher})
	stop, logs := runAgent(t, p, "")
	defer stop()
	p.waitConnected(t)
	p.event(t, "session_refreshed", signInWait)
	check := func(wait time.Duration) {
		t.Helper()
		loads, err := s.Publish(ctx, 2, nil)
		require.NoError(t, err)
		want := map[string]*board.Load{}
		for _, l := range loads {
			want[l.ID] = l
		}
		collect(t, p, want, wait)
	}
	check(20 * time.Second)

	// Sign the page out; the sign-in lands on the jobs page, which fails.
	failing.Store(true)
	require.Equal(t, 1, s.SessionStorm(1))
	// The sign-in may wait out a used TOTP step (30 s).
	require.Eventually(t, func() bool { return failed.Load() > 0 }, 60*time.Second, 50*time.Millisecond,
		"the jobs page was answered with an error")
	// The page stays broken past a keep-warm check: the check saw the
	// error page and loaded it again, into the error page once more.
	first := failed.Load()
	require.Eventually(t, func() bool { return failed.Load() > first }, 30*time.Second, 20*time.Millisecond,
		"a keep-warm check reloaded the broken page")
	failing.Store(false)

	// Without the check the page stays the error page and nothing is seen.
	// The page may also have to sign in again first, which can wait out a
	// used TOTP step (30 s).
	check(60 * time.Second)
	// It recovered by reloading the error page — or, when the state check
	// raced the page's own navigation, by opening a fresh page: blind it
	// was not, either way.
	l := logs.String()
	require.True(t, strings.Contains(l, "the jobs page is an error page") || strings.Contains(l, "watcher lost its page; recovering"), l)
}
