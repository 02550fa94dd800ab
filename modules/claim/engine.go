package claim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/cell"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Offset is an agent's measured clock offset with its error bound (from the
// gateway's ping/pong estimator). Agent timestamps are corrected with it.
type Offset = wire.Estimate

// Offerer delivers an offer to the tenant's connected actors on this replica
// (the gateway implements it). Every replica receives every offer of the
// tenants of the cells it runs; each fans out to its own connections.
type Offerer interface {
	Offer(ctx context.Context, tenant string, o wire.Offer)
}

// Lookuper asks a signed-in agent of the tenant whose account books as the
// client as to look up that client's bookings on the platform (the gateway
// implements it; the panel holds no platform credentials). An agent of
// another client must never answer: its "no booking" proves nothing.
type Lookuper interface {
	Lookup(ctx context.Context, tenant string, as Client, l wire.Lookup) (wire.LookupResult, error)
}

// Config tunes the engine. Zero values take the defaults.
type Config struct {
	// LeaseFor is the lease's length by the database clock (default 5s).
	LeaseFor time.Duration
	// HardTimeout bounds an action once ACTING; past it the sweeper makes
	// the claim UNKNOWN (default 15s). Workers get it in the lease result.
	HardTimeout time.Duration
	// BoardWorstLatency is the slowest the board is believed to commit a
	// booking after the request left (default 10s).
	BoardWorstLatency time.Duration
	// ClockErrorBound is the largest clock error allowed between panel,
	// agents and board (default 2s).
	ClockErrorBound time.Duration
	// Grace: the reconciler never releases before this long after the
	// action started. It must be ≥ HardTimeout + BoardWorstLatency +
	// ClockErrorBound; zero means exactly that sum.
	Grace time.Duration
	// FilterCacheTTL is how long the dispatcher trusts its copy of a
	// tenant's filters (default 2s): an edit applies within it everywhere.
	FilterCacheTTL time.Duration
	// Backoff is the reconciler's retry delay after attempt n (1-based).
	// Default: 1s doubling to 1 minute.
	Backoff func(attempt int) time.Duration
	// ReofferAfter and ReofferWindow: a queued job nobody holds (its offer
	// was lost, every actor was busy, or it was released) is offered again
	// by the leader's sweep once it is ReofferAfter old, for as long as it is
	// younger than ReofferWindow and not expired on the board.
	ReofferAfter, ReofferWindow time.Duration
	// SweepEvery, DuplicateSweepEvery: periods of the leader's sweeps
	// (defaults 2s and 5m). DuplicateWindow: how far back the duplicate
	// sweep looks (default 24h). ArchiveMargin: settled claims are archived
	// this long after their load expired (default 10m).
	SweepEvery, DuplicateSweepEvery time.Duration
	DuplicateWindow, ArchiveMargin  time.Duration
	// StrandedAfter: an UNKNOWN this old with no live reconcile job gets a
	// new one (default 5m).
	StrandedAfter time.Duration
	// WatchFirst is the first wait of a job's watch after a release in
	// doubt (default 2s); later waits are half the time watched so far, at
	// most WatchMaxInterval (WatchDelay).
	WatchFirst time.Duration
	// GateMargin: a granted action's gate check refuses from this long
	// before its send-by time, by the database clock (default 100ms).
	GateMargin time.Duration
	Clock      clock.Clock
	Log        *slog.Logger
	Registerer prometheus.Registerer
}

func (c *Config) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.LeaseFor, 5*time.Second)
	def(&c.HardTimeout, 15*time.Second)
	def(&c.BoardWorstLatency, 10*time.Second)
	def(&c.ClockErrorBound, 2*time.Second)
	def(&c.FilterCacheTTL, 2*time.Second)
	def(&c.SweepEvery, 2*time.Second)
	def(&c.ReofferAfter, 2*time.Second)
	def(&c.ReofferWindow, 2*time.Minute)
	def(&c.DuplicateSweepEvery, 5*time.Minute)
	def(&c.DuplicateWindow, 24*time.Hour)
	def(&c.ArchiveMargin, 10*time.Minute)
	def(&c.StrandedAfter, 5*time.Minute)
	def(&c.WatchFirst, 2*time.Second)
	def(&c.GateMargin, 100*time.Millisecond)
	if c.Grace <= 0 {
		c.Grace = c.MinGrace()
	}
	if c.Backoff == nil {
		c.Backoff = DefaultBackoff
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
}

// MinGrace is the least grace the rule allows.
func (c Config) MinGrace() time.Duration {
	return c.HardTimeout + c.BoardWorstLatency + c.ClockErrorBound
}

// DefaultBackoff is 1s, 2s, 4s … capped at one minute.
func DefaultBackoff(attempt int) time.Duration {
	d := time.Second
	for i := 1; i < attempt && d < time.Minute; i++ {
		d *= 2
	}
	return min(d, time.Minute)
}

// Engine is the panel-side claim API the gateway calls. Tenant and holder
// always come from the authenticated agent, never from a message.
type Engine struct {
	store *Store
	cfg   Config
	log   *slog.Logger
	m     *metrics

	mu       sync.RWMutex
	cells    *cell.Manager
	offerer  Offerer
	lookuper Lookuper

	fmu     sync.Mutex
	filters map[string]cachedFilters

	// keys caches each tenant's idempotency setting for offers (bookingkey.go).
	kmu  sync.Mutex
	keys map[string]cachedKeys

	// modes caches each tenant's dispatch mode (dispatch.go).
	dmu   sync.Mutex
	modes map[string]cachedMode

	// as is assignment dispatch's state (assign.go).
	as assigner

	// watchChecked: when each tenant's lost watches were last looked for.
	smu          sync.Mutex
	watchChecked map[string]time.Time

	// flights holds this replica's lease attempt per job (see Lease).
	lmu     sync.Mutex
	flights map[string]*leaseFlight
}

// leaseFlight is one replica's attempt at a job's lease: the first request
// asks Postgres, the concurrent ones wait for its answer.
type leaseFlight struct {
	done    chan struct{}
	granted bool
}

type cachedFilters struct {
	list []Filter
	at   time.Time
}

// NewEngine returns an engine over store. It refuses a grace below the rule.
func NewEngine(store *Store, cfg Config) (*Engine, error) {
	cfg.defaults()
	if cfg.Grace < cfg.MinGrace() {
		return nil, fmt.Errorf("claim: grace %s is below hard timeout + board worst latency + clock error bound = %s",
			cfg.Grace, cfg.MinGrace())
	}
	if cfg.ArchiveMargin < cfg.ClockErrorBound {
		return nil, fmt.Errorf("claim: archive margin %s is below the clock error bound %s: a load's expiry is the board's clock",
			cfg.ArchiveMargin, cfg.ClockErrorBound)
	}
	e := &Engine{store: store, cfg: cfg, log: cfg.Log.With("component", "claim"), m: newMetrics(cfg.Registerer),
		filters: map[string]cachedFilters{}}
	store.observer = e.observeEvidence
	store.bound = cfg.ClockErrorBound
	return e, nil
}

// ConflictAlarm is the stable log message of a conflict; the alarm itself
// (kind claim.conflict, critical) is raised in the transaction that marks
// the attempts (applyEvidence).
const ConflictAlarm = "ALARM: claim conflict: one job booked more than once for one client"

// observeEvidence counts what applied evidence did and logs a conflict.
func (e *Engine) observeEvidence(res EvidenceResult) {
	if res.Applied && res.Late {
		e.m.late.WithLabelValues(string(res.From)).Inc()
		e.log.Info("late evidence applied", "tenant", res.Tenant, "key", res.Key, "from_state", res.From, "source", res.Source)
	}
	if !res.Conflict {
		return
	}
	e.m.conflicts.Inc()
	e.log.Error(ConflictAlarm, "tenant", res.Tenant, "key", res.Key, "booking_ids", res.BookingIDs,
		"attempts", res.Tokens, "source", res.Source)
}

// Store is the engine's store.
func (e *Engine) Store() *Store { return e.store }

// Config is the engine's effective configuration.
func (e *Engine) Config() Config { return e.cfg }

// SetCells attaches the cell manager (Detected needs it).
func (e *Engine) SetCells(m *cell.Manager) { e.mu.Lock(); e.cells = m; e.mu.Unlock() }

// Cells is the attached cell manager (nil before SetCells).
func (e *Engine) Cells() *cell.Manager { e.mu.RLock(); defer e.mu.RUnlock(); return e.cells }

// SetOfferer attaches the gateway's offer fan-out.
func (e *Engine) SetOfferer(o Offerer) { e.mu.Lock(); e.offerer = o; e.mu.Unlock() }

// SetLookuper attaches the gateway's look-up.
func (e *Engine) SetLookuper(l Lookuper) { e.mu.Lock(); e.lookuper = l; e.mu.Unlock() }

func (e *Engine) lookup() Lookuper { e.mu.RLock(); defer e.mu.RUnlock(); return e.lookuper }

// CellConfig fills a cell.Config's Dispatch and Deliver with the engine's.
func (e *Engine) CellConfig(c cell.Config) cell.Config {
	c.Dispatch = e.Dispatch
	c.DispatchBatch = e.DispatchBatch
	c.Deliver = e.Deliver
	c.Grant = e.DeliverGrant
	return c
}

func newID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Detected handles a watcher's sightings: each agent timestamp is corrected
// to the panel's clock by the measured offset (the error bound goes with
// it), then the tenant's cell drops duplicates and queues the first. It
// returns the first error (cell.ErrFailing while the cell is down); the
// other sightings are still tried.
func (e *Engine) Detected(ctx context.Context, tenant, agentID string, det wire.Detected, offset Offset) error {
	cells := e.Cells()
	if cells == nil {
		return errors.New("claim: no cells attached")
	}
	var first error
	for _, s := range det.Sightings {
		if s.Job.Key == "" {
			continue
		}
		seen := e.cfg.Clock.Now()
		if !s.SeenAt.IsZero() {
			seen = offset.ToPanel(s.SeenAt)
		}
		job, boardErr := onPanelClock(s.Job, det.BoardClock, offset)
		t0 := time.Now()
		_, _, err := cells.Detect(ctx, cell.Entry{Tenant: tenant, Job: job, SeenAt: seen,
			ClockErrorMS: offset.ErrorBound.Milliseconds(), BoardClockErrorMS: boardErr, Agent: agentID, Worker: det.Worker})
		if err == nil {
			e.m.panel.WithLabelValues(PanelStepDetect).Observe(time.Since(t0).Seconds())
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// onPanelClock puts a job's platform times (published_at, expires_at) on the
// panel's clock, by the watcher's reading of the platform's clock against
// its agent's and the agent's offset against the panel's, and returns the
// bound of the publish → detect span: the reading's own, because the
// agent's offset is subtracted from published_at and seen_at alike and
// cancels out of their difference. Without a reading the platform's times
// are kept as they are and the bound is unknown (nil).
func onPanelClock(j wire.Job, bc *wire.BoardClock, offset Offset) (wire.Job, *int64) {
	if bc == nil {
		return j, nil
	}
	toPanel := func(t time.Time) time.Time {
		if t.IsZero() {
			return t
		}
		return offset.ToPanel(t.Add(-bc.Offset()))
	}
	j.PublishedAt, j.ExpiresAt = toPanel(j.PublishedAt), toPanel(j.ExpiresAt)
	ms := (bc.ErrorBound() + time.Millisecond - 1).Milliseconds()
	return j, &ms
}

// tenantFilters returns the tenant's filters from a short-lived cache.
func (e *Engine) tenantFilters(ctx context.Context, tenant string) ([]Filter, error) {
	e.fmu.Lock()
	c, ok := e.filters[tenant]
	e.fmu.Unlock()
	if ok && e.cfg.Clock.Since(c.at) < e.cfg.FilterCacheTTL {
		return c.list, nil
	}
	list, err := e.store.Filters(ctx, tenant)
	if err != nil {
		return nil, err
	}
	e.fmu.Lock()
	e.filters[tenant] = cachedFilters{list: list, at: e.cfg.Clock.Now()}
	e.fmu.Unlock()
	return list, nil
}

func (e *Engine) forgetFilters(tenant string) {
	e.fmu.Lock()
	delete(e.filters, tenant)
	e.fmu.Unlock()
}

// Dispatch handles one queued entry of a cell's stream: the tenant's filters
// decide, the panel records the job (the facts the lease checks again), and
// the offer goes to every replica at once over the cell's pub/sub.
//
// In the tenant's assign mode the dispatcher instead chooses one warm actor
// and records the job and grants it in one transaction (assign.go); with no
// warm actor known it offers the job as in race mode.
func (e *Engine) Dispatch(ctx context.Context, cellName string, en cell.Entry) error {
	t0 := time.Now()
	filters, err := e.tenantFilters(ctx, en.Tenant)
	if err != nil {
		return err
	}
	if !Wanted(filters, en.Job) {
		e.m.dispatched.WithLabelValues("filtered").Inc()
		return nil
	}
	q := QueuedJob{Tenant: en.Tenant, Cell: cellName, Job: en.Job, SeenAt: en.SeenAt,
		QueuedAt: en.QueuedAt, ClockErrorMS: en.ClockErrorMS, BoardClockErrorMS: en.BoardClockErrorMS, Agent: en.Agent, Worker: en.Worker}
	if e.dispatchMode(ctx, en.Tenant) == DispatchAssign {
		done, err := e.assign(ctx, q, t0, PanelStepGrant, nil)
		if err != nil {
			return err
		}
		if done {
			e.m.dispatched.WithLabelValues("granted").Inc()
			return nil
		}
	}
	if _, err := e.store.RecordJob(ctx, q); err != nil {
		return err
	}
	e.m.dispatched.WithLabelValues("offered").Inc()
	return e.publish(ctx, cellName, en.Tenant, en.Job, en.SeenAt, en.QueuedAt, false)
}

// publish sends an offer over the cell's pub/sub; again marks a re-offer
// (the sweep's, an approved review's), which is timed from its own start.
func (e *Engine) publish(ctx context.Context, cellName, tenant string, j wire.Job, seen, queued time.Time, again bool) error {
	cells := e.Cells()
	if cells == nil {
		return errors.New("claim: no cells attached")
	}
	return cells.Publish(ctx, cellName, tenant, wire.Offer{OfferID: newID(), Job: j, SeenAt: seen, QueuedAt: queued, Cell: cellName,
		KeysHonoured: e.keysHonoured(ctx, tenant)}, again)
}

// Deliver hands an offer from the cell's pub/sub to this replica's actors.
// A first offer is timed from the job's queueing (stream, dispatcher,
// pub/sub: queued_offered); a re-offer from its own publication (reoffered),
// never from the job's first queueing, which would read as seconds of
// queue that never happened.
func (e *Engine) Deliver(ctx context.Context, tenant string, o wire.Offer, meta cell.OfferMeta) {
	e.mu.RLock()
	off := e.offerer
	e.mu.RUnlock()
	// Both ends are panel clocks (the replica that queued or published,
	// this one): on one host the same clock, across hosts their NTP error.
	switch {
	case meta.Again && !meta.PublishedAt.IsZero():
		if d := e.cfg.Clock.Since(meta.PublishedAt); d >= 0 {
			e.m.panel.WithLabelValues(PanelStepReoffered).Observe(d.Seconds())
		}
	case meta.Again:
		// A re-offer from a replica that does not say when it published:
		// not timed (its queued_at is the job's first queueing).
	case !o.QueuedAt.IsZero():
		if d := e.cfg.Clock.Since(o.QueuedAt); d >= 0 {
			e.m.panel.WithLabelValues(PanelStepQueuedOffered).Observe(d.Seconds())
		}
	}
	if off != nil {
		off.Offer(ctx, tenant, o)
	}
}

// wireReason maps a refusal to the protocol's reason constant.
func wireReason(err error) string {
	var r *Refusal
	if !errors.As(err, &r) {
		return wire.ReasonInternal
	}
	switch r.Reason {
	case ReasonHeld, ReasonConflict:
		return wire.ReasonHeld
	case ReasonPaused, ReasonNotDurable, ReasonPlatformReview:
		return wire.ReasonPaused
	case ReasonUnknownJob, ReasonMissing:
		return wire.ReasonUnknownJob
	case ReasonFiltered:
		return wire.ReasonFiltered
	case ReasonCapReached:
		return wire.ReasonCapReached
	case ReasonReview:
		return wire.ReasonReview
	case ReasonStaleToken:
		return wire.ReasonStaleToken
	case ReasonNotHolder:
		return wire.ReasonNotHolder
	case ReasonExpired:
		return wire.ReasonExpired
	case ReasonWrongState:
		return wire.ReasonWrongState
	}
	return wire.ReasonInternal
}

// holder fills the worker from the message when the gateway gave only the
// agent: a worker name is scoped inside its authenticated agent.
func holder(h Holder, worker string) Holder {
	if h.Worker == "" {
		h.Worker = worker
	}
	return h
}

// Lease runs the lease statement for an actor. Only a granted result
// carries a token.
//
// Every matching actor answers an offer at once, so a job draws dozens of
// lease requests within milliseconds. Within one replica only the first asks
// Postgres; the others wait for its answer and, when it was granted, are
// refused as held without a statement — a refusal can never cause a
// duplicate, and Postgres still decides between replicas. When the first
// attempt was not granted, each waiter asks Postgres itself (the refusal may
// have been the first actor's own, e.g. a stale lease). A granted job is
// remembered for the lease's length, after which a re-lease is possible.
func (e *Engine) Lease(ctx context.Context, tenant string, h Holder, r wire.LeaseRequest) wire.LeaseResult {
	k := tenant + "\x00" + r.Key
	e.lmu.Lock()
	if e.flights == nil {
		e.flights = map[string]*leaseFlight{}
	}
	f, waiting := e.flights[k]
	if !waiting {
		f = &leaseFlight{done: make(chan struct{})}
		e.flights[k] = f
	}
	e.lmu.Unlock()
	if waiting {
		select {
		case <-f.done:
		case <-ctx.Done():
			return wire.LeaseResult{RequestID: r.RequestID, Key: r.Key, Reason: wire.ReasonInternal}
		}
		if f.granted {
			e.m.leases.WithLabelValues(wire.ReasonHeld).Inc()
			return wire.LeaseResult{RequestID: r.RequestID, Key: r.Key, Reason: wire.ReasonHeld}
		}
		return e.lease(ctx, tenant, h, r)
	}
	res := e.lease(ctx, tenant, h, r)
	f.granted = res.Granted
	close(f.done)
	if res.Granted {
		// Remembered no longer than the lease, nor than grace: a claim the
		// reconciler released on another replica is leasable again here
		// once grace has passed at the latest.
		time.AfterFunc(min(e.cfg.LeaseFor, e.cfg.Grace), func() { e.forgetFlight(k, f) })
	} else {
		e.forgetFlight(k, f)
	}
	return res
}

// forgetFlight drops a finished attempt (a NOT_SENT release also calls it, so
// the job may be leased again at once).
func (e *Engine) forgetFlight(k string, f *leaseFlight) {
	e.lmu.Lock()
	if cur, ok := e.flights[k]; ok && (f == nil || cur == f) {
		delete(e.flights, k)
	}
	e.lmu.Unlock()
}

func (e *Engine) lease(ctx context.Context, tenant string, h Holder, r wire.LeaseRequest) wire.LeaseResult {
	h = holder(h, r.Worker)
	res := wire.LeaseResult{RequestID: r.RequestID, Key: r.Key}
	if h.Agent == "" || h.Worker == "" || tenant == "" || r.Key == "" {
		res.Reason = wire.ReasonInternal
		e.m.leases.WithLabelValues(res.Reason).Inc()
		return res
	}
	t0 := time.Now()
	l, err := e.store.Lease(ctx, LeaseRequest{Tenant: tenant, Key: r.Key, Holder: h, For: e.cfg.LeaseFor})
	e.m.panel.WithLabelValues(PanelStepLease).Observe(time.Since(t0).Seconds())
	if err != nil {
		res.Reason = wireReason(err)
		if res.Reason == wire.ReasonInternal {
			e.log.Error("lease failed", "tenant", tenant, "key", r.Key, "err", err)
		}
		e.m.leases.WithLabelValues(res.Reason).Inc()
		return res
	}
	e.m.leases.WithLabelValues("granted").Inc()
	res.Granted, res.Token, res.OperationID = true, l.Token, l.OperationID
	res.BookingKey, res.KeysHonoured = l.BookingKey, l.KeysHonoured
	res.RemainingMillis = l.Remaining.Milliseconds()
	res.HardTimeoutMillis = e.cfg.HardTimeout.Milliseconds()
	return res
}

// Act runs the fenced LEASED → ACTING statement. Act only on OK.
func (e *Engine) Act(ctx context.Context, tenant string, h Holder, r wire.ActRequest) wire.ActResult {
	h = holder(h, r.Worker)
	res := wire.ActResult{RequestID: r.RequestID, Key: r.Key}
	if h.Agent == "" || h.Worker == "" || tenant == "" {
		res.Reason = wire.ReasonInternal
		return res
	}
	t0 := time.Now()
	g, err := e.store.StartActing(ctx, tenant, r.Key, r.Token, h, e.cfg.HardTimeout)
	e.m.panel.WithLabelValues(PanelStepAct).Observe(time.Since(t0).Seconds())
	if err != nil {
		res.Reason = wireReason(err)
		if res.Reason == wire.ReasonInternal {
			e.log.Error("act failed", "tenant", tenant, "key", r.Key, "err", err)
		}
		e.m.acts.WithLabelValues(res.Reason).Inc()
		return res
	}
	e.m.acts.WithLabelValues("ok").Inc()
	res.OK, res.OperationID = true, g.OperationID
	return res
}

// Outcome records an actor's report (or its journal's, after a restart).
// Agent times are corrected by the offset. A repeat of a report the claim
// already reflects is acknowledged, so the agent can drop its journal entry.
func (e *Engine) Outcome(ctx context.Context, tenant string, h Holder, o wire.Outcome, offset Offset) wire.OutcomeAck {
	h = holder(h, o.Worker)
	ack := wire.OutcomeAck{RequestID: o.RequestID}
	var out Outcome
	switch o.Result {
	case wire.ResultConfirmed:
		out.Result = Confirmed
	case wire.ResultTaken:
		out.Result = Taken
	case wire.ResultNotSent:
		out.Result = NotSent
	case wire.ResultUnknown:
		out.Result = Unknown
	default:
		ack.Reason = wire.ReasonInternal
		return ack
	}
	if o.FromJournal {
		// A journal entry found after a restart: whatever it says, the
		// board may have committed.
		out.Result = Unknown
	}
	if o.SentAt != nil {
		out.SentAt = offset.ToPanel(*o.SentAt)
	}
	if o.ConfirmedAt != nil {
		out.ConfirmedAt = offset.ToPanel(*o.ConfirmedAt)
	}
	out.Detail = o.Detail
	err := e.store.Report(ctx, tenant, o.Key, o.Token, h, out)
	var r *Refusal
	switch {
	case err == nil:
		ack.OK = true
		e.m.outcomes.WithLabelValues(string(out.Result)).Inc()
		if out.Result == Confirmed {
			e.observe(ctx, tenant, o.Key)
		}
		if out.Result == NotSent {
			// Released at once: another actor may lease it right away, and
			// in assign mode another actor is granted it now.
			e.forgetFlight(tenant+"\x00"+o.Key, nil)
			go e.regrant(context.WithoutCancel(ctx), tenant, o.Key, map[string]bool{h.Agent + "/" + h.Worker: true})
		}
	case errors.As(err, &r) && r.Reason == ReasonWrongState:
		// Token and holder match: the claim already moved on (a repeated
		// report, or the sweeper or reconciler got there first).
		ack.OK = true
		ack.Reason = wire.ReasonWrongState
	default:
		ack.Reason = wireReason(err)
		if ack.Reason == wire.ReasonInternal {
			e.log.Error("outcome failed", "tenant", tenant, "key", o.Key, "err", err)
		}
	}
	return ack
}

// AgentLost makes the ACTING claims of one agent connection UNKNOWN (each
// with its reconcile job) and releases its LEASED ones. The gateway calls it
// when an agent's connection ends; claims of the same agent's newer
// connection are not touched (connID empty: every claim of the agent).
func (e *Engine) AgentLost(ctx context.Context, tenant, agentID, connID string) error {
	res, err := e.store.AgentLost(ctx, tenant, agentID, connID)
	if err != nil {
		return err
	}
	if len(res.Unknown)+len(res.Released) > 0 {
		e.log.Info("agent connection lost: its claims settled", "tenant", tenant, "agent", agentID, "conn", connID,
			"unknown", len(res.Unknown), "released", len(res.Released))
	}
	return nil
}

// PutFilter saves a filter (audited) and applies it on this replica at once.
func (e *Engine) PutFilter(ctx context.Context, by audit.Entry, tenant string, f Filter) (int64, error) {
	defer e.forgetFilters(tenant)
	return e.store.PutFilter(ctx, by, tenant, f)
}

// DeleteFilter removes a filter (audited).
func (e *Engine) DeleteFilter(ctx context.Context, by audit.Entry, tenant string, id int64) error {
	defer e.forgetFilters(tenant)
	return e.store.DeleteFilter(ctx, by, tenant, id)
}

// Decide approves or rejects a job waiting for review (audited); an approved
// job is dispatched again at once: in assign mode granted to a warm actor
// (offered when none is warm), in race mode offered so the tenant's actors
// race for it.
func (e *Engine) Decide(ctx context.Context, by audit.Entry, tenant, key string, approve bool) error {
	if err := e.store.Decide(ctx, by, tenant, key, approve); err != nil {
		return err
	}
	if !approve {
		return nil
	}
	q, err := e.store.JobRecord(ctx, tenant, key)
	if err == nil && e.dispatchMode(ctx, tenant) == DispatchAssign {
		done, aerr := e.assign(ctx, q, time.Now(), PanelStepRegrant, nil)
		if aerr == nil && done {
			return nil
		}
	}
	if err == nil {
		err = e.publish(ctx, q.Cell, tenant, q.Job, q.SeenAt, q.QueuedAt, true)
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotOffered, err)
	}
	return nil
}

// ErrNotOffered: the approval stands (and is audited), but the job could not
// be offered again now (its cell is failing, or no cell runs here).
var ErrNotOffered = errors.New("claim: approved, but the job could not be offered again now")
