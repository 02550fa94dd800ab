package engine

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/platform/spec"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// A check is a dry run of a spec against a platform, for the person who
// writes the spec (`fleetwright platform check`, the console's platform
// page): it signs in with a test account, reads the feed once, walks the
// bookings look-up to its end, and reports per field what each rule
// extracted. It books nothing unless CheckOptions.Book names one load. A
// wrong path or a changed answer shape is a field reported empty, never a
// panic; no secret (password, code, token) is in the report.

// CheckOptions are a check's inputs.
type CheckOptions struct {
	// Credentials are the test account's (Origins: the base URL's origin
	// when empty).
	Credentials platform.Credentials
	// Session are the session's options (traits, timeout, dial).
	Session platform.SessionOptions
	// Book, when set, is the key of the one load the check books.
	Book string
	// Items is how many feed items and bookings are traced field by
	// field (default 3).
	Items int
	// MaxPages bounds the bookings walk (default 100).
	MaxPages int
}

// CheckReport is what a check found, stage by stage.
type CheckReport struct {
	Platform string
	BaseURL  string
	SignIn   Stage
	Feed     FeedTrace
	Bookings BookingsTrace
	// Book is nil when no booking was asked for.
	Book *BookTrace
}

// OK reports whether every stage that ran passed.
func (r CheckReport) OK() bool {
	ok := r.SignIn.OK && r.Feed.OK && r.Bookings.OK
	if r.Book != nil {
		ok = ok && r.Book.OK
	}
	return ok
}

// Stage is one stage's outcome: Error says why it failed ("" when it
// passed or did not run; Skipped then says why not).
type Stage struct {
	OK      bool
	Error   string
	Skipped string
}

// FieldTrace is one field of one item: the rule that read it and what it
// gave.
type FieldTrace struct {
	// Field is the spec's field name (key, published_at, booking_id…).
	Field string
	// Rule is where the spec reads it (a JSON path, with its unit or time
	// format).
	Rule string
	// Value is what the rule extracted (as text); Empty when nothing.
	Value string
	Empty bool
	// Error says why the value cannot be used (required and empty, a time
	// that does not parse, a weight that is not a number).
	Error string
}

// ItemTrace is one item's fields; Error is the item's mapping error (the
// one a poll or a look-up would fail with).
type ItemTrace struct {
	Index  int
	Fields []FieldTrace
	Error  string
}

// FeedTrace is the feed's first page.
type FeedTrace struct {
	Stage
	// Items is the rule (path) of the item list; Count how many items the
	// page held.
	Items string
	Count int
	// Paging is how the next page would be found, and what it gave.
	Paging *FieldTrace
	Traced []ItemTrace
}

// BookingsTrace is the bookings walk.
type BookingsTrace struct {
	Stage
	Pages    int
	Count    int
	Complete bool
	Client   string
	Traced   []ItemTrace
}

// BookTrace is the one booking a check made.
type BookTrace struct {
	Stage
	Key string
	// Status is the answer's HTTP status (0: none came back).
	Status int
	// Rule names the result rule that matched (booking.results[i]), or
	// says none did.
	Rule      string
	Result    string
	BookingID string
	Detail    string
}

// Check runs a check of the adapter's spec against its base URL.
func (a *Adapter) Check(ctx context.Context, o CheckOptions) CheckReport {
	if o.Items <= 0 {
		o.Items = 3
	}
	if o.MaxPages <= 0 {
		o.MaxPages = 100
	}
	if len(o.Credentials.Origins) == 0 {
		o.Credentials.Origins = []string{origin(a.base)}
	}
	r := CheckReport{Platform: a.s.Name, BaseURL: a.base.String()}
	ps, err := a.NewSession(o.Session)
	if err != nil {
		r.SignIn.Error = err.Error()
		return r
	}
	s := ps.(*session)
	codes := &platform.TOTP{Secret: o.Credentials.TOTPSecret, Clock: o.Session.Clock}
	if err := s.Login(ctx, o.Credentials, codes); err != nil {
		r.SignIn.Error = shortErr(err)
		skip := "not run: the sign-in failed"
		r.Feed.Skipped, r.Bookings.Skipped = skip, skip
		if o.Book != "" {
			r.Book = &BookTrace{Key: o.Book, Stage: Stage{Skipped: skip}}
		}
		return r
	}
	r.SignIn.OK = true
	r.Feed = s.checkFeed(ctx, o.Items)
	r.Bookings = s.checkBookings(ctx, o.Items, o.MaxPages)
	if o.Book != "" {
		b := s.checkBook(ctx, o.Book)
		r.Book = &b
	}
	return r
}

// checkFeed reads the feed's first page once and traces its items.
func (s *session) checkFeed(ctx context.Context, n int) FeedTrace {
	f := s.a.feed
	t := FeedTrace{Items: f.items}
	d := s.data()
	d[spec.VarCursor] = f.paging.Start
	page := 1
	if f.paging.Kind == spec.PageNumber {
		if p, err := strconv.Atoi(f.paging.Start); err == nil {
			page = p
		}
	}
	d[spec.VarPage] = page
	ans, err := s.get(ctx, "feed", f.req, d, nil)
	if err != nil {
		t.Error = shortErr(err)
		return t
	}
	items := gjson.GetBytes(ans.body, f.items)
	if !items.IsArray() {
		t.Error = fmt.Sprintf("field items (path %s) is not a list: the answer's shape changed", f.items)
		return t
	}
	list := items.Array()
	t.Count = len(list)
	t.OK = true
	// The first n items are traced, and the first that fails to map (the
	// one a poll would fail with), wherever it is.
	for i, it := range list {
		_, jerr := s.a.job(it)
		if jerr == nil && i >= n {
			continue
		}
		tr := ItemTrace{Index: i, Fields: s.a.jobFieldTraces(it)}
		if jerr != nil {
			tr.Error = jerr.Error()
			t.OK = false
			t.Error = fmt.Sprintf("item %d: %v", i, jerr)
			t.Traced = append(t.Traced, tr)
			break
		}
		t.Traced = append(t.Traced, tr)
	}
	pg := f.paging
	switch pg.Kind {
	case spec.PageCursor:
		t.Paging = rawTrace("paging.next", "path "+pg.Next, gjson.GetBytes(ans.body, pg.Next))
	case spec.PageAfter:
		if len(list) > 0 {
			t.Paging = rawTrace("paging.value", "path "+pg.Value+" of the last item", list[len(list)-1].Get(pg.Value))
		}
	case spec.PageNumber:
		if pg.Pages != "" {
			t.Paging = rawTrace("paging.pages", "path "+pg.Pages, gjson.GetBytes(ans.body, pg.Pages))
		}
	case spec.PageLink:
		if pg.Next != "" {
			t.Paging = rawTrace("paging.next", "path "+pg.Next, gjson.GetBytes(ans.body, pg.Next))
		} else {
			v := linkNext(ans.header)
			t.Paging = &FieldTrace{Field: "paging.next", Rule: `the Link header's rel="next"`, Value: v, Empty: v == ""}
		}
	}
	if t.Paging != nil && t.Paging.Empty && pg.Kind == spec.PageCursor {
		t.Paging.Error = "came back empty: the answer's shape changed"
		t.OK = false
		if t.Error == "" {
			t.Error = fmt.Sprintf("field paging.next (path %s) came back empty: the answer's shape changed", pg.Next)
		}
	}
	return t
}

func rawTrace(name, rule string, r gjson.Result) *FieldTrace {
	v := r.String()
	return &FieldTrace{Field: name, Rule: rule, Value: v, Empty: !r.Exists() || v == ""}
}

// jobFieldTraces traces every field the spec maps for one feed item.
func (a *Adapter) jobFieldTraces(it gjson.Result) []FieldTrace {
	f := &a.jobs
	type tf struct {
		f    *field
		kind string
	}
	var out []FieldTrace
	for _, x := range []tf{{f.key, "text"}, {f.published, "time"}, {f.expires, "time"}, {f.origin, "text"},
		{f.dest, "text"}, {f.equipment, "text"}, {f.weight, "number"}, {f.distance, "number"}, {f.rate, "number"},
		{f.pickupStart, "time"}, {f.pickupEnd, "time"}} {
		if x.f != nil {
			out = append(out, x.f.trace(it, x.kind))
		}
	}
	return out
}

// trace reads one field of an item the way the mapping does, keeping what
// came back and why it cannot be used.
func (f *field) trace(it gjson.Result, kind string) FieldTrace {
	t := FieldTrace{Field: f.name, Rule: f.rule()}
	var err error
	switch kind {
	case "time":
		t.Value = it.Get(f.f.Path).String()
		_, err = f.time(it)
	case "number":
		t.Value = it.Get(f.f.Path).String()
		_, _, err = f.number(it)
	default:
		t.Value, err = f.text(it)
	}
	t.Empty = t.Value == ""
	if err != nil {
		t.Error = err.Error()
	}
	return t
}

// rule is how the spec reads the field, in words.
func (f *field) rule() string {
	var b strings.Builder
	if len(f.f.Paths) > 0 {
		b.WriteString("paths " + strings.Join(f.f.Paths, ", "))
		if f.f.Join != "" {
			fmt.Fprintf(&b, " joined by %q", f.f.Join)
		}
	} else {
		b.WriteString("path " + f.f.Path)
	}
	if f.f.Unit != "" {
		b.WriteString(" (" + f.f.Unit + ")")
	}
	if f.f.Time != "" {
		b.WriteString(" (" + f.f.Time)
		if f.f.Layout != "" {
			b.WriteString(" " + f.f.Layout)
		}
		b.WriteString(")")
	}
	if f.f.Required {
		b.WriteString(", required")
	}
	return b.String()
}

// checkBookings walks the bookings look-up to its end (or MaxPages).
func (s *session) checkBookings(ctx context.Context, n, maxPages int) BookingsTrace {
	var t BookingsTrace
	f := &s.a.bkFields
	cursor := ""
	for t.Pages < maxPages {
		page, err := s.Bookings(ctx, cursor)
		if err != nil {
			t.Error = fmt.Sprintf("page %d: %s", t.Pages+1, shortErr(err))
			return t
		}
		t.Pages++
		t.Client = page.Client
		for _, b := range page.Bookings {
			if len(t.Traced) < n {
				tr := ItemTrace{Index: t.Count}
				add := func(fl *field, v string) {
					if fl != nil {
						tr.Fields = append(tr.Fields, FieldTrace{Field: fl.name, Rule: fl.rule(), Value: v, Empty: v == ""})
					}
				}
				add(f.key, b.Key)
				add(f.id, b.BookingID)
				booked := ""
				if !b.BookedAt.IsZero() {
					booked = b.BookedAt.UTC().Format(time.RFC3339)
				}
				add(f.bookedAt, booked)
				add(f.account, b.Account)
				t.Traced = append(t.Traced, tr)
			}
			t.Count++
		}
		if !page.Complete {
			t.Error = fmt.Sprintf("page %d is not provably complete (an every_page condition, the order, the page size or the completeness proof failed): such a look-up never releases a claim", t.Pages)
			return t
		}
		if page.Next == "" {
			t.OK, t.Complete = true, true
			return t
		}
		cursor = page.Next
	}
	t.Error = fmt.Sprintf("the walk did not end within %d pages", maxPages)
	return t
}

// checkBook sends the one booking a check was asked to make, and names
// the result rule that read its answer.
func (s *session) checkBook(ctx context.Context, key string) BookTrace {
	t := BookTrace{Key: key}
	op := checkOperationID()
	d := s.data()
	d[spec.VarKey], d[spec.VarBookingKey] = key, op
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := s.build(ctx, s.a.book, d, nil, true)
	if err != nil {
		t.Error = "not sent: the booking request could not be built: " + shortErr(err)
		return t
	}
	if h := s.a.s.Booking.IdempotencyHeader; h != "" {
		req.Header.Set(h, op)
	}
	resp, err := s.once.Do(req)
	if err != nil {
		t.Error = "no answer: " + shortErr(err)
		return t
	}
	raw, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	if rerr != nil {
		t.Error = "answer cut off: " + shortErr(rerr)
		return t
	}
	ans := &answer{status: resp.StatusCode, url: req.URL, header: resp.Header, body: raw}
	if s.a.s.Booking.FollowRedirects && isSeeOther(ans.status) {
		// As Book does: the rules read the page the redirect leads to.
		next, err := s.follow(ctx, ans, d)
		if err != nil {
			t.Status = ans.status
			t.Error = fmt.Sprintf("HTTP %d: the page it leads to was not read: %s", ans.status, shortErr(err))
			return t
		}
		ans = next
	}
	t.Status = ans.status
	t.Rule = "no result rule matched"
	for i, r := range s.a.results {
		if r.when.holds(ans, d) {
			t.Rule = fmt.Sprintf("booking.results[%d] (result: %s)", i, r.result)
			break
		}
	}
	br := s.a.readBook(ans, d)
	t.Result, t.BookingID, t.Detail = string(br.Result), br.BookingID, br.Detail
	t.OK = br.Result == wire.ResultConfirmed || br.Result == wire.ResultTaken
	if !t.OK {
		t.Error = br.Detail
	}
	return t
}

// checkOperationID is a fresh idempotency key for a check's booking.
func checkOperationID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
