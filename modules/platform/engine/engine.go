// Package engine is the spec-driven platform adapter: one engine that
// implements platform.Adapter over HTTP for any platform a spec
// (platform/spec) describes. Every guarantee the hand-written adapter
// keeps holds here too: the send gate runs right before the booking's first
// byte (platform.Transport), NOT_SENT comes only from the gate or a request
// that never connected, an answer no result rule recognises is UNKNOWN,
// and a bookings page is complete only with the proof the spec names.
package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/platform/spec"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Adapter is one platform described by a spec, at one base URL.
type Adapter struct {
	s       *spec.Spec
	base    *url.URL
	origins []string // where credentials and the session may go

	steps     []step
	check     *checkReq
	refresh   *refreshReq
	sessHdr   *headerT
	signedOut []*cond

	feed     *listing
	jobs     jobFields
	book     *request
	results  []result
	bookings *listing
	bkFields bookingFields
	client   string
	asOf     *field
	every    []*cond
	total    string
	complete *cond

	page *pageSide // the browser section (nil: HTTP only)

	keysReq  *request
	kmu      *sync.Mutex // a pointer: Fork gives each fork its own
	keys     bool
	keysAt   time.Time
	admit    func(*http.Request) error
	keysHTTP *http.Client
}

type step struct {
	name     string
	req      *request
	otp      bool
	reused   *cond
	follow   bool
	fail     []failRule
	success  *cond
	extracts []extractor
}

type failRule struct {
	when *cond
	err  error
}

type checkReq struct {
	req      *request
	success  *cond
	extracts []extractor
}

type refreshReq struct {
	every time.Duration
	checkReq
}

type headerT struct {
	name string
	kv
}

type listing struct {
	req    *request
	paging spec.Paging
	items  string
	order  string
	by     string
}

type jobFields struct {
	key, published, expires, origin, dest, equipment, weight, distance, rate, pickupStart, pickupEnd *field
}

type bookingFields struct {
	key, id, bookedAt, account *field
}

type result struct {
	when   *cond
	result string
	id     *extractor
}

var (
	_ platform.Adapter   = (*Adapter)(nil)
	_ platform.KeyPolicy = (*Adapter)(nil)
	_ platform.Metered   = (*Adapter)(nil)
)

// Factory returns the platform.Factory of a spec: an adapter per account
// base URL.
func Factory(s *spec.Spec) platform.Factory {
	return func(baseURL string) (platform.Adapter, error) { return New(s, baseURL) }
}

// New builds the adapter of a parsed spec for a platform at baseURL.
func New(s *spec.Spec, baseURL string) (*Adapter, error) {
	u, err := url.Parse(strings.TrimRight(strings.TrimSpace(baseURL), "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("engine: %s: base URL %q must be http(s)://host[:port]", s.Name, baseURL)
	}
	a := &Adapter{s: s, base: u, origins: []string{origin(u)}, kmu: &sync.Mutex{}, keysHTTP: &http.Client{Timeout: 5 * time.Second}}
	for _, o := range s.Origins {
		ou, err := url.Parse(o)
		if err == nil {
			a.origins = append(a.origins, origin(ou))
		}
	}
	if err := a.compile(); err != nil {
		return nil, fmt.Errorf("engine: %s: %w", s.Name, err)
	}
	return a, nil
}

func origin(u *url.URL) string {
	host := strings.ToLower(u.Host)
	switch {
	case u.Scheme == "http" && strings.HasSuffix(host, ":80"):
		host = strings.TrimSuffix(host, ":80")
	case u.Scheme == "https" && strings.HasSuffix(host, ":443"):
		host = strings.TrimSuffix(host, ":443")
	}
	return u.Scheme + "://" + host
}

func (a *Adapter) allowed(u *url.URL) error {
	if slices.Contains(a.origins, origin(u)) {
		return nil
	}
	return fmt.Errorf("%s is not one of the platform's origins (the account's base URL and the spec's origins): nothing is sent there", origin(u))
}

var failErrs = map[string]error{
	"credentials":  platform.ErrCredentials,
	"code_refused": platform.ErrCodeRefused,
	"captcha":      platform.ErrCaptcha,
	"unavailable":  platform.ErrUnavailable,
}

func (a *Adapter) compile() error {
	s := a.s
	for i, st := range s.SignIn.Steps {
		name := fmt.Sprintf("sign_in.steps[%d]", i)
		req, err := compileRequest(name+".request", st.Request)
		if err != nil {
			return err
		}
		c := step{name: st.Name, req: req, otp: st.OneTimeCode, follow: st.FollowRedirects == nil || *st.FollowRedirects}
		if c.reused, err = compileCond(name+".code_reused", st.CodeReused); err != nil {
			return err
		}
		for j, f := range st.Fail {
			w, err := compileCond(fmt.Sprintf("%s.fail[%d].when", name, j), &f.When)
			if err != nil {
				return err
			}
			c.fail = append(c.fail, failRule{when: w, err: failErrs[f.Error]})
		}
		if c.success, err = compileCond(name+".success", &st.Success); err != nil {
			return err
		}
		if c.extracts, err = compileExtracts(st.Extract); err != nil {
			return err
		}
		a.steps = append(a.steps, c)
	}
	ss := s.Session
	if ss.Check != nil {
		c, err := compileCheck("session.check", ss.Check.Request, ss.Check.Success, ss.Check.Extract)
		if err != nil {
			return err
		}
		a.check = c
	}
	if ss.Refresh != nil {
		c, err := compileCheck("session.refresh", ss.Refresh.Request, ss.Refresh.Success, ss.Refresh.Extract)
		if err != nil {
			return err
		}
		a.refresh = &refreshReq{every: ss.Refresh.Every.D, checkReq: *c}
	}
	if ss.Carry == "header" && ss.Header != nil {
		t, err := newTpl("session.header.value", ss.Header.Value)
		if err != nil {
			return err
		}
		a.sessHdr = &headerT{name: ss.Header.Name, kv: kv{ss.Header.Name, t}}
	}
	var err error
	if a.signedOut, err = compileConds("session.signed_out", ss.SignedOut); err != nil {
		return err
	}
	if a.feed, err = compileListing("feed", s.Feed.Request, s.Feed.Paging, s.Feed.Items, "", ""); err != nil {
		return err
	}
	jf := s.Feed.Fields
	for _, p := range []struct {
		dst  **field
		name string
		f    *spec.Field
	}{{&a.jobs.key, "key", jf.Key}, {&a.jobs.published, "published_at", jf.PublishedAt}, {&a.jobs.expires, "expires_at", jf.ExpiresAt},
		{&a.jobs.origin, "origin", jf.Origin}, {&a.jobs.dest, "destination", jf.Destination}, {&a.jobs.equipment, "equipment", jf.Equipment},
		{&a.jobs.weight, "weight", jf.Weight}, {&a.jobs.distance, "distance", jf.Distance}, {&a.jobs.rate, "rate", jf.Rate},
		{&a.jobs.pickupStart, "pickup_start", jf.PickupStart}, {&a.jobs.pickupEnd, "pickup_end", jf.PickupEnd},
		{&a.bkFields.key, "key", s.Bookings.Fields.Key}, {&a.bkFields.id, "booking_id", s.Bookings.Fields.BookingID},
		{&a.bkFields.bookedAt, "booked_at", s.Bookings.Fields.BookedAt}, {&a.bkFields.account, "account", s.Bookings.Fields.Account},
		{&a.asOf, "as_of", s.Bookings.AsOf}} {
		if *p.dst, err = compileField(p.name, p.f); err != nil {
			return err
		}
	}
	// The key and the time a job was published are what a sighting is:
	// an item without them is a changed answer, whatever the spec says.
	a.jobs.key.f.Required, a.jobs.published.f.Required = true, true
	a.bkFields.key.f.Required, a.bkFields.id.f.Required = true, true

	if a.book, err = compileRequest("booking.request", s.Booking.Request); err != nil {
		return err
	}
	for i, r := range s.Booking.Results {
		w, err := compileCond(fmt.Sprintf("booking.results[%d].when", i), &r.When)
		if err != nil {
			return err
		}
		res := result{when: w, result: r.Result}
		if r.BookingID != nil {
			x, err := compileExtractor("booking_id", *r.BookingID)
			if err != nil {
				return err
			}
			res.id = &x
		}
		a.results = append(a.results, res)
	}
	b := s.Bookings
	if a.bookings, err = compileListing("bookings", b.Request, b.Paging, b.Items, b.Order, b.OrderBy); err != nil {
		return err
	}
	a.client, a.total = b.Client, b.Complete.Total
	if a.every, err = compileConds("bookings.every_page", b.EveryPage); err != nil {
		return err
	}
	if a.complete, err = compileCond("bookings.complete.when", b.Complete.When); err != nil {
		return err
	}
	if r := s.Idempotency.Read; r != nil {
		if a.keysReq, err = compileRequest("idempotency.read.request", r.Request); err != nil {
			return err
		}
	}
	a.book.fix(a.base, a.allowed)
	return a.compileBrowser()
}

func compileCheck(name string, r spec.Request, success *spec.Cond, ex map[string]spec.Extractor) (*checkReq, error) {
	req, err := compileRequest(name+".request", r)
	if err != nil {
		return nil, err
	}
	c := &checkReq{req: req}
	if c.success, err = compileCond(name+".success", success); err != nil {
		return nil, err
	}
	if c.extracts, err = compileExtracts(ex); err != nil {
		return nil, err
	}
	return c, nil
}

func compileListing(name string, r spec.Request, p spec.Paging, items, order, by string) (*listing, error) {
	req, err := compileRequest(name+".request", r)
	if err != nil {
		return nil, err
	}
	return &listing{req: req, paging: p, items: items, order: order, by: by}, nil
}

// Name implements platform.Adapter.
func (a *Adapter) Name() string { return a.s.Name }

// Spec is the spec the adapter was built from.
func (a *Adapter) Spec() *spec.Spec { return a.s }

// Limits are the platform's own limits (defaults for the tenant's).
func (a *Adapter) Limits() spec.Limits { return a.s.Limits }

// SetAdmit implements platform.Metered: the idempotency status read counts
// against the account's request budget like any other request.
func (a *Adapter) SetAdmit(admit func(*http.Request) error) {
	a.kmu.Lock()
	a.admit = admit
	a.kmu.Unlock()
}

var _ platform.Guarded = (*Adapter)(nil)

// SetDial implements platform.Guarded: the idempotency status read dials
// through dial (the agent's egress guard).
func (a *Adapter) SetDial(dial platform.DialFunc) {
	a.kmu.Lock()
	a.keysHTTP = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dial, Proxy: nil}}
	a.kmu.Unlock()
}

// HonoursIdempotencyKeys implements platform.KeyPolicy: stated in the spec,
// or read from the platform's endpoint (cached as the spec says).
func (a *Adapter) HonoursIdempotencyKeys(ctx context.Context) (bool, error) {
	if h := a.s.Idempotency.Honoured; h != nil {
		return *h, nil
	}
	rd := a.s.Idempotency.Read
	a.kmu.Lock()
	defer a.kmu.Unlock()
	if !a.keysAt.IsZero() && time.Since(a.keysAt) < rd.Cache.D {
		return a.keys, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	u, err := a.keysReq.target(a.base, data{spec.VarBase: a.base.String()})
	if err != nil {
		return false, fmt.Errorf("engine: %s: idempotency: %w", a.s.Name, err)
	}
	if err := a.allowed(u); err != nil {
		return false, fmt.Errorf("engine: %s: idempotency: %w", a.s.Name, err)
	}
	req, err := http.NewRequestWithContext(ctx, a.keysReq.method, u.String(), nil)
	if err != nil {
		return false, fmt.Errorf("engine: %s: %w", a.s.Name, err)
	}
	req.Header.Set("Accept", "application/json")
	where := a.keysReq.method + " " + u.Path
	if a.admit != nil {
		if err := a.admit(req); err != nil {
			return false, fmt.Errorf("%w: %s: %w", platform.ErrUnavailable, where, err)
		}
	}
	resp, err := a.keysHTTP.Do(req)
	if err != nil {
		return false, fmt.Errorf("%w: %s: %v", platform.ErrUnavailable, where, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%w: %s: HTTP %d", platform.ErrUnavailable, where, resp.StatusCode)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return false, fmt.Errorf("%w: %s: %v", platform.ErrUnavailable, where, err)
	}
	r := gjson.GetBytes(raw, rd.Path)
	if r.Type != gjson.True && r.Type != gjson.False {
		return false, fmt.Errorf("engine: %s: %s: field idempotency (path %s) is not true or false in the answer", a.s.Name, where, rd.Path)
	}
	a.keys, a.keysAt = r.Bool(), time.Now()
	return a.keys, nil
}

// NewSession implements platform.Adapter.
func (a *Adapter) NewSession(opts platform.SessionOptions) (platform.Session, error) {
	jar, err := cookiejar.New(nil)
	if err != nil {
		return nil, fmt.Errorf("engine: cookie jar: %w", err)
	}
	to := opts.Timeout
	if to <= 0 {
		to = 15 * time.Second
	}
	tr := &platform.Transport{Order: opts.Traits.Profile.HeaderOrder, Admit: opts.Admit, Dial: opts.Dial}
	s := &session{a: a, tr: tr, opts: opts, timeout: to, jar: jar, base: a.base.String(), vars: map[string]string{}, seen: map[string]struct{}{}}
	s.hc = &http.Client{Jar: jar, Transport: tr, CheckRedirect: s.redirect}
	s.once = &http.Client{Jar: jar, Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	s.feedPos = a.feed.paging.Start
	return s, nil
}

type session struct {
	a       *Adapter
	tr      *platform.Transport
	hc      *http.Client
	once    *http.Client // follows no redirect (a booking, a step that says so)
	jar     http.CookieJar
	opts    platform.SessionOptions
	timeout time.Duration

	base string // the base URL, as templates see it

	mu       sync.Mutex
	vars     map[string]string
	signedAt time.Time
	feedPos  string
	seen     map[string]struct{}
	seenList []string
}

// redirect follows a sign-in form's redirects within the platform's origins
// only (credentials are bound to them).
func (s *session) redirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("engine: more than 10 redirects")
	}
	if err := s.a.allowed(req.URL); err != nil {
		return fmt.Errorf("engine: redirect: %w", err)
	}
	return nil
}

func (s *session) now() time.Time {
	if s.opts.Clock != nil {
		return s.opts.Clock.Now()
	}
	return time.Now()
}

// data is what the session's templates see. The vars map is never changed
// once published (a check or refresh replaces it whole), so it is shared.
func (s *session) data() data {
	s.mu.Lock()
	v := s.vars
	s.mu.Unlock()
	d := make(data, 6)
	d[spec.VarBase], d[spec.VarVars] = s.base, v
	return d
}

// headers sets the traits' headers, then the spec's (and the session's
// header when it is carried in one).
func (s *session) headers(req *http.Request, r *request, d data, accept string, signedIn bool) error {
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
	if r.ctype != "" {
		req.Header.Set("Content-Type", r.ctype)
	}
	if signedIn && s.a.sessHdr != nil {
		v, err := render(s.a.sessHdr.v, d)
		if err != nil {
			return err
		}
		req.Header.Set(s.a.sessHdr.name, v)
	}
	for _, h := range r.headers {
		v, err := render(h.v, d)
		if err != nil {
			return err
		}
		req.Header.Set(h.k, v)
	}
	return nil
}

// build renders a request of the spec (u overrides its URL: a Link).
func (s *session) build(ctx context.Context, r *request, d data, u *url.URL, signedIn bool) (*http.Request, error) {
	target := r.fixed
	if u != nil || target == "" {
		var err error
		if u == nil {
			if u, err = r.target(s.a.base, d); err != nil {
				return nil, err
			}
		}
		if err := s.a.allowed(u); err != nil {
			return nil, err
		}
		target = u.String()
	}
	body, err := r.payload(d)
	if err != nil {
		return nil, err
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, target, rd)
	if err != nil {
		return nil, err
	}
	accept := "application/json"
	if r.htmlForm {
		accept = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
	}
	if err := s.headers(req, r, d, accept, signedIn); err != nil {
		return nil, err
	}
	return req, nil
}

// read sends req and reads its answer (the client follows redirects as
// hc says).
func (s *session) read(hc *http.Client, req *http.Request, limit int64) (*answer, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	set := resp.Cookies()
	a := &answer{status: resp.StatusCode, url: resp.Request.URL, header: resp.Header, body: raw,
		cookies: func(name string) string {
			for _, c := range set {
				if c.Name == name {
					return c.Value
				}
			}
			for _, c := range s.jar.Cookies(s.a.base) {
				if c.Name == name {
					return c.Value
				}
			}
			return ""
		}}
	return a, nil
}

func (s *session) isSignedOut(a *answer, d data) bool {
	for _, c := range s.a.signedOut {
		if c.holds(a, d) {
			return true
		}
	}
	return false
}

// get sends one signed-in read (a check, the feed, the look-up): a
// signed-out answer is ErrSignedOut, another non-2xx ErrUnavailable.
func (s *session) get(ctx context.Context, what string, r *request, d data, u *url.URL) (*answer, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := s.build(ctx, r, d, u, true)
	if err != nil {
		return nil, fmt.Errorf("engine: %s: %s: %w", s.a.s.Name, what, err)
	}
	a, err := s.read(s.hc, req, 16<<20)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %s %s: %s", platform.ErrUnavailable, what, req.Method, req.URL.Path, shortErr(err))
	}
	if s.isSignedOut(a, d) {
		return nil, fmt.Errorf("engine: %s: %s: %w", s.a.s.Name, what, platform.ErrSignedOut)
	}
	if a.status < 200 || a.status > 299 {
		return nil, fmt.Errorf("%w: %s: %s %s: HTTP %d", platform.ErrUnavailable, what, req.Method, req.URL.Path, a.status)
	}
	return a, nil
}

// Login implements platform.Session: the spec's sign-in steps in order.
func (s *session) Login(ctx context.Context, creds platform.Credentials, codes *platform.TOTP) error {
	name := s.a.s.Name
	if err := creds.CheckOrigin(s.a.base.String()); err != nil {
		return fmt.Errorf("engine: %s: sign in: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(len(s.a.steps)+1)*s.timeout+2*platform.Step)
	defer cancel()
	s.tr.CloseIdle()
	// Each step and each redirect it follows goes only to an origin the
	// credentials were sealed for (besides being one of the platform's).
	signIn := func(hc *http.Client) *http.Client {
		c := *hc
		next := c.CheckRedirect
		c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
			if next != nil {
				if err := next(req, via); err != nil {
					return err // a step that follows none, or a hop off the platform
				}
			}
			if err := creds.CheckOrigin(req.URL.String()); err != nil {
				return fmt.Errorf("engine: redirect: %w", err)
			}
			return nil
		}
		return &c
	}
	vars := map[string]string{}
	for _, st := range s.a.steps {
		code := ""
		if st.otp {
			var err error
			if code, err = codes.Code(); err != nil {
				return err
			}
		}
		for attempt := 0; ; attempt++ {
			d := data{spec.VarBase: s.a.base.String(), spec.VarUsername: creds.Username,
				spec.VarPassword: creds.Password.Reveal(), spec.VarVars: vars}
			if st.otp {
				d[spec.VarCode] = code
			}
			req, err := s.build(ctx, st.req, d, nil, false)
			if err != nil {
				return fmt.Errorf("engine: %s: sign-in step %s: %w", name, st.name, err)
			}
			if err := creds.CheckOrigin(req.URL.String()); err != nil {
				return fmt.Errorf("engine: %s: sign-in step %s: %w", name, st.name, err)
			}
			hc := s.hc
			if !st.follow {
				hc = s.once
			}
			a, err := s.read(signIn(hc), req, 4<<20)
			if errors.Is(err, wire.ErrOriginNotBound) {
				return fmt.Errorf("engine: %s: sign-in step %s: %w", name, st.name, err)
			}
			if err != nil {
				return fmt.Errorf("%w: sign-in step %s: %v", platform.ErrUnavailable, st.name, shortErr(err))
			}
			if st.otp && st.reused.holds(a, d) {
				if attempt >= 2 {
					return fmt.Errorf("engine: %s: %w (after %d waits)", name, platform.ErrCodeReused, attempt)
				}
				if code, err = codes.Next(ctx); err != nil {
					return err
				}
				continue
			}
			for _, f := range st.fail {
				if f.when.holds(a, d) {
					if errors.Is(f.err, platform.ErrCredentials) {
						return fmt.Errorf("engine: %s: sign in as %s (step %s): %w", name, creds.Username, st.name, f.err)
					}
					return fmt.Errorf("engine: %s: sign-in step %s: %w", name, st.name, f.err)
				}
			}
			if !st.success.holds(a, d) {
				return fmt.Errorf("%w: sign-in step %s: HTTP %d matched neither success nor a failure rule", platform.ErrUnavailable, st.name, a.status)
			}
			if err := extract(st.extracts, a, vars); err != nil {
				return fmt.Errorf("engine: %s: sign-in step %s: %w", name, st.name, err)
			}
			break
		}
	}
	s.mu.Lock()
	s.vars = vars
	s.signedAt = s.now()
	s.mu.Unlock()
	return s.Check(ctx)
}

// shortErr is an error for a message: without the request's URL (a spec
// may put a token in a query) and at most 200 bytes.
func shortErr(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	m := err.Error()
	if len(m) > 200 {
		m = m[:200]
	}
	return m
}

// Check implements platform.Session: the refresh when it is due, then the
// spec's check request.
func (s *session) Check(ctx context.Context) error {
	if r := s.a.refresh; r != nil {
		s.mu.Lock()
		due := !s.signedAt.IsZero() && s.now().Sub(s.signedAt) >= r.every
		s.mu.Unlock()
		if due {
			if err := s.run(ctx, "session refresh", &r.checkReq); err != nil {
				return err
			}
			s.mu.Lock()
			s.signedAt = s.now()
			s.mu.Unlock()
		}
	}
	if s.a.check == nil {
		return nil
	}
	return s.run(ctx, "session check", s.a.check)
}

func (s *session) run(ctx context.Context, what string, c *checkReq) error {
	d := s.data()
	a, err := s.get(ctx, what, c.req, d, nil)
	if err != nil {
		return err
	}
	if c.success != nil && !c.success.holds(a, d) {
		return fmt.Errorf("%w: %s: HTTP %d did not match its success rule", platform.ErrUnavailable, what, a.status)
	}
	vars := map[string]string{}
	if err := extract(c.extracts, a, vars); err != nil {
		return fmt.Errorf("engine: %s: %s: %w", s.a.s.Name, what, err)
	}
	s.mu.Lock()
	merged := make(map[string]string, len(s.vars)+len(vars))
	for k, v := range s.vars {
		merged[k] = v
	}
	for k, v := range vars {
		merged[k] = v
	}
	s.vars = merged
	s.mu.Unlock()
	return nil
}

// Cookies implements platform.Session.
func (s *session) Cookies() []*http.Cookie { return s.jar.Cookies(s.a.base) }

// SetCookies implements platform.Session.
func (s *session) SetCookies(cookies []*http.Cookie) { s.jar.SetCookies(s.a.base, cookies) }

// Browser implements platform.Adapter: the spec's browser section; without
// one every page action fails with ErrNoBrowser.
func (a *Adapter) Browser() platform.Browser { return &browserSide{a: a} }
