package engine_test

// Every feature the schema names, over a real HTTP server on loopback,
// whether or not the sandbox board uses it. The servers here stand in for
// platforms that cannot exist in a test (a public load board).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/platform/engine"
	"github.com/fleetwright/fleetwright/modules/platform/spec"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// sections of a test spec; a test replaces the ones it is about.
type sections map[string]string

var defaults = sections{
	"sign_in": `
sign_in:
  steps:
    - name: password
      request: {method: POST, url: /login, json: '{"user":{{json .username}},"pass":{{json .password}}}'}
      fail:
        - when: {status: [403]}
          error: credentials
      success: {status: [200]}
      extract:
        token: {json: token}
`,
	"session": `
session:
  carry: header
  header: {name: Authorization, value: "Bearer {{.vars.token}}"}
  signed_out:
    - status: [401]
    - json: {path: error, equals: signed_out}
`,
	"feed": `
feed:
  request: {url: /feed, query: {cursor: "{{.cursor}}"}}
  paging: {kind: cursor, next: next}
  items: items
  fields:
    key: {path: id}
    published_at: {path: ts, time: epoch_ms}
`,
	"booking": `
booking:
  request: {method: POST, url: /book, json: '{"id":{{json .key}}}'}
  results:
    - when: {status: [200], json: {path: result, equals: ok}}
      result: confirmed
      booking_id: {json: booking.id}
`,
	"bookings": `
bookings:
  request: {url: /bookings, query: {after: "{{.cursor}}"}}
  paging: {kind: after, value: id}
  items: items
  fields:
    key: {path: job}
    booking_id: {path: id}
`,
	"idempotency": `
idempotency:
  honoured: false
`,
}

func specOf(t *testing.T, over sections) *spec.Spec {
	t.Helper()
	var b strings.Builder
	b.WriteString("version: 1\nname: fake\n")
	for _, k := range []string{"origins", "sign_in", "session", "feed", "booking", "bookings", "idempotency"} {
		if v, ok := over[k]; ok {
			b.WriteString(v)
		} else {
			b.WriteString(defaults[k])
		}
	}
	s, err := spec.Parse("fake.yaml", []byte(b.String()))
	require.NoError(t, err, b.String())
	return s
}

func sessionOf(t *testing.T, s *spec.Spec, base string, opts platform.SessionOptions) platform.Session {
	t.Helper()
	ad, err := engine.New(s, base)
	require.NoError(t, err)
	sess, err := ad.NewSession(opts)
	require.NoError(t, err)
	return sess
}

var creds = wire.Credentials{Username: "u1", Password: wire.NewSecret("pw-secret-1"), TOTPSecret: wire.NewSecret("JBSWY3DPEHPK3PXP")}

// credsFor are creds as the panel sealed them for the given origins.
func credsFor(origins ...string) wire.Credentials {
	c := creds
	c.Origins = origins
	return c
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// A sign-in of four steps uses every extractor kind — an HTML hidden
// field, a cookie, a header, a regular expression, a JSON path — carries
// values from step to step, answers "code already used" inside a 200
// (the session waits for the next code), and carries the session in an
// Authorization header; a signed-out answer inside a 200 is noticed.
func TestSignInExtractorsAndOneTimeCode(t *testing.T) {
	var mu sync.Mutex
	var codes []string
	expired := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.Method + " " + r.URL.Path {
		case "GET /login":
			http.SetCookie(w, &http.Cookie{Name: "pre", Value: "P1", Path: "/"})
			w.Header().Set("X-Ticket", "T1")
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<html><form><input type="hidden" name="csrf" value="C1"></form><script>var nonce = "N1";</script></html>`)
		case "POST /login":
			c, _ := r.Cookie("pre")
			if c == nil || c.Value != "P1" || r.PostFormValue("csrf") != "C1" || r.PostFormValue("nonce") != "N1" ||
				r.Header.Get("X-Ticket") != "T1" || r.PostFormValue("username") != "u1" || r.PostFormValue("password") != "pw-secret-1" {
				writeJSON(w, 400, map[string]string{"error": "bad sign-in"})
				return
			}
			writeJSON(w, 200, map[string]string{"mfa": "M1"})
		case "POST /mfa":
			var body struct{ Ticket, Code string }
			_ = json.NewDecoder(r.Body).Decode(&body)
			if body.Ticket != "M1" {
				writeJSON(w, 400, map[string]string{"error": "no ticket"})
				return
			}
			codes = append(codes, body.Code)
			if len(codes) == 1 {
				writeJSON(w, 200, map[string]string{"error": "code_used"})
				return
			}
			writeJSON(w, 200, map[string]string{"token": "TOK"})
		case "GET /me":
			if r.Header.Get("Authorization") != "Bearer TOK" {
				writeJSON(w, 401, map[string]string{"error": "signed_out"})
				return
			}
			if expired {
				writeJSON(w, 200, map[string]string{"error": "signed_out"})
				return
			}
			writeJSON(w, 200, map[string]bool{"ok": true})
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	s := specOf(t, sections{"sign_in": `
sign_in:
  steps:
    - name: page
      request: {url: /login}
      success: {status: [200]}
      extract:
        csrf: {html: 'input[name=csrf]', attr: value}
        pre: {cookie: pre}
        ticket: {header: X-Ticket}
        nonce: {regexp: 'nonce = "([^"]+)"'}
    - name: password
      request:
        method: POST
        url: /login
        headers: {X-Ticket: "{{.vars.ticket}}"}
        form: {username: "{{.username}}", password: "{{.password}}", csrf: "{{.vars.csrf}}", nonce: "{{.vars.nonce}}"}
      success: {status: [200], json: {path: mfa}}
      extract:
        mfa: {json: mfa}
    - name: code
      one_time_code: true
      request: {method: POST, url: /mfa, json: '{"ticket":{{json .vars.mfa}},"code":{{json .code}}}'}
      code_reused: {status: [200], json: {path: error, equals: code_used}}
      success: {status: [200], json: {path: token}}
      extract:
        token: {json: token}
`, "session": `
session:
  carry: header
  header: {name: Authorization, value: "Bearer {{.vars.token}}"}
  check:
    request: {url: /me}
    success: {json: {path: ok, equals: "true"}}
  signed_out:
    - status: [401]
    - json: {path: error, equals: signed_out}
`})
	fake := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 5, 0, time.UTC))
	sess := sessionOf(t, s, srv.URL, platform.SessionOptions{Clock: fake})
	totp := &platform.TOTP{Secret: creds.TOTPSecret, Clock: fake}
	done := make(chan error, 1)
	go func() { done <- sess.Login(context.Background(), credsFor(srv.URL), totp) }()
	require.True(t, fake.BlockUntil(1, 10*time.Second), "the session waits for the next code")
	fake.Advance(platform.Step)
	require.NoError(t, <-done)
	require.Equal(t, 1, totp.Waits)
	mu.Lock()
	require.Len(t, codes, 2)
	require.NotEqual(t, codes[0], codes[1], "the next step's code was sent")
	expired = true
	mu.Unlock()
	require.ErrorIs(t, sess.Check(context.Background()), platform.ErrSignedOut, "an error inside a 200 is a signed-out answer")
}

// A required value that came back empty names itself (never its value);
// a fail rule maps to its error; the password never reaches an error.
func TestSignInFailures(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ User, Pass string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		switch body.User {
		case "wrong":
			writeJSON(w, 403, map[string]string{"error": "credentials"})
		case "captcha":
			writeJSON(w, 200, map[string]string{"challenge": "captcha"})
		default:
			writeJSON(w, 200, map[string]string{"tok": "renamed field"})
		}
	}))
	defer srv.Close()
	s := specOf(t, sections{"sign_in": `
sign_in:
  steps:
    - name: password
      request: {method: POST, url: /login, json: '{"user":{{json .username}},"pass":{{json .password}}}'}
      fail:
        - when: {status: [403]}
          error: credentials
        - when: {json: {path: challenge, equals: captcha}}
          error: captcha
      success: {status: [200]}
      extract:
        token: {json: token}
`})
	ctx := context.Background()
	sess := sessionOf(t, s, srv.URL, platform.SessionOptions{})
	err := sess.Login(ctx, credsFor(srv.URL), &platform.TOTP{Secret: creds.TOTPSecret})
	require.ErrorContains(t, err, "value token (json token) came back empty")
	require.NotContains(t, err.Error(), "pw-secret-1")
	bad := credsFor(srv.URL)
	bad.Username = "wrong"
	err = sess.Login(ctx, bad, &platform.TOTP{Secret: creds.TOTPSecret})
	require.ErrorIs(t, err, platform.ErrCredentials)
	require.NotContains(t, err.Error(), "pw-secret-1")
	bad.Username = "captcha"
	require.ErrorIs(t, sess.Login(ctx, bad, &platform.TOTP{Secret: creds.TOTPSecret}), platform.ErrCaptcha)
}

// Credentials go only to the account's base URL and the spec's origins:
// a step to another origin is refused before anything is sent, and so is
// a redirect to one.
func TestCredentialsStayWithinTheOrigins(t *testing.T) {
	var elsewhere int
	var emu sync.Mutex
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		emu.Lock()
		elsewhere++
		emu.Unlock()
		writeJSON(w, 200, map[string]string{"token": "T"})
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/steal", http.StatusSeeOther)
	}))
	defer srv.Close()
	ctx := context.Background()

	step := func(url string) string {
		return `
sign_in:
  steps:
    - name: password
      request: {method: POST, url: "` + url + `", json: '{"user":{{json .username}},"pass":{{json .password}}}'}
      success: {status: [200]}
      extract:
        token: {json: token}
`
	}
	s := specOf(t, sections{"sign_in": step(other.URL + "/login")})
	err := sessionOf(t, s, srv.URL, platform.SessionOptions{}).Login(ctx, credsFor(srv.URL), &platform.TOTP{Secret: creds.TOTPSecret})
	require.ErrorContains(t, err, "is not one of the platform's origins")
	s = specOf(t, sections{"sign_in": step("/login")})
	err = sessionOf(t, s, srv.URL, platform.SessionOptions{}).Login(ctx, credsFor(srv.URL), &platform.TOTP{Secret: creds.TOTPSecret})
	require.ErrorContains(t, err, "is not one of the platform's origins", "a redirect elsewhere is not followed")
	emu.Lock()
	require.Zero(t, elsewhere, "nothing reached the other origin")
	emu.Unlock()

	// Named in origins, the other origin may take them only when the panel
	// sealed the credentials for it too: the spec is the agent's
	// configuration, the binding the panel's.
	s = specOf(t, sections{"origins": "origins: [\"" + other.URL + "\"]\n", "sign_in": step(other.URL + "/login")})
	err = sessionOf(t, s, srv.URL, platform.SessionOptions{}).Login(ctx, credsFor(srv.URL), &platform.TOTP{Secret: creds.TOTPSecret})
	require.ErrorIs(t, err, wire.ErrOriginNotBound)
	emu.Lock()
	require.Zero(t, elsewhere, "nothing reached an origin the credentials were not sealed for")
	emu.Unlock()
	require.NoError(t, sessionOf(t, s, srv.URL, platform.SessionOptions{}).Login(ctx, credsFor(srv.URL, other.URL), &platform.TOTP{Secret: creds.TOTPSecret}))
}

// loadServer serves jobs L1…Ln (n grows with add) in every paging style.
type loadServer struct {
	mu sync.Mutex
	n  int
}

func (ls *loadServer) add(k int) { ls.mu.Lock(); ls.n += k; ls.mu.Unlock() }

func item(i int) map[string]any {
	return map[string]any{"id": "L" + strconv.Itoa(i), "seq": i, "ts": int64(1_700_000_000_000 + i*1000)}
}

const per = 3

func (ls *loadServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ls.mu.Lock()
	n := ls.n
	ls.mu.Unlock()
	q := r.URL.Query()
	num := func(name string, def int) int {
		if v, err := strconv.Atoi(q.Get(name)); err == nil {
			return v
		}
		return def
	}
	if r.URL.Path == "/login" {
		writeJSON(w, 200, map[string]string{"token": "TOK"})
		return
	}
	if r.Header.Get("Authorization") != "Bearer TOK" {
		writeJSON(w, 401, map[string]string{"error": "signed_out"})
		return
	}
	// after: items above a sequence number, oldest first.
	above := func(after int) []map[string]any {
		out := []map[string]any{}
		for i := after + 1; i <= n && len(out) < per; i++ {
			out = append(out, item(i))
		}
		return out
	}
	// page: newest first, page numbers from 1.
	page := func(p int) []map[string]any {
		out := []map[string]any{}
		for i := n - (p-1)*per; i >= 1 && i > n-p*per; i-- {
			out = append(out, item(i))
		}
		return out
	}
	pages := max(1, (n+per-1)/per)
	switch r.URL.Path {
	case "/feed/cursor":
		items := above(num("cursor", 0))
		next := q.Get("cursor")
		if len(items) > 0 {
			next = strconv.Itoa(items[len(items)-1]["seq"].(int))
		}
		writeJSON(w, 200, map[string]any{"items": items, "next": next})
	case "/feed/after":
		writeJSON(w, 200, map[string]any{"items": above(num("after", 0))})
	case "/feed/page":
		writeJSON(w, 200, map[string]any{"items": page(num("page", 1)), "meta": map[string]int{"pages": pages}})
	case "/feed/link":
		p := num("p", 1)
		if p < pages {
			w.Header().Set("Link", fmt.Sprintf(`</feed/link?p=%d>; rel="next", </feed/link?p=1>; rel="first"`, p+1))
		}
		writeJSON(w, 200, map[string]any{"items": page(p)})
	case "/feed/jsonapi":
		p := num("p", 1)
		doc := map[string]any{"data": page(p), "links": map[string]any{}}
		if p < pages {
			doc["links"] = map[string]any{"next": fmt.Sprintf("%s/feed/jsonapi?p=%d", "http://"+r.Host, p+1)}
		}
		writeJSON(w, 200, doc)
	default:
		http.NotFound(w, r)
	}
}

// The feed pages in each of the four kinds (and Link's body form): every
// job once across polls, new ones on the next poll, none twice.
func TestFeedPagingKinds(t *testing.T) {
	cases := []struct{ name, feed string }{
		{"cursor", `
feed:
  request: {url: /feed/cursor, query: {cursor: "{{.cursor}}"}}
  paging: {kind: cursor, start: "0", next: next, max_pages: 10}
  items: items
  fields: {key: {path: id}, published_at: {path: ts, time: epoch_ms}}
`},
		{"after", `
feed:
  request: {url: "/feed/after?after={{.cursor}}"}
  paging: {kind: after, start: "0", value: seq, max_pages: 10}
  items: items
  fields: {key: {path: id}, published_at: {path: ts, time: epoch_ms}}
`},
		{"page", `
feed:
  request: {url: /feed/page, query: {page: "{{.page}}"}}
  paging: {kind: page, pages: meta.pages, max_pages: 10}
  items: items
  fields: {key: {path: id}, published_at: {path: ts, time: epoch_ms}}
`},
		{"link header", `
feed:
  request: {url: /feed/link}
  paging: {kind: link, max_pages: 10}
  items: items
  fields: {key: {path: id}, published_at: {path: ts, time: epoch_ms}}
`},
		{"link in the body", `
feed:
  request: {url: /feed/jsonapi}
  paging: {kind: link, next: links.next, max_pages: 10}
  items: data
  fields: {key: {path: id}, published_at: {path: ts, time: epoch_ms}}
`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ls := &loadServer{n: 7}
			srv := httptest.NewServer(ls)
			defer srv.Close()
			ctx := context.Background()
			sess := sessionOf(t, specOf(t, sections{"feed": c.feed}), srv.URL, platform.SessionOptions{})
			require.NoError(t, sess.Login(ctx, credsFor(srv.URL), &platform.TOTP{Secret: creds.TOTPSecret}))
			keys := func() []string {
				jobs, err := sess.Jobs(ctx)
				require.NoError(t, err)
				var out []string
				for _, j := range jobs {
					require.False(t, j.PublishedAt.IsZero())
					out = append(out, j.Key)
				}
				return out
			}
			require.ElementsMatch(t, []string{"L1", "L2", "L3", "L4", "L5", "L6", "L7"}, keys())
			require.Empty(t, keys(), "nothing new")
			ls.add(2)
			require.ElementsMatch(t, []string{"L8", "L9"}, keys())
		})
	}
}

// bookingServer serves the client's bookings B1…Bn (job J<i>) in every
// paging style; lie and shuffle break its proofs.
type bookingServer struct {
	n       int
	lie     bool // the total says one more than there is
	shuffle bool // two items out of order
	foreign string
}

func (bs *bookingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	num := func(name string, def int) int {
		if v, err := strconv.Atoi(q.Get(name)); err == nil {
			return v
		}
		return def
	}
	if r.URL.Path == "/login" {
		writeJSON(w, 200, map[string]string{"token": "TOK"})
		return
	}
	if r.Header.Get("Authorization") != "Bearer TOK" {
		writeJSON(w, 401, map[string]string{"error": "signed_out"})
		return
	}
	bk := func(i int) map[string]any {
		return map[string]any{"id": i, "job": "J" + strconv.Itoa(i), "at": "2026-03-01 08:00", "tz": "America/Chicago"}
	}
	total := bs.n
	if bs.lie {
		total++
	}
	// newest first by page.
	page := func(p int) []map[string]any {
		out := []map[string]any{}
		for i := bs.n - (p-1)*per; i >= 1 && i > bs.n-p*per; i-- {
			out = append(out, bk(i))
		}
		if bs.shuffle && len(out) > 1 {
			out[0], out[1] = out[1], out[0]
		}
		return out
	}
	pages := max(1, (bs.n+per-1)/per)
	switch r.URL.Path {
	case "/bookings/cursor":
		from := num("cursor", 0)
		out := []map[string]any{}
		for i := from + 1; i <= bs.n && len(out) < per; i++ {
			out = append(out, bk(i))
		}
		next := ""
		if from+per < bs.n {
			next = strconv.Itoa(from + per)
		}
		writeJSON(w, 200, map[string]any{"items": out, "next": next})
	case "/bookings/page":
		writeJSON(w, 200, map[string]any{"data": page(num("page", 1)), "meta": map[string]int{"total": total, "pages": pages}})
	case "/bookings/link":
		p := num("p", 1)
		if p < pages {
			base := ""
			if bs.foreign != "" {
				base = bs.foreign
			}
			w.Header().Set("Link", fmt.Sprintf(`<%s/bookings/link?p=%d>; rel="next"`, base, p+1))
		}
		writeJSON(w, 200, map[string]any{"items": page(p), "total": total})
	default:
		http.NotFound(w, r)
	}
}

// walkAll walks a look-up to its end: every booking, and whether every
// page proved itself.
func walkAll(t *testing.T, sess platform.Session) ([]wire.Booking, bool) {
	t.Helper()
	var all []wire.Booking
	cursor, complete := "", true
	for range 100 {
		b, err := sess.Bookings(context.Background(), cursor)
		require.NoError(t, err)
		all = append(all, b.Bookings...)
		complete = complete && b.Complete
		if !b.Complete || b.Next == "" {
			return all, complete
		}
		cursor = b.Next
	}
	t.Fatal("the walk never ended")
	return nil, false
}

// The bookings look-up pages in each kind, oldest or newest first, and is
// complete only with its proof: the end of a cursor, a total that adds
// up, the last page of a Link chain. A lying total, items out of order or
// a next link to another origin prove nothing.
func TestBookingsPagingAndProof(t *testing.T) {
	const (
		cursorKind = `
bookings:
  request: {url: /bookings/cursor, query: {cursor: "{{.cursor}}"}}
  paging: {kind: cursor, start: "0", next: next}
  items: items
  fields: {key: {path: job}, booking_id: {path: id}, booked_at: {path: at, time: layout, layout: "2006-01-02 15:04", zone_path: tz}}
`
		pageKind = `
bookings:
  request: {url: /bookings/page, query: {page: "{{.page}}"}}
  paging: {kind: page, pages: meta.pages}
  order: newest_first
  order_by: id
  items: data
  fields: {key: {path: job}, booking_id: {path: id}}
  complete: {total: meta.total}
`
		linkKind = `
bookings:
  request: {url: /bookings/link}
  paging: {kind: link}
  order: newest_first
  order_by: id
  items: items
  fields: {key: {path: job}, booking_id: {path: id}}
  complete: {total: total}
`
	)
	cases := []struct {
		name     string
		spec     string
		srv      bookingServer
		complete bool
	}{
		{"cursor to its end", cursorKind, bookingServer{n: 8}, true},
		{"page numbers newest first with a total", pageKind, bookingServer{n: 8}, true},
		{"a total that does not add up", pageKind, bookingServer{n: 8, lie: true}, false},
		{"items out of order", pageKind, bookingServer{n: 8, shuffle: true}, false},
		{"a Link chain to its last page", linkKind, bookingServer{n: 8}, true},
		{"a Link to another origin", linkKind, bookingServer{n: 8, foreign: "http://192.0.2.1:9"}, false},
		{"one empty page", pageKind, bookingServer{n: 0}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bs := c.srv
			srv := httptest.NewServer(&bs)
			defer srv.Close()
			sess := sessionOf(t, specOf(t, sections{"bookings": c.spec}), srv.URL, platform.SessionOptions{})
			require.NoError(t, sess.Login(context.Background(), credsFor(srv.URL), &platform.TOTP{Secret: creds.TOTPSecret}))
			all, complete := walkAll(t, sess)
			require.Equal(t, c.complete, complete)
			if !c.complete {
				return
			}
			require.Len(t, all, bs.n)
			seen := map[string]bool{}
			for _, b := range all {
				require.False(t, seen[b.BookingID], "booking %s twice", b.BookingID)
				seen[b.BookingID] = true
				require.Equal(t, "J"+b.BookingID, b.Key)
			}
			if c.spec == cursorKind {
				chicago, err := time.LoadLocation("America/Chicago")
				require.NoError(t, err)
				require.True(t, time.Date(2026, 3, 1, 8, 0, 0, 0, chicago).Equal(all[0].BookedAt), "a wall-clock time in the item's zone")
			}
		})
	}
}

// Each time format and unit, read from a feed answer.
func TestFieldFormatsAndUnits(t *testing.T) {
	feed := func(fields string) string {
		return `
feed:
  request: {url: /feed, query: {cursor: "{{.cursor}}"}}
  paging: {kind: cursor, next: next}
  items: items
  fields:
    key: {path: id}
` + fields
	}
	cases := []struct {
		name, fields, item string
		check              func(t *testing.T, j wire.Job)
	}{
		{"rfc3339", `    published_at: {path: t}`, `{"id":"a","t":"2026-03-01T12:00:00.5Z"}`, func(t *testing.T, j wire.Job) {
			require.True(t, time.Date(2026, 3, 1, 12, 0, 0, 5e8, time.UTC).Equal(j.PublishedAt))
		}},
		{"epoch seconds", `    published_at: {path: t, time: epoch_s}`, `{"id":"a","t":1772366400}`, func(t *testing.T, j wire.Job) {
			require.Equal(t, int64(1772366400), j.PublishedAt.Unix())
		}},
		{"epoch milliseconds as text", `    published_at: {path: t, time: epoch_ms}`, `{"id":"a","t":"1772366400123"}`, func(t *testing.T, j wire.Job) {
			require.Equal(t, int64(1772366400123), j.PublishedAt.UnixMilli())
		}},
		{"layout in a named zone", `    published_at: {path: t, time: layout, layout: "01/02/2006 3:04 PM", zone: Europe/Berlin}`, `{"id":"a","t":"03/01/2026 1:30 PM"}`, func(t *testing.T, j wire.Job) {
			require.Equal(t, time.Date(2026, 3, 1, 12, 30, 0, 0, time.UTC), j.PublishedAt.UTC())
		}},
		{"kilograms, kilometres, cents per mile", `    published_at: {path: t, time: epoch_s}
    weight: {path: w, unit: kg}
    distance: {path: d, unit: km}
    rate: {path: r, unit: cents_per_mile}`, `{"id":"a","t":1,"w":1000,"d":160.9344,"r":250}`, func(t *testing.T, j wire.Job) {
			require.Equal(t, 2205, j.WeightLbs)
			require.Equal(t, 100, j.Miles)
			require.Equal(t, int64(25000), j.RateCents)
		}},
		{"tonnes, miles, dollars per mile, joined places", `    published_at: {path: t, time: epoch_s}
    weight: {path: w, unit: t}
    distance: {path: d, unit: mi}
    rate: {path: r, unit: usd_per_mile}
    origin: {paths: [o.city, o.state], join: ", "}
    destination: {paths: [x.city, x.state], join: ", "}`, `{"id":"a","t":1,"w":"2","d":400,"r":2.5,"o":{"city":"Austin","state":"TX"},"x":{"state":"NM"}}`, func(t *testing.T, j wire.Job) {
			require.Equal(t, 4409, j.WeightLbs)
			require.Equal(t, 400, j.Miles)
			require.Equal(t, int64(100000), j.RateCents)
			require.Equal(t, "Austin, TX", j.Origin)
			require.Equal(t, "NM", j.Destination)
		}},
		{"cents, usd per km", `    published_at: {path: t, time: epoch_s}
    distance: {path: d, unit: km}
    rate: {path: r, unit: usd_per_km}`, `{"id":"a","t":1,"d":100,"r":1.2}`, func(t *testing.T, j wire.Job) {
			require.Equal(t, int64(12000), j.RateCents)
			require.Equal(t, 62, j.Miles)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ad, err := engine.New(specOf(t, sections{"feed": feed(c.fields)}), "http://127.0.0.1:1")
			require.NoError(t, err)
			jobs, err := ad.Browser().ParseJobs([]byte(`{"items":[` + c.item + `]}`))
			require.NoError(t, err)
			require.Len(t, jobs, 1)
			c.check(t, jobs[0])
		})
	}
}

// An answer whose shape changed is named by its field: a feed item without
// its time or with a time that does not parse, items that are not a list.
func TestFeedShapeChangedNamesTheField(t *testing.T) {
	body := `{"items":[{"id":"a","ts":1}],"next":"1"}`
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path == "/login" {
			writeJSON(w, 200, map[string]string{"token": "TOK"})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, body)
	}))
	defer srv.Close()
	ctx := context.Background()
	sess := sessionOf(t, specOf(t, nil), srv.URL, platform.SessionOptions{})
	require.NoError(t, sess.Login(ctx, credsFor(srv.URL), &platform.TOTP{Secret: creds.TOTPSecret}))
	jobs, err := sess.Jobs(ctx)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	for _, c := range []struct{ body, want string }{
		{`{"items":[{"id":"b","published":1}],"next":"2"}`, "field published_at (path ts) came back empty"},
		{`{"items":[{"id":"b","ts":"yesterday"}],"next":"2"}`, "field published_at (path ts) is not an epoch time"},
		{`{"items":[{"key":"b","ts":1}],"next":"2"}`, "field key (path id) came back empty"},
		{`{"loads":[],"next":"2"}`, "field items (path items) is not a list"},
		{`{"items":[]}`, "field paging.next (path next) came back empty"},
	} {
		mu.Lock()
		body = c.body
		mu.Unlock()
		_, err := sess.Jobs(ctx)
		require.ErrorContains(t, err, c.want)
		require.ErrorContains(t, err, "the answer's shape changed")
	}
}

// The booking's result rules: each named result, an answer no rule
// matches (UNKNOWN, never CONFIRMED), a confirmed answer whose booking id
// moved (UNKNOWN naming the field), a booking id read from a Location
// header with a regexp, or from the HTML of a confirmation page, and the
// idempotency header carrying the booking key.
func TestBookingResultRules(t *testing.T) {
	var mu sync.Mutex
	var status int
	var body, location, ctype string
	var gotKey, gotJob string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/login" {
			writeJSON(w, 200, map[string]string{"token": "TOK"})
			return
		}
		mu.Lock()
		defer mu.Unlock()
		var b struct{ ID string }
		_ = json.NewDecoder(r.Body).Decode(&b)
		gotJob, gotKey = b.ID, r.Header.Get("Idem")
		if location != "" {
			w.Header().Set("Location", location)
		}
		w.Header().Set("Content-Type", ctype)
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}))
	defer srv.Close()
	s := specOf(t, sections{"booking": `
booking:
  request: {method: POST, url: /book, json: '{"id":{{json .key}}}'}
  idempotency_header: Idem
  results:
    - when: {status: [201], json: {path: result, equals: ok}}
      result: confirmed
      booking_id: {json: booking.id}
    - when: {status: [303], header: {name: Location, matches: '^/bookings/'}}
      result: confirmed
      booking_id: {header: Location, regexp: '/bookings/(\d+)'}
    - when: {status: [200], html: {selector: '#confirmation'}}
      result: confirmed
      booking_id: {html: '#confirmation [data-booking-id]', attr: data-booking-id}
    - when: {status: [200], html: {selector: '.banner.error', contains: already taken}}
      result: taken
    - when: {status: [200], json: {path: result, equals: taken}}
      result: taken
    - when: {status: [410]}
      result: expired
    - when: {status: [404]}
      result: not_found
    - when: {status: [429], body: {contains: captcha}}
      result: captcha
    - when: {status: [200], json: {path: result, equals: later}}
      result: unknown
`})
	ctx := context.Background()
	sess := sessionOf(t, s, srv.URL, platform.SessionOptions{})
	require.NoError(t, sess.Login(ctx, credsFor(srv.URL), &platform.TOTP{Secret: creds.TOTPSecret}))
	cases := []struct {
		name                  string
		status                int
		ctype, body, location string
		result, id, detail    string
		captcha, signedOut    bool
	}{
		{"json confirmed", 201, "application/json", `{"result":"ok","booking":{"id":77}}`, "", wire.ResultConfirmed, "77", "", false, false},
		{"confirmed without its id", 201, "application/json", `{"result":"ok","booking":{"ref":77}}`, "", wire.ResultUnknown, "", "field booking_id (json booking.id) came back empty", false, false},
		{"303 to the booking", 303, "text/html", ``, "/bookings/4242", wire.ResultConfirmed, "4242", "", false, false},
		{"confirmation page", 200, "text/html", `<div id="confirmation"><span data-booking-id="B-9">Booked</span></div>`, "", wire.ResultConfirmed, "B-9", "", false, false},
		{"confirmation page without its id", 200, "text/html", `<div id="confirmation"><span>Booked</span></div>`, "", wire.ResultUnknown, "", "field booking_id (html #confirmation [data-booking-id])", false, false},
		{"taken banner inside a 200", 200, "text/html", `<p class="banner error">This load is already taken.</p>`, "", wire.ResultTaken, "", "", false, false},
		{"taken in JSON inside a 200", 200, "application/json", `{"result":"taken"}`, "", wire.ResultTaken, "", "", false, false},
		{"expired", 410, "application/json", `{}`, "", wire.ResultUnknown, "", "410 expired", false, false},
		{"not found", 404, "application/json", `{}`, "", wire.ResultUnknown, "", "404 not_found", false, false},
		{"captcha", 429, "text/plain", `please solve the captcha`, "", wire.ResultUnknown, "", "captcha", true, false},
		{"signed out inside a 200", 200, "application/json", `{"error":"signed_out"}`, "", wire.ResultUnknown, "", "signed out", false, true},
		{"unknown by rule", 200, "application/json", `{"result":"later"}`, "", wire.ResultUnknown, "", "unknown by rule", false, false},
		{"no rule matches", 200, "application/json", `{"result":"booked!"}`, "", wire.ResultUnknown, "", "no result rule matched", false, false},
		{"server error", 502, "text/html", `bad gateway`, "", wire.ResultUnknown, "", "HTTP 502", false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mu.Lock()
			status, ctype, body, location = c.status, c.ctype, c.body, c.location
			mu.Unlock()
			r := sess.Book(ctx, "J1", "key-1", nil)
			require.Equal(t, c.result, r.Result, r.Detail)
			require.Equal(t, c.id, r.BookingID)
			require.Contains(t, r.Detail, c.detail)
			require.Equal(t, c.captcha, r.Captcha)
			require.Equal(t, c.signedOut, r.SignedOut)
			require.False(t, r.SentAt.IsZero())
			mu.Lock()
			require.Equal(t, "J1", gotJob)
			require.Equal(t, "key-1", gotKey, "the booking key rides in the idempotency header")
			mu.Unlock()
		})
	}
}

// The platform's idempotency statement, read from its endpoint and cached.
func TestIdempotencyRead(t *testing.T) {
	var mu sync.Mutex
	reads, answer := 0, `{"features":{"idempotency":true}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		reads++
		fmt.Fprint(w, answer)
	}))
	defer srv.Close()
	s := specOf(t, sections{"idempotency": `
idempotency:
  read: {request: {url: /meta}, path: features.idempotency, cache: 1h}
`, "booking": strings.Replace(defaults["booking"], "  results:", "  idempotency_header: Idempotency-Key\n  results:", 1)})
	ad, err := engine.New(s, srv.URL)
	require.NoError(t, err)
	ctx := context.Background()
	ok, err := ad.HonoursIdempotencyKeys(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	_, _ = ad.HonoursIdempotencyKeys(ctx)
	mu.Lock()
	require.Equal(t, 1, reads, "cached")
	answer = `{"features":{}}`
	mu.Unlock()
	ad, err = engine.New(s, srv.URL)
	require.NoError(t, err)
	_, err = ad.HonoursIdempotencyKeys(ctx)
	require.ErrorContains(t, err, "field idempotency (path features.idempotency) is not true or false")

	stated := specOf(t, sections{"idempotency": "idempotency:\n  honoured: false\n"})
	ad, err = engine.New(stated, "http://127.0.0.1:1")
	require.NoError(t, err)
	ok, err = ad.HonoursIdempotencyKeys(ctx)
	require.NoError(t, err)
	require.False(t, ok, "stated in the spec, nothing is read")
}

// A session carried in a header is refreshed when its period has passed:
// Check sends the refresh, and the new token rides on every request after.
func TestSessionRefresh(t *testing.T) {
	var mu sync.Mutex
	token, refreshes := "T1", 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case "/login":
			writeJSON(w, 200, map[string]string{"token": "T1", "refresh": "R1"})
		case "/refresh":
			if r.PostFormValue("refresh_token") != "R1" {
				writeJSON(w, 400, map[string]string{"error": "bad refresh"})
				return
			}
			refreshes++
			token = "T2"
			writeJSON(w, 200, map[string]string{"access_token": "T2"})
		case "/me":
			if r.Header.Get("Authorization") != "Bearer "+token {
				writeJSON(w, 401, map[string]string{"error": "signed_out"})
				return
			}
			writeJSON(w, 200, map[string]bool{"ok": true})
		}
	}))
	defer srv.Close()
	s := specOf(t, sections{"sign_in": `
sign_in:
  steps:
    - name: password
      request: {method: POST, url: /login, json: '{"user":{{json .username}},"pass":{{json .password}}}'}
      success: {status: [200]}
      extract:
        token: {json: token}
        refresh: {json: refresh}
`, "session": `
session:
  carry: header
  header: {name: Authorization, value: "Bearer {{.vars.token}}"}
  check:
    request: {url: /me}
  refresh:
    every: 10m
    request: {method: POST, url: /refresh, form: {refresh_token: "{{.vars.refresh}}"}}
    extract:
      token: {json: access_token}
  signed_out:
    - status: [401]
`})
	fake := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	ctx := context.Background()
	sess := sessionOf(t, s, srv.URL, platform.SessionOptions{Clock: fake})
	require.NoError(t, sess.Login(ctx, credsFor(srv.URL), &platform.TOTP{Secret: creds.TOTPSecret, Clock: fake}))
	require.NoError(t, sess.Check(ctx))
	fake.Advance(9 * time.Minute)
	require.NoError(t, sess.Check(ctx))
	mu.Lock()
	require.Zero(t, refreshes, "not due yet")
	mu.Unlock()
	fake.Advance(2 * time.Minute)
	require.NoError(t, sess.Check(ctx), "refreshed, then checked with the new token")
	mu.Lock()
	require.Equal(t, 1, refreshes)
	mu.Unlock()
	require.NoError(t, sess.Check(ctx))
	mu.Lock()
	require.Equal(t, 1, refreshes, "the next refresh is ten minutes later")
	mu.Unlock()
}

// A secret a spec puts in a URL never reaches an error: a sign-in that
// cannot connect names the step, not the request's URL.
func TestSecretInAURLStaysOutOfErrors(t *testing.T) {
	s := specOf(t, sections{"sign_in": `
sign_in:
  steps:
    - name: password
      request: {method: POST, url: "/login?u={{.username}}&p={{.password}}", form: {x: "1"}}
      success: {status: [200]}
      extract:
        token: {json: token}
`})
	err := sessionOf(t, s, "http://127.0.0.1:1", platform.SessionOptions{}).Login(context.Background(), credsFor("http://127.0.0.1:1"), &platform.TOTP{Secret: creds.TOTPSecret})
	require.ErrorIs(t, err, platform.ErrUnavailable)
	require.ErrorContains(t, err, "sign-in step password")
	require.NotContains(t, err.Error(), "pw-secret-1")
}
