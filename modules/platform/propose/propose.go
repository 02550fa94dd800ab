// Package propose drafts a platform spec (modules/platform/spec) from a
// recorded session: a HAR file of a person signing in to a load board,
// watching the board, booking one load and opening their bookings. It
// finds the sign-in steps and the values carried between them (a CSRF
// token from a hidden field, a meta tag, a header or a cookie; a bearer
// token), the answer that carries the job list, the booking request and
// its answer, and the bookings listing with its paging, and writes a
// draft in which every guess carries a YAML comment ("# guess: …"). No
// value the session sent or received as a secret — the password, the
// one-time code, cookies, tokens — is written: they become the spec's
// template variables ({{.password}}, {{.code}}, {{.vars.NAME}}).
// docs/ADAPTERS.md, "Drafting a spec from a recorded session", says what
// a person still has to edit.
package propose

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/tidwall/gjson"
	"go.yaml.in/yaml/v3"

	"github.com/fleetwright/fleetwright/modules/platform/spec"
)

// ErrNoJobs is the error of a session in which no answer carried a job
// list: no JSON answer, asked at least twice, with an array of objects
// that have an id-like and a time-like field.
var ErrNoJobs = errors.New("propose: no job list in the session")

// Options are a draft's inputs.
type Options struct {
	// Name is the platform's name; empty: from the pages' titles, else
	// the host.
	Name string
	// File names the HAR in the draft's header comment.
	File string
}

// Draft is a proposed spec.
type Draft struct {
	// YAML is the spec, with a comment on every guess.
	YAML []byte
	// Spec is YAML parsed and validated (nil when it does not validate:
	// Err says why).
	Spec *spec.Spec
	Err  error
	// Secrets are the values of the session the draft replaced by
	// variables (password, code, cookies, tokens): register them with the
	// log redaction; never print them.
	Secrets []string
	// Guesses counts the "# guess:" comments.
	Guesses int
	// Summary says in a line per part what was found where.
	Summary []string
}

// session is a HAR's entries on the platform's origin, analysed.
type session struct {
	es      []*Entry
	origin  string
	secrets map[string]bool
	summary []string
	// varNames: the names given so far, and the value each holds.
	varNames map[string]string
	out      *sessionOut
}

func (s *session) secret(v string) {
	if v != "" {
		s.secrets[v] = true
	}
}

// Propose drafts a spec from a recorded session.
func Propose(h *HAR, o Options) (*Draft, error) {
	all := make([]*Entry, 0, len(h.Log.Entries))
	for i := range h.Log.Entries {
		e := &h.Log.Entries[i]
		u := e.url()
		if (u.Scheme == "http" || u.Scheme == "https") && e.Response.Status > 0 {
			all = append(all, e)
		}
	}
	feed, err := findFeed(all)
	if err != nil {
		return nil, err
	}
	s := &session{origin: origin(feed.polls[0].url()), secrets: map[string]bool{}, varNames: map[string]string{}}
	for _, e := range all {
		if origin(e.url()) == s.origin {
			s.es = append(s.es, e)
		}
	}
	feed.first = indexOf(s.es, feed.polls[0])
	for _, e := range s.es {
		for _, c := range e.setCookies() {
			s.secret(c.Value)
		}
		for _, c := range e.Request.Cookies {
			s.secret(c.Value)
		}
		if c := header(e.Request.Headers, "Cookie"); c != "" {
			for _, part := range strings.Split(c, ";") {
				if _, v, ok := strings.Cut(strings.TrimSpace(part), "="); ok {
					s.secret(v)
				}
			}
		}
	}

	doc := newMap()
	doc.set("version", spec.Version, "")
	name, nameNote := s.name(o.Name)
	doc.set("name", name, nameNote)
	si, sess, err := s.signIn(feed)
	if err != nil {
		return nil, err
	}
	s.out = sess
	lim := newMap()
	lim.set("poll_interval", feed.interval(), "guess: the page asked the feed about this often (1s at least)")
	lim.set("requests_per_hour", 0, "guess: the session shows no stated limit; 0 means none is stated")
	doc.set("limits", lim, "")

	bk := s.findBooking(feed)
	bl := s.findBookings(feed, bk)

	feedNode := s.feedSpec(feed)
	var bookNode, bookingsNode ymap
	if bk != nil {
		bookNode = s.bookingSpec(feed, bk, bl)
	}
	if bl != nil {
		bookingsNode = s.bookingsSpec(bl)
	}
	// The session's check and its extracts: the values the reads and the
	// booking send that a signed-in page gave.
	s.session(sess, si)

	doc.set("sign_in", si.node, "")
	doc.set("session", sess.node, "")
	doc.set("feed", feedNode, "")
	if bk != nil {
		doc.set("booking", bookNode, "")
	} else {
		doc.set("booking", s.missingBooking(), "guess: no booking request was recorded (a POST naming a job's key); write it by hand")
	}
	if bl != nil {
		doc.set("bookings", bookingsNode, "")
	} else {
		doc.set("bookings", s.missingBookings(feed), "guess: no bookings listing was recorded (a JSON list holding the booked key); write it by hand")
	}
	idem := newMap()
	idem.set("honoured", false, "guess: nothing in the session stated that booking requests are idempotent; say so (honoured, or read:) only where the platform does")
	doc.set("idempotency", idem, "")

	out := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{doc.n}}
	file := o.File
	if file == "" {
		file = "a recorded session"
	}
	doc.n.HeadComment = fmt.Sprintf("A draft made by `fleetwright platform propose` from %s (docs/ADAPTERS.md,\n\"Drafting a spec from a recorded session\"). Every line marked\n\"guess:\" is a guess from one session: read each, make the edits the doc\nlists, then run `fleetwright platform validate` and `platform check`.\nThe browser section is not drafted: this spec runs over HTTP only.", file)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(out); err != nil {
		return nil, fmt.Errorf("propose: write the draft: %w", err)
	}
	_ = enc.Close()
	d := &Draft{YAML: buf.Bytes(), Summary: s.summary}
	d.Guesses = strings.Count(buf.String(), "# guess:")
	for v := range s.secrets {
		d.Secrets = append(d.Secrets, v)
	}
	sort.Strings(d.Secrets)
	d.Spec, d.Err = spec.Parse("draft.yaml", d.YAML)
	if d.Err != nil {
		d.Spec = nil
	}
	return d, nil
}

func origin(u *url.URL) string { return u.Scheme + "://" + u.Host }

func indexOf(es []*Entry, e *Entry) int {
	for i, x := range es {
		if x == e {
			return i
		}
	}
	return -1
}

// requestURI is the path and query as the request sent them.
func requestURI(u *url.URL) string {
	r := u.EscapedPath()
	if u.RawQuery != "" {
		r += "?" + u.RawQuery
	}
	return r
}

// ---- the job list ----

// feedFound is the answer that carries the job list, over its polls.
type feedFound struct {
	path   string   // the request's URL path
	items  string   // gjson path of the array
	polls  []*Entry // every answer, in order
	fields []fieldGuess
	keys   map[string]bool
	first  int // index of the first poll in the session's entries
}

func findFeed(es []*Entry) (*feedFound, error) {
	type cand struct {
		f       *feedFound
		objects [][]leaf
	}
	cands := map[string]*cand{}
	var order []string
	for _, e := range es {
		if e.Request.Method != "GET" || e.Response.Status != 200 || !e.isJSON() {
			continue
		}
		doc := gjson.ParseBytes(e.body())
		for _, a := range arrays(doc) {
			id := origin(e.url()) + e.url().Path + " " + a
			c := cands[id]
			if c == nil {
				c = &cand{f: &feedFound{path: e.url().Path, items: a, keys: map[string]bool{}}}
				cands[id] = c
				order = append(order, id)
			}
			c.f.polls = append(c.f.polls, e)
			for _, it := range doc.Get(a).Array() {
				c.objects = append(c.objects, leaves(it))
			}
		}
	}
	var best *cand
	for _, id := range order {
		c := cands[id]
		if len(c.f.polls) < 2 || len(c.objects) == 0 {
			continue
		}
		fields, ok := jobFields(c.objects)
		if !ok {
			continue
		}
		c.f.fields = fields
		for _, it := range c.objects {
			c.f.keys[valueAt(it, fields[0].path)] = true
		}
		if best == nil || len(c.f.polls) > len(best.f.polls) {
			best = c
		}
	}
	if best == nil {
		return nil, fmt.Errorf("%w: no JSON answer, asked at least twice, carries a list of objects with an id-like and a time-like field; record the session again and stay on the board until it has shown a few loads (the page must ask for them more than once)", ErrNoJobs)
	}
	return best.f, nil
}

// interval is the feed's poll interval: the median gap between polls, 1s
// at least, rounded to 100 ms.
func (f *feedFound) interval() string {
	var gaps []time.Duration
	var last time.Time
	for _, e := range f.polls {
		t, err := time.Parse(time.RFC3339Nano, e.StartedDateTime)
		if err != nil {
			continue
		}
		if !last.IsZero() {
			gaps = append(gaps, t.Sub(last))
		}
		last = t
	}
	d := time.Second
	if len(gaps) > 0 {
		sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
		if m := gaps[len(gaps)/2].Round(100 * time.Millisecond); m > d {
			d = m
		}
	}
	return d.String()
}

// ---- names and values ----

var titleSep = regexp.MustCompile(`\s+[·|–—-]\s+`)

func (s *session) name(given string) (string, string) {
	if given != "" {
		return given, ""
	}
	for _, e := range s.es {
		if !e.isHTML() {
			continue
		}
		d, err := goquery.NewDocumentFromReader(bytes.NewReader(e.body()))
		if err != nil {
			continue
		}
		t := strings.TrimSpace(d.Find("title").First().Text())
		if t == "" {
			continue
		}
		parts := titleSep.Split(t, -1)
		if n := slug(parts[len(parts)-1]); n != "" {
			return n, "guess: from the pages' title; the name workers' platform setting uses"
		}
	}
	u, _ := url.Parse(s.origin)
	return slug(u.Hostname()), "guess: from the host; the name workers' platform setting uses"
}

func slug(t string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(t) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
			dash = false
		case b.Len() > 0 && !dash:
			b.WriteByte('-')
			dash = true
		}
	}
	out := strings.Trim(b.String(), "-")
	if len(out) > 63 {
		out = strings.Trim(out[:63], "-")
	}
	return out
}

var (
	passwordRe = regexp.MustCompile(`(?i)pass(word)?|passwd|pwd`)
	userRe     = regexp.MustCompile(`(?i)user|login|email|account`)
	codeRe     = regexp.MustCompile(`(?i)code|otp|totp|mfa|2fa|pin|token`)
	digitsRe   = regexp.MustCompile(`^\d{4,8}$`)
	csrfRe     = regexp.MustCompile(`(?i)csrf|xsrf|authenticity|_token$|^token$`)
	varNameRe  = regexp.MustCompile(`[^a-z0-9_]+`)
)

// randomish tells a value that looks like a token (long, letters and
// digits, no spaces) from a constant such as "Log in".
func randomish(v string) bool {
	if len(v) < 16 || strings.ContainsAny(v, " \t") {
		return false
	}
	letters, digits := false, false
	for _, r := range v {
		switch {
		case r >= '0' && r <= '9':
			digits = true
		case r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z':
			letters = true
		}
	}
	return letters && digits
}

// source is where a value a request sends came from: an earlier answer.
type source struct {
	entry int
	ex    ymap
	desc  string
}

// findSource looks for v in the answers before entry i, newest first:
// a cookie it set, a header, a JSON value, a hidden input or a meta tag.
func (s *session) findSource(v string, i int, field string) (*source, bool) {
	if len(v) < 8 {
		return nil, false
	}
	for j := i - 1; j >= 0; j-- {
		e := s.es[j]
		for _, c := range e.setCookies() {
			if c.Value == v {
				return &source{j, flowMap().set("cookie", c.Name, ""), "the cookie " + c.Name}, true
			}
		}
		for _, h := range e.Response.Headers {
			if h.Value == v && !strings.EqualFold(h.Name, "Set-Cookie") {
				return &source{j, flowMap().set("header", h.Name, ""), "the header " + h.Name}, true
			}
		}
		if e.isJSON() {
			for _, l := range leaves(gjson.ParseBytes(e.body())) {
				if l.v.Type == gjson.String && l.v.String() == v {
					return &source{j, flowMap().set("json", l.path, ""), "the JSON value " + l.path}, true
				}
			}
		}
		if e.isHTML() {
			if sel, attr, ok := htmlSource(e.body(), v, field); ok {
				return &source{j, flowMap().set("html", sel, "").set("attr", attr, ""), "the page's " + sel}, true
			}
		}
	}
	return nil, false
}

// htmlSource finds v in a page's inputs named field (a form sends its own
// hidden field), then its meta tags and other inputs, and a selector whose
// first match holds it.
func htmlSource(body []byte, v, field string) (string, string, bool) {
	d, err := goquery.NewDocumentFromReader(bytes.NewReader(body))
	if err != nil {
		return "", "", false
	}
	if sel, ok := inputSource(d, v, field); ok {
		return sel, "value", true
	}
	var sel, attr string
	d.Find("meta[content]").EachWithBreak(func(_ int, m *goquery.Selection) bool {
		if c, _ := m.Attr("content"); c == v {
			if n, ok := m.Attr("name"); ok {
				sel, attr = fmt.Sprintf(`meta[name="%s"]`, n), "content"
				return false
			}
		}
		return true
	})
	if sel != "" && first(d, sel, attr) == v {
		return sel, attr, true
	}
	sel, ok := inputSource(d, v, "")
	return sel, "value", ok
}

// inputSource finds an input (named name, or any) whose value is v.
func inputSource(d *goquery.Document, v, name string) (string, bool) {
	sel := ""
	d.Find("input[value]").EachWithBreak(func(_ int, in *goquery.Selection) bool {
		if c, _ := in.Attr("value"); c != v {
			return true
		}
		n, ok := in.Attr("name")
		if !ok || (name != "" && n != name) {
			return true
		}
		cands := []string{fmt.Sprintf(`input[name="%s"]`, n)}
		if f := in.Closest("form"); f.Length() > 0 {
			if id, ok := f.Attr("id"); ok {
				cands = append([]string{fmt.Sprintf(`form#%s input[name="%s"]`, id, n)}, cands...)
			}
		}
		for _, c := range cands {
			if first(d, c, "value") == v {
				sel = c
				return false
			}
		}
		return true
	})
	return sel, sel != ""
}

func first(d *goquery.Document, sel, attr string) string {
	v, _ := d.Find(sel).First().Attr(attr)
	return v
}

// varName names a carried value after the field or header that sends it.
func (s *session) varName(field, v string) string {
	for n, have := range s.varNames {
		if have == v {
			return n
		}
	}
	base := strings.Trim(varNameRe.ReplaceAllString(strings.ToLower(field), "_"), "_")
	if csrfRe.MatchString(field) {
		base = "csrf"
	}
	if base == "" || !(base[0] >= 'a' && base[0] <= 'z') {
		base = "value"
	}
	n := base
	for i := 2; ; i++ {
		if _, taken := s.varNames[n]; !taken {
			break
		}
		n = base + "_" + strconv.Itoa(i)
	}
	s.varNames[n] = v
	return n
}

// ---- sign-in ----

type step struct {
	name    string
	entry   int   // the request
	chain   []int // its redirects, the request first
	node    ymap
	extract ymap
	code    bool
}

type signIn struct {
	node  ymap
	steps []*step
	// page is the sign-in form's path (where a signed-out page leads).
	page string
}

type sessionOut struct {
	node ymap
	// vars the reads and the booking use: name → source.
	vars  map[string]*source
	order []string
	// bearer: the session is carried in an Authorization header.
	bearer *source
	// landing is the last sign-in step's final page.
	landing int
}

// chain is the request at i and the redirects it was answered with.
func (s *session) chain(i int) []int {
	out := []int{i}
	for cur := i; s.es[cur].isRedirect(); {
		loc := s.es[cur].location()
		next := -1
		for j := cur + 1; j < len(s.es) && j < cur+50; j++ {
			if s.es[j].Request.Method == "GET" && s.es[j].Request.URL == loc {
				next = j
				break
			}
		}
		if next < 0 {
			break
		}
		out = append(out, next)
		cur = next
	}
	return out
}

func (s *session) fields(e *Entry) []NV {
	if f := e.form(); f != nil {
		return f
	}
	if j := e.jsonBody(); j != "" {
		var out []NV
		gjson.Parse(j).ForEach(func(k, v gjson.Result) bool {
			out = append(out, NV{k.String(), v.String()})
			return true
		})
		return out
	}
	return nil
}

func (s *session) signIn(feed *feedFound) (*signIn, *sessionOut, error) {
	si := &signIn{node: newMap()}
	pw, code := -1, -1
	for i := 0; i < feed.first; i++ {
		e := s.es[i]
		if e.Request.Method == "GET" {
			continue
		}
		for _, f := range s.fields(e) {
			if pw < 0 && passwordRe.MatchString(f.Name) && f.Value != "" {
				pw = i
			}
			if pw >= 0 && code < 0 && digitsRe.MatchString(f.Value) && (codeRe.MatchString(f.Name) || len(s.fields(e)) <= 2) {
				code = i
			}
		}
	}
	if pw < 0 {
		return nil, nil, fmt.Errorf("propose: no sign-in in the session: no request before the first feed answer sends a password field; start recording before you sign in (DevTools open, Network → Preserve log)")
	}
	// The password and the code: two steps, or one that sends both.
	idx := []int{pw}
	if code > pw {
		idx = append(idx, code)
	}
	taken := map[int]*step{}
	for _, i := range idx {
		st := &step{entry: i, chain: s.chain(i), code: i == code, name: "password"}
		if st.code && i != pw {
			st.name = "code"
		}
		for _, c := range st.chain {
			taken[c] = st
		}
		si.steps = append(si.steps, st)
	}
	si.page = s.es[pw].url().Path
	var bearer *source
	for i := feed.first; i < len(s.es) && bearer == nil; i++ {
		if a := header(s.es[i].Request.Headers, "Authorization"); strings.HasPrefix(a, "Bearer ") {
			tok := strings.TrimPrefix(a, "Bearer ")
			s.secret(tok)
			if src, ok := s.findSource(tok, i, "Authorization"); ok && taken[src.entry] != nil {
				bearer = src
				st := taken[src.entry]
				st.extract = newMap()
				st.extract.set("token", src.ex, "guess: the bearer token the later requests carry, found in "+src.desc)
			}
		}
	}
	// The form page before the password: where a signed-out page leads.
	for j := pw - 1; j >= 0; j-- {
		if s.es[j].Request.Method == "GET" && s.es[j].isHTML() {
			si.page = s.es[j].url().Path
			break
		}
	}
	var pages []*step
	for _, st := range si.steps {
		e := s.es[st.entry]
		req := newMap()
		req.set("method", e.Request.Method, "")
		req.set("url", e.url().EscapedPath(), "")
		form := newMap()
		for _, f := range s.fields(e) {
			switch {
			case st.code && digitsRe.MatchString(f.Value) && (codeRe.MatchString(f.Name) || !passwordRe.MatchString(f.Name)):
				s.secret(f.Value)
				form.set(f.Name, "{{."+spec.VarCode+"}}", "")
			case passwordRe.MatchString(f.Name) && st.entry == pw:
				s.secret(f.Value)
				form.set(f.Name, "{{."+spec.VarPassword+"}}", "")
			case userRe.MatchString(f.Name) && st.entry == pw:
				form.set(f.Name, "{{."+spec.VarUsername+"}}", "guess: the username field")
			default:
				v := s.carried(f.Name, f.Value, st.entry, taken, &pages)
				form.set(f.Name, v.text, v.comment)
			}
		}
		key := "form"
		if e.jsonBody() != "" {
			key = "json"
			// A JSON sign-in: the same fields as one JSON object template.
			var b strings.Builder
			b.WriteString("{")
			for k := 0; k+1 < len(form.n.Content); k += 2 {
				if k > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, "%q:{{json %s}}", form.n.Content[k].Value, strings.TrimSuffix(strings.TrimPrefix(form.n.Content[k+1].Value, "{{"), "}}"))
			}
			b.WriteString("}")
			req.set("json", b.String(), "")
		} else if !form.empty() {
			req.set(key, form, "")
		}
		st.node = newMap()
		st.node.set("name", st.name, "")
		if st.code {
			st.node.set("one_time_code", true, "")
		}
		st.node.set("request", req, "")
		last := s.es[st.chain[len(st.chain)-1]]
		succ := flowMap().set("status", []int{last.Response.Status}, "").set("url_path", last.url().Path, "")
		note := "guess: where the recorded step ended; no failing answer was recorded: add fail rules (a wrong password)"
		if st.code {
			note = "guess: where the recorded step ended; no failing answer was recorded: add fail rules (a wrong code) and code_reused (a code used twice)"
		}
		st.node.set("success", succ, note)
	}
	all := append(pages, si.steps...)
	sort.Slice(all, func(i, j int) bool { return all[i].entry < all[j].entry })
	steps := seq()
	for _, st := range all {
		if st.extract.n != nil && !st.extract.empty() {
			st.node.set("extract", st.extract, "")
		}
		steps.Content = append(steps.Content, st.node.n)
	}
	si.steps = all
	si.node.set("steps", steps, "")
	s.summary = append(s.summary, fmt.Sprintf("sign-in: %d step(s) ending on %s", len(all), s.es[all[len(all)-1].chain[len(all[len(all)-1].chain)-1]].url().Path))
	last := all[len(all)-1]
	// Where the signed-in session landed: the last step's final page, or
	// (a JSON sign-in) the first signed-in GET after it.
	landing := last.chain[len(last.chain)-1]
	for j := landing; j < len(s.es) && s.es[landing].Request.Method != "GET"; j++ {
		if e := s.es[j]; e.Request.Method == "GET" && e.Response.Status/100 == 2 {
			landing = j
		}
	}
	return si, &sessionOut{node: newMap(), vars: map[string]*source{}, landing: landing, bearer: bearer}, nil
}

// value is a template for one value a request sends, with its comment.
type value struct{ text, comment string }

// carried makes a sign-in field's value: a value an earlier answer gave
// becomes {{.vars.NAME}}, extracted by the step whose answer it was (or a
// step of its own that asks for that page); a token-like value with no
// source a placeholder; anything else is sent as recorded.
func (s *session) carried(field, v string, at int, taken map[int]*step, pages *[]*step) value {
	src, ok := s.findSource(v, at, field)
	if !ok {
		return s.literal(field, v)
	}
	s.secret(v)
	n := s.varName(field, v)
	st := taken[src.entry]
	if st == nil {
		e := s.es[src.entry]
		st = &step{name: "page", entry: src.entry, chain: []int{src.entry}, node: newMap()}
		if len(*pages) > 0 {
			st.name = "page-" + strconv.Itoa(len(*pages)+1)
		}
		st.node.set("name", st.name, "")
		st.node.set("request", flowMap().set("url", requestURI(e.url()), ""), "guess: the page that carries the form's token")
		st.node.set("success", flowMap().set("status", []int{e.Response.Status}, "").set("url_path", e.url().Path, ""), "guess: as recorded")
		taken[src.entry] = st
		*pages = append(*pages, st)
	}
	if st.extract.n == nil {
		st.extract = newMap()
	}
	st.extract.set(n, src.ex, "guess: the value the next step sends as "+field+", found in "+src.desc)
	return value{"{{.vars." + n + "}}", ""}
}

func (s *session) literal(field, v string) value {
	if randomish(v) {
		s.secret(v)
		return value{"REPLACE-ME", "guess: a token-like value (" + field + ") whose source no earlier answer showed; extract it where the platform gives it"}
	}
	return value{v, "guess: sent as recorded"}
}

// ---- the session ----

// session fills the session part: how it is carried, the check that keeps
// it warm (and reads the values the reads and the booking send), and how
// a signed-out answer looks.
func (s *session) session(out *sessionOut, si *signIn) {
	n := out.node
	if out.bearer != nil {
		n.set("carry", "header", "guess: the requests after sign-in carried Authorization: Bearer, from "+out.bearer.desc)
		n.set("header", flowMap().set("name", "Authorization", "").set("value", "Bearer {{.vars.token}}", ""), "")
	} else {
		n.set("carry", "cookies", "guess: the session rode on cookies")
	}
	check := newMap()
	at := out.landing
	ex := newMap()
	for _, name := range out.order {
		src := out.vars[name]
		at = src.entry
	}
	for _, name := range out.order {
		src := out.vars[name]
		if src.entry == at {
			ex.set(name, src.ex, "guess: found in "+src.desc+", which the booking sends")
		}
	}
	e := s.es[at]
	if e.Request.Method != "GET" {
		at = out.landing
		e = s.es[at]
	}
	req := newMap().set("url", requestURI(e.url()), "")
	if a := header(e.Request.Headers, "Accept"); e.isHTML() && a != "" {
		req.set("headers", flowMap().set("Accept", "text/html,application/xhtml+xml", ""), "")
	}
	check.set("request", req, "guess: a signed-in page the session asked for")
	check.set("success", flowMap().set("status", []int{e.Response.Status}, "").set("url_path", e.url().Path, ""), "guess: as recorded")
	if !ex.empty() {
		check.set("extract", ex, "")
	}
	n.set("check", check, "")
	so := seq(flowMap().set("status", []int{401}, "").n, flowMap().set("url_path", si.page, "").n)
	n.set("signed_out", so, "guess: no signed-out answer was recorded: a 401, or a page that leads to the sign-in form; add the platform's own (an error inside a 200)")
	s.summary = append(s.summary, fmt.Sprintf("session: cookies, checked with %s", e.url().Path))
}

// sent makes a value a read or the booking sends after sign-in: a value
// an earlier answer gave becomes {{.vars.NAME}}, read by the session's
// check; a bearer token sets the session's header.
func (s *session) sent(out *sessionOut, field, v string, at int) value {
	src, ok := s.findSource(v, at, field)
	if !ok {
		return s.literal(field, v)
	}
	s.secret(v)
	n := s.varName(field, v)
	if _, have := out.vars[n]; !have {
		out.vars[n] = src
		out.order = append(out.order, n)
	}
	return value{"{{.vars." + n + "}}", ""}
}

// skipHeaders are the headers a browser sets on its own (the engine sets
// its traits' own) or that carry the session.
var skipHeaders = map[string]bool{"accept-encoding": true, "accept-language": true, "user-agent": true, "cookie": true,
	"connection": true, "host": true, "origin": true, "referer": true, "content-length": true, "content-type": true,
	"upgrade-insecure-requests": true, "cache-control": true, "pragma": true, "priority": true, "dnt": true, "authorization": true}

// headers are the request's own headers worth keeping: an Accept that asks
// for JSON, and custom headers (a CSRF header becomes a variable).
func (s *session) headers(out *sessionOut, e *Entry, at int) ymap {
	h := flowMap()
	names := map[string]bool{}
	hs := slices.Clone(e.Request.Headers)
	sort.SliceStable(hs, func(i, j int) bool { return strings.ToLower(hs[i].Name) < strings.ToLower(hs[j].Name) })
	for _, x := range hs {
		ln := strings.ToLower(x.Name)
		if skipHeaders[ln] || strings.HasPrefix(ln, "sec-") || strings.HasPrefix(ln, ":") || names[ln] {
			continue
		}
		names[ln] = true
		switch {
		case ln == "accept":
			if strings.Contains(x.Value, "json") {
				h.set("Accept", x.Value, "")
			}
		default:
			v := s.sent(out, x.Name, x.Value, at)
			h.set(canonical(x.Name), v.text, v.comment)
		}
	}
	return h
}

func canonical(h string) string {
	parts := strings.Split(strings.ToLower(h), "-")
	for i, p := range parts {
		if p == "csrf" || p == "xsrf" {
			parts[i] = strings.ToUpper(p)
		} else if p != "" {
			parts[i] = strings.ToUpper(p[:1]) + p[1:]
		}
	}
	return strings.Join(parts, "-")
}
