package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/platform/spec"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Book implements platform.Session: one request, no redirects, no retries.
// The gate runs in the Transport after connecting and right before the
// first byte is written; a refusal there is the only NOT_SENT besides a
// request that never connected.
func (s *session) Book(ctx context.Context, key, idemKey string, gate platform.Gate) platform.BookResult {
	d := s.data()
	d[spec.VarKey], d[spec.VarBookingKey] = key, idemKey
	req, err := s.build(ctx, s.a.book, d, nil, true)
	if err != nil {
		return platform.BookResult{Result: wire.ResultNotSent, Detail: "not sent: the booking request could not be built: " + shortErr(err)}
	}
	if h := s.a.s.Booking.IdempotencyHeader; h != "" && idemKey != "" {
		req.Header.Set(h, idemKey)
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
	resp, err := s.once.Do(req)
	if err != nil {
		if errors.Is(err, platform.ErrNotSent) {
			return platform.BookResult{Result: wire.ResultNotSent, Detail: "local deadline passed before sending"}
		}
		if sentAt.IsZero() {
			// Failed before the gate opened (could not connect): never sent.
			return platform.BookResult{Result: wire.ResultNotSent, Detail: "not sent: " + shortErr(err)}
		}
		return platform.BookResult{Result: wire.ResultUnknown, SentAt: sentAt, Detail: "no answer: " + shortErr(err)}
	}
	raw, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	if rerr != nil {
		return platform.BookResult{Result: wire.ResultUnknown, SentAt: sentAt, Detail: "answer cut off: " + shortErr(rerr)}
	}
	a := &answer{status: resp.StatusCode, url: req.URL, header: resp.Header, body: raw}
	if s.a.s.Booking.FollowRedirects && isSeeOther(a.status) {
		// The booking left; the page its answer points to is read with a
		// GET. Whatever goes wrong on the way is UNKNOWN, never NOT_SENT.
		next, err := s.follow(ctx, a, d)
		if err != nil {
			return platform.BookResult{Result: wire.ResultUnknown, SentAt: sentAt,
				Detail: fmt.Sprintf("HTTP %d: the page it leads to was not read: %s", a.status, shortErr(err))}
		}
		a = next
	}
	r := s.a.readBook(a, d)
	if !r.SignedOut && r.Result == wire.ResultUnknown && r.Detail == noRule(a.status) && s.isSignedOut(a, d) {
		r.SignedOut, r.Detail = true, "signed out"
	}
	r.SentAt = sentAt
	if r.Result == wire.ResultConfirmed {
		r.ConfirmedAt = s.now()
	}
	return r
}

func noRule(status int) string {
	return fmt.Sprintf("HTTP %d: no result rule matched the answer", status)
}

// readBook applies the result rules in order. An answer no rule matches is
// UNKNOWN (the reconciler settles it); a confirmed answer without its
// booking id is UNKNOWN too, naming the field: never CONFIRMED by guesswork.
func (a *Adapter) readBook(ans *answer, d data) platform.BookResult {
	for _, r := range a.results {
		if !r.when.holds(ans, d) {
			continue
		}
		switch r.result {
		case spec.ResultConfirmed:
			id := ""
			if r.id != nil {
				id = r.id.value(ans)
			}
			if id == "" {
				return platform.BookResult{Result: wire.ResultUnknown,
					Detail: fmt.Sprintf("HTTP %d: the answer matched the confirmed rule but field booking_id (%s) came back empty: the answer's shape changed", ans.status, r.id.desc)}
			}
			return platform.BookResult{Result: wire.ResultConfirmed, BookingID: id, Detail: "confirmed"}
		case spec.ResultTaken:
			return platform.BookResult{Result: wire.ResultTaken, Detail: "taken by another client"}
		case spec.ResultCaptcha:
			return platform.BookResult{Result: wire.ResultUnknown, Captcha: true, Detail: "captcha: a person must verify"}
		case spec.ResultSignedOut:
			return platform.BookResult{Result: wire.ResultUnknown, SignedOut: true, Detail: "signed out"}
		case spec.ResultExpired, spec.ResultNotFound:
			// The claim engine has no result for these: the request left,
			// and the reconciler settles the claim from the bookings.
			return platform.BookResult{Result: wire.ResultUnknown, Detail: fmt.Sprintf("HTTP %d %s", ans.status, r.result)}
		}
		return platform.BookResult{Result: wire.ResultUnknown, Detail: fmt.Sprintf("HTTP %d: unknown by rule", ans.status)}
	}
	return platform.BookResult{Result: wire.ResultUnknown, Detail: noRule(ans.status)}
}

// htmlAccept is a browser's Accept for a page.
const htmlAccept = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"

// isSeeOther: a redirect a browser follows with a GET. A 307 or 308 would
// repeat the POST, so it is never followed.
func isSeeOther(status int) bool {
	return status == http.StatusMovedPermanently || status == http.StatusFound || status == http.StatusSeeOther
}

// follow reads the page a booking's redirect leads to, within the
// platform's origins (and on through further redirects there).
func (s *session) follow(ctx context.Context, a *answer, d data) (*answer, error) {
	loc := a.header.Get("Location")
	if loc == "" {
		return nil, errors.New("the redirect names no Location")
	}
	u, err := url.Parse(loc)
	if err != nil {
		return nil, errors.New("the redirect's Location does not parse")
	}
	u = a.url.ResolveReference(u)
	if err := s.a.allowed(u); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if err := s.headers(req, &request{}, d, htmlAccept, true); err != nil {
		return nil, err
	}
	return s.read(s.hc, req, 4<<20)
}
