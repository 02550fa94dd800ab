package board_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/app/unit"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/board/boardtest"
)

// The process-lifetime spawner thread of app/unit is not a leak.
func TestMain(m *testing.M) { testenv.MainNoLeaks(m, goleak.IgnoreTopFunction(unit.SpawnerFunction)) }

const pw = "correct horse battery"

var t0 = time.Date(2030, 1, 7, 9, 0, 0, 0, time.UTC)

type bundle struct {
	s     *board.Server
	clk   *clock.Fake // nil when the board runs on the wall clock
	accts map[string]board.Account
}

func (tb *bundle) now() time.Time {
	if tb.clk != nil {
		return tb.clk.Now()
	}
	return time.Now()
}

// setup starts a board with accounts acme-1, acme-2 (client acme) and
// delta-1 (client delta). fake selects the fake clock.
func setup(t *testing.T, fake bool, mod ...func(*board.Config)) *bundle {
	t.Helper()
	tb := &bundle{accts: map[string]board.Account{}}
	if fake {
		tb.clk = clock.NewFake(t0)
		mod = append([]func(*board.Config){func(c *board.Config) { c.Clock = tb.clk }}, mod...)
	}
	tb.s = boardtest.Start(t, mod...)
	for _, a := range [][2]string{{"acme-1", "acme"}, {"acme-2", "acme"}, {"delta-1", "delta"}} {
		acct, err := tb.s.CreateAccount(context.Background(), board.AccountSpec{Username: a[0], Password: pw, Client: a[1]})
		require.NoError(t, err)
		tb.accts[a[0]] = acct
	}
	return tb
}

func (tb *bundle) login(t *testing.T, user string) *boardtest.Client {
	t.Helper()
	c, err := boardtest.Login(context.Background(), tb.s.URL(), user, pw, tb.accts[user].TOTPSecret, tb.now)
	require.NoError(t, err)
	return c
}

func (tb *bundle) publish(t *testing.T, n int) []*board.Load {
	t.Helper()
	ls, err := tb.s.Publish(context.Background(), n, nil)
	require.NoError(t, err)
	return ls
}

func book(t *testing.T, c *boardtest.Client, id, key string) (int, map[string]any) {
	t.Helper()
	st, body, err := c.Book(context.Background(), id, key)
	require.NoError(t, err)
	return st, body
}

func bookings(t *testing.T, c *boardtest.Client, query string) board.BookingsPage {
	t.Helper()
	var p board.BookingsPage
	require.NoError(t, c.GetJSON(context.Background(), "/api/bookings"+query, &p))
	return p
}

func TestBookingRules(t *testing.T) {
	tb := setup(t, false)
	a1, a2, d1 := tb.login(t, "acme-1"), tb.login(t, "acme-2"), tb.login(t, "delta-1")
	l := tb.publish(t, 1)[0]

	st, body := book(t, a1, l.ID, "")
	require.Equal(t, http.StatusCreated, st)
	require.Equal(t, "confirmed", body["status"])

	st, body = book(t, d1, l.ID, "")
	require.Equal(t, http.StatusConflict, st, "another client is told the load is taken")
	require.Equal(t, "taken", body["status"])

	st, body = book(t, a2, l.ID, "")
	require.Equal(t, http.StatusCreated, st, "the same client booking again is a second tender")
	require.Equal(t, "confirmed", body["status"])

	st, body = book(t, a1, "LD-999999", "")
	require.Equal(t, http.StatusNotFound, st)
	require.Equal(t, "not_found", body["status"])

	s := tb.s.Stats()
	require.EqualValues(t, 1, s.LoadsPublished)
	require.EqualValues(t, 4, s.BookingRequests)
	require.EqualValues(t, 2, s.ConfirmedBookings)
	require.EqualValues(t, 1, s.DuplicateConfirmations)
	require.EqualValues(t, 1, s.TakenAnswers)
	require.EqualValues(t, board.ClientStats{BookingRequests: 3, ConfirmedBookings: 2, DuplicateConfirmations: 1}, *s.Clients["acme"])
	require.EqualValues(t, board.ClientStats{BookingRequests: 1, TakenAnswers: 1}, *s.Clients["delta"])

	// Any account of the client sees both bookings, and says the list is complete.
	p := bookings(t, a2, "")
	require.True(t, p.SignedIn)
	require.True(t, p.Complete)
	require.Len(t, p.Bookings, 2)
	require.Equal(t, "acme-1", p.Bookings[0].Account)
	require.Empty(t, bookings(t, d1, "").Bookings)
	require.True(t, bookings(t, d1, "").Complete, "an empty list from a signed-in client is a complete answer")

	// A partial page is not complete; all=1 is.
	p = bookings(t, a1, "?per_page=1&page=2")
	require.False(t, p.Complete)
	require.Equal(t, 2, p.Pages)
	require.Len(t, p.Bookings, 1)
	require.True(t, bookings(t, a1, "?per_page=1&all=1").Complete)
}

// The bookings list by cursor: the client's bookings above the cursor,
// oldest first, at most limit, with the cursor to ask with next; only the
// page with nothing after it says complete. Bad parameters are a 400.
func TestBookingsByCursor(t *testing.T) {
	tb := setup(t, false)
	a1, a2, d1 := tb.login(t, "acme-1"), tb.login(t, "acme-2"), tb.login(t, "delta-1")
	ls := tb.publish(t, 5)
	for i, l := range ls {
		c := a1
		if i%2 == 1 {
			c = a2
		}
		st, _ := book(t, c, l.ID, "")
		require.Equal(t, http.StatusCreated, st)
	}
	st, _ := book(t, d1, ls[0].ID, "")
	require.Equal(t, http.StatusConflict, st)

	p := bookings(t, a2, "?after=0&limit=2")
	require.True(t, p.SignedIn)
	require.False(t, p.Complete, "more follows")
	require.True(t, *p.More)
	require.EqualValues(t, 0, *p.After)
	require.Len(t, p.Bookings, 2)
	require.Equal(t, 5, p.Total)
	require.Equal(t, p.Bookings[1].ID, *p.NextAfter)
	var ids []int64
	after := int64(0)
	for {
		p := bookings(t, a1, fmt.Sprintf("?after=%d&limit=2", after))
		for _, b := range p.Bookings {
			require.Greater(t, b.ID, after)
			require.Equal(t, "acme", b.Client)
			ids = append(ids, b.ID)
		}
		after = *p.NextAfter
		if !*p.More {
			require.True(t, p.Complete, "the last page says complete")
			break
		}
	}
	require.Equal(t, []int64{1, 2, 3, 4, 5}, ids)
	end := bookings(t, a1, "?after=5")
	require.True(t, end.Complete)
	require.Empty(t, end.Bookings)
	require.EqualValues(t, 5, *end.NextAfter, "an empty page keeps the cursor")
	require.Empty(t, bookings(t, d1, "?after=0").Bookings, "another client's bookings are never listed")

	for _, q := range []string{"?after=-1", "?after=x", "?after=0&limit=0", "?after=0&limit=1001"} {
		var body map[string]any
		err := a1.GetJSON(context.Background(), "/api/bookings"+q, &body)
		require.Error(t, err, q)
	}
}

func TestSignedOutAnswersAreNotComplete(t *testing.T) {
	tb := setup(t, false)
	for _, path := range []string{"/api/bookings", "/api/loads", "/api/session"} {
		resp, err := http.Get(tb.s.URL() + path)
		require.NoError(t, err)
		var body map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, path)
		require.Equal(t, false, body["signed_in"], path)
		require.Equal(t, false, body["complete"], path)
	}
	resp, err := http.Post(tb.s.URL()+"/api/book", "application/json", strings.NewReader(`{"load_id":"LD-000001"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Zero(t, tb.s.Stats().BookingRequests, "a signed-out request never reaches the booking desk")
}

func TestBookRequiresCSRF(t *testing.T) {
	tb := setup(t, false)
	c := tb.login(t, "acme-1")
	l := tb.publish(t, 1)[0]
	c.CSRF = "wrong"
	st, body := book(t, c, l.ID, "")
	require.Equal(t, http.StatusForbidden, st)
	require.Equal(t, "csrf_failed", body["status"])
	require.Zero(t, tb.s.Stats().ConfirmedBookings)
}

func TestIdempotencyKeys(t *testing.T) {
	t.Run("ignored by default", func(t *testing.T) {
		tb := setup(t, false)
		a1, a2 := tb.login(t, "acme-1"), tb.login(t, "acme-2")
		l := tb.publish(t, 1)[0]
		st, _ := book(t, a1, l.ID, "op-1")
		require.Equal(t, http.StatusCreated, st)
		st, _ = book(t, a2, l.ID, "op-1")
		require.Equal(t, http.StatusCreated, st)
		require.EqualValues(t, 2, tb.s.Stats().ConfirmedBookings)
		require.EqualValues(t, 1, tb.s.Stats().DuplicateConfirmations)
	})
	t.Run("honoured with --idempotency-keys", func(t *testing.T) {
		tb := setup(t, false, func(c *board.Config) { c.IdempotencyKeys = true })
		a1, a2 := tb.login(t, "acme-1"), tb.login(t, "acme-2")
		ls := tb.publish(t, 2)
		st, first := book(t, a1, ls[0].ID, "op-1")
		require.Equal(t, http.StatusCreated, st)
		st, again := book(t, a2, ls[0].ID, "op-1")
		require.Equal(t, http.StatusCreated, st, "the replay repeats the first answer")
		require.Equal(t, first, again)
		require.EqualValues(t, 1, tb.s.Stats().ConfirmedBookings)
		require.Zero(t, tb.s.Stats().DuplicateConfirmations)

		st, body := book(t, a1, ls[1].ID, "op-1")
		require.Equal(t, http.StatusUnprocessableEntity, st)
		require.Equal(t, "idempotency_key_reused", body["status"])

		st, _ = book(t, a1, ls[0].ID, "op-2")
		require.Equal(t, http.StatusCreated, st, "a new key is a new booking")
		require.EqualValues(t, 2, tb.s.Stats().ConfirmedBookings)
	})
}

func TestCommitButDropResponse(t *testing.T) {
	tb := setup(t, false, func(c *board.Config) { c.Chaos.DropResponseRate = 1 })
	c := tb.login(t, "acme-1")
	l := tb.publish(t, 1)[0]
	_, _, err := c.Book(context.Background(), l.ID, "")
	require.Error(t, err, "the client sees a failed request")

	s := tb.s.Stats()
	require.EqualValues(t, 1, s.ConfirmedBookings, "the booking was committed all the same")
	p := bookings(t, c, "")
	require.True(t, p.Complete)
	require.Len(t, p.Bookings, 1)
	require.Equal(t, l.ID, p.Bookings[0].LoadID)
	require.Equal(t, "http", p.Bookings[0].Source)

	var dropped bool
	for _, e := range tb.s.Events(0, 0) {
		dropped = dropped || e.Type == board.EvResponseDropped
	}
	require.True(t, dropped, "the event log records the dropped response")
}

func TestLoadsFeed(t *testing.T) {
	tb := setup(t, true, func(c *board.Config) { c.LoadTTL = time.Minute })
	c := tb.login(t, "acme-1")
	ls := tb.publish(t, 3)
	var feed struct {
		Loads     []board.Load `json:"loads"`
		NextAfter int64        `json:"next_after"`
	}
	require.NoError(t, c.GetJSON(context.Background(), "/api/loads", &feed))
	require.Len(t, feed.Loads, 3)
	require.Equal(t, ls[0].ID, feed.Loads[0].ID)
	require.True(t, feed.Loads[0].PublishedAt.Equal(t0))
	require.True(t, feed.Loads[0].ExpiresAt.Equal(t0.Add(time.Minute)))
	require.NotEmpty(t, feed.Loads[0].Origin.City)
	require.NotEqual(t, feed.Loads[0].Origin, feed.Loads[0].Destination)
	require.Positive(t, feed.Loads[0].WeightLb)
	require.Positive(t, feed.Loads[0].RateUSD)
	require.True(t, feed.Loads[0].PickupEnd.After(feed.Loads[0].PickupStart))
	require.EqualValues(t, 3, feed.NextAfter)

	require.NoError(t, c.GetJSON(context.Background(), "/api/loads?after=2", &feed))
	require.Len(t, feed.Loads, 1, "after= returns only newer loads")
	require.NoError(t, c.GetJSON(context.Background(), "/api/loads?after=0&limit=2", &feed))
	require.Len(t, feed.Loads, 2)
	require.EqualValues(t, 2, feed.NextAfter)

	tb.clk.Advance(time.Minute)
	require.NoError(t, c.GetJSON(context.Background(), "/api/loads", &feed))
	require.Empty(t, feed.Loads, "expired loads leave the feed")
	st, body := book(t, c, ls[0].ID, "")
	require.Equal(t, http.StatusGone, st)
	require.Equal(t, "expired", body["status"])
	require.Equal(t, 3, 3)

	resp, err := c.HTTP.Get(tb.s.URL() + "/api/loads?after=-1")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

func TestEventLogIsGroundTruth(t *testing.T) {
	tb := setup(t, true)
	c := tb.login(t, "acme-1")
	l := tb.publish(t, 1)[0]
	tb.clk.Advance(1500 * time.Millisecond)
	st, _ := book(t, c, l.ID, "")
	require.Equal(t, http.StatusCreated, st)

	var out struct {
		Events    []board.Event `json:"events"`
		NextAfter int64         `json:"next_after"`
	}
	code, err := boardtest.Admin(context.Background(), tb.s, "GET", "/_sandbox/events", nil, &out)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	byType := map[string]board.Event{}
	for i, e := range out.Events {
		require.EqualValues(t, i+1, e.Seq, "sequence numbers are dense")
		byType[e.Type] = e
	}
	require.True(t, byType[board.EvLoadPublished].At.Equal(l.PublishedAt))
	require.Equal(t, l.ID, byType[board.EvLoadPublished].LoadID)
	require.True(t, byType[board.EvBookingConfirmed].At.Equal(t0.Add(1500*time.Millisecond)))
	require.Equal(t, "acme", byType[board.EvBookingRequest].Client)

	// ndjson export, paged with after=.
	req, _ := http.NewRequest("GET", tb.s.URL()+"/_sandbox/events?format=ndjson&after=1", nil)
	req.Header.Set("Authorization", "Bearer "+tb.s.AdminToken())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	require.Len(t, lines, len(out.Events)-1)
	require.Contains(t, lines[0], `"seq":2`)
}

func TestAdminTokenGuard(t *testing.T) {
	tb := setup(t, false)
	routes := [][2]string{
		{"GET", "/_sandbox/stats"}, {"GET", "/_sandbox/events"}, {"GET", "/_sandbox/accounts"},
		{"POST", "/_sandbox/accounts"}, {"POST", "/_sandbox/loads"}, {"GET", "/_sandbox/bookings"},
		{"POST", "/_sandbox/bookings"}, {"GET", "/_sandbox/chaos"}, {"PATCH", "/_sandbox/chaos"},
		{"POST", "/_sandbox/session-storm"}, {"GET", "/_sandbox/publisher"}, {"PATCH", "/_sandbox/publisher"},
	}
	for _, rt := range routes {
		for _, auth := range []string{"", "Bearer wrong-token-wrong-token", "Basic " + tb.s.AdminToken(), tb.s.AdminToken()} {
			req, _ := http.NewRequest(rt[0], tb.s.URL()+rt[1], strings.NewReader(`{}`))
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s %s with %q", rt[0], rt[1], auth)
		}
	}
	var s board.Stats
	code, err := boardtest.Admin(context.Background(), tb.s, "GET", "/_sandbox/stats", nil, &s)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	// The token never appears in an answer or in the oracle page.
	resp, err := http.Get(tb.s.URL() + "/_sandbox/")
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NotContains(t, string(raw), tb.s.AdminToken())
}

func TestAdminAPI(t *testing.T) {
	tb := setup(t, false)
	ctx := context.Background()
	var acct board.Account
	code, err := boardtest.Admin(ctx, tb.s, "POST", "/_sandbox/accounts", board.AccountSpec{Username: "north-1", Password: pw, Client: "north"}, &acct)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	require.NotEmpty(t, acct.TOTPSecret)
	require.Contains(t, acct.OTPAuthURL, "otpauth://totp/")

	code, _ = boardtest.Admin(ctx, tb.s, "POST", "/_sandbox/accounts", board.AccountSpec{Username: "north-1", Password: pw, Client: "north"}, nil)
	require.Equal(t, http.StatusConflict, code)
	for _, bad := range []board.AccountSpec{{Username: "x", Password: "short", Client: "c"}, {Username: "", Password: pw, Client: "c"}, {Username: "a b", Password: pw, Client: "c"}, {Username: "ok", Password: pw, Client: "c", TOTPSecret: "not base32!"}} {
		code, _ = boardtest.Admin(ctx, tb.s, "POST", "/_sandbox/accounts", bad, nil)
		require.Equal(t, http.StatusBadRequest, code, "%+v", bad)
	}
	var list struct{ Accounts []board.Account }
	_, err = boardtest.Admin(ctx, tb.s, "GET", "/_sandbox/accounts", nil, &list)
	require.NoError(t, err)
	require.Len(t, list.Accounts, 4)
	for _, a := range list.Accounts {
		require.Empty(t, a.TOTPSecret, "the list never shows secrets")
	}

	c, err := boardtest.Login(ctx, tb.s.URL(), "north-1", pw, acct.TOTPSecret, nil)
	require.NoError(t, err)
	require.Equal(t, "north", c.Client)

	var pub struct{ Loads []board.Load }
	code, err = boardtest.Admin(ctx, tb.s, "POST", "/_sandbox/loads", map[string]any{"count": 2, "loads": []map[string]any{{"equipment": "Reefer", "rate_usd": 1234, "origin": map[string]string{"city": "Boise", "state": "ID"}}}}, &pub)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	require.Len(t, pub.Loads, 2)
	require.Equal(t, "Reefer", pub.Loads[0].Equipment)
	require.Equal(t, 1234, pub.Loads[0].RateUSD)
	require.Equal(t, "Boise", pub.Loads[0].Origin.City)
	code, _ = boardtest.Admin(ctx, tb.s, "POST", "/_sandbox/loads", map[string]any{"count": 0}, nil)
	require.Equal(t, http.StatusBadRequest, code)
	code, _ = boardtest.Admin(ctx, tb.s, "POST", "/_sandbox/loads", map[string]any{"cont": 2}, nil)
	require.Equal(t, http.StatusBadRequest, code, "unknown fields are refused, not ignored")

	// Injected duplicate: one booking over HTTP plus one injected for the same client.
	st, _ := book(t, c, pub.Loads[1].ID, "")
	require.Equal(t, http.StatusCreated, st)
	code, _ = boardtest.Admin(ctx, tb.s, "POST", "/_sandbox/bookings", map[string]string{"load_id": pub.Loads[1].ID, "account": "north-1"}, nil)
	require.Equal(t, http.StatusCreated, code)
	s := tb.s.Stats()
	require.EqualValues(t, 2, s.ConfirmedBookings)
	require.EqualValues(t, 1, s.DuplicateConfirmations)
	require.EqualValues(t, 1, s.Clients["north"].DuplicateConfirmations)
	require.Len(t, bookings(t, c, "").Bookings, 2)
	code, _ = boardtest.Admin(ctx, tb.s, "POST", "/_sandbox/bookings", map[string]string{"load_id": "LD-424242", "account": "north-1"}, nil)
	require.Equal(t, http.StatusBadRequest, code)

	var rate struct{ Rate float64 }
	code, _ = boardtest.Admin(ctx, tb.s, "PATCH", "/_sandbox/publisher", map[string]any{"rate": -1}, nil)
	require.Equal(t, http.StatusBadRequest, code)
	_, err = boardtest.Admin(ctx, tb.s, "PATCH", "/_sandbox/publisher", map[string]any{"rate": 3.5}, &rate)
	require.NoError(t, err)
	require.Equal(t, 3.5, rate.Rate)
	_, _ = boardtest.Admin(ctx, tb.s, "PATCH", "/_sandbox/publisher", map[string]any{"rate": 0}, nil)
}

func TestTOTPReplayRefused(t *testing.T) {
	tb := setup(t, true)
	ctx := context.Background()
	_, err := boardtest.Login(ctx, tb.s.URL(), "acme-1", pw, tb.accts["acme-1"].TOTPSecret, tb.clk.Now)
	require.NoError(t, err)

	// Same step, same code: refused with a reason the worker can act on.
	jar := tryLogin(t, tb, "acme-1", boardtest.Code(tb.accts["acme-1"].TOTPSecret, tb.clk.Now()), "totp_reused")
	// A wrong code is a different refusal.
	tryLoginWithJar(t, tb, jar, "000000", "totp_invalid")
	// The previous step's code is refused too once a later one was used.
	tryLogin(t, tb, "acme-1", boardtest.Code(tb.accts["acme-1"].TOTPSecret, tb.clk.Now().Add(-30*time.Second)), "totp_reused")
	// Another account of the same client is not affected.
	_, err = boardtest.Login(ctx, tb.s.URL(), "acme-2", pw, tb.accts["acme-2"].TOTPSecret, tb.clk.Now)
	require.NoError(t, err)

	tb.clk.Advance(30 * time.Second)
	_, err = boardtest.Login(ctx, tb.s.URL(), "acme-1", pw, tb.accts["acme-1"].TOTPSecret, tb.clk.Now)
	require.NoError(t, err, "the next step's code works")

	tryLogin(t, tb, "acme-1", "", "credentials") // wrong password path below
}

// tryLogin posts the password then code, and asserts the TOTP step's refusal.
func tryLogin(t *testing.T, tb *bundle, user, code, want string) *http.Client {
	t.Helper()
	hc := jarClient()
	password := pw
	if want == "credentials" {
		password = "wrong password"
	}
	resp, err := hc.PostForm(tb.s.URL()+"/login", url.Values{"username": {user}, "password": {password}})
	require.NoError(t, err)
	resp.Body.Close()
	if want == "credentials" {
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		require.Equal(t, "credentials", resp.Header.Get("X-Board-Error"))
		return hc
	}
	tryLoginWithJar(t, tb, hc, code, want)
	return hc
}

func tryLoginWithJar(t *testing.T, tb *bundle, hc *http.Client, code, want string) {
	t.Helper()
	resp, err := hc.PostForm(tb.s.URL()+"/login/totp", url.Values{"code": {code}})
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Equal(t, want, resp.Header.Get("X-Board-Error"))
	require.NotContains(t, string(raw), code, "the page never echoes a code")
}

func TestSessionExpiry(t *testing.T) {
	tb := setup(t, true, func(c *board.Config) { c.SessionTTL = time.Minute })
	c := tb.login(t, "acme-1")
	var feed map[string]any
	require.NoError(t, c.GetJSON(context.Background(), "/api/loads", &feed))
	tb.clk.Advance(59 * time.Second)
	require.NoError(t, c.GetJSON(context.Background(), "/api/loads", &feed))
	tb.clk.Advance(time.Second)
	require.ErrorContains(t, c.GetJSON(context.Background(), "/api/loads", &feed), "HTTP 401")

	// The page sends a signed-out browser to the login page.
	resp, err := c.HTTP.Get(tb.s.URL() + "/loads")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "/login", resp.Request.URL.Path)

	tb.clk.Advance(30 * time.Second) // next TOTP step
	c = tb.login(t, "acme-1")
	require.NoError(t, c.GetJSON(context.Background(), "/api/loads", &feed), "a fresh login refreshes the session")
}

func TestConfigFlags(t *testing.T) {
	// Register against the shared config package and check the FLEET_BOARD_* fallbacks.
	cfg := board.Defaults()
	s := newSet()
	cfg.Register(s)
	_, err := s.Parse([]string{"--rate=2.5", "--chaos-layout=v2"}, func(k string) string {
		return map[string]string{"FLEET_BOARD_SESSION_TTL": "90s", "FLEET_BOARD_IDEMPOTENCY_KEYS": "true", "FLEET_BOARD_RATE": "9", "FLEET_BOARD_CHAOS_LATENCY": "uniform:1ms-2ms"}[k]
	})
	require.NoError(t, err)
	require.Equal(t, 2.5, cfg.Rate, "the flag wins over the variable")
	require.Equal(t, 90*time.Second, cfg.SessionTTL)
	require.True(t, cfg.IdempotencyKeys)
	require.Equal(t, "v2", cfg.Chaos.Layout)
	require.Equal(t, "uniform:1ms-2ms", cfg.Chaos.Latency)
	require.Equal(t, 250*time.Millisecond, cfg.PollInterval)
	require.Equal(t, 10*time.Minute, cfg.LoadTTL)
	require.Equal(t, time.Duration(5*time.Second), time.Duration(cfg.Chaos.LateCommitDelay))

	_, err = board.Start(context.Background(), board.Config{Listen: "127.0.0.1:0", Data: "memory"}, nil)
	require.ErrorContains(t, err, "FLEET_BOARD_ADMIN_TOKEN", "no token is a clear error")
	_, err = board.Start(context.Background(), board.Config{Listen: "127.0.0.1:0", Data: "memory", AdminToken: boardtest.AdminToken, Chaos: board.Chaos{Latency: "zipf:3"}}, nil)
	require.ErrorContains(t, err, "unknown distribution")
}

// TestIssuedSessionsListsEveryCookieGiven: the board remembers the session
// cookies it issued, including those a session storm expired, so a secret
// scan (the load test's) can look for them in every log.
func TestIssuedSessionsListsEveryCookieGiven(t *testing.T) {
	tb := setup(t, false)
	a, b := tb.login(t, "acme-1"), tb.login(t, "delta-1")
	u, err := url.Parse(tb.s.URL())
	require.NoError(t, err)
	var cookies []string
	for _, c := range []*boardtest.Client{a, b} {
		for _, ck := range c.HTTP.Jar.Cookies(u) {
			cookies = append(cookies, ck.Value)
		}
	}
	require.Len(t, cookies, 2)
	tb.s.SessionStorm(1)
	var issued, accounts []string
	for _, s := range tb.s.IssuedSessions() {
		issued, accounts = append(issued, s.Token), append(accounts, s.Account)
	}
	require.ElementsMatch(t, cookies, issued, "expired sessions stay listed")
	require.ElementsMatch(t, []string{"acme-1", "delta-1"}, accounts)
}
