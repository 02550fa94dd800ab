package board_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/board/boardtest"
)

func htmlDialect(c *board.Config) { c.Dialect = board.DialectHTML }

func (tb *bundle) loginHTML(t *testing.T, user string) *boardtest.HTMLClient {
	t.Helper()
	c, err := boardtest.LoginHTML(context.Background(), tb.s.URL(), user, pw, tb.accts[user].TOTPSecret, tb.now)
	require.NoError(t, err)
	return c
}

func sessionCookie(c *boardtest.HTMLClient) string {
	u, _ := url.Parse(c.Base)
	for _, k := range c.HTTP.Jar.Cookies(u) {
		if k.Name == board.HTMLSessionCookie {
			return k.Value
		}
	}
	return ""
}

type feedDoc struct {
	Data []struct {
		Type       string `json:"type"`
		ID         string `json:"id"`
		Attributes struct {
			Reference     string                             `json:"reference"`
			Origin        string                             `json:"origin"`
			Destination   string                             `json:"destination"`
			EquipmentType string                             `json:"equipment_type"`
			WeightLbs     int                                `json:"weight_lbs"`
			DistanceMi    int                                `json:"distance_mi"`
			RatePerMile   string                             `json:"rate_per_mile"`
			PostedAt      string                             `json:"posted_at"`
			BookableUntil string                             `json:"bookable_until"`
			Pickup        struct{ Opens, Closes, TZ string } `json:"pickup"`
		} `json:"attributes"`
	} `json:"data"`
	Links  map[string]string               `json:"links"`
	Meta   map[string]any                  `json:"meta"`
	Errors []struct{ Status, Code string } `json:"errors"`
}

type bookingsDoc struct {
	Data []struct {
		ID         string `json:"id"`
		Attributes struct {
			LoadReference string `json:"load_reference"`
			BookedAt      string `json:"booked_at"`
			BookedBy      string `json:"booked_by"`
		} `json:"attributes"`
	} `json:"data"`
	Meta struct {
		Total, Offset, Limit int
		Carrier              string
	} `json:"meta"`
	Errors []struct{ Status, Code string } `json:"errors"`
}

// Sign-in is a form with a hidden CSRF token; the one cookie's value
// changes at the password and again at the code, and an old value is
// never accepted again. Wrong passwords and used codes are errors inside
// a 200 page.
func TestHTMLSignInRotatesTheSessionCookie(t *testing.T) {
	tb := setup(t, false, htmlDialect)
	ctx := context.Background()
	c := boardtest.NewHTMLClient(tb.s.URL())
	p, err := c.Get(ctx, "/signin")
	require.NoError(t, err)
	anon := sessionCookie(c)
	require.NotEmpty(t, anon)
	tok, ok := p.Doc.Find(`form#new_user input[type=hidden][name=authenticity_token]`).Attr("value")
	require.True(t, ok)

	// Without the form's token the password is not even checked.
	p, err = c.Post(ctx, "/signin", url.Values{"user[login]": {"acme-1"}, "user[password]": {pw}})
	require.NoError(t, err)
	require.Equal(t, http.StatusUnprocessableEntity, p.Status)
	require.Equal(t, "invalid_token", p.Code)

	p, err = c.Get(ctx, "/signin")
	require.NoError(t, err)
	tok = p.Doc.Find(`input[name=authenticity_token]`).AttrOr("value", "")
	p, err = c.Post(ctx, "/signin", url.Values{"authenticity_token": {tok}, "user[login]": {"acme-1"}, "user[password]": {"wrong-password-1"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, p.Status, "an error inside a 200")
	require.Equal(t, "invalid_login", p.Code)
	require.Equal(t, "/signin", p.Path)

	tok = p.Doc.Find(`input[name=authenticity_token]`).AttrOr("value", "")
	before := sessionCookie(c)
	p, err = c.Post(ctx, "/signin", url.Values{"authenticity_token": {tok}, "user[login]": {"acme-1"}, "user[password]": {pw}})
	require.NoError(t, err)
	require.Equal(t, "/signin/verify", p.Path)
	pending := sessionCookie(c)
	require.NotEqual(t, before, pending, "the cookie rotates at the password")
	require.NotEqual(t, anon, pending)

	code := boardtest.Code(tb.accts["acme-1"].TOTPSecret, time.Now())
	vt := p.Doc.Find(`input[name=authenticity_token]`).AttrOr("value", "")
	p, err = c.Post(ctx, "/signin/verify", url.Values{"authenticity_token": {vt}, "otp_attempt": {code}})
	require.NoError(t, err)
	require.Equal(t, "/dashboard", p.Path)
	signed := sessionCookie(c)
	require.NotEqual(t, pending, signed, "the cookie rotates at the code")
	require.NotEmpty(t, p.Doc.Find(`meta[name=csrf-token]`).AttrOr("content", ""))
	require.Equal(t, signed, tb.s.IssuedSessions()[len(tb.s.IssuedSessions())-1].Token, "the secret scan knows the cookie")

	// The same code again, on a second sign-in: refused as used, in a 200.
	c2 := boardtest.NewHTMLClient(tb.s.URL())
	p, err = c2.Get(ctx, "/signin")
	require.NoError(t, err)
	p, err = c2.Post(ctx, "/signin", url.Values{"authenticity_token": {p.Doc.Find(`input[name=authenticity_token]`).AttrOr("value", "")},
		"user[login]": {"acme-1"}, "user[password]": {pw}})
	require.NoError(t, err)
	p, err = c2.Post(ctx, "/signin/verify", url.Values{"authenticity_token": {p.Doc.Find(`input[name=authenticity_token]`).AttrOr("value", "")},
		"otp_attempt": {code}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, p.Status)
	require.Equal(t, "otp_used", p.Code)

	// An old cookie value is dead: the pending one signs nobody in.
	c3 := boardtest.NewHTMLClient(tb.s.URL())
	u, _ := url.Parse(tb.s.URL())
	c3.HTTP.Jar.SetCookies(u, []*http.Cookie{{Name: board.HTMLSessionCookie, Value: pending}})
	p, err = c3.Get(ctx, "/dashboard")
	require.NoError(t, err)
	require.Equal(t, "/signin", p.Path)
}

// The feed is a JSON:API document: loads in data[].attributes, local
// wall-clock times with a zone name, pounds, miles and the rate per mile,
// and links.next to resume from. A signed-out request is a 200 with an
// errors document.
func TestHTMLFeedIsJSONAPI(t *testing.T) {
	tb := setup(t, false, htmlDialect)
	ctx := context.Background()
	c := tb.loginHTML(t, "acme-1")
	loads := tb.publish(t, 3)
	var doc feedDoc
	st, err := c.API(ctx, "/api/v2/loads?page[size]=2", &doc)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, st)
	require.Len(t, doc.Data, 2)
	l, d := loads[0], doc.Data[0]
	require.Equal(t, "load", d.Type)
	require.Equal(t, l.ID, d.ID)
	a := d.Attributes
	require.Equal(t, l.Origin.City+", "+l.Origin.State, a.Origin)
	require.Equal(t, l.WeightLb, a.WeightLbs)
	require.Equal(t, l.Miles, a.DistanceMi)
	perMile, err := strconv.ParseFloat(a.RatePerMile, 64)
	require.NoError(t, err)
	require.InDelta(t, float64(l.RateUSD)/float64(l.Miles), perMile, 0.005)
	require.True(t, strings.HasSuffix(a.PostedAt, " "+board.BoardZone), a.PostedAt)
	posted, err := time.ParseInLocation("2006-01-02 15:04:05.000", strings.TrimSuffix(a.PostedAt, " "+board.BoardZone), mustLoad(t, board.BoardZone))
	require.NoError(t, err)
	require.WithinDuration(t, l.PublishedAt, posted, time.Millisecond)
	opens, err := time.ParseInLocation("2006-01-02 15:04", a.Pickup.Opens, mustLoad(t, a.Pickup.TZ))
	require.NoError(t, err)
	require.True(t, l.PickupStart.Equal(opens), "pickup in the origin's zone %s", a.Pickup.TZ)

	var next feedDoc
	_, err = c.API(ctx, doc.Links["next"], &next)
	require.NoError(t, err)
	require.Len(t, next.Data, 1)
	require.Equal(t, loads[2].ID, next.Data[0].ID)
	var empty feedDoc
	_, err = c.API(ctx, next.Links["next"], &empty)
	require.NoError(t, err)
	require.Empty(t, empty.Data)
	require.Equal(t, next.Links["next"], empty.Links["next"], "an empty page's next is itself: a poll resumes there")

	tb.s.SessionStorm(1)
	var out feedDoc
	st, err = c.API(ctx, "/api/v2/loads", &out)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, st, "signed out is a 200 …")
	require.Len(t, out.Errors, 1, "… with an errors document")
	require.Equal(t, "not_authenticated", out.Errors[0].Code)
	require.Nil(t, out.Data)
}

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	l, err := time.LoadLocation(name)
	require.NoError(t, err)
	return l
}

// Booking is a form POST: confirmed is a 303 to a confirmation page that
// carries the booking id; taken is a 200 with an error banner; the oracle
// counts both as the classic board does.
func TestHTMLBookingAnswers(t *testing.T) {
	tb := setup(t, false, htmlDialect, func(c *board.Config) { c.IdempotencyKeys = true })
	ctx := context.Background()
	c := tb.loginHTML(t, "acme-1")
	r := tb.loginHTML(t, "delta-1")
	loads := tb.publish(t, 2)

	// Without the page's token nothing is booked nor counted.
	bad := &boardtest.HTMLClient{HTTP: c.HTTP, Base: c.Base, CSRF: "nope"}
	p, err := bad.Book(ctx, loads[0].ID, "")
	require.NoError(t, err)
	require.Equal(t, http.StatusUnprocessableEntity, p.Status)
	require.Zero(t, tb.s.Stats().BookingRequests)

	p, err = c.Book(ctx, loads[0].ID, "op-1")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, p.Status)
	require.Equal(t, "/loads/"+loads[0].ID+"/confirmation", p.Path)
	bk := tb.s.Bookings("acme")
	require.Len(t, bk, 1)
	require.Equal(t, strconv.FormatInt(bk[0].ID, 10), p.Text(".confirmation-number"))
	require.Equal(t, "op-1", bk[0].IdempotencyKey)

	// The same request token again: the same booking, not a second one.
	p, err = c.Book(ctx, loads[0].ID, "op-1")
	require.NoError(t, err)
	require.Equal(t, "/loads/"+loads[0].ID+"/confirmation", p.Path)
	require.Len(t, tb.s.Bookings("acme"), 1)

	p, err = r.Book(ctx, loads[0].ID, "")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, p.Status, "taken is a 200 …")
	require.Equal(t, "already_booked", p.Code, "… with an error banner")
	require.Empty(t, tb.s.Bookings("delta"))

	p, err = c.Book(ctx, "LD-999999", "")
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, p.Status)

	s := tb.s.Stats()
	require.EqualValues(t, 4, s.BookingRequests)
	require.EqualValues(t, 1, s.ConfirmedBookings)
	require.EqualValues(t, 1, s.TakenAnswers)
	require.Zero(t, s.DuplicateConfirmations)
	require.Equal(t, board.DialectHTML, s.Dialect)

	tb.s.SessionStorm(1)
	p, err = c.Book(ctx, loads[1].ID, "")
	require.NoError(t, err)
	require.Equal(t, "/signin", p.Path, "signed out: the form leads to sign-in")
}

// The bookings look-up pages by offset and limit with the total in meta;
// another client's bookings never show.
func TestHTMLBookingsByOffset(t *testing.T) {
	tb := setup(t, false, htmlDialect)
	ctx := context.Background()
	c := tb.loginHTML(t, "acme-1")
	loads := tb.publish(t, 7)
	for i, l := range loads {
		_, err := tb.s.InjectBooking(ctx, "acme-1", l.ID)
		require.NoError(t, err)
		if i%2 == 0 {
			_, err := tb.s.InjectBooking(ctx, "delta-1", l.ID)
			require.NoError(t, err)
		}
	}
	var seen []string
	for off := 0; ; off += 3 {
		var doc bookingsDoc
		_, err := c.API(ctx, "/api/v2/account/bookings?page[offset]="+strconv.Itoa(off)+"&page[limit]=3", &doc)
		require.NoError(t, err)
		require.Equal(t, 7, doc.Meta.Total)
		require.Equal(t, "acme", doc.Meta.Carrier)
		for _, d := range doc.Data {
			require.Equal(t, "acme-1", d.Attributes.BookedBy)
			require.True(t, strings.HasSuffix(d.Attributes.BookedAt, " "+board.BoardZone))
			seen = append(seen, d.Attributes.LoadReference)
		}
		if len(doc.Data) < 3 {
			break
		}
	}
	require.Len(t, seen, 7)
	for i, l := range loads {
		require.Equal(t, l.ID, seen[i], "oldest first")
	}
	tb.s.SessionStorm(1)
	var doc bookingsDoc
	st, err := c.API(ctx, "/api/v2/account/bookings", &doc)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, st)
	require.Equal(t, "not_authenticated", doc.Errors[0].Code)
}

// The chaos switches act on the html dialect as on the classic one: a 503
// without effect, a late commit's 504 that lands later, a dropped answer
// after the commit, a captcha interstitial (a 303 to the security check) a
// person can pass, and the layout switch's other markup.
func TestHTMLChaosSwitches(t *testing.T) {
	tb := setup(t, true, htmlDialect)
	ctx := context.Background()
	c := tb.loginHTML(t, "acme-1")
	loads := tb.publish(t, 5)

	require.Equal(t, http.StatusOK, patchChaos(t, tb, map[string]any{"error_rate": 1}))
	p, err := c.Book(ctx, loads[0].ID, "")
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, p.Status)
	var doc feedDoc
	st, err := c.API(ctx, "/api/v2/loads", &doc)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, st)
	require.Equal(t, "unavailable", doc.Errors[0].Code)
	require.Zero(t, tb.s.Stats().ConfirmedBookings)

	require.Equal(t, http.StatusOK, patchChaos(t, tb, map[string]any{"error_rate": 0, "late_commit_rate": 1, "late_commit_delay": "30s"}))
	p, err = c.Book(ctx, loads[1].ID, "")
	require.NoError(t, err)
	require.Equal(t, http.StatusGatewayTimeout, p.Status)
	require.Empty(t, tb.s.Bookings("acme"))
	require.True(t, tb.clk.BlockUntil(1, 5*time.Second))
	tb.clk.Advance(30 * time.Second)
	require.Eventually(t, func() bool { return len(tb.s.Bookings("acme")) == 1 }, 5*time.Second, 10*time.Millisecond, "the late commit lands")

	require.Equal(t, http.StatusOK, patchChaos(t, tb, map[string]any{"late_commit_rate": 0, "drop_response_rate": 1}))
	_, err = c.Book(ctx, loads[2].ID, "")
	require.Error(t, err, "no answer")
	require.Len(t, tb.s.Bookings("acme"), 2, "committed all the same")

	require.Equal(t, http.StatusOK, patchChaos(t, tb, map[string]any{"drop_response_rate": 0, "captcha_rate": 1}))
	p, err = c.Book(ctx, loads[3].ID, "")
	require.NoError(t, err)
	require.Equal(t, "/verify-human", p.Path)
	require.Len(t, tb.s.Bookings("acme"), 2)
	p, err = c.Post(ctx, "/verify-human", url.Values{"authenticity_token": {c.CSRF}, "confirm_human": {"1"}})
	require.NoError(t, err)
	require.Equal(t, "/dashboard", p.Path)
	p, err = c.Book(ctx, loads[3].ID, "")
	require.NoError(t, err)
	require.Equal(t, "/loads/"+loads[3].ID+"/confirmation", p.Path, "a person passed the check")

	p, err = c.Get(ctx, "/dashboard")
	require.NoError(t, err)
	require.Equal(t, 1, p.Doc.Find("table.freight-table tbody#freight").Length())
	require.Equal(t, http.StatusOK, patchChaos(t, tb, map[string]any{"captcha_rate": 0, "layout": "v2"}))
	p, err = c.Get(ctx, "/dashboard")
	require.NoError(t, err)
	require.Zero(t, p.Doc.Find("table.freight-table").Length())
	require.Equal(t, 1, p.Doc.Find("ul.offers#freight").Length())

	require.Equal(t, http.StatusOK, patchChaos(t, tb, map[string]any{"layout": "v1", "session_storm_every": "1m"}))
	require.True(t, tb.clk.BlockUntil(1, 5*time.Second))
	tb.clk.Advance(time.Minute)
	require.Eventually(t, func() bool {
		p, err := c.Get(ctx, "/dashboard")
		return err == nil && p.Path == "/signin"
	}, 5*time.Second, 10*time.Millisecond, "the storm ended the session")
	s := tb.s.Stats()
	require.Zero(t, s.DuplicateConfirmations)
}

// --dialect is a flag of the board role; a board refuses an unknown one.
func TestDialectFlag(t *testing.T) {
	cfg := board.Defaults()
	set := newSet()
	cfg.Register(set)
	_, err := set.Parse([]string{"--dialect=html"}, func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, board.DialectHTML, cfg.Dialect)
	other := board.Defaults()
	set = newSet()
	other.Register(set)
	_, err = set.Parse([]string{"--dialect=soap"}, func(string) string { return "" })
	require.ErrorContains(t, err, "dialect")
	bad := board.Defaults()
	bad.Listen, bad.AdminToken, bad.Dialect = "127.0.0.1:0", boardtest.AdminToken, "soap"
	_, err = board.Start(context.Background(), bad, nil)
	require.ErrorContains(t, err, "--dialect")
}

// A held booking waits on the board's clock and books when the hold ends;
// with the reused-connection switch, a booking on a connection that carried
// an earlier request commits and gets no answer, one on a fresh connection
// is answered.
func TestHTMLChaosHoldAndReusedConnection(t *testing.T) {
	tb := setup(t, true, htmlDialect)
	ctx := context.Background()
	c := tb.loginHTML(t, "acme-1")
	loads := tb.publish(t, 3)

	require.Equal(t, http.StatusOK, patchChaos(t, tb, map[string]any{"hold": "10s"}))
	done := make(chan *boardtest.HTMLPage, 1)
	go func() {
		p, err := c.Book(ctx, loads[0].ID, "")
		if err != nil {
			p = nil
		}
		done <- p
	}()
	require.True(t, tb.clk.BlockUntil(1, 5*time.Second), "the booking is held open")
	require.Empty(t, tb.s.Bookings("acme"))
	tb.clk.Advance(10 * time.Second)
	p := <-done
	require.NotNil(t, p)
	require.Equal(t, "/loads/"+loads[0].ID+"/confirmation", p.Path)

	require.Equal(t, http.StatusOK, patchChaos(t, tb, map[string]any{"hold": "0s", "drop_reused_response_rate": 1}))
	fresh := &boardtest.HTMLClient{HTTP: &http.Client{Jar: c.HTTP.Jar, Transport: &http.Transport{DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}, Base: c.Base, CSRF: c.CSRF}
	p, err := fresh.Book(ctx, loads[1].ID, "")
	require.NoError(t, err, "a fresh connection is answered")
	require.Equal(t, http.StatusSeeOther, p.Status)
	// One kept-alive connection: a page, then the booking on it.
	one := &http.Transport{MaxConnsPerHost: 1}
	defer one.CloseIdleConnections()
	c.HTTP.Transport = one
	_, err = c.Get(ctx, "/dashboard")
	require.NoError(t, err)
	_, err = c.Book(ctx, loads[2].ID, "")
	require.Error(t, err, "the reused connection closed without an answer")
	require.Len(t, tb.s.Bookings("acme"), 3, "committed all the same")
	var dropped int
	for _, e := range tb.s.Events(0, 0) {
		if e.Type == board.EvResponseDropped {
			dropped++
			require.Contains(t, e.Detail, "reused connection")
		}
	}
	require.Equal(t, 1, dropped)
}
