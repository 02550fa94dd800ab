// Package sandbox is the hand-written platform adapter of Fleetwright's
// sandbox board (modules/board, docs/BOARD.md), kept as a test oracle: the
// sandbox suites run over it and over the spec-driven engine
// (examples/platforms/sandbox.yaml), which is the only adapter the roles
// use. Only tests import this package (TestOnlyTestsImportTheOracle).
package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Name is the adapter's name in worker settings.
const Name = "sandbox"

// Adapter is the sandbox board at one base URL.
type Adapter struct {
	base *url.URL

	// keys caches the board's idempotency status (GET /api/platform).
	kmu    sync.Mutex
	keys   bool
	keysAt time.Time
	// admit is the account's request budget (SetAdmit; nil: none).
	admit func(*http.Request) error
	// hc sends the adapter's own requests (SetDial: through the agent's
	// egress guard).
	hc *http.Client
}

var _ platform.Guarded = (*Adapter)(nil)

// SetDial implements platform.Guarded: the status read dials through dial.
func (a *Adapter) SetDial(dial platform.DialFunc) {
	a.kmu.Lock()
	a.hc = &http.Client{Transport: &http.Transport{DialContext: dial, Proxy: nil},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	a.kmu.Unlock()
}

var _ platform.Metered = (*Adapter)(nil)

// SetAdmit implements platform.Metered: the status read is a request to
// the board like any other, and counts against the account's budget.
func (a *Adapter) SetAdmit(admit func(*http.Request) error) {
	a.kmu.Lock()
	a.admit = admit
	a.kmu.Unlock()
}

// keysFor is how long the board's idempotency status is trusted: a board
// is reconfigured by a restart, so a minute's staleness costs at most a
// minute of claims refused or not refused on a mismatch.
const keysFor = 30 * time.Second

var _ platform.KeyPolicy = (*Adapter)(nil)

// HonoursIdempotencyKeys implements platform.KeyPolicy: the board states it
// at GET /api/platform (no sign-in needed), cached for 30 s.
func (a *Adapter) HonoursIdempotencyKeys(ctx context.Context) (bool, error) {
	a.kmu.Lock()
	defer a.kmu.Unlock()
	if !a.keysAt.IsZero() && time.Since(a.keysAt) < keysFor {
		return a.keys, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.url("/api/platform"), nil)
	if err != nil {
		return false, fmt.Errorf("sandbox: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if a.admit != nil {
		if err := a.admit(req); err != nil {
			return false, fmt.Errorf("%w: GET /api/platform: %w", platform.ErrUnavailable, err)
		}
	}
	hc := a.hc
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, fmt.Errorf("%w: GET /api/platform: %v", platform.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%w: GET /api/platform: HTTP %d", platform.ErrUnavailable, resp.StatusCode)
	}
	var p struct {
		IdempotencyKeys *bool `json:"idempotency_keys"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&p); err != nil || p.IdempotencyKeys == nil {
		return false, fmt.Errorf("sandbox: GET /api/platform: no idempotency_keys in the answer")
	}
	a.keys, a.keysAt = *p.IdempotencyKeys, time.Now()
	return a.keys, nil
}

var _ platform.Adapter = (*Adapter)(nil)

// New returns the adapter for a board at baseURL (http(s)://host[:port]).
func New(baseURL string) (platform.Adapter, error) {
	u, err := url.Parse(strings.TrimRight(strings.TrimSpace(baseURL), "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("sandbox: board URL %q must be http(s)://host[:port]", baseURL)
	}
	return &Adapter{base: u}, nil
}

// Name implements platform.Adapter.
func (a *Adapter) Name() string { return Name }

// Browser implements platform.Adapter.
func (a *Adapter) Browser() platform.Browser { return &browserSide{a: a} }

func (a *Adapter) url(path string) string { return a.base.String() + path }

// NewSession implements platform.Adapter.
func (a *Adapter) NewSession(opts platform.SessionOptions) (platform.Session, error) {
	jar, err := cookiejar.New(nil)
	if err != nil {
		return nil, fmt.Errorf("sandbox: cookie jar: %w", err)
	}
	to := opts.Timeout
	if to <= 0 {
		to = 15 * time.Second
	}
	tr := &platform.Transport{Order: opts.Traits.Profile.HeaderOrder, Admit: opts.Admit, Dial: opts.Dial}
	s := &session{a: a, tr: tr, opts: opts, timeout: to,
		hc: &http.Client{Jar: jar, Transport: tr}}
	return s, nil
}

type session struct {
	a       *Adapter
	tr      *platform.Transport
	hc      *http.Client
	opts    platform.SessionOptions
	timeout time.Duration

	mu    sync.Mutex
	csrf  string
	after int64
}

// headers sets the traits' headers of a fetch or form post from the page.
func (s *session) headers(req *http.Request, accept string) {
	t := s.opts.Traits
	if t.UserAgent != "" {
		req.Header.Set("User-Agent", t.UserAgent)
	}
	if t.Language.AcceptLanguage != "" {
		req.Header.Set("Accept-Language", t.Language.AcceptLanguage)
	}
	if t.Profile.ClientHintPlatform != "" {
		req.Header.Set("sec-ch-ua-platform", `"`+t.Profile.ClientHintPlatform+`"`)
		req.Header.Set("sec-ch-ua-mobile", "?0")
	}
	for k, v := range t.Profile.ExtraHeaders {
		req.Header.Set(k, v)
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("Accept-Encoding", "gzip, deflate")
	req.Header.Set("Origin", s.a.base.String())
}

func (s *session) do(ctx context.Context, method, path, ctype string, body []byte, accept string) (*http.Response, []byte, error) {
	return s.doWith(ctx, s.hc, method, path, ctype, body, accept)
}

func (s *session) doWith(ctx context.Context, hc *http.Client, method, path, ctype string, body []byte, accept string) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.a.url(path), rd)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: %w", err)
	}
	s.headers(req, accept)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	_ = resp.Body.Close()
	if err != nil {
		return resp, nil, err
	}
	return resp, raw, nil
}

func (s *session) get(ctx context.Context, path string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, raw, err := s.do(ctx, http.MethodGet, path, "", nil, "application/json")
	if err != nil {
		return fmt.Errorf("%w: GET %s: %v", platform.ErrUnavailable, path, err)
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("sandbox: GET %s: %w", path, platform.ErrSignedOut)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("%w: GET %s: HTTP %d", platform.ErrUnavailable, path, resp.StatusCode)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("sandbox: GET %s: decode: %w", path, err)
	}
	return nil
}

const formType = "application/x-www-form-urlencoded"

// Login implements platform.Session. The credentials (and the codes) go
// only to an origin they were sealed for (creds.Origins), redirects
// included: a board URL or a redirect pointing elsewhere sends nothing.
func (s *session) Login(ctx context.Context, creds platform.Credentials, codes *platform.TOTP) error {
	if err := creds.CheckOrigin(s.a.base.String()); err != nil {
		return fmt.Errorf("sandbox: sign in: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout+2*platform.Step)
	defer cancel()
	s.tr.CloseIdle()
	hc := *s.hc
	hc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("sandbox: sign in: more than 10 redirects")
		}
		if err := creds.CheckOrigin(req.URL.String()); err != nil {
			return fmt.Errorf("sandbox: sign in: redirect: %w", err)
		}
		return nil
	}
	form := url.Values{"username": {creds.Username}, "password": {creds.Password.Reveal()}}
	resp, _, err := s.doWith(ctx, &hc, http.MethodPost, "/login", formType, []byte(form.Encode()), "text/html")
	if errors.Is(err, wire.ErrOriginNotBound) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%w: sign in: %v", platform.ErrUnavailable, err)
	}
	if resp.Request.URL.Path != "/login/totp" {
		if resp.Header.Get("X-Board-Error") == "credentials" {
			return fmt.Errorf("sandbox: sign in as %s: %w", creds.Username, platform.ErrCredentials)
		}
		return fmt.Errorf("%w: sign in: HTTP %d", platform.ErrUnavailable, resp.StatusCode)
	}
	code, err := codes.Code()
	for attempt := 0; ; attempt++ {
		if err != nil {
			return err
		}
		resp, _, err = s.doWith(ctx, &hc, http.MethodPost, "/login/totp", formType, []byte(url.Values{"code": {code}}.Encode()), "text/html")
		if errors.Is(err, wire.ErrOriginNotBound) {
			return err
		}
		if err != nil {
			return fmt.Errorf("%w: one-time code: %v", platform.ErrUnavailable, err)
		}
		if resp.StatusCode == http.StatusOK && resp.Request.URL.Path == "/loads" {
			break
		}
		switch resp.Header.Get("X-Board-Error") {
		case "totp_reused":
			if attempt >= 2 {
				return fmt.Errorf("sandbox: %w (after %d waits)", platform.ErrCodeReused, attempt)
			}
			code, err = codes.Next(ctx)
			continue
		case "totp_invalid":
			return fmt.Errorf("sandbox: %w", platform.ErrCodeRefused)
		case "credentials":
			return fmt.Errorf("sandbox: sign-in step expired: %w", platform.ErrCredentials)
		}
		return fmt.Errorf("%w: one-time code: HTTP %d", platform.ErrUnavailable, resp.StatusCode)
	}
	return s.Check(ctx)
}

// Check implements platform.Session: GET /api/session, which also gives
// the CSRF token bookings need.
func (s *session) Check(ctx context.Context) error {
	var si struct {
		SignedIn  bool   `json:"signed_in"`
		CSRFToken string `json:"csrf_token"`
	}
	if err := s.get(ctx, "/api/session", &si); err != nil {
		return err
	}
	if !si.SignedIn {
		return fmt.Errorf("sandbox: %w", platform.ErrSignedOut)
	}
	s.mu.Lock()
	s.csrf = si.CSRFToken
	s.mu.Unlock()
	return nil
}

// Jobs implements platform.Session (the feed with its cursor).
func (s *session) Jobs(ctx context.Context) ([]wire.Job, error) {
	s.mu.Lock()
	after := s.after
	s.mu.Unlock()
	var raw json.RawMessage
	if err := s.get(ctx, "/api/loads?after="+strconv.FormatInt(after, 10), &raw); err != nil {
		return nil, err
	}
	jobs, next, err := parseFeed(raw)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if next > s.after {
		s.after = next
	}
	s.mu.Unlock()
	return jobs, nil
}

// Book implements platform.Session.
func (s *session) Book(ctx context.Context, key, idemKey string, gate platform.Gate) platform.BookResult {
	s.mu.Lock()
	csrf := s.csrf
	s.mu.Unlock()
	body, _ := json.Marshal(map[string]string{"load_id": key})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.a.url("/api/book"), bytes.NewReader(body))
	if err != nil {
		return platform.BookResult{Result: wire.ResultNotSent, Detail: "bad request: " + err.Error()}
	}
	s.headers(req, "application/json")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-CSRF-Token", csrf)
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	var sentAt time.Time
	g := func() error {
		if gate != nil {
			if err := gate(); err != nil {
				return err
			}
		}
		sentAt = s.now()
		return nil
	}
	req = req.WithContext(platform.WithGate(ctx, g))
	// No redirects and no retries: one request, whatever happens.
	hc := *s.hc
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := hc.Do(req)
	if err != nil {
		if errors.Is(err, platform.ErrNotSent) {
			return platform.BookResult{Result: wire.ResultNotSent, Detail: "local deadline passed before sending"}
		}
		if sentAt.IsZero() {
			// Failed before the gate opened (could not connect): never sent.
			return platform.BookResult{Result: wire.ResultNotSent, Detail: "not sent: " + platform.ShortErr(err)}
		}
		return platform.BookResult{Result: wire.ResultUnknown, SentAt: sentAt, Detail: "no answer: " + platform.ShortErr(err)}
	}
	raw, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	if rerr != nil {
		return platform.BookResult{Result: wire.ResultUnknown, SentAt: sentAt, Detail: "answer cut off: " + platform.ShortErr(rerr)}
	}
	r := parseBook(resp.StatusCode, raw)
	r.SentAt = sentAt
	if r.Result == wire.ResultConfirmed {
		r.ConfirmedAt = s.now()
	}
	return r
}

// now is the session's clock (the agent's), or the wall clock.
func (s *session) now() time.Time {
	if s.opts.Clock != nil {
		return s.opts.Clock.Now()
	}
	return time.Now()
}

// bookingsPage is how many bookings one request of the board's list asks
// for: a page of them stays well under a protocol message.
const bookingsPage = 200

// bookingsPath is the board's bookings list from a cursor (a booking id).
func bookingsPath(cursor string) (string, int64, error) {
	after := int64(0)
	if cursor != "" {
		n, err := strconv.ParseInt(cursor, 10, 64)
		if err != nil || n < 0 {
			return "", 0, fmt.Errorf("sandbox: bookings: cursor %q is not a booking id", cursor)
		}
		after = n
	}
	return fmt.Sprintf("/api/bookings?after=%d&limit=%d", after, bookingsPage), after, nil
}

// Bookings implements platform.Session.
func (s *session) Bookings(ctx context.Context, cursor string) (platform.Bookings, error) {
	path, after, err := bookingsPath(cursor)
	if err != nil {
		return platform.Bookings{}, err
	}
	var raw json.RawMessage
	if err := s.get(ctx, path, &raw); err != nil {
		return platform.Bookings{}, err
	}
	return parseBookings(raw, after)
}

// Cookies implements platform.Session.
func (s *session) Cookies() []*http.Cookie { return s.hc.Jar.Cookies(s.a.base) }

// SetCookies implements platform.Session.
func (s *session) SetCookies(cookies []*http.Cookie) {
	s.hc.Jar.SetCookies(s.a.base, cookies)
}

// ---- the board's JSON ----

type place struct {
	City  string `json:"city"`
	State string `json:"state"`
}

func (p place) String() string {
	if p.City == "" {
		return p.State
	}
	return p.City + ", " + p.State
}

type feedLoad struct {
	ID          string    `json:"id"`
	Origin      place     `json:"origin"`
	Destination place     `json:"destination"`
	Equipment   string    `json:"equipment"`
	WeightLb    int       `json:"weight_lb"`
	RateUSD     int64     `json:"rate_usd"`
	Miles       int       `json:"miles"`
	PickupStart time.Time `json:"pickup_start"`
	PickupEnd   time.Time `json:"pickup_end"`
	PublishedAt time.Time `json:"published_at"`
	ExpiresAt   time.Time `json:"expires_at"`
}

func parseFeed(raw []byte) ([]wire.Job, int64, error) {
	var f struct {
		NextAfter int64      `json:"next_after"`
		Loads     []feedLoad `json:"loads"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, 0, fmt.Errorf("sandbox: loads feed: %w", err)
	}
	out := make([]wire.Job, 0, len(f.Loads))
	for _, l := range f.Loads {
		if l.ID == "" {
			continue
		}
		out = append(out, wire.Job{Key: l.ID, PublishedAt: l.PublishedAt, ExpiresAt: l.ExpiresAt,
			Origin: l.Origin.String(), Destination: l.Destination.String(), Equipment: l.Equipment,
			WeightLbs: l.WeightLb, Miles: l.Miles, RateCents: l.RateUSD * 100,
			PickupStart: l.PickupStart, PickupEnd: l.PickupEnd})
	}
	return out, f.NextAfter, nil
}

func parseBook(status int, raw []byte) platform.BookResult {
	var b struct {
		Status  string `json:"status"`
		Booking struct {
			ID int64 `json:"id"`
		} `json:"booking"`
	}
	_ = json.Unmarshal(raw, &b)
	switch {
	case status == http.StatusCreated && b.Status == "confirmed":
		return platform.BookResult{Result: wire.ResultConfirmed, BookingID: strconv.FormatInt(b.Booking.ID, 10), Detail: "confirmed"}
	case status == http.StatusConflict && b.Status == "taken":
		return platform.BookResult{Result: wire.ResultTaken, Detail: "taken by another client"}
	case status == http.StatusForbidden && b.Status == "captcha":
		return platform.BookResult{Result: wire.ResultUnknown, Captcha: true, Detail: "captcha: a person must verify"}
	case status == http.StatusUnauthorized:
		return platform.BookResult{Result: wire.ResultUnknown, SignedOut: true, Detail: "signed out"}
	}
	// Everything else (5xx, 504 late commit, 410, 404, 422, csrf) left the
	// worker and is settled by the reconciler, never guessed here.
	st := b.Status
	if st == "" {
		st = "unreadable answer"
	}
	return platform.BookResult{Result: wire.ResultUnknown, Detail: fmt.Sprintf("HTTP %d %s", status, st)}
}

// parseBookings reads one page of the board's list by cursor. It is
// Complete only with the board's own proof: signed in, the page answers the
// cursor asked with, its ids ascend above it and end at next_after, and the
// last page (more false) says complete.
func parseBookings(raw []byte, after int64) (platform.Bookings, error) {
	var p struct {
		SignedIn  bool      `json:"signed_in"`
		Complete  bool      `json:"complete"`
		Client    string    `json:"client"`
		AsOf      time.Time `json:"as_of"`
		After     *int64    `json:"after"`
		NextAfter *int64    `json:"next_after"`
		More      *bool     `json:"more"`
		Bookings  []struct {
			ID       int64     `json:"id"`
			LoadID   string    `json:"load_id"`
			Account  string    `json:"account"`
			BookedAt time.Time `json:"booked_at"`
		} `json:"bookings"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return platform.Bookings{}, fmt.Errorf("sandbox: bookings: %w", err)
	}
	out := platform.Bookings{AsOf: p.AsOf, Client: p.Client, Bookings: []wire.Booking{}}
	ok := p.SignedIn && p.After != nil && *p.After == after && p.NextAfter != nil && p.More != nil &&
		len(p.Bookings) <= bookingsPage
	last := after
	for _, b := range p.Bookings {
		if b.ID <= last {
			ok = false
		}
		last = b.ID
		out.Bookings = append(out.Bookings, wire.Booking{Key: b.LoadID, BookingID: strconv.FormatInt(b.ID, 10),
			BookedAt: b.BookedAt, Account: b.Account})
	}
	if !ok || *p.NextAfter != last {
		return out, nil
	}
	if *p.More {
		if len(p.Bookings) == 0 {
			return out, nil // "more" without progress proves nothing
		}
		out.Next = strconv.FormatInt(last, 10)
		out.Complete = true
		return out, nil
	}
	out.Complete = p.Complete
	return out, nil
}
