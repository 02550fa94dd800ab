package engine

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/platform/spec"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// walk is where a bookings walk stands: the adapter's own cursor, encoded
// as a query string (c: the platform's cursor or after value, p: the page
// number, u: the next page's URL, n: the bookings seen so far, which a
// total-count proof adds up and an offset walk asks from).
type walk struct {
	kind string
	pos  string
	page int
	link string
	seen int64
	last string // offset: the last item's order_by value, which the next page must pass
}

func (w walk) String() string {
	v := url.Values{}
	v.Set("n", strconv.FormatInt(w.seen, 10))
	switch w.kind {
	case spec.PageLink:
		v.Set("u", w.link)
	case spec.PageNumber:
		v.Set("p", strconv.Itoa(w.page))
	case spec.PageOffset:
		if w.last != "" {
			v.Set("l", w.last)
		}
	default:
		v.Set("c", w.pos)
	}
	return v.Encode()
}

func (a *Adapter) parseWalk(cursor string) (walk, error) {
	pg := a.bookings.paging
	w := walk{kind: pg.Kind, pos: pg.Start}
	if pg.Kind == spec.PageNumber {
		w.page, _ = strconv.Atoi(pg.Start)
		w.pos = ""
	}
	if cursor == "" {
		return w, nil
	}
	bad := fmt.Errorf("engine: %s: bookings: cursor %q is not one this adapter gave", a.s.Name, cursor)
	v, err := url.ParseQuery(cursor)
	if err != nil || !v.Has("n") {
		return w, bad
	}
	if w.seen, err = strconv.ParseInt(v.Get("n"), 10, 64); err != nil || w.seen < 0 {
		return w, bad
	}
	switch pg.Kind {
	case spec.PageCursor, spec.PageAfter:
		if !v.Has("c") {
			return w, bad
		}
		w.pos = v.Get("c")
	case spec.PageNumber:
		if w.page, err = strconv.Atoi(v.Get("p")); err != nil || w.page < 0 {
			return w, bad
		}
	case spec.PageOffset:
		w.last = v.Get("l")
	case spec.PageLink:
		u, err := url.Parse(v.Get("u"))
		if err != nil || !u.IsAbs() || a.allowed(u) != nil {
			return w, bad
		}
		w.link = u.String()
	}
	return w, nil
}

// Bookings implements platform.Session: one page of the look-up from
// cursor. The page is Complete only when every every_page condition holds,
// its items are in the stated order and within the page size, it made
// progress if another page follows, and — on the last page — the paging
// ended and the spec's completeness proof (a total that matches, a
// condition) holds. A signed-out answer is an error, never an empty list.
func (s *session) Bookings(ctx context.Context, cursor string) (platform.Bookings, error) {
	a := s.a
	l := a.bookings
	pg := l.paging
	w, err := a.parseWalk(cursor)
	if err != nil {
		return platform.Bookings{}, err
	}
	d := s.data()
	d[spec.VarCursor], d[spec.VarPage] = w.pos, w.page
	if pg.Kind == spec.PageOffset {
		start, _ := strconv.ParseInt(pg.Start, 10, 64)
		d[spec.VarOffset] = start + w.seen
	}
	var u *url.URL
	if w.link != "" {
		u, _ = url.Parse(w.link)
	}
	ans, err := s.get(ctx, "bookings", l.req, d, u)
	if err != nil {
		return platform.Bookings{}, err
	}
	return s.bookingsPage(ans, w, d)
}

// bookingsPage reads one signed-in answer of the look-up (over HTTP, or
// fetched by the page) from where the walk w stands.
func (s *session) bookingsPage(ans *answer, w walk, d data) (platform.Bookings, error) {
	a := s.a
	l := a.bookings
	pg := l.paging
	var err error
	items := gjson.GetBytes(ans.body, l.items)
	if !items.IsArray() {
		return platform.Bookings{}, fmt.Errorf("engine: %s: bookings: field items (path %s) is not a list: the answer's shape changed", a.s.Name, l.items)
	}
	list := items.Array()
	out := platform.Bookings{Bookings: make([]wire.Booking, 0, len(list))}
	if a.client != "" {
		out.Client = gjson.GetBytes(ans.body, a.client).String()
	}
	if a.asOf != nil {
		root := gjson.ParseBytes(ans.body)
		if out.AsOf, err = a.asOf.time(root); err != nil {
			return platform.Bookings{}, fmt.Errorf("engine: %s: bookings: %w", a.s.Name, err)
		}
	}
	for i, it := range list {
		b, err := a.booking(it)
		if err != nil {
			return platform.Bookings{}, fmt.Errorf("engine: %s: bookings: item %d: %w", a.s.Name, i, err)
		}
		out.Bookings = append(out.Bookings, b)
	}

	ok := true
	for _, c := range a.every {
		if !c.holds(ans, d) {
			ok = false
		}
	}
	if pg.Size > 0 && len(list) > pg.Size {
		ok = false
	}
	if l.by != "" && !a.ordered(list, w) {
		ok = false
	}

	last := false
	next := w
	next.seen = w.seen + int64(len(list))
	switch pg.Kind {
	case spec.PageCursor:
		r := gjson.GetBytes(ans.body, pg.Next)
		next.pos = r.String()
		last = next.pos == "" || len(list) == 0
		if !last && next.pos == w.pos {
			ok = false // a cursor that does not move proves nothing
		}
	case spec.PageAfter:
		last = len(list) == 0 || (pg.Size > 0 && len(list) < pg.Size)
		if len(list) > 0 {
			next.pos = list[len(list)-1].Get(pg.Value).String()
			if next.pos == "" {
				ok = false
			}
		}
	case spec.PageOffset:
		// The next offset is the items seen so far: a page shorter than
		// the size asked for is the last.
		last = len(list) < pg.Size
		if l.by != "" && len(list) > 0 {
			next.last = list[len(list)-1].Get(l.by).String()
		}
	case spec.PageNumber:
		last = len(list) == 0 || (pg.Size > 0 && len(list) < pg.Size)
		if pg.Pages != "" {
			pages := gjson.GetBytes(ans.body, pg.Pages)
			if !pages.Exists() {
				ok = false
			}
			last = int64(w.page) >= pages.Int()
		}
		next.page = w.page + 1
	case spec.PageLink:
		nu := s.nextLink(ans, pg)
		last = nu == nil
		if nu != nil {
			if a.allowed(nu) != nil {
				ok = false
			}
			next.link = nu.String()
		}
	}
	if pg.More != "" {
		m := gjson.GetBytes(ans.body, pg.More)
		if m.Type != gjson.True && m.Type != gjson.False {
			ok = false
		}
		last = !m.Bool()
	}
	if !ok {
		return out, nil
	}
	if !last {
		if len(list) == 0 {
			return out, nil // "more" without progress proves nothing
		}
		out.Next = next.String()
		out.Complete = true
		return out, nil
	}
	if a.total != "" {
		t := gjson.GetBytes(ans.body, a.total)
		if !t.Exists() || t.Int() != next.seen {
			return out, nil
		}
	}
	if a.complete != nil && !a.complete.holds(ans, d) {
		return out, nil
	}
	out.Complete = true
	return out, nil
}

func (a *Adapter) booking(it gjson.Result) (wire.Booking, error) {
	var b wire.Booking
	var err error
	f := &a.bkFields
	if b.Key, err = f.key.text(it); err != nil {
		return b, err
	}
	if b.BookingID, err = f.id.text(it); err != nil {
		return b, err
	}
	if b.BookedAt, err = f.bookedAt.time(it); err != nil {
		return b, err
	}
	if b.Account, err = f.account.text(it); err != nil {
		return b, err
	}
	return b, nil
}

// ordered checks the items are strictly in the stated order by order_by,
// and (for an after or cursor walk over numbers) beyond the cursor.
func (a *Adapter) ordered(list []gjson.Result, w walk) bool {
	l := a.bookings
	desc := l.order == spec.NewestFirst
	// An after walk's items lie beyond the value it starts after: above it
	// oldest first, below it newest first (where the start value is not a
	// real position).
	prev := ""
	if l.paging.Kind == spec.PageAfter && w.pos != "" && (!desc || w.pos != l.paging.Start) {
		prev = w.pos
	}
	// An offset walk's page starts beyond the last page's end: a list that
	// shifted under the walk shows an item again and proves nothing.
	if l.paging.Kind == spec.PageOffset {
		prev = w.last
	}
	for _, it := range list {
		v := it.Get(l.by).String()
		if v == "" {
			return false
		}
		if prev != "" {
			c := compare(prev, v)
			if (!desc && c >= 0) || (desc && c <= 0) {
				return false
			}
		}
		prev = v
	}
	return true
}

// compare compares numerically when both are numbers, else as text.
func compare(x, y string) int {
	fx, ex := strconv.ParseFloat(x, 64)
	fy, ey := strconv.ParseFloat(y, 64)
	if ex == nil && ey == nil {
		switch {
		case fx < fy:
			return -1
		case fx > fy:
			return 1
		}
		return 0
	}
	return strings.Compare(x, y)
}
