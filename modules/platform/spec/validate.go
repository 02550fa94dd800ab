package spec

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/andybalholm/cascadia"
	"github.com/tidwall/gjson"
)

type validator struct {
	loc  *locator
	errs []FieldError
	// bookingKey: the booking request sends {{.booking_key}} itself (a
	// form field, a JSON member) rather than in idempotency_header.
	bookingKey bool
}

func (v *validator) add(path, format string, args ...any) {
	v.errs = append(v.errs, FieldError{Path: path, Line: v.loc.find(path), Msg: fmt.Sprintf(format, args...)})
}

var (
	nameRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	varRe    = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
	tokenRe  = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	methods  = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}
	results  = []string{ResultConfirmed, ResultTaken, ResultExpired, ResultNotFound, ResultCaptcha, ResultSignedOut, ResultUnknown}
	failErrs = []string{"credentials", "code_refused", "captcha", "unavailable"}
)

func (v *validator) spec(s *Spec) {
	if s.Name == "" {
		v.add("name", "missing; a platform needs a name (lower case letters, digits, '.', '_', '-')")
	} else if !nameRe.MatchString(s.Name) {
		v.add("name", "%q: use 1–63 lower case letters, digits, '.', '_' or '-', starting with a letter or digit", s.Name)
	}
	for i, o := range s.Origins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			v.add(fmt.Sprintf("origins[%d]", i), "%q is not an origin; write scheme://host[:port], e.g. https://auth.example.com", o)
		}
	}
	if s.Limits.PollInterval.D < 0 {
		v.add("limits.poll_interval", "must not be negative")
	}
	if s.Limits.PollInterval.D == 0 {
		s.Limits.PollInterval.D = time.Second
	}
	if s.Limits.RequestsPerHour < 0 {
		v.add("limits.requests_per_hour", "must not be negative (0: the platform states none)")
	}

	base := scope{vars: []string{VarBase}}
	named := v.signIn(s, base)
	sess := base.with(VarVars)
	sess.named = named
	v.session(s, sess)
	sess.named = vars(s)

	v.feed(s, sess)
	v.booking(s, sess)
	v.bookings(s, sess)
	v.idempotency(s, base)
	v.browser(s)
}

// vars are every name the sign-in steps, the check and the refresh extract.
func vars(s *Spec) []string {
	var out []string
	add := func(m map[string]Extractor) {
		for k := range m {
			if !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
	}
	for _, st := range s.SignIn.Steps {
		add(st.Extract)
	}
	if s.Session.Check != nil {
		add(s.Session.Check.Extract)
	}
	if s.Session.Refresh != nil {
		add(s.Session.Refresh.Extract)
	}
	slices.Sort(out)
	return out
}

func (v *validator) signIn(s *Spec, base scope) []string {
	if len(s.SignIn.Steps) == 0 {
		v.add("sign_in.steps", "missing; list the sign-in requests (at least one)")
		return nil
	}
	var named []string
	seen := map[string]bool{}
	otp := 0
	for i := range s.SignIn.Steps {
		st := &s.SignIn.Steps[i]
		p := fmt.Sprintf("sign_in.steps[%d]", i)
		if st.Name == "" {
			v.add(p+".name", "missing; name the step (it names the step in errors)")
		} else if seen[st.Name] {
			v.add(p+".name", "%q names an earlier step too", st.Name)
		}
		seen[st.Name] = true
		sc := base.with(VarUsername, VarPassword, VarVars)
		sc.named = named
		if st.OneTimeCode {
			otp++
			sc = sc.with(VarCode)
			if otp > 1 {
				v.add(p+".one_time_code", "only one step submits the one-time code")
			}
		}
		used := v.request(p+".request", &st.Request, sc)
		if st.OneTimeCode && !slices.Contains(used, VarCode) {
			v.add(p+".request", "a one_time_code step must send {{.code}}")
		}
		if st.CodeReused != nil {
			if !st.OneTimeCode {
				v.add(p+".code_reused", "only a one_time_code step has a \"code already used\" answer")
			}
			v.cond(p+".code_reused", st.CodeReused, sc)
		}
		for j := range st.Fail {
			fp := fmt.Sprintf("%s.fail[%d]", p, j)
			v.cond(fp+".when", &st.Fail[j].When, sc)
			if !slices.Contains(failErrs, st.Fail[j].Error) {
				v.add(fp+".error", "%q: say credentials, code_refused, captcha or unavailable", st.Fail[j].Error)
			}
		}
		if st.Success.empty() {
			v.add(p+".success", "missing; say what answer means the step worked (status, url_path, header, json, html or body)")
		} else {
			v.cond(p+".success", &st.Success, sc)
		}
		v.extracts(p+".extract", st.Extract)
		for k := range st.Extract {
			named = append(named, k)
		}
		slices.Sort(named)
	}
	return named
}

func (v *validator) session(s *Spec, sc scope) {
	ss := &s.Session
	switch ss.Carry {
	case "":
		ss.Carry = "cookies"
	case "cookies":
	case "header":
		if ss.Header == nil {
			v.add("session.header", "missing; carry: header needs the header's name and value template")
		}
	default:
		v.add("session.carry", "%q: say cookies or header", ss.Carry)
	}
	if ss.Header != nil {
		if ss.Carry != "header" {
			v.add("session.header", "only with carry: header")
		}
		if !tokenRe.MatchString(ss.Header.Name) {
			v.add("session.header.name", "%q is not a header name", ss.Header.Name)
		}
		v.template("session.header.value", ss.Header.Value, sc, true)
	}
	if ss.Check != nil {
		v.request("session.check.request", &ss.Check.Request, sc)
		if ss.Check.Success != nil {
			v.cond("session.check.success", ss.Check.Success, sc)
		}
		v.extracts("session.check.extract", ss.Check.Extract)
	}
	if r := ss.Refresh; r != nil {
		if r.Every.D <= 0 {
			v.add("session.refresh.every", "missing; say how often the session is refreshed (e.g. 10m)")
		}
		rs := sc
		rs.named = vars(s)
		v.request("session.refresh.request", &r.Request, rs)
		if r.Success != nil {
			v.cond("session.refresh.success", r.Success, rs)
		}
		v.extracts("session.refresh.extract", r.Extract)
	}
	if len(ss.SignedOut) == 0 {
		v.add("session.signed_out", "missing; say what a signed-out answer looks like (e.g. - status: [401])")
	}
	for i := range ss.SignedOut {
		v.cond(fmt.Sprintf("session.signed_out[%d]", i), &ss.SignedOut[i], sc)
	}
}

func (v *validator) feed(s *Spec, sc scope) {
	f := &s.Feed
	sc = sc.with(VarCursor, VarPage, VarOffset)
	used := v.request("feed.request", &f.Request, sc)
	v.paging("feed.paging", &f.Paging, used, true)
	v.jsonPath("feed.items", f.Items, true)
	fs := &f.Fields
	v.field("feed.fields.key", fs.Key, kindText, true)
	v.field("feed.fields.published_at", fs.PublishedAt, kindTime, true)
	v.field("feed.fields.expires_at", fs.ExpiresAt, kindTime, false)
	v.field("feed.fields.origin", fs.Origin, kindText, false)
	v.field("feed.fields.destination", fs.Destination, kindText, false)
	v.field("feed.fields.equipment", fs.Equipment, kindText, false)
	v.field("feed.fields.weight", fs.Weight, kindWeight, false)
	v.field("feed.fields.distance", fs.Distance, kindDistance, false)
	v.field("feed.fields.rate", fs.Rate, kindRate, false)
	v.field("feed.fields.pickup_start", fs.PickupStart, kindTime, false)
	v.field("feed.fields.pickup_end", fs.PickupEnd, kindTime, false)
	if fs.Rate != nil && perDistance(fs.Rate.Unit) && fs.Distance == nil {
		v.add("feed.fields.rate.unit", "%s needs feed.fields.distance to compute the rate", fs.Rate.Unit)
	}
}

func (v *validator) booking(s *Spec, sc scope) {
	b := &s.Booking
	sc = sc.with(VarKey, VarBookingKey)
	used := v.request("booking.request", &b.Request, sc)
	if !slices.Contains(used, VarKey) {
		v.add("booking.request", "the booking request must send the job's key ({{.key}})")
	}
	v.bookingKey = slices.Contains(used, VarBookingKey)
	if b.IdempotencyHeader != "" && !tokenRe.MatchString(b.IdempotencyHeader) {
		v.add("booking.idempotency_header", "%q is not a header name", b.IdempotencyHeader)
	}
	if len(b.Results) == 0 {
		v.add("booking.results", "missing; list the rules that read a booking's answer (an answer no rule matches is UNKNOWN)")
	}
	confirmed := false
	for i := range b.Results {
		r := &b.Results[i]
		p := fmt.Sprintf("booking.results[%d]", i)
		if !slices.Contains(results, r.Result) {
			v.add(p+".result", "%q: say one of %s", r.Result, strings.Join(results, ", "))
		}
		if r.When.empty() {
			v.add(p+".when", "missing; a rule needs a condition (status, header, json, html or body)")
		} else {
			v.cond(p+".when", &r.When, sc)
		}
		switch {
		case r.Result == ResultConfirmed && r.BookingID == nil:
			confirmed = true
			v.add(p+".booking_id", "missing; say where the booking id is (e.g. {json: booking.id})")
		case r.Result == ResultConfirmed:
			confirmed = true
			v.extractor(p+".booking_id", *r.BookingID)
		case r.BookingID != nil:
			v.add(p+".booking_id", "only a confirmed rule reads a booking id")
		}
	}
	if len(b.Results) > 0 && !confirmed {
		v.add("booking.results", "no rule says confirmed: no booking could ever be confirmed")
	}
}

func (v *validator) bookings(s *Spec, sc scope) {
	b := &s.Bookings
	sc = sc.with(VarCursor, VarPage, VarOffset)
	used := v.request("bookings.request", &b.Request, sc)
	v.paging("bookings.paging", &b.Paging, used, false)
	switch b.Order {
	case "":
		b.Order = OldestFirst
	case OldestFirst, NewestFirst:
	default:
		v.add("bookings.order", "%q: say oldest_first or newest_first", b.Order)
	}
	if b.Paging.Kind == PageOffset && b.Order == NewestFirst {
		v.add("bookings.order", "an offset walk newest first shifts under a booking made during it: page oldest first, or by cursor")
	}
	v.jsonPath("bookings.order_by", b.OrderBy, false)
	v.jsonPath("bookings.items", b.Items, true)
	v.jsonPath("bookings.client", b.Client, false)
	v.field("bookings.as_of", b.AsOf, kindTime, false)
	fs := &b.Fields
	v.field("bookings.fields.key", fs.Key, kindText, true)
	v.field("bookings.fields.booking_id", fs.BookingID, kindText, true)
	v.field("bookings.fields.booked_at", fs.BookedAt, kindTime, false)
	v.field("bookings.fields.account", fs.Account, kindText, false)
	for i := range b.EveryPage {
		v.cond(fmt.Sprintf("bookings.every_page[%d]", i), &b.EveryPage[i], sc)
	}
	v.jsonPath("bookings.complete.total", b.Complete.Total, false)
	if b.Complete.When != nil {
		v.cond("bookings.complete.when", b.Complete.When, sc)
	}
}

func (v *validator) idempotency(s *Spec, sc scope) {
	id := &s.Idempotency
	switch {
	case id.Honoured == nil && id.Read == nil:
		v.add("idempotency", "missing; state honoured: true/false, or read: the platform's own statement")
	case id.Honoured != nil && id.Read != nil:
		v.add("idempotency", "say honoured or read, not both")
	case id.Read != nil:
		v.request("idempotency.read.request", &id.Read.Request, sc)
		v.jsonPath("idempotency.read.path", id.Read.Path, true)
		if id.Read.Cache.D < 0 {
			v.add("idempotency.read.cache", "must not be negative")
		}
		if id.Read.Cache.D == 0 {
			id.Read.Cache.D = 30 * time.Second
		}
	}
	if id.Honoured != nil && *id.Honoured && s.Booking.IdempotencyHeader == "" && !v.bookingKey {
		v.add("idempotency.honoured", "the platform honours keys, but neither booking.idempotency_header nor the booking request ({{.booking_key}}) sends one")
	}
}

func (v *validator) paging(p string, pg *Paging, used []string, feed bool) {
	uses := func(name string) {
		if !slices.Contains(used, name) {
			v.add(strings.TrimSuffix(p, ".paging")+".request", "paging kind %s needs the request to send {{.%s}}", pg.Kind, name)
		}
	}
	switch pg.Kind {
	case "":
		v.add(p+".kind", "missing; say cursor, after, page, link or offset")
	case PageCursor:
		uses(VarCursor)
		v.jsonPath(p+".next", pg.Next, true)
	case PageAfter:
		uses(VarCursor)
		v.jsonPath(p+".value", pg.Value, true)
	case PageNumber:
		uses(VarPage)
		v.jsonPath(p+".pages", pg.Pages, false)
	case PageLink:
		v.jsonPath(p+".next", pg.Next, false)
	case PageOffset:
		uses(VarOffset)
		if pg.Size <= 0 {
			v.add(p+".size", "missing; offset paging needs the page size the request asks for (a shorter page is the last)")
		}
		if pg.Start == "" {
			pg.Start = "0"
		}
		var n int
		if _, err := fmt.Sscanf(pg.Start, "%d", &n); err != nil || n < 0 {
			v.add(p+".start", "%q: an offset starts at a whole number (default 0)", pg.Start)
		}
	default:
		v.add(p+".kind", "%q: say cursor, after, page, link or offset", pg.Kind)
	}
	if pg.Kind != PageCursor && pg.Kind != PageLink && pg.Next != "" {
		v.add(p+".next", "only paging kinds cursor and link read a next value")
	}
	if pg.Kind != PageAfter && pg.Value != "" {
		v.add(p+".value", "only paging kind after reads an item's value")
	}
	if pg.Kind != PageNumber && pg.Pages != "" {
		v.add(p+".pages", "only paging kind page reads a page count")
	}
	v.jsonPath(p+".more", pg.More, false)
	if pg.Size < 0 {
		v.add(p+".size", "must not be negative")
	}
	if pg.Kind == PageNumber && pg.Start == "" {
		pg.Start = "1"
	}
	if pg.Kind == PageNumber {
		var n int
		if _, err := fmt.Sscanf(pg.Start, "%d", &n); err != nil || n < 0 {
			v.add(p+".start", "%q: a page number starts at a whole number (default 1)", pg.Start)
		}
	}
	switch {
	case pg.MaxPages < 0 || pg.MaxPages > 100:
		v.add(p+".max_pages", "%d: between 1 and 100 (default 1)", pg.MaxPages)
	case pg.MaxPages > 0 && !feed:
		v.add(p+".max_pages", "only the feed reads several pages a call; a look-up is walked page by page")
	case pg.MaxPages == 0 && feed:
		pg.MaxPages = 1
	}
}

func (v *validator) request(p string, r *Request, sc scope) []string {
	var used []string
	use := func(path, text string, required bool) {
		used = append(used, v.template(path, text, sc, required)...)
	}
	if r.Method == "" {
		r.Method = http.MethodGet
	}
	if !slices.Contains(methods, r.Method) {
		v.add(p+".method", "%q: say GET, POST, PUT, PATCH or DELETE", r.Method)
	}
	use(p+".url", r.URL, true)
	if r.URL != "" && !strings.HasPrefix(r.URL, "/") && !strings.HasPrefix(r.URL, "http://") && !strings.HasPrefix(r.URL, "https://") &&
		!strings.HasPrefix(r.URL, "{{") {
		v.add(p+".url", "%q: write a path from the base URL (/api/…) or an absolute http(s) URL", r.URL)
	}
	for _, k := range sorted(r.Query) {
		use(p+".query."+k, r.Query[k], false)
	}
	for _, k := range sorted(r.Headers) {
		if !tokenRe.MatchString(k) {
			v.add(p+".headers."+k, "%q is not a header name", k)
		}
		use(p+".headers."+k, r.Headers[k], false)
	}
	bodies := 0
	if len(r.Form) > 0 {
		bodies++
	}
	for _, k := range sorted(r.Form) {
		use(p+".form."+k, r.Form[k], false)
	}
	if r.JSON != "" {
		bodies++
		use(p+".json", r.JSON, false)
	}
	if r.Body != "" {
		bodies++
		use(p+".body", r.Body, false)
		if r.ContentType == "" {
			v.add(p+".content_type", "missing; a raw body needs its content type")
		}
	}
	if bodies > 1 {
		v.add(p, "give one body: form, json or body")
	}
	if bodies > 0 && r.Method == http.MethodGet {
		v.add(p+".method", "a GET request sends no body; say POST (or another method)")
	}
	return used
}

func sorted(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (v *validator) template(p, text string, sc scope, required bool) []string {
	if text == "" {
		if required {
			v.add(p, "missing")
		}
		return nil
	}
	used, err := refs(text, sc)
	if err != nil {
		v.add(p, "%v", err)
	}
	return used
}

func (c *Cond) empty() bool {
	return len(c.Status) == 0 && c.URLPath == "" && c.Header == nil && c.JSON == nil && c.HTML == nil && c.Body == nil
}

func (v *validator) cond(p string, c *Cond, sc scope) {
	if c.empty() {
		v.add(p, "an empty condition matches every answer; give status, url_path, header, json, html or body")
		return
	}
	for i, st := range c.Status {
		if st < 100 || st > 599 {
			v.add(fmt.Sprintf("%s.status[%d]", p, i), "%d is not an HTTP status", st)
		}
	}
	if c.URLPath != "" && !strings.HasPrefix(c.URLPath, "/") {
		v.add(p+".url_path", "%q: a path starts with /", c.URLPath)
	}
	if c.Header != nil {
		if !tokenRe.MatchString(c.Header.Name) {
			v.add(p+".header.name", "%q is not a header name", c.Header.Name)
		}
		v.match(p+".header", &c.Header.Match, sc)
	}
	if c.JSON != nil {
		v.jsonPath(p+".json.path", c.JSON.Path, true)
		v.match(p+".json", &c.JSON.Match, sc)
	}
	if c.HTML != nil {
		v.css(p+".html.selector", c.HTML.Selector)
		v.match(p+".html", &c.HTML.Match, sc)
	}
	if c.Body != nil {
		v.match(p+".body", c.Body, sc)
	}
}

func (v *validator) match(p string, m *Match, sc scope) {
	n := 0
	if m.Equals != nil {
		n++
		v.template(p+".equals", *m.Equals, sc, false)
	}
	if m.Contains != "" {
		n++
		v.template(p+".contains", m.Contains, sc, false)
	}
	if m.Matches != "" {
		n++
		if _, err := regexp.Compile(m.Matches); err != nil {
			v.add(p+".matches", "%q is not a valid regular expression: %v", m.Matches, err)
		}
	}
	if m.Exists != nil {
		n++
	}
	switch {
	case n == 0 && strings.HasSuffix(p, ".body"):
		v.add(p, "say equals, contains, matches or exists")
	case n == 0:
		m.Exists = new(bool)
		*m.Exists = true
	case n > 1:
		v.add(p, "say one of equals, contains, matches or exists")
	}
}

func (v *validator) extracts(p string, m map[string]Extractor) {
	for _, name := range sortedX(m) {
		ep := p + "." + name
		if !varRe.MatchString(name) {
			v.add(ep, "%q: name a value with lower case letters, digits and _", name)
		}
		v.extractor(ep, m[name])
	}
}

func (v *validator) extractor(ep string, e Extractor) {
	n := 0
	if e.JSON != "" {
		n++
		v.jsonPath(ep+".json", e.JSON, true)
	}
	if e.HTML != "" {
		n++
		v.css(ep+".html", e.HTML)
	}
	if e.Attr != "" && e.HTML == "" {
		v.add(ep+".attr", "only with html")
	}
	if e.Header != "" {
		n++
		if !tokenRe.MatchString(e.Header) {
			v.add(ep+".header", "%q is not a header name", e.Header)
		}
	}
	if e.Cookie != "" {
		n++
	}
	if e.Regexp != "" {
		if re, err := regexp.Compile(e.Regexp); err != nil {
			v.add(ep+".regexp", "%q is not a valid regular expression: %v", e.Regexp, err)
		} else if re.NumSubexp() > 1 {
			v.add(ep+".regexp", "%q has %d groups; give one (the value) or none (the whole match)", e.Regexp, re.NumSubexp())
		}
	}
	switch {
	case n > 1:
		v.add(ep, "say where the value is: one of json, html, header or cookie (a regexp may follow it)")
	case n == 0 && e.Regexp == "":
		v.add(ep, "say where the value is: json, html, header, cookie or regexp")
	}
}

func sortedX(m map[string]Extractor) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (v *validator) css(p, sel string) {
	if sel == "" {
		v.add(p, "missing; give a CSS selector")
		return
	}
	if _, err := cascadia.ParseGroup(sel); err != nil {
		v.add(p, "%q is not a valid CSS selector: %v", sel, err)
	}
}

func (v *validator) jsonPath(p, path string, required bool) {
	if path == "" {
		if required {
			v.add(p, "missing; give a JSON path (gjson syntax, e.g. data.items)")
		}
		return
	}
	if err := CheckPath(path); err != nil {
		v.add(p, "%q can never match: %v", path, err)
	}
}

// CheckPath reports a gjson path that is syntactically broken (so it could
// never match anything): empty components, unbalanced brackets or quotes,
// an unknown @modifier.
func CheckPath(p string) error {
	if strings.TrimSpace(p) != p {
		return fmt.Errorf("leading or trailing space")
	}
	var stack []byte
	quote, esc := false, false
	comp := 0 // length of the current top-level component
	for i := 0; i < len(p); i++ {
		c := p[i]
		if esc {
			esc = false
			comp++
			continue
		}
		if c == '\\' {
			esc = true
			continue
		}
		if quote {
			if c == '"' {
				quote = false
			}
			continue
		}
		switch c {
		case '"':
			if len(stack) == 0 {
				return fmt.Errorf("a quote belongs inside a query #(…)")
			}
			quote = true
		case '(', '[', '{':
			stack = append(stack, c)
		case ')', ']', '}':
			open := map[byte]byte{')': '(', ']': '[', '}': '{'}[c]
			if len(stack) == 0 || stack[len(stack)-1] != open {
				return fmt.Errorf("%q at %d closes nothing", string(c), i+1)
			}
			stack = stack[:len(stack)-1]
		case '.', '|':
			if len(stack) == 0 {
				if comp == 0 {
					return fmt.Errorf("an empty component at %d (two separators, or one at the start)", i+1)
				}
				comp = 0
				continue
			}
		case '@':
			if len(stack) == 0 && comp == 0 {
				j := i + 1
				for j < len(p) && p[j] != '.' && p[j] != '|' && p[j] != ':' {
					j++
				}
				if name := p[i+1 : j]; !gjson.ModifierExists(name, nil) {
					return fmt.Errorf("@%s is not a gjson modifier", name)
				}
			}
		}
		comp++
	}
	switch {
	case esc:
		return fmt.Errorf("ends with a backslash")
	case quote:
		return fmt.Errorf("a quote is not closed")
	case len(stack) > 0:
		return fmt.Errorf("%q is not closed", string(stack[len(stack)-1]))
	case comp == 0:
		return fmt.Errorf("ends with a separator")
	}
	return nil
}

type fieldKind int

const (
	kindText fieldKind = iota
	kindTime
	kindWeight
	kindDistance
	kindRate
)

// Units by field kind.
var (
	WeightUnits   = []string{"lb", "kg", "t"}
	DistanceUnits = []string{"mi", "km"}
	RateUnits     = []string{"usd", "cents", "usd_per_mile", "cents_per_mile", "usd_per_km", "cents_per_km"}
	TimeFormats   = []string{TimeRFC3339, TimeEpochS, TimeEpochMS, TimeLayout}
)

func perDistance(unit string) bool { return strings.Contains(unit, "_per_") }

func (v *validator) field(p string, f *Field, kind fieldKind, required bool) {
	if f == nil {
		if required {
			v.add(p, "missing; say where the value is (path: …)")
		}
		return
	}
	switch {
	case f.Path != "" && len(f.Paths) > 0:
		v.add(p, "give path or paths, not both")
	case f.Path == "" && len(f.Paths) == 0:
		v.add(p+".path", "missing; give the value's JSON path within the item")
	}
	if f.Path != "" {
		v.jsonPath(p+".path", f.Path, true)
	}
	for i, pp := range f.Paths {
		v.jsonPath(fmt.Sprintf("%s.paths[%d]", p, i), pp, true)
	}
	if f.Join != "" && len(f.Paths) == 0 {
		v.add(p+".join", "only with paths")
	}
	if len(f.Paths) > 0 && kind != kindText {
		v.add(p+".paths", "only a text field joins several values")
	}
	units := map[fieldKind][]string{kindWeight: WeightUnits, kindDistance: DistanceUnits, kindRate: RateUnits}[kind]
	switch {
	case units != nil && f.Unit == "":
		v.add(p+".unit", "missing; say one of %s", strings.Join(units, ", "))
	case units != nil && !slices.Contains(units, f.Unit):
		v.add(p+".unit", "%q: say one of %s", f.Unit, strings.Join(units, ", "))
	case units == nil && f.Unit != "":
		v.add(p+".unit", "only a weight, distance or rate has a unit")
	}
	if kind != kindTime {
		if f.Time != "" || f.Layout != "" || f.Zone != "" || f.ZonePath != "" || f.ZoneInValue {
			v.add(p, "only a time has time, layout, zone, zone_path or zone_in_value")
		}
		return
	}
	if f.Time == "" {
		f.Time = TimeRFC3339
	}
	if !slices.Contains(TimeFormats, f.Time) {
		v.add(p+".time", "%q: say one of %s", f.Time, strings.Join(TimeFormats, ", "))
	}
	if f.Time == TimeLayout && f.Layout == "" {
		v.add(p+".layout", "missing; time: layout needs a Go layout, e.g. 2006-01-02 15:04")
	}
	if f.Time != TimeLayout && (f.Layout != "" || f.Zone != "" || f.ZonePath != "" || f.ZoneInValue) {
		v.add(p+".time", "layout, zone, zone_path and zone_in_value need time: layout")
	}
	if n := btoi(f.Zone != "") + btoi(f.ZonePath != "") + btoi(f.ZoneInValue); n > 1 {
		v.add(p+".zone", "give one of zone, zone_path or zone_in_value")
	}
	if f.Zone != "" {
		if _, err := time.LoadLocation(f.Zone); err != nil {
			v.add(p+".zone", "%q is not a time zone name (e.g. America/Chicago)", f.Zone)
		}
	}
	if f.ZonePath != "" {
		v.jsonPath(p+".zone_path", f.ZonePath, true)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
