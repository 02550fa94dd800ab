package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// The account's request budget (the account_requests_hour limit,
// docs/OPERATIONS.md "Requests per account per hour").
//
// What counts: every HTTP request a worker of this agent sends to the
// platform's origin for the account — a browser page's navigation and each
// of its sub-requests (scripts, styles, the jobs view's own polls), each
// sign-in step, an HTTP actor's session checks and bookings, and the
// look-ups that read the account's bookings, and an adapter's own requests
// (platform.Metered: the sandbox's idempotency status read). A redirect
// followed is a second request. Requests to anything else (a crawler's
// targets, the panel) do not count.
//
// Counting is per second over a rolling hour on the budget's clock. When
// the count reaches the budget the agent holds: browser pages' requests to
// the platform are failed in the browser before they leave (the jobs view
// keeps its cursor, so the first poll after the hold reads everything
// published meanwhile), watchers stop polling, actors refuse new offers and
// answer grants NOT_SENT, sign-ins and session checks wait. Two kinds of
// request still leave while held, and are counted: the booking of a claim
// already ACTING (it finishes), and look-ups that settle a claim whose
// outcome is unknown. The agent reports request_limit_reached (the panel
// raises a limit.reached alarm) and logs it; when the window frees it
// reports request_limit_resumed and the workers go on.
type requestBudget struct {
	clock clock.Clock
	log   *slog.Logger
	event func(wire.Event)

	mu      sync.Mutex
	limit   int64 // 0: no limit
	from    string
	buckets []bucket // requests per second, oldest first, within the hour
	total   int64
	held    bool
	changed chan struct{} // closed and replaced when the limit changes
}

type bucket struct {
	sec int64
	n   int64
}

// budgetWindow is the rolling window the limit counts over.
const budgetWindow = time.Hour

func newRequestBudget(c clock.Clock, log *slog.Logger, event func(wire.Event)) *requestBudget {
	return &requestBudget{clock: c, log: log, event: event, changed: make(chan struct{})}
}

// errBudget refuses a request while the budget is spent.
type errBudget struct {
	limit   int64
	from    string
	freesAt time.Time
}

func (e *errBudget) Error() string {
	return fmt.Sprintf("agent: limit: %s %d (%s limit) spent: no request to the platform until %s",
		"account_requests_hour", e.limit, e.from, e.freesAt.UTC().Format(time.RFC3339))
}

// set applies the panel's limit (nil: none). Requests already counted stay
// counted: a lowered limit may hold at once, a raised one frees at once.
func (b *requestBudget) set(l *wire.RequestLimit) {
	b.mu.Lock()
	old := b.limit
	if l == nil || l.PerHour <= 0 {
		b.limit, b.from = 0, ""
	} else {
		b.limit, b.from = l.PerHour, l.From
	}
	if b.limit != old {
		close(b.changed)
		b.changed = make(chan struct{})
		b.log.Info("agent: request limit per account per hour", "limit", b.limit, "from", b.from)
	}
	b.mu.Unlock()
	b.holding()
}

// prune drops the seconds that left the window; b.mu held.
func (b *requestBudget) prune(now time.Time) {
	cut := now.Add(-budgetWindow).Unix()
	i := 0
	for i < len(b.buckets) && b.buckets[i].sec <= cut {
		b.total -= b.buckets[i].n
		i++
	}
	if i > 0 {
		b.buckets = append(b.buckets[:0], b.buckets[i:]...)
	}
}

// freesAt is when the oldest counted second leaves the window; b.mu held.
func (b *requestBudget) freesAt() time.Time {
	if len(b.buckets) == 0 {
		return b.clock.Now()
	}
	return time.Unix(b.buckets[0].sec, 0).Add(budgetWindow)
}

func (b *requestBudget) spentLocked() bool { return b.limit > 0 && b.total >= b.limit }

// take counts one request about to leave, or refuses it (*errBudget) while
// the budget is spent. must: the request finishes work in progress (an
// ACTING claim's booking, a look-up); it is never refused, only counted.
func (b *requestBudget) take(must bool) error {
	now := b.clock.Now()
	b.mu.Lock()
	b.prune(now)
	if b.spentLocked() && !must {
		err := &errBudget{limit: b.limit, from: b.from, freesAt: b.freesAt()}
		reached := b.reachLocked(now)
		b.mu.Unlock()
		reached()
		return err
	}
	sec := now.Unix()
	if n := len(b.buckets); n > 0 && b.buckets[n-1].sec >= sec {
		b.buckets[n-1].n++
	} else {
		b.buckets = append(b.buckets, bucket{sec: sec, n: 1})
	}
	b.total++
	reached := func() {}
	if b.spentLocked() {
		reached = b.reachLocked(now)
	}
	b.mu.Unlock()
	reached()
	return nil
}

// reachLocked marks the hold; the first time, it returns what reports it
// (called without b.mu).
func (b *requestBudget) reachLocked(now time.Time) func() {
	if b.held {
		return func() {}
	}
	b.held = true
	limit, from, counted, frees := b.limit, b.from, b.total, b.freesAt()
	return func() {
		reason := fmt.Sprintf("limit: account_requests_hour %d (%s limit)", limit, from)
		b.log.Warn("agent: request limit reached: polling and new work stop for this account until the window frees",
			"limit", limit, "from", from, "counted", counted, "frees_at", frees.UTC().Format(time.RFC3339))
		b.event(wire.Event{Level: wire.LevelWarn, Kind: wire.EventRequestLimitReached, At: now,
			Message: fmt.Sprintf("%s reached: %d requests to the platform in the last hour; watchers stop polling and actors take no new work until %s (a claim already acting finishes)",
				reason, counted, frees.UTC().Format(time.RFC3339)),
			Fields: map[string]string{"limit": "account_requests_hour", "value": strconv.FormatInt(limit, 10), "from": from,
				"counted": strconv.FormatInt(counted, 10), "frees_at": frees.UTC().Format(time.RFC3339)}})
	}
}

// holding reports whether the budget is spent now. It is also where a hold
// begins when no request was refused yet (a lowered limit) and where it
// ends: the first call that finds room again reports the resumption.
func (b *requestBudget) holding() bool {
	now := b.clock.Now()
	b.mu.Lock()
	b.prune(now)
	if b.spentLocked() {
		reached := b.reachLocked(now)
		b.mu.Unlock()
		reached()
		return true
	}
	resumed := b.held
	b.held = false
	limit, from, counted := b.limit, b.from, b.total
	b.mu.Unlock()
	if resumed {
		b.log.Info("agent: request limit: the window freed; polling and work resume", "limit", limit, "counted", counted)
		msg := "the request window freed: polling and work resume"
		if limit == 0 {
			msg = "the request limit was removed: polling and work resume"
		}
		b.event(wire.Event{Level: wire.LevelInfo, Kind: wire.EventRequestLimitResumed, At: now, Message: msg,
			Fields: map[string]string{"limit": "account_requests_hour", "value": strconv.FormatInt(limit, 10), "from": from,
				"counted": strconv.FormatInt(counted, 10)}})
	}
	return false
}

// reason words the hold for a refused offer or grant ("" when not held).
func (b *requestBudget) reason() string {
	if !b.holding() {
		return ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return (&errBudget{limit: b.limit, from: b.from, freesAt: b.freesAt()}).Error()
}

// wait returns once the budget has room (at once when it has), or ctx's
// error. It wakes when the oldest counted second leaves the window or the
// limit changes.
func (b *requestBudget) wait(ctx context.Context) error {
	for b.holding() {
		b.mu.Lock()
		d, changed := b.freesAt().Sub(b.clock.Now()), b.changed
		b.mu.Unlock()
		select {
		case <-b.clock.After(max(d, time.Millisecond)):
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

type mustKey struct{}

// mustSend marks ctx's requests as finishing work in progress: the budget
// counts them but never refuses them.
func mustSend(ctx context.Context) context.Context { return context.WithValue(ctx, mustKey{}, true) }

func isMust(ctx context.Context) bool { v, _ := ctx.Value(mustKey{}).(bool); return v }

// admit is the HTTP sessions' hook (platform.SessionOptions.Admit).
func (b *requestBudget) admit(req *http.Request) error { return b.take(isMust(req.Context())) }
