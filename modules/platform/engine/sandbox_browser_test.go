package engine_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/proto"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/browser"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/board/boardtest"
	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// pagePath is the page's path.
func pagePath(t *testing.T, p *rod.Page) string {
	t.Helper()
	info, err := p.Info()
	require.NoError(t, err)
	u, err := url.Parse(info.URL)
	require.NoError(t, err)
	return u.Path
}

// netLog records the page's requests the browser side tells (jobs and
// booking answers), with their bodies once loaded.
type netLog struct {
	mu      sync.Mutex
	jobs    [][]byte
	book    []bookAnswer
	status  map[proto.NetworkRequestID]int
	headers map[proto.NetworkRequestID]http.Header
	kind    map[proto.NetworkRequestID]string
}

type bookAnswer struct {
	status int
	header http.Header
	body   []byte
}

func watchNet(t *testing.T, ctx context.Context, p *rod.Page, bs platform.Browser) *netLog {
	t.Helper()
	n := &netLog{status: map[proto.NetworkRequestID]int{}, headers: map[proto.NetworkRequestID]http.Header{}, kind: map[proto.NetworkRequestID]string{}}
	require.NoError(t, proto.NetworkEnable{}.Call(p))
	pc := p.Context(ctx)
	go pc.EachEvent(func(e *proto.NetworkRequestWillBeSent) {
		u, _ := url.Parse(e.Request.URL)
		body := []byte(e.Request.PostData)
		n.mu.Lock()
		defer n.mu.Unlock()
		switch {
		case bs.IsJobsRequest(e.Request.Method, u, body):
			n.kind[e.RequestID] = "jobs"
		case bs.IsBookRequest(e.Request.Method, u, body):
			n.kind[e.RequestID] = "book"
		}
	}, func(e *proto.NetworkResponseReceived) {
		h := http.Header{}
		for k, v := range e.Response.Headers {
			h.Set(k, v.String())
		}
		n.mu.Lock()
		n.status[e.RequestID], n.headers[e.RequestID] = e.Response.Status, h
		n.mu.Unlock()
	}, func(e *proto.NetworkLoadingFinished) {
		n.mu.Lock()
		kind, st, h := n.kind[e.RequestID], n.status[e.RequestID], n.headers[e.RequestID]
		n.mu.Unlock()
		if kind == "" {
			return
		}
		res, err := proto.NetworkGetResponseBody{RequestID: e.RequestID}.Call(pc)
		if err != nil {
			return
		}
		raw := []byte(res.Body)
		if res.Base64Encoded {
			raw, _ = base64.StdEncoding.DecodeString(res.Body)
		}
		n.mu.Lock()
		if kind == "jobs" && st == 200 {
			n.jobs = append(n.jobs, raw)
		} else if kind == "book" {
			n.book = append(n.book, bookAnswer{st, h, raw})
		}
		n.mu.Unlock()
	})()
	return n
}

// The browser side of both adapters over a real board in real Chromium:
// sign in in the page (a reused code waits for the next), read the page's
// own jobs answers, click one job's control and let only its booking
// request go (its key read from the request), read the answer, list the
// bookings from inside the page, and tell a captcha, a signed-out page and
// an error page; a wrong password is refused.
func TestBrowserSide(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b, err := browser.Launch(ctx, browser.Options{})
	require.NoError(t, err)
	defer b.Close()
	for _, ad := range targets(t)[:2] { // the classic dialect: the html one has no browser section
		t.Run(ad.name, func(t *testing.T) {
			s := boardtest.Start(t, func(c *board.Config) { c.PollInterval = 100 * time.Millisecond; c.IdempotencyKeys = true })
			acct, err := s.CreateAccount(ctx, board.AccountSpec{Username: "acme-1", Password: password, Client: "acme"})
			require.NoError(t, err)
			a, err := ad.new(s.URL())
			require.NoError(t, err)
			bs := a.Browser()
			creds := wire.Credentials{Username: "acme-1", Password: wire.NewSecret(password), TOTPSecret: wire.NewSecret(acct.TOTPSecret),
				Origins: []string{s.URL()}}

			// A wrong password is refused as credentials.
			p0, err := b.Page(ctx)
			require.NoError(t, err)
			bad := creds
			bad.Password = wire.NewSecret("not-the-password")
			err = bs.Login(ctx, p0, bad, &platform.TOTP{Secret: creds.TOTPSecret})
			require.ErrorIs(t, err, platform.ErrCredentials)
			require.NotContains(t, err.Error(), "not-the-password")
			_ = p0.Close()

			p, err := b.Page(ctx)
			require.NoError(t, err)
			defer p.Close()
			n := watchNet(t, ctx, p, bs)
			// Another sign-in used the current code step first.
			_, err = boardtest.Login(ctx, s.URL(), "acme-1", password, acct.TOTPSecret, nil)
			require.NoError(t, err)
			codes := &platform.TOTP{Secret: creds.TOTPSecret}
			require.NoError(t, bs.Login(ctx, p, creds, codes))
			require.Equal(t, 1, codes.Waits, "the used step was refused and the next code waited for")
			require.Equal(t, "/loads", pagePath(t, p))
			require.Equal(t, s.URL()+"/loads", bs.JobsURL())
			st, err := bs.State(ctx, p)
			require.NoError(t, err)
			require.Equal(t, platform.PageOK, st)

			// The page's own feed answers carry the jobs, with the board's
			// clock.
			loads, err := s.Publish(ctx, 3, nil)
			require.NoError(t, err)
			got := map[string]wire.Job{}
			require.Eventually(t, func() bool {
				n.mu.Lock()
				bodies := n.jobs
				n.mu.Unlock()
				for _, raw := range bodies {
					jobs, err := bs.ParseJobs(raw)
					require.NoError(t, err)
					for _, j := range jobs {
						got[j.Key] = j
					}
					st, ok := bs.(platform.ServerTimer).ServerTime(raw)
					require.True(t, ok, "the feed carries server_time")
					require.WithinDuration(t, time.Now(), st, time.Minute)
				}
				return len(got) >= 3
			}, 20*time.Second, 50*time.Millisecond)
			for _, l := range loads {
				require.True(t, l.PublishedAt.Equal(got[l.ID].PublishedAt), "published_at is the board's")
				require.EqualValues(t, l.RateUSD*100, got[l.ID].RateCents)
			}

			// Booking: the click's request is paused, told by pattern,
			// method and URL, its key read, and let go.
			require.NotEmpty(t, bs.BookRequestPattern())
			require.Equal(t, "Idempotency-Key", bs.IdempotencyHeader())
			keys := make(chan string, 4)
			pc := p.Context(ctx)
			go pc.EachEvent(func(e *proto.FetchRequestPaused) {
				u, _ := url.Parse(e.Request.URL)
				body := []byte(e.Request.PostData)
				if bs.IsBookRequest(e.Request.Method, u, body) {
					keys <- bs.BookRequestKey(u, body)
				}
				_ = proto.FetchContinueRequest{RequestID: e.RequestID}.Call(pc)
			})()
			require.NoError(t, proto.FetchEnable{Patterns: []*proto.FetchRequestPattern{{URLPattern: bs.BookRequestPattern(), RequestStage: proto.FetchRequestStageRequest}}}.Call(p))
			require.NoError(t, bs.ClickBook(ctx, p, loads[1].ID))
			select {
			case k := <-keys:
				require.Equal(t, loads[1].ID, k, "the key is read from the booking request")
			case <-time.After(20 * time.Second):
				t.Fatal("no booking request was paused")
			}
			var ans bookAnswer
			require.Eventually(t, func() bool {
				n.mu.Lock()
				defer n.mu.Unlock()
				if len(n.book) == 0 {
					return false
				}
				ans = n.book[0]
				return true
			}, 20*time.Second, 50*time.Millisecond)
			r := bs.ParseBookResponse(ans.status, ans.header, ans.body)
			require.Equal(t, wire.ResultConfirmed, r.Result, r.Detail)
			require.NotEmpty(t, r.BookingID)
			require.Equal(t, platform.BookResult{Result: wire.ResultUnknown}.Result, bs.ParseBookResponse(502, nil, []byte("<html>bad gateway</html>")).Result, "an answer no rule reads is UNKNOWN")

			// The bookings from inside the page.
			bk, err := bs.Bookings(ctx, p, "")
			require.NoError(t, err)
			require.True(t, bk.Complete)
			require.Equal(t, "acme", bk.Client)
			require.Len(t, bk.Bookings, 1)
			require.Equal(t, loads[1].ID, bk.Bookings[0].Key)
			require.Equal(t, r.BookingID, bk.Bookings[0].BookingID)

			// A captcha answer shows the page's overlay.
			ch := s.Chaos()
			ch.CaptchaRate = 1
			require.NoError(t, s.SetChaos(ch))
			require.NoError(t, bs.ClickBook(ctx, p, loads[2].ID))
			<-keys
			require.Eventually(t, func() bool {
				st, err := bs.State(ctx, p)
				return err == nil && st == platform.PageCaptcha
			}, 20*time.Second, 50*time.Millisecond)
			require.Eventually(t, func() bool {
				n.mu.Lock()
				defer n.mu.Unlock()
				return len(n.book) >= 2
			}, 20*time.Second, 50*time.Millisecond)
			n.mu.Lock()
			ans = n.book[1]
			n.mu.Unlock()
			r = bs.ParseBookResponse(ans.status, ans.header, ans.body)
			require.True(t, r.Captcha)
			require.Equal(t, wire.ResultUnknown, r.Result)
			ch.CaptchaRate = 0
			require.NoError(t, s.SetChaos(ch))
			require.NoError(t, proto.FetchDisable{}.Call(p))

			// An error page served for the jobs view is broken, not OK.
			ch.ErrorRate = 1
			require.NoError(t, s.SetChaos(ch))
			require.NoError(t, p.Navigate(bs.JobsURL()))
			require.NoError(t, p.WaitLoad())
			st, err = bs.State(ctx, p)
			require.NoError(t, err)
			require.Equal(t, platform.PageBroken, st)
			ch.ErrorRate = 0
			require.NoError(t, s.SetChaos(ch))

			// Signed out: the look-up says so (never an empty list), and
			// the jobs view sends the page to sign in.
			require.Positive(t, s.SessionStorm(1))
			_, err = bs.Bookings(ctx, p, "")
			require.ErrorIs(t, err, platform.ErrSignedOut)
			require.True(t, bs.IsSignedOutResponse(401))
			require.False(t, bs.IsSignedOutResponse(200))
			require.NoError(t, p.Navigate(bs.JobsURL()))
			require.NoError(t, p.WaitLoad())
			st, err = bs.State(ctx, p)
			require.NoError(t, err)
			require.Equal(t, platform.PageSignedOut, st)
		})
	}
}
