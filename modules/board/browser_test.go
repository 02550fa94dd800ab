package board_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/proto"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/browser"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/board/boardtest"
)

// signIn walks the real login and TOTP pages in a fresh browser context.
func signIn(t *testing.T, b *browser.Browser, tb *bundle, user string) *rod.Page {
	t.Helper()
	inc, err := b.Incognito()
	require.NoError(t, err)
	p, err := inc.Page(proto.TargetCreateTarget{URL: "about:blank"})
	require.NoError(t, err)
	// The test's own deadline bounds the page, not a clock started here: a
	// page signed in early is still used late in the test on a busy machine.
	require.NoError(t, p.Navigate(tb.s.URL()+"/loads"))
	require.NoError(t, p.WaitLoad())
	require.Equal(t, "/login", mustPath(t, p), "signed out: the board sends us to the login page")
	p.MustElement("#username").MustInput(user)
	p.MustElement("#password").MustInput(pw)
	// The next page is waited for by its address: a navigation wait set up
	// before the click can be satisfied by the current page's own late
	// lifecycle events on a busy machine.
	p.MustElement("#login-submit").MustClick()
	waitPath(t, p, "/login/totp")
	p.MustElement("#code").MustInput(boardtest.Code(tb.accts[user].TOTPSecret, time.Now()))
	p.MustElement("#totp-submit").MustClick()
	waitPath(t, p, "/loads")
	require.NoError(t, p.WaitLoad())
	return p
}

// waitPath waits until the page's address has the path want.
func waitPath(t *testing.T, p *rod.Page, want string) {
	t.Helper()
	require.Eventually(t, func() bool {
		info, err := p.Info()
		if err != nil {
			return false
		}
		u, err := url.Parse(info.URL)
		return err == nil && u.Path == want
	}, 30*time.Second, 20*time.Millisecond, "the page reaches %s", want)
}

func mustPath(t *testing.T, p *rod.Page) string {
	t.Helper()
	info, err := p.Info()
	require.NoError(t, err)
	u, err := url.Parse(info.URL)
	require.NoError(t, err)
	return u.Path
}

func row(p *rod.Page, id string) *rod.Element {
	return p.MustElement(fmt.Sprintf(`tr.load-row[data-load-id=%q]`, id))
}

func resultText(t *testing.T, p *rod.Page, id string) string {
	t.Helper()
	el := row(p, id).MustElement(".result")
	require.NoError(t, el.Timeout(15*time.Second).Wait(rod.Eval(`() => this.textContent.trim() !== "" && this.textContent.indexOf("booking…") < 0`)))
	return strings.TrimSpace(el.MustText())
}

// TestBrowserBooking is issue 5's "done when": real pages, real Chromium.
func TestBrowserBooking(t *testing.T) {
	tb := setup(t, false, func(c *board.Config) { c.PollInterval = 100 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b, err := browser.Launch(ctx, browser.Options{})
	require.NoError(t, err)
	defer b.Close()

	p1 := signIn(t, b, tb, "acme-1")

	// Watchers read the JSON responses through CDP: record the feed's responses.
	require.NoError(t, proto.NetworkEnable{}.Call(p1))
	var mu sync.Mutex
	var feedResponses []proto.NetworkRequestID
	go p1.EachEvent(func(e *proto.NetworkResponseReceived) {
		if strings.Contains(e.Response.URL, "/api/loads") && e.Response.MIMEType == "application/json" {
			mu.Lock()
			feedResponses = append(feedResponses, e.RequestID)
			mu.Unlock()
		}
	})()

	l := tb.publish(t, 1)[0]
	r := row(p1, l.ID)
	require.Contains(t, r.MustText(), l.Origin.City, "the row rendered from the JSON feed")

	// The load is in a JSON response body that CDP can read.
	require.Eventually(t, func() bool {
		mu.Lock()
		ids := append([]proto.NetworkRequestID(nil), feedResponses...)
		mu.Unlock()
		for _, id := range ids {
			body, err := proto.NetworkGetResponseBody{RequestID: id}.Call(p1)
			if err == nil && strings.Contains(body.Body, l.ID) {
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond)

	r.MustElement("button.book-btn").MustClick()
	require.Equal(t, "Booked #1", resultText(t, p1, l.ID))
	s := tb.s.Stats()
	require.EqualValues(t, 1, s.BookingRequests)
	require.EqualValues(t, 1, s.ConfirmedBookings)
	require.Zero(t, s.DuplicateConfirmations)

	// Two sessions of the same client click Book on one load: two accepted
	// bookings, and the oracle counts one duplicate confirmation.
	p2 := signIn(t, b, tb, "acme-2")
	l2 := tb.publish(t, 1)[0]
	row(p1, l2.ID).MustElement("button.book-btn").MustClick()
	row(p2, l2.ID).MustElement("button.book-btn").MustClick()
	require.True(t, strings.HasPrefix(resultText(t, p1, l2.ID), "Booked #"))
	require.True(t, strings.HasPrefix(resultText(t, p2, l2.ID), "Booked #"))
	s = tb.s.Stats()
	require.EqualValues(t, 3, s.ConfirmedBookings)
	require.EqualValues(t, 1, s.DuplicateConfirmations)
	require.EqualValues(t, 1, s.Clients["acme"].DuplicateConfirmations)

	// Another client is told the load is taken.
	p3 := signIn(t, b, tb, "delta-1")
	row(p3, l2.ID).MustElement("button.book-btn").MustClick()
	require.Equal(t, "Taken", resultText(t, p3, l2.ID))

	// Commit but drop the response: the page sees a failed request, the
	// booking is recorded, and the bookings endpoint shows it. The board
	// keeps connections alive like any server, and Chromium resends a
	// request whose reused connection closed before any answer (the
	// hazard docs/CLAIMS.md, "A booking is written once", keeps out of the
	// actor): the click reaches the board once or twice, each committed.
	require.NoError(t, tb.s.SetChaos(withDrop(tb.s.Chaos())))
	before := tb.s.Stats()
	l3 := tb.publish(t, 1)[0]
	row(p1, l3.ID).MustElement("button.book-btn").MustClick()
	require.Equal(t, "Request failed", resultText(t, p1, l3.ID))
	after := tb.s.Stats()
	sent := after.BookingRequests - before.BookingRequests
	require.True(t, sent == 1 || sent == 2, "one click, %d booking requests", sent)
	require.Equal(t, before.ConfirmedBookings+sent, after.ConfirmedBookings, "every request that arrived was committed")
	c := tb.login(t, "acme-2")
	var found bool
	for _, bk := range bookings(t, c, "").Bookings {
		found = found || bk.LoadID == l3.ID
	}
	require.True(t, found, "the dropped booking is in the client's bookings")

	// The layout change reaches a reloaded page: cards with a Reserve button.
	ch := tb.s.Chaos()
	ch.DropResponseRate, ch.Layout = 0, board.LayoutV2
	require.NoError(t, tb.s.SetChaos(ch))
	require.NoError(t, p3.Reload())
	card := p3.MustElement(fmt.Sprintf(`div.lane-card[data-load-id=%q]`, l3.ID))
	require.Equal(t, "Reserve", card.MustElement("button.reserve-btn").MustText())
	has, _, err := p3.Has("tr.load-row")
	require.NoError(t, err)
	require.False(t, has)
}

func withDrop(c board.Chaos) board.Chaos { c.DropResponseRate = 1; return c }
