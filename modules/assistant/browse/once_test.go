package browse_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/assistant/browse"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// site is a loopback site with a publish form. Every publish is recorded;
// while drop is set, its answer is lost: the connection is closed without
// a response after the post was taken, as a proxy's timeout would.
type site struct {
	url       string
	published atomic.Int32
	drop      atomic.Bool
	mu        sync.Mutex
	cookies   []string
}

func startSite(t *testing.T) *site {
	s := &site{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: "s3ss10n", Path: "/", HttpOnly: true})
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<!doctype html><title>Post</title><form method="post" action="/publish">`+
			`<textarea name="text">hello</textarea><button type="submit">Publish</button></form>`)
	})
	mux.HandleFunc("POST /publish", func(w http.ResponseWriter, r *http.Request) {
		s.published.Add(1)
		s.mu.Lock()
		s.cookies = append(s.cookies, r.Header.Get("Cookie"))
		s.mu.Unlock()
		if s.drop.Load() {
			panic(http.ErrAbortHandler) // taken, and the answer is lost
		}
		http.SetCookie(w, &http.Cookie{Name: "flash", Value: "posted", Path: "/"})
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><title>Posted</title><p id="done">Published: %s</p>`, r.PostFormValue("text"))
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	s.url = "http://" + ln.Addr().String()
	return s
}

func openSession(t *testing.T, s *site) *browse.Session {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	writes := &http.Transport{DisableKeepAlives: true}
	bs, err := browse.Open(ctx, browse.Options{Writes: writes, Log: testenv.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = bs.Close() })
	host := strings.TrimPrefix(s.url, "http://")
	bs.SetAllow(func(h string) bool { return h == host })
	return bs
}

// publishButton opens the form and returns the tab and the button's number.
func publishButton(t *testing.T, bs *browse.Session, s *site) (string, int) {
	ctx := context.Background()
	tab, err := bs.Open(ctx, s.url+"/")
	require.NoError(t, err)
	v, err := bs.Read(ctx, tab.ID)
	require.NoError(t, err)
	for _, it := range v.Items {
		if it.N > 0 && strings.Contains(it.Text, "Publish") {
			return tab.ID, it.N
		}
	}
	t.Fatalf("no Publish button in %+v", v.Items)
	return "", 0
}

// An approved action's write is sent by the session, once, with the
// browser's cookies, and the page gets the site's answer (its cookies
// stored). When the site takes the post and the answer is lost, the post is
// never sent again and ClickOnce says it may or may not have happened.
func TestClickOnceSendsAWriteOnce(t *testing.T) {
	s := startSite(t)
	bs := openSession(t, s)
	ctx := context.Background()

	tab, n := publishButton(t, bs, s)
	require.NoError(t, bs.ClickOnce(ctx, tab, n, 10*time.Second))
	require.EqualValues(t, 1, s.published.Load())
	s.mu.Lock()
	require.Contains(t, s.cookies[0], "sid=s3ss10n", "the browser's cookies went with the write")
	s.mu.Unlock()
	v, err := bs.Read(ctx, tab)
	require.NoError(t, err)
	require.Equal(t, "Posted", v.Title, "the page shows the site's answer")
	var shown bool
	for _, it := range v.Items {
		shown = shown || strings.Contains(it.Text, "Published: hello")
	}
	require.True(t, shown, "the answer's body reached the page: %+v", v.Items)

	// The answer is lost after the site took the post.
	s.drop.Store(true)
	tab, n = publishButton(t, bs, s)
	err = bs.ClickOnce(ctx, tab, n, 10*time.Second)
	require.Error(t, err)
	require.Contains(t, err.Error(), "may or may not")
	require.Contains(t, err.Error(), "POST "+s.url+"/publish")
	// Nothing resends it. Chromium resends within milliseconds of the lost
	// answer; half a second without a second post is an absence, not a wait
	// for an event.
	require.Never(t, func() bool { return s.published.Load() != 2 }, 500*time.Millisecond, 50*time.Millisecond,
		"the lost post reached the site once")
}
