package agent

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/wire"
)

// capture is a server that must receive nothing: it counts every request
// and keeps what they were.
type capture struct {
	*httptest.Server
	n    atomic.Int64
	mu   sync.Mutex
	seen []string
}

func newCapture(t *testing.T) *capture {
	c := &capture{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.n.Add(1)
		c.mu.Lock()
		c.seen = append(c.seen, r.Method+" "+r.URL.Path)
		c.mu.Unlock()
	}))
	t.Cleanup(c.Close)
	return c
}

func (c *capture) requests() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seen...)
}

// TestCredentialsNeverReachAnotherBoard: the panel sealed the account's
// credentials for the real board, but the agent's configuration says the
// board is a capture server on loopback (a row edited behind the console's
// back, a compromised or buggy panel). Neither the HTTP actor nor the
// browser watcher sends it anything — no sign-in, no cookie, not even a
// page load — and each says why; once the panel seals credentials for that
// board, they go there (so the capture server would have seen them).
func TestCredentialsNeverReachAnotherBoard(t *testing.T) {
	s, creds := boardAccount(t)
	trap := newCapture(t)
	p := newClaimPanel(t, trap.URL, creds, wire.WorkerSpec{Name: "h1", Kind: KindHTTPActor},
		wire.WorkerSpec{Name: "w1", Kind: KindWatcher})
	p.welcome.CredentialOrigins = []string{s.URL()}
	_, logs := runAgent(t, p, "")
	p.waitConnected(t)
	byWorker := map[string]wire.Event{}
	for len(byWorker) < 2 {
		e := p.event(t, "credentials_not_sent", 20*time.Second)
		byWorker[e.Worker] = e
	}
	for _, w := range []string{"h1", "w1"} {
		e := byWorker[w]
		require.Equal(t, wire.LevelError, e.Level)
		require.Contains(t, e.Message, "they were sealed for "+s.URL()+", not "+trap.URL, w)
		require.Contains(t, e.Message, "an admin enters the account's credentials again", w)
		require.Equal(t, trap.URL, e.Fields["board"])
	}
	require.Zero(t, trap.n.Load(), "the capture server received %v", trap.requests())
	noSecrets(t, logs, creds, "")

	// Sealed for the capture server's origin, the credentials go there:
	// the check above would have seen them.
	p.command(t, wire.RotateCredentials{CommandID: "rot-1", Credentials: creds, Origins: []string{trap.URL}}, "rot-1")
	require.Eventually(t, func() bool {
		return strings.Contains(strings.Join(trap.requests(), "\n"), "POST /login")
	}, 30*time.Second, 50*time.Millisecond)
}

// TestAV4PanelGetsNoCredentialsSent: a panel before protocol v5 sends
// credentials without saying which board they were sealed for. The agent
// stores them but sends them nowhere, and says so.
func TestAV4PanelGetsNoCredentialsSent(t *testing.T) {
	_, creds := boardAccount(t)
	trap := newCapture(t)
	p := newClaimPanel(t, trap.URL, creds, wire.WorkerSpec{Name: "h1", Kind: KindHTTPActor})
	p.maxVer = wire.V4
	runAgent(t, p, "")
	p.waitConnected(t)
	e := p.event(t, "credentials_not_sent", 20*time.Second)
	require.Contains(t, e.Message, "the panel did not say which board they were sealed for (a panel before protocol v5)")
	require.Contains(t, e.Message, "upgrade the panel")
	require.Zero(t, trap.n.Load(), "the board received %v", trap.requests())
}

// TestBoardTrafficStaysOnTheBoard: the board's pages redirect the HTTP
// session's session check and the browser's sign-in page to another
// loopback port. The engine refuses a redirect off the platform's origins
// before dialling, and the agent's egress guard admits the board's origin
// only: that port receives no request (a cookie jar
// would have sent it the session cookie: cookies do not tell ports apart).
func TestBoardTrafficStaysOnTheBoard(t *testing.T) {
	s, creds := boardAccount(t)
	elsewhere := newCapture(t)
	real, err := url.Parse(s.URL())
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(real)
	var sessionChecks, signInPages atomic.Int64
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/api/session":
			sessionChecks.Add(1)
			http.Redirect(w, r, elsewhere.URL+"/api/session", http.StatusFound)
		case r.Method == http.MethodGet && r.URL.Path == "/login":
			signInPages.Add(1)
			http.Redirect(w, r, elsewhere.URL+"/login", http.StatusFound)
		default:
			rp.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(front.Close)
	p := newClaimPanel(t, front.URL, creds, wire.WorkerSpec{Name: "h1", Kind: KindHTTPActor},
		wire.WorkerSpec{Name: "w1", Kind: KindWatcher})
	_, logs := runAgent(t, p, "")
	p.waitConnected(t)
	// Each worker says it refused the redirect's target: the browser's
	// guard, and the HTTP session's engine itself (a redirect off the
	// platform's origins is never even dialled; its guard would refuse it
	// too).
	other := strings.TrimPrefix(elsewhere.URL, "http://")
	refusedByEngine := func(out string) bool {
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "worker=h1") && strings.Contains(line, "redirect: "+elsewhere.URL+" is not one of the platform's origins") {
				return true
			}
		}
		return false
	}
	require.Eventually(t, func() bool {
		out := logs.String()
		return (strings.Contains(out, "worker=h1 kind=http_actor target="+other) || refusedByEngine(out)) &&
			strings.Contains(out, "worker=w1 kind=watcher target="+other)
	}, 90*time.Second, 50*time.Millisecond)
	require.NotZero(t, sessionChecks.Load())
	require.NotZero(t, signInPages.Load())
	require.Zero(t, elsewhere.n.Load(), "the other port received %v", elsewhere.requests())
	require.Contains(t, logs.String(), "not the platform's origin")
	noSecrets(t, logs, creds, "")
}
