package propose

import (
	"bytes"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/PuerkitoBio/goquery"
	"github.com/tidwall/gjson"
	"go.yaml.in/yaml/v3"

	"github.com/fleetwright/fleetwright/modules/platform/spec"
)

// ---- the feed ----

func fieldNode(f fieldGuess) ymap {
	m := flowMap()
	if len(f.paths) > 0 {
		m.set("paths", f.paths, "").set("join", ", ", "")
	} else {
		m.set("path", f.path, "")
	}
	if f.unit != "" {
		m.set("unit", f.unit, "")
	}
	if t := f.time; t != nil {
		m.set("time", t.format, "")
		if t.layout != "" {
			m.set("layout", t.layout, "")
		}
		if t.zoneInValue {
			m.set("zone_in_value", true, "")
		}
		if t.zonePath != "" {
			m.set("zone_path", t.zonePath, "")
		}
	}
	if f.field == "key" || f.field == "published_at" {
		m.set("required", true, "")
	}
	return m
}

// topLeaves are a page's scalars outside its item list.
func topLeaves(body []byte, items string) []leaf {
	var out []leaf
	for _, l := range leaves(gjson.ParseBytes(body)) {
		if l.path != items && !strings.HasPrefix(l.path, items+".") {
			out = append(out, l)
		}
	}
	return out
}

func (s *session) feedSpec(f *feedFound) ymap {
	m := newMap()
	first := f.polls[0]
	u := first.url()
	req := newMap()
	paging := flowMap()
	var pagingNote string
	q := u.Query()
	// A query parameter whose value, in each poll, the poll before gave:
	// a cursor at that path.
	cursorParam, cursorPath := "", ""
	for _, p := range sortedKeys(q) {
		for _, l := range topLeaves(first.body(), f.items) {
			if holdsForPolls(f.polls, func(prev, next *Entry) bool {
				return next.url().Query().Get(p) == gjson.GetBytes(prev.body(), l.path).String()
			}) && changes(f.polls, func(e *Entry) string { return e.url().Query().Get(p) }) {
				if cursorPath == "" || strings.Contains(l.name, "next") {
					cursorParam, cursorPath = p, l.path
				}
			}
		}
	}
	// The whole next URL at a path of the answer (JSON:API's links.next).
	linkPath := ""
	if cursorParam == "" {
		for _, l := range topLeaves(first.body(), f.items) {
			if l.v.Type == gjson.String && holdsForPolls(f.polls, func(prev, next *Entry) bool {
				r, err := prev.url().Parse(gjson.GetBytes(prev.body(), l.path).String())
				return err == nil && r.String() == next.url().String()
			}) {
				linkPath = l.path
				break
			}
		}
	}
	switch {
	case cursorParam != "":
		req.set("url", u.EscapedPath(), "")
		query := newMap()
		for _, p := range sortedKeys(q) {
			if p == cursorParam {
				query.set(p, "{{."+spec.VarCursor+"}}", "")
			} else {
				query.set(p, q.Get(p), "guess: sent as recorded")
			}
		}
		req.set("query", query, "")
		paging.set("kind", spec.PageCursor, "").set("start", q.Get(cursorParam), "").set("next", cursorPath, "")
		pagingNote = fmt.Sprintf("guess: each poll sent %s as the poll before answered at %s", cursorParam, cursorPath)
	case linkPath != "":
		req.set("url", "{{."+spec.VarCursor+"}}", "guess: each poll asked the URL the poll before answered at "+linkPath)
		paging.set("kind", spec.PageCursor, "").set("start", requestURI(u), "").set("next", linkPath, "")
		pagingNote = "guess: a stream whose cursor is the next URL"
	default:
		req.set("url", requestURI(u), "")
		paging.set("kind", spec.PageLink, "")
		pagingNote = "guess: no cursor seen between polls: the list is read from its first page on each poll (a Link header's next page, if any)"
	}
	out := s.out
	if h := s.headers(out, first, indexOf(s.es, first)); !h.empty() {
		req.set("headers", h, "")
	}
	m.set("request", req, "")
	m.set("paging", paging, pagingNote)
	m.set("items", f.items, fmt.Sprintf("guess: the list of objects with an id-like and a time-like field, in %d answers", len(f.polls)))
	fields := newMap()
	for _, fg := range f.fields {
		fields.set(fg.field, fieldNode(fg), fg.comment)
	}
	m.set("fields", fields, "")
	s.summary = append(s.summary, fmt.Sprintf("feed: %s, %d answer(s), jobs at %s, %d field(s) mapped", f.path, len(f.polls), f.items, len(f.fields)))
	return m
}

// holdsForPolls reports whether ok holds for every pair of polls in a row.
func holdsForPolls(ps []*Entry, ok func(prev, next *Entry) bool) bool {
	if len(ps) < 2 {
		return false
	}
	for i := 1; i < len(ps); i++ {
		if !ok(ps[i-1], ps[i]) {
			return false
		}
	}
	return true
}

func changes(ps []*Entry, v func(*Entry) string) bool {
	for _, p := range ps[1:] {
		if v(p) != v(ps[0]) {
			return true
		}
	}
	return false
}

// ---- the booking ----

type bookingFound struct {
	entry int
	chain []int
	key   string
}

// findBooking is the first request after the feed showed jobs that is not
// a GET and names a job's key in its URL or body.
func (s *session) findBooking(f *feedFound) *bookingFound {
	for i := f.first + 1; i < len(s.es); i++ {
		e := s.es[i]
		if e.Request.Method == "GET" {
			continue
		}
		body := ""
		if e.Request.PostData != nil {
			body = e.Request.PostData.Text
		}
		for k := range f.keys {
			if k == "" {
				continue
			}
			if pathHas(e.url(), k) || formHas(e, k) || strings.Contains(body, strconv.Quote(k)) {
				return &bookingFound{entry: i, chain: s.chain(i), key: k}
			}
		}
	}
	return nil
}

func pathHas(u *url.URL, k string) bool {
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == k {
			return true
		}
	}
	return u.Query().Get("id") == k
}

func formHas(e *Entry, k string) bool {
	for _, f := range e.form() {
		if f.Value == k {
			return true
		}
	}
	return false
}

func (s *session) bookingSpec(f *feedFound, b *bookingFound, bl *bookingsFound) ymap {
	e := s.es[b.entry]
	out := s.out
	m := newMap()
	req := newMap()
	req.set("method", e.Request.Method, "")
	u := e.url()
	segs := strings.Split(u.EscapedPath(), "/")
	for i, seg := range segs {
		if seg == url.PathEscape(b.key) {
			segs[i] = "{{path ." + spec.VarKey + "}}"
		}
	}
	req.set("url", strings.Join(segs, "/"), "")
	if u.RawQuery != "" {
		query := newMap()
		for _, p := range sortedKeys(u.Query()) {
			v := u.Query().Get(p)
			if v == b.key {
				query.set(p, "{{."+spec.VarKey+"}}", "")
			} else {
				x := s.sent(out, p, v, b.entry)
				query.set(p, x.text, x.comment)
			}
		}
		req.set("query", query, "")
	}
	if h := s.headers(out, e, b.entry); !h.empty() {
		req.set("headers", h, "")
	}
	if j := e.jsonBody(); j != "" {
		req.set("json", s.jsonTemplate(j, b), "guess: the recorded body, the job's key and carried values as variables")
	} else if fs := e.form(); fs != nil {
		form := newMap()
		for _, fl := range fs {
			if fl.Value == b.key {
				form.set(fl.Name, "{{."+spec.VarKey+"}}", "")
				continue
			}
			x := s.sent(out, fl.Name, fl.Value, b.entry)
			form.set(fl.Name, x.text, x.comment)
		}
		if !form.empty() {
			req.set("form", form, "")
		}
	}
	m.set("request", req, "")
	last := s.es[b.chain[len(b.chain)-1]]
	if len(b.chain) > 1 {
		m.set("follow_redirects", true, fmt.Sprintf("guess: the booking was answered %d and the page it led to carries the confirmation", e.Response.Status))
	}
	bid := ""
	if bl != nil {
		bid = bl.bookingID
	}
	rule := flowMap()
	when := flowMap().set("status", []int{last.Response.Status}, "")
	var idEx ymap
	note := "guess: the one answer recorded, a confirmed booking; no taken, expired or captcha answer was recorded: add rules for them (an answer no rule reads is UNKNOWN, which is safe)"
	switch {
	case last.isJSON():
		top := leaves(gjson.ParseBytes(last.body()))
		for _, l := range top {
			if l.depth == 0 && (l.name == "status" || l.name == "result" || l.name == "state") && l.v.Type == gjson.String {
				when.set("json", flowMap().set("path", l.path, "").set("equals", l.v.String(), ""), "")
				break
			}
		}
		for _, l := range top {
			if bid != "" && l.v.String() == bid && strings.Contains(l.name, "id") {
				idEx = flowMap().set("json", l.path, "")
				break
			}
		}
		if idEx.n == nil {
			for _, l := range top {
				if l.name == "id" || strings.HasSuffix(l.name, "booking_id") || strings.Contains(l.name, "confirmation") {
					idEx = flowMap().set("json", l.path, "")
					note += "; the booking id is a guess by name: the bookings listing did not show it"
					break
				}
			}
		}
	case last.isHTML():
		if sel, ok := textSelector(last.body(), bid); ok {
			when.set("html", flowMap().set("selector", sel, ""), "")
			idEx = flowMap().set("html", sel, "")
		}
	}
	if idEx.n == nil {
		idEx = flowMap().set("regexp", `(\d+)`, "")
		note += "; the booking id was not found in the answer: say where it is"
	}
	rule.set("when", when, "")
	rule.set("result", spec.ResultConfirmed, "")
	rule.set("booking_id", idEx, "")
	m.set("results", seq(rule), note)
	s.summary = append(s.summary, fmt.Sprintf("booking: %s %s answered %d", e.Request.Method, u.Path, e.Response.Status))
	return m
}

// jsonTemplate is the recorded JSON body with the key and carried values
// as template calls.
func (s *session) jsonTemplate(j string, b *bookingFound) string {
	out := j
	var walk func(r gjson.Result)
	walk = func(r gjson.Result) {
		r.ForEach(func(k, v gjson.Result) bool {
			switch {
			case v.IsObject() || v.IsArray():
				walk(v)
			case v.Type == gjson.String && v.String() == b.key:
				out = strings.Replace(out, v.Raw, "{{json ."+spec.VarKey+"}}", 1)
			case v.Type == gjson.String:
				x := s.sent(s.out, k.String(), v.String(), b.entry)
				if strings.HasPrefix(x.text, "{{") {
					out = strings.Replace(out, v.Raw, "{{json "+strings.TrimSuffix(strings.TrimPrefix(x.text, "{{"), "}}")+"}}", 1)
				} else if x.text == "REPLACE-ME" {
					out = strings.Replace(out, v.Raw, `"REPLACE-ME"`, 1)
				}
			}
			return true
		})
	}
	walk(gjson.Parse(j))
	return out
}

// textSelector finds the element whose text is v and a selector whose
// first match is it: its class under the nearest ancestor with an id.
func textSelector(body []byte, v string) (string, bool) {
	if v == "" {
		return "", false
	}
	d, err := goquery.NewDocumentFromReader(bytes.NewReader(body))
	if err != nil {
		return "", false
	}
	var found string
	d.Find("body *").EachWithBreak(func(_ int, el *goquery.Selection) bool {
		if el.Children().Length() > 0 || strings.TrimSpace(el.Text()) != v {
			return true
		}
		var own string
		if id, ok := el.Attr("id"); ok && id != "" {
			own = "#" + id
		} else if c, ok := el.Attr("class"); ok && strings.TrimSpace(c) != "" {
			own = "." + strings.Fields(c)[0]
		} else {
			own = goquery.NodeName(el)
		}
		cands := []string{own}
		if anc := el.ParentsFiltered("[id]").First(); anc.Length() > 0 && !strings.HasPrefix(own, "#") {
			id, _ := anc.Attr("id")
			cands = append([]string{"#" + id + " " + own}, cands...)
		}
		for _, c := range cands {
			if strings.TrimSpace(d.Find(c).First().Text()) == v {
				found = c
				return false
			}
		}
		return true
	})
	return found, found != ""
}

func (s *session) missingBooking() ymap {
	m := newMap()
	m.set("request", newMap().set("method", "POST", "").set("url", "/book", "").set("form", newMap().set("id", "{{."+spec.VarKey+"}}", ""), ""), "")
	m.set("results", seq(flowMap().set("when", flowMap().set("status", []int{201}, ""), "").set("result", spec.ResultConfirmed, "").set("booking_id", flowMap().set("json", "id", ""), "")), "")
	return m
}

// ---- the bookings listing ----

type bookingsFound struct {
	entry     int
	items     string
	keyPath   string
	bookingID string
	idPath    string
	item      []leaf
}

// findBookings is the first JSON answer after the booking whose list holds
// an object with the booked key.
func (s *session) findBookings(f *feedFound, b *bookingFound) *bookingsFound {
	if b == nil {
		return nil
	}
	for i := b.entry + 1; i < len(s.es); i++ {
		e := s.es[i]
		if e.Request.Method != "GET" || e.Response.Status != 200 || !e.isJSON() || e.url().Path == f.path {
			continue
		}
		doc := gjson.ParseBytes(e.body())
		for _, a := range arrays(doc) {
			for _, it := range doc.Get(a).Array() {
				ls := leaves(it)
				for _, l := range ls {
					if l.v.String() != b.key || l.v.Type != gjson.String {
						continue
					}
					bl := &bookingsFound{entry: i, items: a, keyPath: l.path, item: ls}
					if id, ok := pick(ls, "id", "booking_id", "confirmation", "confirmation_number", "number"); ok && id.path != l.path {
						bl.idPath, bl.bookingID = id.path, id.v.String()
					} else {
						for _, o := range ls {
							if o.path != l.path && strings.HasSuffix(o.name, "id") {
								bl.idPath, bl.bookingID = o.path, o.v.String()
								break
							}
						}
					}
					return bl
				}
			}
		}
	}
	return nil
}

func (s *session) bookingsSpec(bl *bookingsFound) ymap {
	e := s.es[bl.entry]
	u := e.url()
	q := u.Query()
	body := e.body()
	top := topLeaves(body, bl.items)
	m := newMap()
	req := newMap().set("url", u.EscapedPath(), "")
	if h := s.headers(s.out, e, bl.entry); !h.empty() {
		req.set("headers", h, "")
	}
	query := newMap()
	paging := flowMap()
	var every []any
	pagingNote := ""
	echo := func(v string) (leaf, bool) {
		for _, l := range top {
			if l.v.String() == v && l.v.Type == gjson.Number {
				return l, true
			}
		}
		for _, l := range top {
			if l.v.String() == v {
				return l, true
			}
		}
		return leaf{}, false
	}
	named := func(names ...string) (leaf, bool) { return pick(top, names...) }
	kind := ""
	size := 0
	for _, p := range sortedKeys(q) {
		lp := strings.ToLower(p)
		if strings.Contains(lp, "limit") || strings.Contains(lp, "size") || strings.Contains(lp, "per_page") || lp == "count" {
			size, _ = strconv.Atoi(q.Get(p))
		}
	}
	for _, p := range sortedKeys(q) {
		v, lp := q.Get(p), strings.ToLower(p)
		if kind != "" || strings.Contains(lp, "limit") || strings.Contains(lp, "size") || strings.Contains(lp, "per_page") {
			continue
		}
		ech, hasEcho := echo(v)
		switch {
		case strings.Contains(lp, "offset") || strings.Contains(lp, "skip"):
			kind = spec.PageOffset
			query.set(p, "{{."+spec.VarOffset+"}}", "")
			if v != "0" {
				paging.set("start", v, "")
			}
			if hasEcho {
				every = append(every, flowMap().set("json", flowMap().set("path", ech.path, "").set("equals", "{{."+spec.VarOffset+"}}", ""), "").n)
			}
			pagingNote = "guess: " + p + " is the offset of the page"
		case lp == "page" || strings.Contains(lp, "page[number]") || lp == "p":
			kind = spec.PageNumber
			query.set(p, "{{."+spec.VarPage+"}}", "")
			paging.set("start", v, "")
			if l, ok := named("pages", "total_pages", "page_count", "last_page"); ok {
				paging.set("pages", l.path, "")
			}
			pagingNote = "guess: " + p + " is the page number"
		default:
			next, ok := named("next_"+lp, "next", "next_cursor", "cursor_next", "next_after")
			if ok {
				kind = spec.PageCursor
				query.set(p, "{{."+spec.VarCursor+"}}", "")
				paging.set("start", v, "").set("next", next.path, "")
				pagingNote = "guess: " + p + " is a cursor, the next one at " + next.path
			} else if bl.idPath != "" {
				kind = spec.PageAfter
				query.set(p, "{{."+spec.VarCursor+"}}", "")
				paging.set("start", v, "").set("value", bl.idPath, "")
				pagingNote = "guess: " + p + " is the last booking's " + bl.idPath + " on the page before"
			} else {
				continue
			}
			if hasEcho && ech.path != next.path {
				every = append(every, flowMap().set("json", flowMap().set("path", ech.path, "").set("equals", "{{."+spec.VarCursor+"}}", ""), "").n)
			}
			if more, ok := named("more", "has_more", "has_next", "more_pages"); ok && more.v.IsBool() {
				paging.set("more", more.path, "")
			}
		}
	}
	for _, p := range sortedKeys(q) {
		if _, set := findKey(query, p); !set {
			query.set(p, q.Get(p), "guess: sent as recorded")
		}
	}
	if kind == "" {
		if l, ok := named("links.next", "next_url", "next_page_url", "next"); ok && l.v.Type == gjson.String {
			kind = spec.PageLink
			paging.set("next", l.path, "")
			pagingNote = "guess: the next page's URL at " + l.path
		} else {
			kind = spec.PageLink
			pagingNote = "guess: no paging seen in one page: a Link header's next page, if any"
		}
	}
	if kind == spec.PageOffset && size == 0 {
		if l, ok := named("limit", "per_page", "page_size", "size"); ok {
			size, _ = strconv.Atoi(l.v.String())
		}
		if size == 0 {
			size = 50
		}
	}
	if size > 0 {
		paging.set("size", size, "")
	}
	paging.n.Content = append([]*yaml.Node{scalar("kind"), scalar(kind)}, paging.n.Content...)
	if !query.empty() {
		req.set("query", query, "")
	}
	m.set("request", req, "")
	m.set("paging", paging, pagingNote)
	m.set("order", spec.OldestFirst, "guess: one page with one booking cannot show the order; check it with two bookings")
	if bl.idPath != "" {
		m.set("order_by", bl.idPath, "guess: the booking id, if the platform lists by it")
	}
	m.set("items", bl.items, "guess: the list that held the booked load")
	if l, ok := named("client", "carrier", "customer", "company", "tenant", "organization", "org"); ok && l.v.Type == gjson.String {
		m.set("client", l.path, "guess: by name: the client the platform says answered")
	}
	if l, g, ok := timeLeaf(top, []string{"as_of", "generated_at", "server_time", "now", "timestamp"}); ok {
		m.set("as_of", fieldNode(fieldGuess{path: l.path, time: g}), "guess: by name; "+describe(g))
	}
	fields := newMap()
	fields.set("key", flowMap().set("path", bl.keyPath, ""), "the field that held the booked load's key")
	if bl.idPath != "" {
		fields.set("booking_id", flowMap().set("path", bl.idPath, ""), "guess: by name")
	}
	if l, g, ok := timeLeaf(bl.item, []string{"booked_at", "bookedat", "created_at", "createdat", "booked", "created", "confirmed_at"}); ok {
		fields.set("booked_at", fieldNode(fieldGuess{path: l.path, time: g}), "guess: by name; "+describe(g))
	}
	if l, ok := pick(bl.item, "account", "booked_by", "user", "username", "dispatcher", "agent"); ok && l.v.Type == gjson.String {
		fields.set("account", flowMap().set("path", l.path, ""), "guess: by name")
	}
	m.set("fields", fields, "")
	if l, ok := named("signed_in", "authenticated", "logged_in"); ok && l.v.IsBool() && l.v.Bool() {
		every = append(every, flowMap().set("json", flowMap().set("path", l.path, "").set("equals", "true", ""), "").n)
	}
	if len(every) > 0 {
		m.set("every_page", seq(every...), "guess: what each recorded page said about itself (the position it answers, signed in)")
	}
	comp := newMap()
	if l, ok := named("total", "total_count", "totalcount", "count_total", "meta.total"); ok && isNumber(l.v) {
		comp.set("total", l.path, "guess: by name: the bookings the walk sees must add up to it")
	}
	if l, ok := named("complete", "is_complete", "done", "finished"); ok && l.v.IsBool() && l.v.Bool() {
		comp.set("when", flowMap().set("json", flowMap().set("path", l.path, "").set("equals", "true", ""), ""), "guess: by name: the last page says it is complete")
	}
	if comp.empty() {
		m.set("complete", comp, "guess: NO PROOF FOUND: a look-up that proves nothing never settles a claim; find what the platform offers (a total, a last-page flag) and say it here")
	} else {
		m.set("complete", comp, "")
	}
	s.summary = append(s.summary, fmt.Sprintf("bookings: %s paged by %s, the booked load at %s", u.Path, kind, bl.keyPath))
	return m
}

func findKey(m ymap, k string) (int, bool) {
	for i := 0; i+1 < len(m.n.Content); i += 2 {
		if m.n.Content[i].Value == k {
			return i, true
		}
	}
	return 0, false
}

func (s *session) missingBookings(f *feedFound) ymap {
	m := newMap()
	m.set("request", newMap().set("url", "/bookings", ""), "")
	m.set("paging", flowMap().set("kind", spec.PageLink, ""), "")
	m.set("items", "bookings", "")
	m.set("fields", newMap().set("key", flowMap().set("path", "load_id", ""), "").set("booking_id", flowMap().set("path", "id", ""), ""), "")
	m.set("complete", newMap().set("total", "total", ""), "")
	return m
}
