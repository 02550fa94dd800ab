package engine

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/fleetwright/fleetwright/modules/platform/spec"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// seenMax bounds the keys a session remembers to drop the jobs a page or
// Link listing shows again on the next poll.
const seenMax = 100_000

// Jobs implements platform.Session. A cursor or after feed is a stream: the
// position carries over from poll to poll and moves only after a page was
// read whole. A page-number, offset or Link feed is a listing read from its
// first page each poll; the jobs already returned are dropped by key.
func (s *session) Jobs(ctx context.Context) ([]wire.Job, error) {
	f := s.a.feed
	pg := f.paging
	s.mu.Lock()
	pos := s.feedPos
	s.mu.Unlock()
	stream := pg.Kind == spec.PageCursor || pg.Kind == spec.PageAfter
	page, offset := 0, 0
	switch pg.Kind {
	case spec.PageNumber:
		page, _ = strconv.Atoi(pg.Start)
	case spec.PageOffset:
		offset, _ = strconv.Atoi(pg.Start)
	}
	var next *url.URL
	var out []wire.Job
	for n := 0; n < pg.MaxPages; n++ {
		d := s.data()
		d[spec.VarCursor], d[spec.VarPage], d[spec.VarOffset] = pos, page, offset
		a, err := s.get(ctx, "feed", f.req, d, next)
		if err != nil {
			return nil, err
		}
		items := gjson.GetBytes(a.body, f.items)
		if !items.IsArray() {
			return nil, fmt.Errorf("engine: %s: feed: field items (path %s) is not a list: the answer's shape changed", s.a.s.Name, f.items)
		}
		list := items.Array()
		for i, it := range list {
			j, err := s.a.job(it)
			if err != nil {
				return nil, fmt.Errorf("engine: %s: feed: item %d: %w", s.a.s.Name, i, err)
			}
			out = append(out, j)
		}
		more := true
		switch pg.Kind {
		case spec.PageCursor:
			r := gjson.GetBytes(a.body, pg.Next)
			if !r.Exists() {
				return nil, fmt.Errorf("engine: %s: feed: field paging.next (path %s) came back empty: the answer's shape changed", s.a.s.Name, pg.Next)
			}
			more = r.String() != pos && len(list) > 0
			pos = r.String()
		case spec.PageAfter:
			if len(list) == 0 {
				more = false
				break
			}
			v := list[len(list)-1].Get(pg.Value)
			if !v.Exists() || v.String() == "" {
				return nil, fmt.Errorf("engine: %s: feed: field paging.value (path %s) came back empty: the answer's shape changed", s.a.s.Name, pg.Value)
			}
			pos = v.String()
		case spec.PageNumber:
			more = len(list) > 0 && !(pg.Size > 0 && len(list) < pg.Size)
			if pg.Pages != "" {
				if pages := gjson.GetBytes(a.body, pg.Pages); pages.Exists() && int64(page) >= pages.Int() {
					more = false
				}
			}
			page++
		case spec.PageLink:
			next = s.nextLink(a, pg)
			more = next != nil
		case spec.PageOffset:
			offset += len(list)
			more = len(list) >= pg.Size
		}
		if pg.More != "" {
			if m := gjson.GetBytes(a.body, pg.More); m.Exists() && !m.Bool() {
				more = false
			}
		}
		if !more {
			break
		}
	}
	if stream {
		s.mu.Lock()
		s.feedPos = pos
		s.mu.Unlock()
		return out, nil
	}
	return s.fresh(out), nil
}

// fresh drops the jobs an earlier poll returned.
func (s *session) fresh(jobs []wire.Job) []wire.Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := jobs[:0]
	for _, j := range jobs {
		if _, ok := s.seen[j.Key]; ok {
			continue
		}
		s.seen[j.Key] = struct{}{}
		s.seenList = append(s.seenList, j.Key)
		out = append(out, j)
	}
	if len(s.seenList) > seenMax {
		drop := s.seenList[:len(s.seenList)-seenMax/2]
		for _, k := range drop {
			delete(s.seen, k)
		}
		s.seenList = append([]string(nil), s.seenList[len(drop):]...)
	}
	return out
}

// nextLink is the next page's URL: the body's path, or the Link header's
// rel="next", resolved against the page's own URL (nil: the last page).
func (s *session) nextLink(a *answer, pg spec.Paging) *url.URL {
	raw := ""
	if pg.Next != "" {
		raw = gjson.GetBytes(a.body, pg.Next).String()
	} else {
		raw = linkNext(a.header)
	}
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	return a.url.ResolveReference(u)
}

// linkNext reads rel="next" from Link headers (RFC 8288).
func linkNext(h http.Header) string {
	for _, line := range h.Values("Link") {
		for _, part := range splitLinks(line) {
			part = strings.TrimSpace(part)
			if !strings.HasPrefix(part, "<") {
				continue
			}
			end := strings.Index(part, ">")
			if end < 0 {
				continue
			}
			target := part[1:end]
			for _, p := range strings.Split(part[end+1:], ";") {
				k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
				if !ok || !strings.EqualFold(strings.TrimSpace(k), "rel") {
					continue
				}
				for _, rel := range strings.Fields(strings.Trim(strings.TrimSpace(v), `"`)) {
					if strings.EqualFold(rel, "next") {
						return target
					}
				}
			}
		}
	}
	return ""
}

// splitLinks splits a Link header on the commas between links (not those
// inside <…> or quotes).
func splitLinks(s string) []string {
	var out []string
	depth, quote, start := 0, false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			quote = !quote
		case quote:
		case c == '<':
			depth++
		case c == '>':
			depth--
		case c == ',' && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// job maps one feed item.
func (a *Adapter) job(it gjson.Result) (wire.Job, error) {
	var j wire.Job
	var err error
	f := &a.jobs
	if j.Key, err = f.key.text(it); err != nil {
		return j, err
	}
	if j.PublishedAt, err = f.published.time(it); err != nil {
		return j, err
	}
	if j.ExpiresAt, err = f.expires.time(it); err != nil {
		return j, err
	}
	if j.PickupStart, err = f.pickupStart.time(it); err != nil {
		return j, err
	}
	if j.PickupEnd, err = f.pickupEnd.time(it); err != nil {
		return j, err
	}
	if j.Origin, err = f.origin.text(it); err != nil {
		return j, err
	}
	if j.Destination, err = f.dest.text(it); err != nil {
		return j, err
	}
	if j.Equipment, err = f.equipment.text(it); err != nil {
		return j, err
	}
	if v, ok, err := f.weight.number(it); err != nil {
		return j, err
	} else if ok {
		j.WeightLbs = weightLbs(v, f.weight.f.Unit)
	}
	miles := 0.0
	if v, ok, err := f.distance.number(it); err != nil {
		return j, err
	} else if ok {
		miles = distanceMiles(v, f.distance.f.Unit)
		j.Miles = int(math.Round(miles))
	}
	if v, ok, err := f.rate.number(it); err != nil {
		return j, err
	} else if ok {
		j.RateCents = rateCents(v, f.rate.f.Unit, miles)
	}
	return j, nil
}

// parseItems maps a jobs answer's body, its jobs at the gjson path items
// (the feed's, or the browser section's for the page's own responses).
func (a *Adapter) parseItems(body []byte, path string) ([]wire.Job, error) {
	items := gjson.GetBytes(body, path)
	if !items.IsArray() {
		return nil, fmt.Errorf("engine: %s: feed: field items (path %s) is not a list: the answer's shape changed", a.s.Name, path)
	}
	out := make([]wire.Job, 0, len(items.Array()))
	for i, it := range items.Array() {
		j, err := a.job(it)
		if err != nil {
			return nil, fmt.Errorf("engine: %s: feed: item %d: %w", a.s.Name, i, err)
		}
		out = append(out, j)
	}
	return out, nil
}
