package claim

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/fleetwright/fleetwright/modules/cell"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Assignment dispatch (docs/CLAIMS.md, "Dispatch modes"). Each replica
// publishes the warm actors it holds to the tenant's cell every WarmEvery
// (expiring after WarmTTL), so the dispatcher of any replica knows the
// tenant's actors everywhere. For a queued job the dispatcher chooses one —
// least busy, then the account with the fewest of this replica's recent
// grants, then the lowest round trip — records the job and grants it to
// that actor in one transaction (Store.Grant: the claim is written ACTING),
// and sends the grant over the cell's pub/sub to the replica holding the
// actor's connection, which hands it on as lease_grant. Postgres still
// decides: the grant is one conditional upsert on (tenant, job key).

// ActorKinds are the worker kinds that book (the agent's browser actor and
// HTTP actor).
var ActorKinds = []string{"actor", "http_actor"}

// Timings of assignment dispatch.
const (
	// WarmEvery is how often a replica publishes its warm actors.
	WarmEvery = time.Second
	// WarmTTL is how long a published list stands without a refresh.
	WarmTTL = 3 * time.Second
	// warmCacheFor is how long a dispatcher trusts its read of a tenant's
	// warm actors; its own grants since count on top (inflightFor).
	warmCacheFor = 200 * time.Millisecond
	// inflightFor is how long a grant this replica made counts towards its
	// actor's load here (a little over one publication period: by then the
	// holding replica's published list counts it).
	inflightFor = 1500 * time.Millisecond
)

// WarmActor is an actor one replica can reach now: connected over protocol
// v4, its agent not paused, the worker running (not needing a person), its
// round trip measured.
type WarmActor struct {
	Agent   string `json:"a"`
	Conn    string `json:"c"`
	Worker  string `json:"w"`
	Kind    string `json:"k,omitempty"`
	Account string `json:"acct,omitempty"`
	// Replica holds the connection (filled by the publishing engine).
	Replica string `json:"r,omitempty"`
	// Busy counts the grants its connection holds without an outcome yet,
	// plus one while the worker reports a task in hand.
	Busy      int   `json:"b"`
	RTTMicros int64 `json:"rtt"`
}

func (a WarmActor) key() string { return a.Agent + "/" + a.Worker }

// WarmSource lists the warm actors this replica holds, by tenant (the
// gateway implements it).
type WarmSource interface {
	WarmActors() map[string][]WarmActor
}

// Granter hands a grant to the actor's connection on this replica (the
// gateway implements it). ErrNotDelivered means nothing was written: the
// connection is not here (any more), or does not speak protocol v4.
type Granter interface {
	Grant(ctx context.Context, tenant string, a WarmActor, g wire.LeaseGrant) error
}

// ErrNotDelivered: a grant was written to no connection, so its request
// provably never left; the engine releases it (NOT_SENT) and grants again.
var ErrNotDelivered = errors.New("claim: the grant was not delivered to the actor's connection")

// grantNote is a grant as it travels over the cell's pub/sub.
type grantNote struct {
	Tenant string          `json:"t"`
	Actor  WarmActor       `json:"a"`
	Grant  wire.LeaseGrant `json:"g"`
	// Sent is the dispatching replica's clock when it published the grant.
	Sent time.Time `json:"s"`
}

type cachedWarm struct {
	list []WarmActor
	at   time.Time
}

type inflight struct {
	actor, account string
	until          time.Time
}

// assigner is the engine's assignment state.
type assigner struct {
	mu        sync.Mutex
	src       WarmSource
	granter   Granter
	warm      map[string]cachedWarm
	recent    []inflight
	published map[string]bool // tenants this replica published last round
	regrants  map[string][]time.Time
}

// SetAssign attaches the gateway's warm actors and grant delivery.
func (e *Engine) SetAssign(src WarmSource, g Granter) {
	e.as.mu.Lock()
	e.as.src, e.as.granter = src, g
	e.as.mu.Unlock()
}

func (e *Engine) granter() Granter {
	e.as.mu.Lock()
	defer e.as.mu.Unlock()
	return e.as.granter
}

// RunWarm publishes this replica's warm actors of every tenant in assign
// mode to the tenant's cell every WarmEvery until ctx ends. A tenant whose
// actors all went away here gets an empty list at once, so other replicas
// stop choosing them before the old list expires.
func (e *Engine) RunWarm(ctx context.Context) {
	for {
		e.publishWarm(ctx)
		select {
		case <-ctx.Done():
			return
		case <-e.cfg.Clock.After(WarmEvery):
		}
	}
}

func (e *Engine) publishWarm(ctx context.Context) {
	cells := e.Cells()
	e.as.mu.Lock()
	src := e.as.src
	last := e.as.published
	e.as.mu.Unlock()
	if cells == nil || src == nil {
		return
	}
	lists := src.WarmActors()
	now := map[string]bool{}
	for tenant, list := range lists {
		if e.dispatchMode(ctx, tenant) != DispatchAssign {
			continue
		}
		now[tenant] = true
		for i := range list {
			list[i].Replica = cells.Consumer()
		}
		e.putWarm(ctx, cells, tenant, list)
	}
	for tenant := range last {
		if !now[tenant] {
			e.putWarm(ctx, cells, tenant, []WarmActor{})
		}
	}
	e.as.mu.Lock()
	e.as.published = now
	e.as.mu.Unlock()
}

func (e *Engine) putWarm(ctx context.Context, cells *cell.Manager, tenant string, list []WarmActor) {
	body, err := json.Marshal(list)
	if err != nil {
		return
	}
	if err := cells.PublishWarm(ctx, tenant, body, WarmTTL); err != nil && ctx.Err() == nil {
		e.log.Debug("warm actors not published", "tenant", tenant, "err", err)
	}
}

// warmOf reads the tenant's warm actors on every replica (cached briefly).
func (e *Engine) warmOf(ctx context.Context, tenant string) ([]WarmActor, error) {
	e.as.mu.Lock()
	c, ok := e.as.warm[tenant]
	e.as.mu.Unlock()
	if ok && e.cfg.Clock.Since(c.at) < warmCacheFor {
		return c.list, nil
	}
	cells := e.Cells()
	if cells == nil {
		return nil, errors.New("claim: no cells attached")
	}
	byReplica, err := cells.Warm(ctx, tenant)
	if err != nil {
		return nil, err
	}
	var list []WarmActor
	for replica, body := range byReplica {
		var got []WarmActor
		if json.Unmarshal(body, &got) != nil {
			continue
		}
		for _, a := range got {
			a.Replica = replica
			list = append(list, a)
		}
	}
	e.as.mu.Lock()
	if e.as.warm == nil {
		e.as.warm = map[string]cachedWarm{}
	}
	e.as.warm[tenant] = cachedWarm{list: list, at: e.cfg.Clock.Now()}
	e.as.mu.Unlock()
	return list, nil
}

// choose picks the actor for the next grant: the least busy (its published
// load plus this replica's grants to it since), then the account with the
// fewest of this replica's recent grants (spread across accounts: one
// account's session or rate limit is not the fleet's), then the lowest round
// trip; ties are broken at random so replicas do not all pick the same one.
// The gateway publishes only actors that may act (not paused, not needing a
// person, on protocol v4).
func (e *Engine) choose(actors []WarmActor, exclude map[string]bool) (WarmActor, bool) {
	now := e.cfg.Clock.Now()
	e.as.mu.Lock()
	live := e.as.recent[:0]
	byActor, byAccount := map[string]int{}, map[string]int{}
	for _, r := range e.as.recent {
		if now.Before(r.until) {
			live = append(live, r)
			byActor[r.actor]++
			byAccount[r.account]++
		}
	}
	e.as.recent = live
	e.as.mu.Unlock()
	cands := make([]WarmActor, 0, len(actors))
	for _, a := range actors {
		if !exclude[a.key()] && slices.Contains(ActorKinds, a.Kind) {
			cands = append(cands, a)
		}
	}
	if len(cands) == 0 {
		return WarmActor{}, false
	}
	rand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		la, lb := a.Busy+byActor[a.key()], b.Busy+byActor[b.key()]
		if la != lb {
			return la < lb
		}
		if byAccount[a.Account] != byAccount[b.Account] {
			return byAccount[a.Account] < byAccount[b.Account]
		}
		return a.RTTMicros < b.RTTMicros
	})
	return cands[0], true
}

func (e *Engine) noteGrant(a WarmActor) {
	e.as.mu.Lock()
	e.as.recent = append(e.as.recent, inflight{actor: a.key(), account: a.Account, until: e.cfg.Clock.Now().Add(inflightFor)})
	e.as.mu.Unlock()
}

// assign chooses an actor for the job and grants it (recording the job in
// the same transaction). It reports false when no warm actor could be
// chosen: the caller offers the job instead (race), so a tenant whose
// agents are older than v4, or whose actors' lists have not arrived yet,
// still claims. A refusal (held, paused, filtered, cap, review) is handled:
// it applies to any actor. step names the panel step observed (grant for a
// first grant, regrant for any later one, each timed from its own start).
func (e *Engine) assign(ctx context.Context, q QueuedJob, t0 time.Time, step string, exclude map[string]bool) (bool, error) {
	actors, err := e.warmOf(ctx, q.Tenant)
	if err != nil {
		// The lists cannot be read: offered as in race mode (which fails
		// too, and is retried, if the cell itself is failing).
		e.log.Debug("warm actors unreadable; offering instead", "tenant", q.Tenant, "err", err)
		return false, nil
	}
	a, ok := e.choose(actors, exclude)
	if !ok {
		return false, nil
	}
	g, err := e.store.Grant(ctx, GrantRequest{Job: q, Holder: Holder{Agent: a.Agent, Worker: a.Worker, Conn: a.Conn},
		SendWithin: e.cfg.LeaseFor, HardTimeout: e.cfg.HardTimeout})
	if err != nil {
		var r *Refusal
		if errors.As(err, &r) {
			e.m.grants.WithLabelValues(wireReason(err)).Inc()
			return true, nil
		}
		return false, err
	}
	e.m.grants.WithLabelValues("granted").Inc()
	e.noteGrant(a)
	e.sendGrant(ctx, e.Cells(), q, a, g, t0, step)
	return true, nil
}

// DeliverGrant hands a grant published for this replica to the gateway. A
// grant written to no connection is released (NOT_SENT: its request
// provably never left) and granted again to another actor.
func (e *Engine) DeliverGrant(ctx context.Context, body []byte) {
	var n grantNote
	if err := json.Unmarshal(body, &n); err != nil || n.Tenant == "" || n.Grant.Token <= 0 {
		e.log.Warn("dropping a malformed grant")
		return
	}
	if !n.Sent.IsZero() {
		if d := e.cfg.Clock.Since(n.Sent); d >= 0 {
			e.m.panel.WithLabelValues(PanelStepGrantRouted).Observe(d.Seconds())
		}
	}
	gr := e.granter()
	go func() {
		err := ErrNotDelivered
		if gr != nil {
			err = gr.Grant(ctx, n.Tenant, n.Actor, n.Grant)
		}
		switch {
		case errors.Is(err, ErrNotDelivered):
			e.undelivered(context.WithoutCancel(ctx), n.Tenant, n.Actor, n.Grant, "the actor's connection is not on the replica it was published from")
		case err != nil:
			// Written or not, the connection failed: its end settles the
			// grant (UNKNOWN), as for any action in flight on it.
			e.log.Warn("grant delivery failed", "tenant", n.Tenant, "key", n.Grant.Job.Key, "err", err)
		}
	}()
}

// undelivered releases a grant that reached no connection and grants the
// job again, to another actor (or offers it when none is warm).
func (e *Engine) undelivered(ctx context.Context, tenant string, a WarmActor, g wire.LeaseGrant, why string) {
	e.m.grants.WithLabelValues("undelivered").Inc()
	err := e.store.Report(ctx, tenant, g.Job.Key, g.Token, Holder{Agent: a.Agent, Worker: a.Worker, Conn: a.Conn},
		Outcome{Result: NotSent, Detail: "the grant was never delivered: " + why})
	if err != nil {
		e.log.Warn("an undelivered grant could not be released; it settles by its deadline", "tenant", tenant,
			"key", g.Job.Key, "err", err)
		return
	}
	e.regrant(ctx, tenant, g.Job.Key, map[string]bool{a.key(): true})
}

// regrant grants a released job again (NOT_SENT, an undelivered grant),
// timed from its own start; with no warm actor it is offered instead.
func (e *Engine) regrant(ctx context.Context, tenant, key string, exclude map[string]bool) {
	if e.dispatchMode(ctx, tenant) != DispatchAssign || !e.regrantAllowed(tenant, key) {
		return
	}
	t0 := time.Now()
	q, err := e.store.JobRecord(ctx, tenant, key)
	if err != nil {
		return
	}
	done, err := e.assign(ctx, q, t0, PanelStepRegrant, exclude)
	if err == nil && !done {
		err = e.publish(ctx, q.Cell, tenant, q.Job, q.SeenAt, q.QueuedAt, true)
	}
	if err != nil {
		e.log.Debug("re-grant failed; the sweep offers it again", "tenant", tenant, "key", key, "err", err)
	}
}

// maxQuickRegrants bounds the immediate re-grants of one job on one replica
// within regrantMemory: a job every actor answers NOT_SENT (a platform
// refusing them all) must not bounce between actors; after these it waits
// for the sweep's re-grant (every 2 s), as a race-mode job waits for its
// re-offer.
const (
	maxQuickRegrants = 3
	regrantMemory    = time.Minute
)

func (e *Engine) regrantAllowed(tenant, key string) bool {
	now := e.cfg.Clock.Now()
	e.as.mu.Lock()
	defer e.as.mu.Unlock()
	if e.as.regrants == nil {
		e.as.regrants = map[string][]time.Time{}
	}
	k := tenant + "\x00" + key
	var live []time.Time
	for _, t := range e.as.regrants[k] {
		if now.Sub(t) < regrantMemory {
			live = append(live, t)
		}
	}
	if len(e.as.regrants) > 10000 {
		// Bounded memory: forget everything older at once.
		for kk, ts := range e.as.regrants {
			if len(ts) == 0 || now.Sub(ts[len(ts)-1]) >= regrantMemory {
				delete(e.as.regrants, kk)
			}
		}
	}
	if len(live) >= maxQuickRegrants {
		e.as.regrants[k] = live
		return false
	}
	e.as.regrants[k] = append(live, now)
	return true
}

// Gate runs the gate's read-only fenced check for a granted action, just
// before its request leaves.
func (e *Engine) Gate(ctx context.Context, tenant string, h Holder, r wire.GateCheck) wire.GateResult {
	h = holder(h, r.Worker)
	res := wire.GateResult{RequestID: r.RequestID, Key: r.Key}
	if h.Agent == "" || h.Worker == "" || tenant == "" || r.Key == "" {
		res.Reason = wire.ReasonInternal
		return res
	}
	t0 := time.Now()
	err := e.store.GateCheck(ctx, tenant, r.Key, r.Token, h, e.cfg.GateMargin)
	e.m.panel.WithLabelValues(PanelStepGate).Observe(time.Since(t0).Seconds())
	if err != nil {
		res.Reason = wireReason(err)
		if res.Reason == wire.ReasonInternal {
			e.log.Error("gate check failed", "tenant", tenant, "key", r.Key, "err", err)
		}
		e.m.gates.WithLabelValues(res.Reason).Inc()
		return res
	}
	e.m.gates.WithLabelValues("ok").Inc()
	res.OK = true
	return res
}
