package engine_test

// More of the schema's features over a real HTTP server on loopback:
// following a booking's redirect to the page that carries its id, offset
// paging with a total, a feed whose next link is where the next poll
// starts, and wall-clock times with the zone's name in the value.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// A booking answered 303 is followed with a GET and the rules read the
// page it leads to: the booking id by an HTML selector there. A 307 is
// never followed (it would send the booking again); a redirect off the
// platform or a page that never answers is UNKNOWN, never NOT_SENT.
func TestBookingFollowsTheRedirectToItsPage(t *testing.T) {
	var mu sync.Mutex
	posts, gets := 0, 0
	mode := ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.URL.Path == "/login":
			writeJSON(w, 200, map[string]string{"token": "TOK"})
		case r.Method == http.MethodPost && r.URL.Path == "/book":
			posts++
			switch mode {
			case "taken":
				w.Header().Set("Content-Type", "text/html")
				fmt.Fprint(w, `<div class="flash" data-code="already_booked">Taken.</div>`)
			case "307":
				w.Header().Set("Location", "/done/J1")
				w.WriteHeader(http.StatusTemporaryRedirect)
			case "foreign":
				w.Header().Set("Location", "http://192.0.2.1:9/done/J1")
				w.WriteHeader(http.StatusSeeOther)
			case "hang-up":
				w.Header().Set("Location", "/hang-up")
				w.WriteHeader(http.StatusSeeOther)
			case "signin":
				w.Header().Set("Location", "/signin")
				w.WriteHeader(http.StatusSeeOther)
			default:
				w.Header().Set("Location", "/done/"+url.PathEscape(r.FormValue("id")))
				w.WriteHeader(http.StatusSeeOther)
			}
		case r.URL.Path == "/hang-up":
			gets++
			panic(http.ErrAbortHandler)
		case r.URL.Path == "/signin":
			gets++
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<form id="signin"></form>`)
		case r.URL.Path == "/done/J1":
			gets++
			require.Equal(t, http.MethodGet, r.Method)
			require.Equal(t, "Bearer TOK", r.Header.Get("Authorization"), "the session rides along")
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<h1>Booked</h1><dl><dd class="confirmation-number">4711</dd></dl>`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	s := specOf(t, sections{"booking": `
booking:
  request: {method: POST, url: /book, form: {id: "{{.key}}"}}
  follow_redirects: true
  results:
    - when: {status: [200], url_path: /signin}
      result: signed_out
    - when: {status: [200], html: {selector: .confirmation-number}}
      result: confirmed
      booking_id: {html: .confirmation-number}
    - when: {status: [200], html: {selector: '.flash[data-code]', attr: data-code, equals: already_booked}}
      result: taken
`})
	ctx := context.Background()
	sess := sessionOf(t, s, srv.URL, platform.SessionOptions{})
	require.NoError(t, sess.Login(ctx, credsFor(srv.URL), &platform.TOTP{Secret: creds.TOTPSecret}))
	for _, c := range []struct {
		mode, result, id, detail string
		gets                     int
		signedOut                bool
	}{
		{"", wire.ResultConfirmed, "4711", "confirmed", 1, false},
		{"taken", wire.ResultTaken, "", "taken", 0, false},
		{"307", wire.ResultUnknown, "", "HTTP 307", 0, false},
		{"foreign", wire.ResultUnknown, "", "not one of the platform's origins", 0, false},
		{"hang-up", wire.ResultUnknown, "", "the page it leads to was not read", 1, false},
		{"signin", wire.ResultUnknown, "", "signed out", 1, true},
	} {
		t.Run("mode "+c.mode, func(t *testing.T) {
			mu.Lock()
			mode, posts, gets = c.mode, 0, 0
			mu.Unlock()
			r := sess.Book(ctx, "J1", "", nil)
			require.Equal(t, c.result, r.Result, r.Detail)
			require.Equal(t, c.id, r.BookingID)
			require.Contains(t, r.Detail, c.detail)
			require.Equal(t, c.signedOut, r.SignedOut)
			require.False(t, r.SentAt.IsZero(), "the booking left")
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, 1, posts, "the booking is sent once, whatever its answer")
			require.Equal(t, c.gets, gets)
		})
	}
}

// offsetServer lists B1…Bn oldest first by offset and limit with the total
// in meta; lie overstates the total, shift repeats an item as a list that
// moved under the walk would.
type offsetServer struct {
	mu    sync.Mutex
	n     int
	lie   bool
	shift bool
	asked []string
}

func (o *offsetServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/login" {
		writeJSON(w, 200, map[string]string{"token": "TOK"})
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.asked = append(o.asked, r.URL.RawQuery)
	off, _ := strconv.Atoi(r.URL.Query().Get("page[offset]"))
	lim, _ := strconv.Atoi(r.URL.Query().Get("page[limit]"))
	if o.shift && off > 0 {
		off--
	}
	data := []map[string]any{}
	for i := off + 1; i <= o.n && len(data) < lim; i++ {
		data = append(data, map[string]any{"id": strconv.Itoa(i), "attributes": map[string]any{"job": "J" + strconv.Itoa(i),
			"at": "2026-03-01 08:00:00.250 America/Chicago"}})
	}
	total := o.n
	if o.lie {
		total++
	}
	w.Header().Set("Content-Type", "application/vnd.api+json")
	writeJSON(w, 200, map[string]any{"data": data, "meta": map[string]any{"total": total}})
}

// The look-up by offset and limit: each page asks from the items seen so
// far, a short page is the last, and the walk is whole only when they add
// up to meta.total; a list that shifted under the walk proves nothing.
func TestBookingsByOffsetWithATotal(t *testing.T) {
	const offsetKind = `
bookings:
  request: {url: /bookings, query: {"page[offset]": "{{.offset}}", "page[limit]": "3"}}
  paging: {kind: offset, size: 3}
  order_by: id
  items: data
  fields:
    key: {path: attributes.job}
    booking_id: {path: id}
    booked_at: {path: attributes.at, time: layout, layout: "2006-01-02 15:04:05.000", zone_in_value: true}
  complete: {total: meta.total}
`
	for _, c := range []struct {
		name     string
		srv      *offsetServer
		complete bool
	}{
		{"to its last short page", &offsetServer{n: 8}, true},
		{"a full last page, then an empty one", &offsetServer{n: 6}, true},
		{"none", &offsetServer{n: 0}, true},
		{"a total that does not add up", &offsetServer{n: 8, lie: true}, false},
		{"a list that shifted", &offsetServer{n: 8, shift: true}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(c.srv)
			defer srv.Close()
			sess := sessionOf(t, specOf(t, sections{"bookings": offsetKind}), srv.URL, platform.SessionOptions{})
			require.NoError(t, sess.Login(context.Background(), credsFor(srv.URL), &platform.TOTP{Secret: creds.TOTPSecret}))
			all, complete := walkAll(t, sess)
			require.Equal(t, c.complete, complete)
			if !c.complete {
				return
			}
			require.Len(t, all, c.srv.n)
			for i, b := range all {
				require.Equal(t, strconv.Itoa(i+1), b.BookingID)
				chicago, _ := time.LoadLocation("America/Chicago")
				require.True(t, time.Date(2026, 3, 1, 8, 0, 0, 250e6, chicago).Equal(b.BookedAt), "the zone named in the value")
			}
			require.Equal(t, "page%5Blimit%5D=3&page%5Boffset%5D=0", c.srv.asked[0])
			if c.srv.n == 8 {
				require.Equal(t, "page%5Blimit%5D=3&page%5Boffset%5D=6", c.srv.asked[2])
			}
		})
	}
}

// Two more feed shapes: offset paging read from the start each poll, and a
// feed whose links.next is where the next poll starts (the cursor is the
// next page's URL: url: "{{.cursor}}").
func TestFeedByOffsetAndByNextLink(t *testing.T) {
	for _, c := range []struct{ name, feed string }{
		{"offset", `
feed:
  request: {url: /feed/offset, query: {offset: "{{.offset}}", limit: "3"}}
  paging: {kind: offset, size: 3, max_pages: 10}
  items: items
  fields: {key: {path: id}, published_at: {path: ts, time: epoch_ms}}
`},
		{"next link as the cursor", `
feed:
  request: {url: "{{.cursor}}"}
  paging: {kind: cursor, start: "/feed/resume?after=0", next: links.next, max_pages: 10}
  items: data
  fields: {key: {path: id}, published_at: {path: ts, time: epoch_ms}}
`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			n := 7
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				if r.URL.Path == "/login" {
					writeJSON(w, 200, map[string]string{"token": "TOK"})
					return
				}
				q := r.URL.Query()
				switch r.URL.Path {
				case "/feed/offset":
					off, _ := strconv.Atoi(q.Get("offset"))
					out := []map[string]any{}
					for i := off + 1; i <= n && len(out) < 3; i++ {
						out = append(out, item(i))
					}
					writeJSON(w, 200, map[string]any{"items": out})
				case "/feed/resume":
					after, _ := strconv.Atoi(q.Get("after"))
					out := []map[string]any{}
					next := after
					for i := after + 1; i <= n && len(out) < 3; i++ {
						out = append(out, item(i))
						next = i
					}
					writeJSON(w, 200, map[string]any{"data": out, "links": map[string]string{"next": "http://" + r.Host + "/feed/resume?after=" + strconv.Itoa(next)}})
				default:
					http.NotFound(w, r)
				}
			}))
			defer srv.Close()
			ctx := context.Background()
			sess := sessionOf(t, specOf(t, sections{"feed": c.feed}), srv.URL, platform.SessionOptions{})
			require.NoError(t, sess.Login(ctx, credsFor(srv.URL), &platform.TOTP{Secret: creds.TOTPSecret}))
			keys := func() []string {
				jobs, err := sess.Jobs(ctx)
				require.NoError(t, err)
				var out []string
				for _, j := range jobs {
					out = append(out, j.Key)
				}
				return out
			}
			require.ElementsMatch(t, []string{"L1", "L2", "L3", "L4", "L5", "L6", "L7"}, keys())
			require.Empty(t, keys(), "nothing new")
			mu.Lock()
			n = 9
			mu.Unlock()
			require.ElementsMatch(t, []string{"L8", "L9"}, keys())
		})
	}
}

// A wall-clock time whose zone's name ends the value; a value without a
// zone name there is a changed shape, named by its field.
func TestZoneNameInTheValue(t *testing.T) {
	var mu sync.Mutex
	ts := "2026-07-01 09:15:00 America/Denver"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/login" {
			writeJSON(w, 200, map[string]string{"token": "TOK"})
			return
		}
		mu.Lock()
		defer mu.Unlock()
		writeJSON(w, 200, map[string]any{"items": []map[string]any{{"id": "a", "t": ts}}, "next": "1"})
	}))
	defer srv.Close()
	sess := sessionOf(t, specOf(t, sections{"feed": `
feed:
  request: {url: /feed, query: {cursor: "{{.cursor}}"}}
  paging: {kind: cursor, next: next}
  items: items
  fields:
    key: {path: id}
    published_at: {path: t, time: layout, layout: "2006-01-02 15:04:05", zone_in_value: true}
`}), srv.URL, platform.SessionOptions{})
	ctx := context.Background()
	require.NoError(t, sess.Login(ctx, credsFor(srv.URL), &platform.TOTP{Secret: creds.TOTPSecret}))
	jobs, err := sess.Jobs(ctx)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, time.Date(2026, 7, 1, 15, 15, 0, 0, time.UTC), jobs[0].PublishedAt.UTC(), "Denver in summer is UTC-6")
	mu.Lock()
	ts = "2026-07-01 09:15:00 Mountain"
	mu.Unlock()
	_, err = sess.Jobs(ctx)
	require.ErrorContains(t, err, "field published_at (path t) ends with no time zone name")
}

// {{path .key}} escapes a key for one segment of a URL's path: a key with
// a slash or a space stays one segment.
func TestPathFunctionEscapesASegment(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/login" {
			writeJSON(w, 200, map[string]string{"token": "TOK"})
			return
		}
		got <- r.URL.EscapedPath()
		writeJSON(w, 200, map[string]any{"result": "ok", "booking": map[string]any{"id": 1}})
	}))
	defer srv.Close()
	s := specOf(t, sections{"booking": `
booking:
  request: {method: POST, url: "/loads/{{path .key}}/book", json: '{}'}
  results:
    - when: {status: [200], json: {path: result, equals: ok}}
      result: confirmed
      booking_id: {json: booking.id}
`})
	ctx := context.Background()
	sess := sessionOf(t, s, srv.URL, platform.SessionOptions{})
	require.NoError(t, sess.Login(ctx, credsFor(srv.URL), &platform.TOTP{Secret: creds.TOTPSecret}))
	r := sess.Book(ctx, "LD 7/a", "", nil)
	require.Equal(t, wire.ResultConfirmed, r.Result, r.Detail)
	require.Equal(t, "/loads/LD%207%2Fa/book", <-got)
}
