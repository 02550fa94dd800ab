package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/proto"
	"github.com/tidwall/gjson"

	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/platform/spec"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// ErrNoBrowser: the spec has no browser section, so it describes the
// platform over HTTP only; a browser worker on it stops with it.
var ErrNoBrowser = errors.New("engine: the spec describes the platform over HTTP only (no browser section): run HTTP workers on it, or describe the page under browser:")

// stepWait bounds how long one sign-in form's next page may take to show
// a state its rules know.
const stepWait = 15 * time.Second

// pollEvery is how often a page is read while a sign-in step's outcome is
// awaited.
const pollEvery = 50 * time.Millisecond

// browserSide is the platform in a page, as the spec's browser section
// says; without one, every page action fails with ErrNoBrowser.
type browserSide struct{ a *Adapter }

var (
	_ platform.Browser     = (*browserSide)(nil)
	_ platform.ServerTimer = (*browserSide)(nil)
)

// pageSide is the compiled browser section.
type pageSide struct {
	signInURL *tpl
	steps     []pageStep
	jobsURL   *url.URL
	jobs      []*reqMatch
	items     string
	srvTime   *field
	control   *tpl
	book      *reqMatch
	key       spec.KeyAt
	keyRe     *regexp.Regexp
	state     probe
	captcha   []*pageCond
	signedOut []*pageCond
	ready     int // the ready read in state, -1 for none
	vars      probe
	varNames  []string
}

type pageStep struct {
	name      string
	otp       bool
	fields    []pageField
	submit    string
	navigates bool
	probe     probe
	reused    *pageCond
	fail      []pageFail
	success   *pageCond
}

type pageField struct {
	sel string
	v   *tpl
}

type pageFail struct {
	when *pageCond
	err  error
}

// read is one element the page is asked about.
type read struct {
	Sel     string `json:"s"`
	Attr    string `json:"a,omitempty"`
	Visible bool   `json:"v,omitempty"`
	Text    bool   `json:"t,omitempty"`
}

// probe is the reads one place needs, asked of the page in one call.
type probe struct{ reads []read }

func (p *probe) add(r read) int {
	if i := slices.Index(p.reads, r); i >= 0 {
		return i
	}
	p.reads = append(p.reads, r)
	return len(p.reads) - 1
}

// view is what the page answered.
type view struct {
	Path  string `json:"path"`
	Ready string `json:"ready"`
	Reads []struct {
		Found   bool   `json:"f"`
		Visible bool   `json:"v"`
		Has     bool   `json:"h"`
		Text    string `json:"t"`
	} `json:"r"`
}

// lookJS reads the page: its path, whether it finished loading, and each
// read's element (found, shown, its text or attribute). A selector the
// browser does not take finds nothing.
const lookJS = `(reads) => {
	const out = {path: location.pathname, ready: document.readyState, r: []};
	for (const q of reads) {
		let e = null;
		try { e = document.querySelector(q.s); } catch (_) {}
		if (!e) { out.r.push({f: false}); continue; }
		const o = {f: true, v: false, h: true, t: ""};
		if (q.v) {
			const st = getComputedStyle(e);
			o.v = st.display !== "none" && st.visibility !== "hidden" && e.getClientRects().length > 0;
		}
		if (q.t) {
			if (q.a) { o.h = e.hasAttribute(q.a); o.t = e.getAttribute(q.a) || ""; }
			else { o.t = (e.textContent || "").trim(); }
		}
		out.r.push(o);
	}
	return out;
}`

func (p *probe) look(pg *rod.Page) (*view, error) {
	reads := p.reads
	if reads == nil {
		reads = []read{}
	}
	res, err := pg.Eval(lookJS, reads)
	if err != nil {
		return nil, err
	}
	var v view
	if err := res.Value.Unmarshal(&v); err != nil {
		return nil, err
	}
	if len(v.Reads) != len(p.reads) {
		return nil, fmt.Errorf("the page answered %d reads of %d", len(v.Reads), len(p.reads))
	}
	return &v, nil
}

// pageCond is a compiled spec.PageCond: indices into its probe.
type pageCond struct {
	path             string
	element, visible int
	text             int
	textM            *match
}

func compilePageCond(name string, c *spec.PageCond, p *probe) (*pageCond, error) {
	if c == nil {
		return nil, nil
	}
	out := &pageCond{path: c.URLPath, element: -1, visible: -1, text: -1}
	if c.Element != "" {
		out.element = p.add(read{Sel: c.Element})
	}
	if c.Visible != "" {
		out.visible = p.add(read{Sel: c.Visible, Visible: true})
	}
	if c.Text != nil {
		m, err := compileMatch(name+".text", c.Text.Match)
		if err != nil {
			return nil, err
		}
		out.text, out.textM = p.add(read{Sel: c.Text.Selector, Attr: c.Text.Attr, Text: true}), &m
	}
	return out, nil
}

func (c *pageCond) holds(v *view, d data) bool {
	if c == nil {
		return false
	}
	if c.path != "" && v.Path != c.path {
		return false
	}
	if c.element >= 0 && !v.Reads[c.element].Found {
		return false
	}
	if c.visible >= 0 && !(v.Reads[c.visible].Found && v.Reads[c.visible].Visible) {
		return false
	}
	if c.text >= 0 {
		r := v.Reads[c.text]
		if !c.textM.test(r.Text, r.Found && r.Has, d) {
			return false
		}
	}
	return true
}

// reqMatch is a compiled spec.RequestMatch.
type reqMatch struct {
	method  string
	url     *regexp.Regexp // scheme://host/path, without the query
	pattern string         // the CDP Fetch URL pattern
	json    string
	jsonM   *match
	form    string
	formM   *match
	bodyM   *match
}

func compileReqMatch(name string, r spec.RequestMatch, base *url.URL) (*reqMatch, error) {
	abs := r.URL
	if strings.HasPrefix(abs, "/") {
		abs = origin(base) + abs
	}
	parts := strings.Split(abs, "*")
	for i := range parts {
		parts[i] = regexp.QuoteMeta(parts[i])
	}
	re, err := regexp.Compile("^" + strings.Join(parts, ".*") + "$")
	if err != nil {
		return nil, fmt.Errorf("%s.url: %w", name, err)
	}
	// CDP patterns take * and ? as wildcards and \ as the escape; the
	// trailing * lets the query through (the precise check is url).
	cdp := strings.NewReplacer(`\`, `\\`, `?`, `\?`).Replace(abs) + "*"
	m := &reqMatch{method: r.Method, url: re, pattern: cdp}
	if r.JSON != nil {
		jm, err := compileMatch(name+".json", r.JSON.Match)
		if err != nil {
			return nil, err
		}
		m.json, m.jsonM = r.JSON.Path, &jm
	}
	if r.Form != nil {
		fm, err := compileMatch(name+".form", r.Form.Match)
		if err != nil {
			return nil, err
		}
		m.form, m.formM = r.Form.Name, &fm
	}
	if r.Body != nil {
		bm, err := compileMatch(name+".body", *r.Body)
		if err != nil {
			return nil, err
		}
		m.bodyM = &bm
	}
	return m, nil
}

func (m *reqMatch) holds(method string, u *url.URL, body []byte, d data) bool {
	if u == nil || !strings.EqualFold(method, m.method) {
		return false
	}
	if !m.url.MatchString(origin(u) + u.Path) {
		return false
	}
	if m.jsonM != nil {
		r := gjson.GetBytes(body, m.json)
		if !m.jsonM.test(r.String(), r.Exists(), d) {
			return false
		}
	}
	if m.formM != nil {
		q, err := url.ParseQuery(string(body))
		vs, ok := q[m.form]
		v := ""
		if ok && len(vs) > 0 {
			v = vs[0]
		}
		if !m.formM.test(v, err == nil && ok, d) {
			return false
		}
	}
	if m.bodyM != nil && !m.bodyM.test(string(body), true, d) {
		return false
	}
	return true
}

var failPage = map[string]error{
	"credentials":  platform.ErrCredentials,
	"code_refused": platform.ErrCodeRefused,
	"captcha":      platform.ErrCaptcha,
	"unavailable":  platform.ErrUnavailable,
}

// compileBrowser compiles the spec's browser section (none: a.page stays
// nil and the browser side fails with ErrNoBrowser).
func (a *Adapter) compileBrowser() error {
	b := a.s.Browser
	if b == nil {
		return nil
	}
	ps := &pageSide{ready: -1, key: b.Booking.Key}
	var err error
	if ps.signInURL, err = newTpl("browser.sign_in.url", b.SignIn.URL); err != nil {
		return err
	}
	for i, st := range b.SignIn.Steps {
		name := fmt.Sprintf("browser.sign_in.steps[%d]", i)
		c := pageStep{name: st.Name, otp: st.OneTimeCode, submit: st.Submit, navigates: st.Navigates == nil || *st.Navigates}
		for j, f := range st.Fields {
			t, err := newTpl(fmt.Sprintf("%s.fields[%d].value", name, j), f.Value)
			if err != nil {
				return err
			}
			c.fields = append(c.fields, pageField{sel: f.Selector, v: t})
		}
		if c.reused, err = compilePageCond(name+".code_reused", st.CodeReused, &c.probe); err != nil {
			return err
		}
		for j := range st.Fail {
			w, err := compilePageCond(fmt.Sprintf("%s.fail[%d].when", name, j), &st.Fail[j].When, &c.probe)
			if err != nil {
				return err
			}
			c.fail = append(c.fail, pageFail{when: w, err: failPage[st.Fail[j].Error]})
		}
		if c.success, err = compilePageCond(name+".success", &st.Success, &c.probe); err != nil {
			return err
		}
		ps.steps = append(ps.steps, c)
	}
	ju, err := newTpl("browser.jobs.url", b.Jobs.URL)
	if err != nil {
		return err
	}
	raw, err := render(ju, data{spec.VarBase: a.base.String()})
	if err != nil {
		return err
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("browser.jobs.url: the URL does not parse")
	}
	ps.jobsURL = a.base.ResolveReference(u)
	for i, r := range b.Jobs.Responses {
		m, err := compileReqMatch(fmt.Sprintf("browser.jobs.responses[%d]", i), r, a.base)
		if err != nil {
			return err
		}
		ps.jobs = append(ps.jobs, m)
	}
	ps.items = b.Jobs.Items
	if ps.items == "" {
		ps.items = a.s.Feed.Items
	}
	if ps.srvTime, err = compileField("server_time", b.Jobs.ServerTime); err != nil {
		return err
	}
	if ps.control, err = newTpl("browser.booking.control", b.Booking.Control); err != nil {
		return err
	}
	if ps.book, err = compileReqMatch("browser.booking.request", b.Booking.Request, a.base); err != nil {
		return err
	}
	if b.Booking.Key.Path != "" {
		if ps.keyRe, err = regexp.Compile(b.Booking.Key.Path); err != nil {
			return fmt.Errorf("browser.booking.key.path: %w", err)
		}
	}
	for i := range b.Page.Captcha {
		c, err := compilePageCond(fmt.Sprintf("browser.page.captcha[%d]", i), &b.Page.Captcha[i], &ps.state)
		if err != nil {
			return err
		}
		ps.captcha = append(ps.captcha, c)
	}
	for i := range b.Page.SignedOut {
		c, err := compilePageCond(fmt.Sprintf("browser.page.signed_out[%d]", i), &b.Page.SignedOut[i], &ps.state)
		if err != nil {
			return err
		}
		ps.signedOut = append(ps.signedOut, c)
	}
	if b.Page.Ready != "" {
		ps.ready = ps.state.add(read{Sel: b.Page.Ready})
	}
	for name, pv := range b.Vars {
		ps.varNames = append(ps.varNames, name)
		_ = pv
	}
	slices.Sort(ps.varNames)
	for _, name := range ps.varNames {
		pv := b.Vars[name]
		ps.vars.add(read{Sel: pv.Selector, Attr: pv.Attr, Text: true})
	}
	a.page = ps
	return nil
}

func (b *browserSide) fail() error { return fmt.Errorf("%w (%s)", ErrNoBrowser, b.a.s.Name) }

func (b *browserSide) name() string { return b.a.s.Name }

// pageURL reads the page's address.
func pageURL(p *rod.Page) (*url.URL, error) {
	info, err := p.Info()
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(info.URL)
	if err != nil {
		return nil, err
	}
	return u, nil
}

// loader is the page's current document (its loader id changes with each
// navigation).
func loader(p *rod.Page) proto.NetworkLoaderID {
	res, err := proto.PageGetFrameTree{}.Call(p)
	if err != nil || res.FrameTree == nil || res.FrameTree.Frame == nil {
		return ""
	}
	return res.FrameTree.Frame.LoaderID
}

// Login implements platform.Browser: the sign-in page, then each step's
// form — its fields typed, its control clicked, the page that follows read
// by its rules; a code refused as used is replaced by the next step's code.
// Nothing is typed unless the page is on a platform origin the credentials
// were sealed for. It leaves the page on the jobs view.
func (b *browserSide) Login(ctx context.Context, page *rod.Page, creds platform.Credentials, codes *platform.TOTP) error {
	ps := b.a.page
	if ps == nil {
		return b.fail()
	}
	name := b.name()
	if err := creds.CheckOrigin(b.a.base.String()); err != nil {
		return fmt.Errorf("engine: %s: sign in: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(len(ps.steps)+1)*stepWait+2*platform.Step)
	defer cancel()
	p := page.Context(ctx)
	raw, err := render(ps.signInURL, data{spec.VarBase: b.a.base.String()})
	if err != nil {
		return fmt.Errorf("engine: %s: sign in: %w", name, err)
	}
	su, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("engine: %s: sign in: browser.sign_in.url does not parse", name)
	}
	su = b.a.base.ResolveReference(su)
	if err := b.a.allowed(su); err != nil {
		return fmt.Errorf("engine: %s: sign in: %w", name, err)
	}
	if err := creds.CheckOrigin(su.String()); err != nil {
		return fmt.Errorf("engine: %s: sign in: %w", name, err)
	}
	if err := p.Navigate(su.String()); err != nil {
		return fmt.Errorf("%w: open sign-in page: %v", platform.ErrUnavailable, err)
	}
	if err := p.WaitLoad(); err != nil {
		return fmt.Errorf("%w: sign-in page: %v", platform.ErrUnavailable, err)
	}
	for _, st := range ps.steps {
		code := ""
		if st.otp {
			if code, err = codes.Code(); err != nil {
				return err
			}
		}
		for attempt := 0; ; attempt++ {
			d := data{spec.VarBase: b.a.base.String(), spec.VarUsername: creds.Username, spec.VarPassword: creds.Password.Reveal()}
			if st.otp {
				d[spec.VarCode] = code
			}
			v, err := b.submit(ctx, p, &st, creds, d)
			if err != nil {
				return err
			}
			if st.otp && st.reused.holds(v, d) {
				if attempt >= 2 {
					return fmt.Errorf("engine: %s: %w (after %d waits)", name, platform.ErrCodeReused, attempt)
				}
				if code, err = codes.Next(ctx); err != nil {
					return err
				}
				continue
			}
			if err := stepFailed(name, &st, v, d, creds); err != nil {
				return err
			}
			break
		}
	}
	if v, err := pageURL(p); err != nil || v.Path != ps.jobsURL.Path {
		if err := p.Navigate(ps.jobsURL.String()); err != nil {
			return fmt.Errorf("%w: open jobs page: %v", platform.ErrUnavailable, err)
		}
		if err := p.WaitLoad(); err != nil {
			return fmt.Errorf("%w: jobs page: %v", platform.ErrUnavailable, err)
		}
	}
	return nil
}

// stepFailed maps the page after a step: a fail rule's error, nil on
// success (submit only returns once one of them holds).
func stepFailed(name string, st *pageStep, v *view, d data, creds platform.Credentials) error {
	for _, f := range st.fail {
		if f.when.holds(v, d) {
			if errors.Is(f.err, platform.ErrCredentials) {
				return fmt.Errorf("engine: %s: sign in as %s (step %s): %w", name, creds.Username, st.name, f.err)
			}
			return fmt.Errorf("engine: %s: sign-in step %s: %w", name, st.name, f.err)
		}
	}
	return nil
}

// submit types a step's fields, clicks its control, and waits for the page
// that follows (a new document, loaded, unless the step answers in place)
// to show a state one of the step's rules knows.
func (b *browserSide) submit(ctx context.Context, p *rod.Page, st *pageStep, creds platform.Credentials, d data) (*view, error) {
	name := b.name()
	u, err := pageURL(p)
	if err != nil {
		return nil, fmt.Errorf("%w: read the sign-in page's address: %v", platform.ErrUnavailable, err)
	}
	if err := b.a.allowed(u); err != nil {
		return nil, fmt.Errorf("engine: %s: sign-in step %s: the page: %w", name, st.name, err)
	}
	if err := creds.CheckOrigin(u.String()); err != nil {
		return nil, fmt.Errorf("engine: %s: sign-in step %s: the page: %w", name, st.name, err)
	}
	sctx, cancel := context.WithTimeout(ctx, stepWait)
	defer cancel()
	sp := p.Context(sctx)
	for _, f := range st.fields {
		v, err := render(f.v, d)
		if err != nil {
			return nil, fmt.Errorf("engine: %s: sign-in step %s: %w", name, st.name, err)
		}
		el, err := sp.Element(f.sel)
		if err != nil {
			return nil, fmt.Errorf("%w: sign-in step %s: field %s: %v", platform.ErrUnavailable, st.name, f.sel, shortErr(err))
		}
		if err := el.SelectAllText(); err != nil {
			return nil, fmt.Errorf("%w: sign-in step %s: field %s: %v", platform.ErrUnavailable, st.name, f.sel, shortErr(err))
		}
		if err := el.Input(v); err != nil {
			// rod's error names the element, never the text typed.
			return nil, fmt.Errorf("%w: sign-in step %s: type into %s: %v", platform.ErrUnavailable, st.name, f.sel, shortErr(err))
		}
	}
	btn, err := sp.Element(st.submit)
	if err != nil {
		return nil, fmt.Errorf("%w: sign-in step %s: control %s: %v", platform.ErrUnavailable, st.name, st.submit, shortErr(err))
	}
	before := loader(sp)
	if _, err := btn.Eval(`() => this.click()`); err != nil {
		return nil, fmt.Errorf("%w: sign-in step %s: submit: %v", platform.ErrUnavailable, st.name, shortErr(err))
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-sctx.Done():
			return nil, fmt.Errorf("%w: sign-in step %s: the page that followed matched neither success nor a failure rule within %s",
				platform.ErrUnavailable, st.name, stepWait)
		case <-t.C:
		}
		t.Reset(pollEvery)
		if st.navigates && before != "" && loader(sp) == before {
			continue // still the form's own document
		}
		v, err := st.probe.look(sp)
		if err != nil || (st.navigates && v.Ready != "complete") {
			continue // the next document is still on its way
		}
		if (st.otp && st.reused.holds(v, d)) || st.success.holds(v, d) {
			return v, nil
		}
		for _, f := range st.fail {
			if f.when.holds(v, d) {
				return v, nil
			}
		}
	}
}

// JobsURL implements platform.Browser.
func (b *browserSide) JobsURL() string {
	if b.a.page == nil {
		return ""
	}
	return b.a.page.jobsURL.String()
}

// IsJobsRequest implements platform.Browser: a request any of the spec's
// jobs responses match.
func (b *browserSide) IsJobsRequest(method string, u *url.URL, body []byte) bool {
	if b.a.page == nil {
		return false
	}
	d := data{spec.VarBase: b.a.base.String()}
	for _, m := range b.a.page.jobs {
		if m.holds(method, u, body, d) {
			return true
		}
	}
	return false
}

// ParseJobs implements platform.Browser: the feed's fields, over the
// browser section's items (default the feed's).
func (b *browserSide) ParseJobs(body []byte) ([]wire.Job, error) {
	items := b.a.feed.items
	if b.a.page != nil {
		items = b.a.page.items
	}
	return b.a.parseItems(body, items)
}

// ServerTime implements platform.ServerTimer when the spec says where the
// jobs responses carry the platform's clock.
func (b *browserSide) ServerTime(body []byte) (time.Time, bool) {
	if b.a.page == nil || b.a.page.srvTime == nil {
		return time.Time{}, false
	}
	t, err := b.a.page.srvTime.time(gjson.ParseBytes(body))
	return t, err == nil && !t.IsZero()
}

// IsSignedOutResponse implements platform.Browser: a status the session's
// signed_out rules name on its own.
func (b *browserSide) IsSignedOutResponse(status int) bool {
	for _, c := range b.a.signedOut {
		if len(c.status) > 0 && slices.Contains(c.status, status) && c.urlPath == "" && c.headerM == nil && c.jsonM == nil && c.htmlM == nil && c.bodyM == nil {
			return true
		}
	}
	return false
}

// BookRequestPattern implements platform.Browser ("" without a browser
// section: nothing is intercepted as a booking, so none is let go).
func (b *browserSide) BookRequestPattern() string {
	if b.a.page == nil {
		return ""
	}
	return b.a.page.book.pattern
}

// IsBookRequest implements platform.Browser.
func (b *browserSide) IsBookRequest(method string, u *url.URL, body []byte) bool {
	if b.a.page == nil {
		return false
	}
	return b.a.page.book.holds(method, u, body, data{spec.VarBase: b.a.base.String()})
}

// BookRequestKey implements platform.Browser: where the spec says the
// booking request carries the job's key.
func (b *browserSide) BookRequestKey(u *url.URL, body []byte) string {
	ps := b.a.page
	if ps == nil {
		return ""
	}
	switch {
	case ps.key.JSON != "":
		r := gjson.GetBytes(body, ps.key.JSON)
		if r.Type == gjson.String || r.Type == gjson.Number {
			return r.String()
		}
	case ps.key.Form != "":
		if q, err := url.ParseQuery(string(body)); err == nil {
			return q.Get(ps.key.Form)
		}
	case ps.key.Query != "" && u != nil:
		return u.Query().Get(ps.key.Query)
	case ps.keyRe != nil && u != nil:
		if m := ps.keyRe.FindStringSubmatch(u.Path); len(m) == 2 {
			return m[1]
		}
	}
	return ""
}

// IdempotencyHeader implements platform.Browser.
func (b *browserSide) IdempotencyHeader() string { return b.a.s.Booking.IdempotencyHeader }

// ClickBook implements platform.Browser: the control the spec's selector
// finds for this job's key, clicked on that very element (a row inserted
// above it cannot shift the click onto another job).
func (b *browserSide) ClickBook(ctx context.Context, page *rod.Page, key string) error {
	ps := b.a.page
	if ps == nil {
		return b.fail()
	}
	sel, err := render(ps.control, data{spec.VarBase: b.a.base.String(), spec.VarKey: key})
	if err != nil {
		return fmt.Errorf("engine: %s: booking control: %w", b.name(), err)
	}
	el, err := page.Context(ctx).Element(sel)
	if err != nil {
		return fmt.Errorf("engine: %s: no booking control for %s on the page: %w", b.name(), key, err)
	}
	if _, err := el.Eval(`() => this.click()`); err != nil {
		return fmt.Errorf("engine: %s: click the booking control of %s: %w", b.name(), key, err)
	}
	return nil
}

// ParseBookResponse implements platform.Browser: the booking's result
// rules, as over HTTP.
func (b *browserSide) ParseBookResponse(status int, header http.Header, body []byte) platform.BookResult {
	if header == nil {
		header = http.Header{}
	}
	d := data{spec.VarBase: b.a.base.String()}
	ans := &answer{status: status, header: header, body: body}
	r := b.a.readBook(ans, d)
	if !r.SignedOut && r.Result == wire.ResultUnknown && r.Detail == noRule(status) {
		for _, c := range b.a.signedOut {
			if c.holds(ans, d) {
				r.SignedOut, r.Detail = true, "signed out"
				break
			}
		}
	}
	return r
}

// State implements platform.Browser: a captcha first (it must stop the
// worker), then a signed-out page, then a jobs view without its ready
// marker (an error page the platform served).
func (b *browserSide) State(ctx context.Context, page *rod.Page) (platform.PageState, error) {
	ps := b.a.page
	if ps == nil {
		return platform.PageOK, b.fail()
	}
	v, err := ps.state.look(page.Context(ctx))
	if err != nil {
		return platform.PageOK, fmt.Errorf("engine: %s: page state: %w", b.name(), err)
	}
	d := data{spec.VarBase: b.a.base.String()}
	for _, c := range ps.captcha {
		if c.holds(v, d) {
			return platform.PageCaptcha, nil
		}
	}
	for _, c := range ps.signedOut {
		if c.holds(v, d) {
			return platform.PageSignedOut, nil
		}
	}
	if ps.ready >= 0 && v.Path == ps.jobsURL.Path && !v.Reads[ps.ready].Found {
		return platform.PageBroken, nil
	}
	return platform.PageOK, nil
}

// fetchJS sends one request from the page, with its cookies, and reads the
// answer whole.
const fetchJS = `(m, u, h, b) => fetch(u, {method: m, credentials: "same-origin", headers: h, body: b === "" ? undefined : b})
	.then(r => r.text().then(t => ({status: r.status, url: r.url, headers: Array.from(r.headers.entries()), body: t})))`

// Bookings implements platform.Browser: the spec's bookings request, sent
// by the signed-in page, read by the same rules as over HTTP (the page's
// values, browser.vars, stand for the session's).
func (b *browserSide) Bookings(ctx context.Context, page *rod.Page, cursor string) (platform.Bookings, error) {
	ps := b.a.page
	if ps == nil {
		return platform.Bookings{}, b.fail()
	}
	a := b.a
	name := b.name()
	w, err := a.parseWalk(cursor)
	if err != nil {
		return platform.Bookings{}, err
	}
	p := page.Context(ctx)
	vars := map[string]string{}
	if len(ps.varNames) > 0 {
		v, err := ps.vars.look(p)
		if err != nil {
			return platform.Bookings{}, fmt.Errorf("%w: bookings: read the page's values: %v", platform.ErrUnavailable, shortErr(err))
		}
		for i, n := range ps.varNames {
			if !v.Reads[i].Found || v.Reads[i].Text == "" {
				if st, err := b.State(ctx, page); err == nil && st == platform.PageSignedOut {
					return platform.Bookings{}, fmt.Errorf("engine: %s: bookings: %w", name, platform.ErrSignedOut)
				}
				return platform.Bookings{}, fmt.Errorf("engine: %s: bookings: value %s (browser.vars) is not on the page: the page's shape changed", name, n)
			}
			vars[n] = v.Reads[i].Text
		}
	}
	d := data{spec.VarBase: a.base.String(), spec.VarVars: vars, spec.VarCursor: w.pos, spec.VarPage: w.page}
	r := a.bookings.req
	var u *url.URL
	if w.link != "" {
		u, _ = url.Parse(w.link)
	} else if u, err = r.target(a.base, d); err != nil {
		return platform.Bookings{}, fmt.Errorf("engine: %s: bookings: %w", name, err)
	}
	if err := a.allowed(u); err != nil {
		return platform.Bookings{}, fmt.Errorf("engine: %s: bookings: %w", name, err)
	}
	body, err := r.payload(d)
	if err != nil {
		return platform.Bookings{}, fmt.Errorf("engine: %s: bookings: %w", name, err)
	}
	hdr := map[string]string{"Accept": "application/json"}
	if r.ctype != "" && body != nil {
		hdr["Content-Type"] = r.ctype
	}
	for _, h := range r.headers {
		v, err := render(h.v, d)
		if err != nil {
			return platform.Bookings{}, fmt.Errorf("engine: %s: bookings: %w", name, err)
		}
		hdr[h.k] = v
	}
	res, err := p.Eval(fetchJS, r.method, u.String(), hdr, string(body))
	if err != nil {
		return platform.Bookings{}, fmt.Errorf("%w: bookings: %s", platform.ErrUnavailable, shortErr(err))
	}
	var got struct {
		Status  int        `json:"status"`
		URL     string     `json:"url"`
		Headers [][]string `json:"headers"`
		Body    string     `json:"body"`
	}
	if err := res.Value.Unmarshal(&got); err != nil {
		return platform.Bookings{}, fmt.Errorf("%w: bookings: the page's answer: %v", platform.ErrUnavailable, err)
	}
	ans := &answer{status: got.Status, url: u, header: http.Header{}, body: []byte(got.Body)}
	if fu, err := url.Parse(got.URL); err == nil && got.URL != "" {
		ans.url = fu
	}
	for _, kv := range got.Headers {
		if len(kv) == 2 {
			ans.header.Add(kv[0], kv[1])
		}
	}
	s := &session{a: a}
	if s.isSignedOut(ans, d) {
		return platform.Bookings{}, fmt.Errorf("engine: %s: bookings: %w", name, platform.ErrSignedOut)
	}
	if ans.status < 200 || ans.status > 299 {
		return platform.Bookings{}, fmt.Errorf("%w: bookings: %s %s: HTTP %d", platform.ErrUnavailable, r.method, u.Path, ans.status)
	}
	return s.bookingsPage(ans, w, d)
}
