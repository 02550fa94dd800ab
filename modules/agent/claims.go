package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fleetwright/fleetwright/modules/agent/store"
	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// ErrDisconnected: the agent has no live (v3) connection to the panel. A
// claim request fails at once rather than wait: an actor skips the offer,
// and never acts without a fresh lease.
var ErrDisconnected = errors.New("agent: not connected to the panel")

// offerBuffer bounds the offers waiting for a free actor. Offers are not
// persisted by the panel either: a dropped offer costs a chance, never a
// duplicate.
const offerBuffer = 16

// Claims is the workers' client of the claim engine over the agent's live
// connection: Detected for watchers; Lease, Act and Outcome for actors.
// Answers are matched to requests by request_id.
type Claims struct {
	a      *agent
	offers chan wire.Offer

	mu      sync.Mutex
	pending map[string]chan wire.Message
	live    map[string]bool // operation ids being acted on by this process
	dropped int
	// keysWarned: when each worker last reported an idempotency mismatch.
	keysWarned map[string]time.Time
	// retries counts the transient answers per queued report (backoff).
	retries map[string]int
	// grants holds each actor's grants waiting for it (grants.go).
	grants map[string]chan wire.LeaseGrant
}

// speaks reports whether the live connection speaks protocol v or later.
func (c *Claims) speaks(v int) bool {
	s := c.a.current()
	return s != nil && s.c.Version() >= v
}

// warnKeys rate-limits the idempotency mismatch report to one a minute per
// worker (every offer would repeat it).
func (c *Claims) warnKeys(worker string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keysWarned == nil {
		c.keysWarned = map[string]time.Time{}
	}
	if last, ok := c.keysWarned[worker]; ok && now.Sub(last) < time.Minute {
		return false
	}
	c.keysWarned[worker] = now
	return true
}

func newClaims(a *agent) *Claims {
	return &Claims{a: a, offers: make(chan wire.Offer, offerBuffer),
		pending: map[string]chan wire.Message{}, live: map[string]bool{}}
}

// Offers delivers the panel's offers; each goes to one free actor.
func (c *Claims) Offers() <-chan wire.Offer { return c.offers }

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// send sends m on the live connection.
func (c *Claims) send(ctx context.Context, m wire.Message) error {
	s := c.a.current()
	if s == nil {
		return ErrDisconnected
	}
	if s.c.Version() < wire.V3 {
		return fmt.Errorf("%w: the panel speaks protocol %d, claims need %d", ErrDisconnected, s.c.Version(), wire.V3)
	}
	return s.send(ctx, m)
}

// request sends m and waits for the answer with the same request id, until
// ctx ends or the connection drops.
func (c *Claims) request(ctx context.Context, id string, m wire.Message) (wire.Message, error) {
	ch := make(chan wire.Message, 1)
	c.mu.Lock()
	c.pending[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()
	if err := c.send(ctx, m); err != nil {
		return nil, err
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return nil, ErrDisconnected
		}
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// deliver hands an answer to the waiting request (false: nobody waits).
func (c *Claims) deliver(id string, m wire.Message) bool {
	c.mu.Lock()
	ch, ok := c.pending[id]
	if ok {
		delete(c.pending, id)
	}
	c.mu.Unlock()
	if ok {
		ch <- m
	}
	return ok
}

// disconnected fails every waiting request.
func (c *Claims) disconnected() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, ch := range c.pending {
		close(ch)
		delete(c.pending, id)
	}
}

// offer queues an offer for a free actor, dropping it when none keeps up.
func (c *Claims) offer(o wire.Offer) {
	select {
	case c.offers <- o:
	default:
		c.mu.Lock()
		c.dropped++
		c.mu.Unlock()
	}
}

// Detected reports what a watcher saw, with its latest reading of the
// platform's clock (nil: none). Sightings are not queued while
// disconnected: a later poll or another watcher sees the job again.
func (c *Claims) Detected(ctx context.Context, worker string, s []wire.Sighting, bc *wire.BoardClock) error {
	if len(s) == 0 {
		return nil
	}
	// Stay well under the message limit: a big first page goes in chunks.
	for len(s) > 0 {
		n := min(len(s), 100)
		if err := c.send(ctx, wire.Detected{Worker: worker, Sightings: s[:n], BoardClock: bc}); err != nil {
			return err
		}
		s = s[n:]
	}
	return nil
}

// Lease is a lease the panel granted, with the local deadline.
type Lease struct {
	wire.LeaseResult
	// SentAt is the local monotonic time the request was sent.
	SentAt time.Time
}

// Deadline is the conservative local deadline: the request's send time
// plus the remaining lease time the database computed, minus margin. Every
// delay (network, panel, database) only makes it earlier than the real
// expiry, never later.
func (l Lease) Deadline(margin time.Duration) time.Time {
	return l.SentAt.Add(time.Duration(l.RemainingMillis)*time.Millisecond - margin)
}

// Lease asks for the lease of key.
func (c *Claims) Lease(ctx context.Context, worker, key, offerID string) (Lease, error) {
	id := newID()
	sent := c.a.cfg.Clock.Now()
	r, err := c.request(ctx, id, wire.LeaseRequest{RequestID: id, Worker: worker, Key: key, OfferID: offerID})
	if err != nil {
		return Lease{}, err
	}
	lr, ok := r.(wire.LeaseResult)
	if !ok {
		return Lease{}, fmt.Errorf("agent: lease request answered with %s", r.MessageType())
	}
	return Lease{LeaseResult: lr, SentAt: sent}, nil
}

// Act asks for the fenced LEASED → ACTING transition.
func (c *Claims) Act(ctx context.Context, worker, key string, token int64) (wire.ActResult, error) {
	id := newID()
	r, err := c.request(ctx, id, wire.ActRequest{RequestID: id, Worker: worker, Key: key, Token: token})
	if err != nil {
		return wire.ActResult{}, err
	}
	ar, ok := r.(wire.ActResult)
	if !ok {
		return wire.ActResult{}, fmt.Errorf("agent: act request answered with %s", r.MessageType())
	}
	return ar, nil
}

// begin journals an action (and marks it live in this process).
func (c *Claims) begin(ctx context.Context, opID, key, worker string, token int64) error {
	c.mu.Lock()
	c.live[opID] = true
	c.mu.Unlock()
	if err := c.a.store.BeginAction(ctx, opID, key, worker, token, c.a.cfg.Clock.Now()); err != nil {
		c.mu.Lock()
		delete(c.live, opID)
		c.mu.Unlock()
		return err
	}
	return nil
}

// Outcome records an action's outcome in the journal, queues it in the
// outbox and sends it; the outbox keeps it until the panel's outcome_ack
// (a reconnect sends it again). The journal is written with a context that
// outlives a cancelled worker.
func (c *Claims) Outcome(ctx context.Context, o wire.Outcome) error {
	o.RequestID = "outcome-" + o.OperationID
	body, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("agent: encode outcome: %w", err)
	}
	wctx := context.WithoutCancel(ctx)
	ferr := c.a.store.FinishAction(wctx, o.OperationID, o.Result, c.a.cfg.Clock.Now(), o.RequestID, body)
	c.mu.Lock()
	delete(c.live, o.OperationID)
	c.mu.Unlock()
	if ferr != nil {
		// The entry stays in flight: a restart reports it UNKNOWN, the
		// safe side. Still tell the panel now.
		c.a.log.Error("agent: could not journal an outcome; a restart will report it UNKNOWN",
			"operation", o.OperationID, "key", o.Key, "err", ferr)
	}
	if err := c.send(wctx, o); err != nil {
		return err
	}
	return ferr
}

// reportUnjournaled sends an outcome for an action that never started
// because the journal could not be written (nothing to keep in the outbox).
func (c *Claims) reportUnjournaled(ctx context.Context, o wire.Outcome) error {
	o.RequestID = "outcome-" + o.OperationID
	return c.send(context.WithoutCancel(ctx), o)
}

// ack handles an outcome_ack. The report leaves the outbox only when the
// panel applied it or refused it for good; a transient failure (the panel's
// database unavailable, its replica going away) keeps it, and it is sent
// again after a backoff on the agent's clock (1 s doubling to 1 min) — the
// same body, so its timestamps survive the retry. A v3 panel's answer has no
// disposition: an internal failure is treated as transient, anything else
// as final.
func (c *Claims) ack(ctx context.Context, a wire.OutcomeAck) {
	transient := a.Disposition == wire.AckTransient || (a.Disposition == "" && !a.OK && a.Reason == wire.ReasonInternal)
	if transient {
		c.retryOutcome(ctx, a.RequestID)
		c.deliver(a.RequestID, a)
		return
	}
	if !a.OK {
		c.a.log.Warn("agent: the panel refused an outcome", "request", a.RequestID, "reason", a.Reason)
	}
	c.mu.Lock()
	delete(c.retries, a.RequestID)
	c.mu.Unlock()
	if err := c.a.store.DeleteOutbox(ctx, a.RequestID); err != nil {
		c.a.log.Error("agent: outbox", "err", err)
	}
	c.deliver(a.RequestID, a)
}

// outboxBackoff is the wait before the n-th resend (1-based) of a report the
// panel could not record: 1 s doubling, capped at a minute.
func outboxBackoff(n int) time.Duration {
	d := time.Second
	for i := 1; i < n && d < time.Minute; i++ {
		d *= 2
	}
	return min(d, time.Minute)
}

// retryOutcome sends the queued report requestID again after its backoff,
// if it is still queued and the agent still runs. One resend is pending per
// report at a time; a reconnect sends every queued report anyway.
func (c *Claims) retryOutcome(ctx context.Context, requestID string) {
	c.mu.Lock()
	if c.retries == nil {
		c.retries = map[string]int{}
	}
	c.retries[requestID]++
	n := c.retries[requestID]
	c.mu.Unlock()
	wait := outboxBackoff(n)
	c.a.log.Warn("agent: the panel could not record an outcome now; it stays queued and is sent again",
		"request", requestID, "attempt", n, "retry_in", wait)
	go func() {
		select {
		case <-c.a.cfg.Clock.After(wait):
		case <-ctx.Done():
			return
		}
		queued, err := c.a.store.Outbox(ctx)
		if err != nil {
			c.a.log.Error("agent: outbox", "err", err)
			return
		}
		for _, q := range queued {
			if q.RequestID != requestID {
				continue
			}
			var o wire.Outcome
			if err := json.Unmarshal(q.Body, &o); err != nil {
				return
			}
			if err := c.send(ctx, o); err != nil {
				c.a.log.Info("agent: queued outcome not sent now; it goes with the next connection", "request", requestID, "err", err)
			}
			return
		}
	}()
}

// recover runs on every welcome: journal entries in flight that this
// process is not acting on (a crash or kill mid-action) become UNKNOWN
// outcomes marked FromJournal; then every queued report is sent again.
func (c *Claims) recover(ctx context.Context) error {
	acts, err := c.a.store.InFlightActions(ctx)
	if err != nil {
		return err
	}
	for _, a := range acts {
		c.mu.Lock()
		live := c.live[a.OperationID]
		c.mu.Unlock()
		if live {
			continue
		}
		o := wire.Outcome{RequestID: "outcome-" + a.OperationID, Worker: a.Worker, Key: a.JobKey, Token: a.Token,
			OperationID: a.OperationID, Result: wire.ResultUnknown, FromJournal: true,
			Detail: "in flight when the agent stopped; the board may have committed"}
		body, _ := json.Marshal(o)
		if err := c.a.store.FinishAction(ctx, a.OperationID, wire.ResultUnknown, c.a.cfg.Clock.Now(), o.RequestID, body); err != nil {
			return err
		}
		c.a.log.Warn("agent: an action was in flight when the agent stopped; reporting UNKNOWN",
			"operation", a.OperationID, "key", a.JobKey, "worker", a.Worker)
	}
	queued, err := c.a.store.Outbox(ctx)
	if err != nil {
		return err
	}
	for _, q := range queued {
		var o wire.Outcome
		if err := json.Unmarshal(q.Body, &o); err != nil {
			c.a.log.Error("agent: unreadable queued report dropped", "request", q.RequestID, "err", err)
			_ = c.a.store.DeleteOutbox(ctx, q.RequestID)
			continue
		}
		if err := c.send(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// lookupBudget bounds the bookings one look-up answer carries (their JSON),
// leaving room under wire.MaxMessageBytes for the envelope.
const lookupBudget = wire.MaxMessageBytes - 8<<10

// lookup answers the reconciler's look-up through any signed-in worker's
// session. Only a look-up the platform proved complete says Complete.
//
// To a v4 panel the answer is paged: from m.Cursor the agent reads the
// platform's pages, keeps the bookings asked for, and stops before the
// answer would outgrow lookupBudget, with Next where the panel asks again;
// Complete then covers every platform page read. A v3 panel cannot ask for
// a next page, so it gets the whole list in one answer (which the codec
// refuses above MaxMessageBytes, as before).
func (a *agent) lookup(ctx context.Context, m wire.Lookup, version int) wire.LookupResult {
	res := wire.LookupResult{RequestID: m.RequestID, Bookings: []wire.Booking{}}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	budget := lookupBudget
	if version < wire.V4 {
		m.Cursor, budget = "", 0
	}
	var errs []string
	for _, lk := range a.sessions.lookers() {
		r, err := lookPages(ctx, lk, m, budget)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if !r.Complete {
			errs = append(errs, "the platform's answer did not prove itself complete")
			continue
		}
		r.RequestID = m.RequestID
		return r
	}
	switch {
	case len(errs) == 0:
		res.Error = "no signed-in worker to look up bookings with"
	case strings.HasPrefix(errs[0], "the platform's"):
		res.Error = errs[0]
	default:
		res.Error = "look-up failed: " + errs[0]
	}
	return res
}

// lookPages reads platform pages from m.Cursor through one session, keeping
// the bookings m asks for, until the list ends or (budget > 0) the next page
// would not fit; Next is then the cursor the last kept page ended at. A
// page that proves nothing ends the answer as incomplete.
func lookPages(ctx context.Context, lk lookFunc, m wire.Lookup, budget int) (wire.LookupResult, error) {
	res := wire.LookupResult{Bookings: []wire.Booking{}}
	cursor, size := m.Cursor, 0
	for {
		page, err := lk(ctx, cursor)
		if err != nil {
			return res, err
		}
		if res.Client == "" {
			res.Client = page.Client
		}
		if !page.Complete || (page.Client != "" && page.Client != res.Client) {
			res.Complete = false
			return res, nil
		}
		kept := page.Filter(m.Keys, m.Since)
		add := 0
		for _, b := range kept {
			add += bookingSize(b)
		}
		if budget > 0 && size > 0 && size+add > budget {
			// This page goes into the next answer.
			res.Next, res.Complete = cursor, true
			return res, nil
		}
		if budget > 0 && add > budget {
			return res, fmt.Errorf("one page of the platform's bookings (%d bytes) is larger than a message can carry", add)
		}
		res.Bookings = append(res.Bookings, kept...)
		size += add
		if page.Next == "" {
			res.Complete = true
			return res, nil
		}
		if page.Next == cursor {
			return res, fmt.Errorf("the platform's bookings cursor did not move (%s)", cursor)
		}
		cursor = page.Next
	}
}

// bookingSize is a booking's size in an answer's JSON (with its comma).
func bookingSize(b wire.Booking) int {
	raw, _ := json.Marshal(b)
	return len(raw) + 1
}

// Sessions coordinates the account's sign-ins across the agent's workers:
// one login at a time, and a worker whose session ended first adopts the
// cookies a sibling stored after a fresh login, so a session storm costs
// one one-time code, not one per worker (the platform refuses a code's step
// twice). Cookies live in the agent's store (0600), never in a log.
type Sessions struct {
	a     *agent
	login sync.Mutex

	mu      sync.Mutex
	gen     int // bumped on every stored login
	looking map[string]lookFunc
	changed chan struct{} // closed (and replaced) when new credentials are stored
}

func newSessions(a *agent) *Sessions {
	return &Sessions{a: a, looking: map[string]lookFunc{}, changed: make(chan struct{})}
}

// credentialsChanged wakes the workers that wait for new credentials.
func (s *Sessions) credentialsChanged() {
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// Changed is closed when credentials are next stored.
func (s *Sessions) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Generation is the number of the last stored login.
func (s *Sessions) Generation() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// Login gives a worker a signed-in session. have is the generation the
// worker's own cookies came from (0: none). If a newer login is stored, its
// cookies are returned for the worker to adopt (fresh=false); otherwise
// login runs (with the lock held) and what it returns is stored
// (fresh=true). The worker reports a fresh login as an event.
//
// board is where login sends the credentials (the worker's board URL):
// unless its origin is one the panel sealed the credentials for, nothing
// is sent and the error wraps wire.ErrOriginNotBound, whatever the
// configuration says.
func (s *Sessions) Login(ctx context.Context, have int, board string, login func(ctx context.Context, creds platform.Credentials) ([]store.Cookie, error)) (cookies []store.Cookie, gen int, fresh bool, err error) {
	s.login.Lock()
	defer s.login.Unlock()
	s.mu.Lock()
	g := s.gen
	s.mu.Unlock()
	if g > have {
		cs, err := s.a.store.Cookies(ctx)
		if err == nil && len(cs) > 0 {
			return cs, g, false, nil
		}
	}
	creds, ok, err := s.a.store.Credentials(ctx)
	if err != nil {
		return nil, 0, false, fmt.Errorf("agent: %w", err)
	}
	if !ok {
		return nil, 0, false, errors.New("agent: no platform credentials yet (the panel sends them in welcome)")
	}
	if err := creds.CheckOrigin(board); err != nil {
		return nil, 0, false, fmt.Errorf("%w: %w", errBoardNotBound, err)
	}
	// A sign-in is several requests to the platform: it waits for the
	// account's request budget rather than failing halfway.
	if err := s.a.budget.wait(ctx); err != nil {
		return nil, 0, false, err
	}
	cs, err := login(ctx, creds)
	if err != nil {
		return nil, 0, false, err
	}
	if err := s.a.store.SaveCookies(ctx, cs); err != nil {
		s.a.log.Error("agent: could not store the session cookies", "err", err)
	}
	s.mu.Lock()
	s.gen++
	g = s.gen
	s.mu.Unlock()
	return cs, g, true, nil
}

// errBoardNotBound: the worker's board is not one the credentials were
// sealed for (a configuration only a person or the panel can fix), as
// opposed to an adapter refusing a redirect mid-sign-in (a failed try).
var errBoardNotBound = errors.New("agent: sign in")

// lookFunc reads one page of the client's bookings from a cursor through a
// worker's signed-in session.
type lookFunc func(ctx context.Context, cursor string) (platform.Bookings, error)

// Register offers a worker's signed-in session for look-ups.
func (s *Sessions) Register(worker string, f lookFunc) (unregister func()) {
	s.mu.Lock()
	s.looking[worker] = f
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.looking, worker)
		s.mu.Unlock()
	}
}

func (s *Sessions) lookers() []lookFunc {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]lookFunc, 0, len(s.looking))
	for _, f := range s.looking {
		// A look-up settles claims whose outcome is unknown: it passes the
		// request budget (counted, never refused).
		out = append(out, func(ctx context.Context, cursor string) (platform.Bookings, error) {
			return f(mustSend(ctx), cursor)
		})
	}
	return out
}
