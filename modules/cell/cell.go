// Package cell runs the claim engine's cells: each cell is a Redis that
// deduplicates a tenant's sightings (SET NX with expiry), queues the first one
// in a stream read by a consumer group, and carries offers to every panel
// replica over pub/sub. Cells and the tenant → cell routing are rows in
// Postgres, reloaded without a restart. A cell whose Redis fails stops alone,
// is reported failing, and resumes by itself.
package cell

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Redis keys and names, the same in every cell.
const (
	streamKey     = "fw:jobs"
	group         = "dispatch"
	seenPrefix    = "fw:seen:"   // fw:seen:<tenant>:<job key>
	offerPrefix   = "fw:offers:" // fw:offers:<tenant>
	offerPattern  = offerPrefix + "*"
	DefaultCell   = "default"
	entryField    = "e"
	reclaimBatch  = 64
	readBatch     = 64
	maxFailureLog = 200
)

// ErrFailing is returned for a sighting of a tenant whose cell's Redis is
// failing: the sighting is lost (costs a chance, never a duplicate).
var ErrFailing = errors.New("cell: the tenant's cell is failing")

// Entry is one queued job in a cell's stream.
type Entry struct {
	Tenant string   `json:"t"`
	Job    wire.Job `json:"j"`
	// SeenAt is the watcher's time, corrected to the panel's clock.
	SeenAt       time.Time `json:"s"`
	ClockErrorMS int64     `json:"ce"`
	// BoardClockErrorMS bounds the error of the job's published_at and
	// expires_at, put on the panel's clock from the watcher's reading of
	// the platform's clock (nil: not measured, the platform's own times).
	BoardClockErrorMS *int64    `json:"be,omitempty"`
	QueuedAt          time.Time `json:"q"`
	Agent             string    `json:"a"`
	Worker            string    `json:"w"`
}

// Config configures a Manager. Zero durations and sizes take the defaults.
type Config struct {
	// DefaultRedisURL serves cells whose redis_url is empty.
	DefaultRedisURL string
	// Consumer names this replica in each cell's consumer group.
	Consumer string
	// PoolSize is each cell's Redis connection pool (default 32: one per
	// concurrent Detected call the gateway makes, plus the loops).
	PoolSize int
	// DedupeTTL keeps a sighting's key when the job has no expiry (15m).
	DedupeTTL time.Duration
	// StreamMaxLen caps each stream (approximate MAXLEN, default 10000).
	StreamMaxLen int64
	// ReclaimIdle: pending entries idle this long are taken over from a
	// dead consumer with XAUTOCLAIM (default 10s).
	ReclaimIdle time.Duration
	// MaxAge: an entry not dispatched this long after it was queued (its
	// dispatch kept failing, or its consumer died) is queued again with the
	// time it is dispatched, while its load can still be booked, and
	// dropped with its seen-key once it cannot (default 60s).
	MaxAge time.Duration
	// Reload is how often cells and routes are re-read (default 2s).
	Reload time.Duration
	// Dispatch handles a queued entry (filters, record, offer). An error
	// leaves the entry pending, to be reclaimed and retried.
	Dispatch func(ctx context.Context, cell string, e Entry) error
	// DispatchBatch, when set, handles every entry one read returned (at
	// most ReadBatch) at once and answers one error per entry; Dispatch is
	// then not called.
	DispatchBatch func(ctx context.Context, cell string, es []Entry) []error
	// DispatchWorkers is how many reads of each cell's stream this replica
	// dispatches at once (default 2). One worker leaves a core idle under
	// load: a batch's commit and the Redis hops around it wait on I/O while
	// the next read could be recorded. Each batch locks its keys in sorted
	// order, so concurrent batches never deadlock (as between replicas).
	DispatchWorkers int
	// Deliver receives every offer published for a tenant, on every replica,
	// with when and how it was published (each offer is timed from its own
	// start: a re-offer from its re-offer, not from the job's first queueing).
	Deliver func(ctx context.Context, tenant string, o wire.Offer, meta OfferMeta)
	// Grant receives every grant addressed to this replica (assign mode), on
	// every cell it runs: the chosen actor's connection is held here.
	Grant func(ctx context.Context, body []byte)
	Clock clock.Clock
	Log   *slog.Logger
	// Registerer receives the cells' metrics (nil: none).
	Registerer prometheus.Registerer
}

func (c *Config) defaults() {
	if c.PoolSize <= 0 {
		c.PoolSize = 32
	}
	if c.DispatchWorkers <= 0 {
		c.DispatchWorkers = 2
	}
	if c.DedupeTTL <= 0 {
		c.DedupeTTL = 15 * time.Minute
	}
	if c.StreamMaxLen <= 0 {
		c.StreamMaxLen = 10000
	}
	if c.ReclaimIdle <= 0 {
		c.ReclaimIdle = 10 * time.Second
	}
	if c.MaxAge <= 0 {
		c.MaxAge = time.Minute
	}
	if c.Reload <= 0 {
		c.Reload = 2 * time.Second
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Consumer == "" {
		c.Consumer = "panel"
	}
}

// Status is a cell as the console shows it.
type Status struct {
	Name      string
	RedisURL  string // password removed
	Failing   bool
	Since     time.Time // when the current state began
	LastError string
	Tenants   int
}

type metrics struct {
	up        *prometheus.GaugeVec
	failures  *prometheus.CounterVec
	sightings *prometheus.CounterVec
	dispatch  *prometheus.CounterVec
	quorum    *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fleet_cell_up",
			Help: "1 while the cell's Redis answers, 0 while the cell is failing."}, []string{"cell"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_cell_failures_total",
			Help: "Times a cell went from claiming to failing (each one raises the alarm)."}, []string{"cell"}),
		sightings: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_cell_sightings_total",
			Help: "Sightings by outcome: queued (first), duplicate (SET NX refused), lost (cell failing)."}, []string{"cell", "result"}),
		dispatch: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_cell_dispatched_total",
			Help: "Queued entries handled by the dispatcher: ok, late (past max age, queued again), stale (its load expired: dropped with its seen-key), error (left pending)."}, []string{"cell", "result"}),
		quorum: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fleet_cell_sentinel_quorum",
			Help: "For a cell on Sentinels: 1 while they have the quorum to promote a replica (SENTINEL CKQUORUM), 0 while they do not or none answers."}, []string{"cell"}),
	}
	if reg != nil {
		reg.MustRegister(m.up, m.failures, m.sightings, m.dispatch, m.quorum)
	}
	return m
}

// Manager runs every cell this replica knows.
type Manager struct {
	pool *pgxpool.Pool
	cfg  Config
	log  *slog.Logger
	m    *metrics

	mu     sync.RWMutex
	cells  map[string]*cell
	routes map[string]string // tenant id → cell name

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type cell struct {
	name, url string
	rdb       *redis.Client
	failing   atomic.Bool
	mu        sync.Mutex
	since     time.Time
	lastErr   string
	cancel    context.CancelFunc
	done      chan struct{}
}

// New returns a manager; Start loads the cells and runs them.
func New(pool *pgxpool.Pool, cfg Config) *Manager {
	cfg.defaults()
	return &Manager{pool: pool, cfg: cfg, log: cfg.Log.With("component", "cell"), m: newMetrics(cfg.Registerer),
		cells: map[string]*cell{}, routes: map[string]string{}}
}

// Start loads cells and routes, starts each cell's dispatcher and offer
// subscriber, and keeps reloading them until Stop.
func (m *Manager) Start(ctx context.Context) error {
	m.ctx, m.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := m.Reload(ctx); err != nil {
		m.cancel()
		return err
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for {
			select {
			case <-m.ctx.Done():
				return
			case <-m.cfg.Clock.After(m.cfg.Reload):
			}
			if err := m.Reload(m.ctx); err != nil && m.ctx.Err() == nil {
				m.log.Warn("cell reload failed; keeping the current cells", "err", err)
			}
			m.checkQuorum(m.ctx)
		}
	}()
	return nil
}

// checkQuorum asks each Sentinel cell's Sentinels whether they could
// promote a replica now (fleet_cell_sentinel_quorum): without a quorum a
// dead master stays dead, and the cell with it.
func (m *Manager) checkQuorum(ctx context.Context) {
	m.mu.RLock()
	var cells []*cell
	for _, c := range m.cells {
		if IsSentinel(c.url) {
			cells = append(cells, c)
		}
	}
	m.mu.RUnlock()
	for _, c := range cells {
		err := SentinelQuorum(ctx, c.url)
		v := 1.0
		if err != nil {
			v = 0
			m.log.Warn("the cell's Sentinels have no quorum to promote a replica", "cell", c.name, "err", err)
		}
		m.m.quorum.WithLabelValues(c.name).Set(v)
	}
}

// Stop ends every cell's loops and closes their clients.
func (m *Manager) Stop() {
	if m.cancel == nil {
		return
	}
	m.cancel()
	m.wg.Wait()
	m.mu.Lock()
	cells := m.cells
	m.cells = map[string]*cell{}
	m.mu.Unlock()
	for _, c := range cells {
		m.stopCell(c)
	}
}

// Reload re-reads cells and routes and applies the difference: new cells
// start, removed ones stop, a changed URL restarts its cell. The console calls
// it after an edit so a change applies at once; the loop catches the rest
// (another replica's edits).
func (m *Manager) Reload(ctx context.Context) error {
	defs, err := ListCells(ctx, m.pool)
	if err != nil {
		return err
	}
	routes, err := Routes(ctx, m.pool)
	if err != nil {
		return err
	}
	var stopped []*cell
	defer func() {
		// Outside the lock: a stopping cell's loops may still be publishing.
		for _, c := range stopped {
			m.stopCell(c)
		}
	}()
	m.mu.Lock()
	defer m.mu.Unlock()
	want := map[string]string{}
	for _, d := range defs {
		url := d.RedisURL
		if url == "" {
			url = m.cfg.DefaultRedisURL
		}
		want[d.Name] = url
	}
	for name, c := range m.cells {
		if url, ok := want[name]; !ok || url != c.url {
			stopped = append(stopped, c)
			delete(m.cells, name)
			m.log.Info("cell stopped", "cell", name)
		}
	}
	for name, url := range want {
		if _, ok := m.cells[name]; ok {
			continue
		}
		c, err := m.startCell(name, url)
		if err != nil {
			m.log.Error("cell cannot start", "cell", name, "err", logging.Scrub(err.Error()))
			continue
		}
		m.cells[name] = c
	}
	m.routes = routes
	return nil
}

func (m *Manager) startCell(name, url string) (*cell, error) {
	if url == "" {
		return nil, errors.New("cell: no Redis URL (and no default)")
	}
	// Fail fast: a cell that cannot answer within a second is failing, and
	// its tenants' sightings are better lost than piled up.
	rdb, err := OpenRedis(url, Tuning{PoolSize: m.cfg.PoolSize, MinIdleConns: 2, Timeout: time.Second, MaxRetries: 1})
	if err != nil {
		return nil, fmt.Errorf("cell: %s: %w", name, err)
	}
	c := &cell{name: name, url: url, rdb: rdb, since: m.cfg.Clock.Now(), done: make(chan struct{})}
	m.m.up.WithLabelValues(name).Set(1)
	ctx, cancel := context.WithCancel(m.ctx)
	c.cancel = cancel
	var wg sync.WaitGroup
	wg.Add(1 + m.cfg.DispatchWorkers)
	for range m.cfg.DispatchWorkers {
		go func() { defer wg.Done(); m.dispatchLoop(ctx, c) }()
	}
	go func() { defer wg.Done(); m.subscribeLoop(ctx, c) }()
	go func() { wg.Wait(); close(c.done) }()
	m.log.Info("cell started", "cell", name)
	return c, nil
}

func (m *Manager) stopCell(c *cell) {
	c.cancel()
	<-c.done
	_ = c.rdb.Close()
}

// fail marks the cell failing (once per outage: the alarm).
func (m *Manager) fail(c *cell, err error) {
	msg := logging.Scrub(err.Error())
	if len(msg) > maxFailureLog {
		msg = msg[:maxFailureLog]
	}
	c.mu.Lock()
	c.lastErr = msg
	c.mu.Unlock()
	if c.failing.CompareAndSwap(false, true) {
		c.mu.Lock()
		c.since = m.cfg.Clock.Now()
		c.mu.Unlock()
		m.m.up.WithLabelValues(c.name).Set(0)
		m.m.failures.WithLabelValues(c.name).Inc()
		m.log.Error("ALARM: cell failing: its tenants stop claiming until its Redis answers", "cell", c.name, "err", msg)
	}
}

func (m *Manager) restore(c *cell) {
	if c.failing.CompareAndSwap(true, false) {
		c.mu.Lock()
		c.since = m.cfg.Clock.Now()
		c.mu.Unlock()
		m.m.up.WithLabelValues(c.name).Set(1)
		m.log.Info("cell restored: claiming again", "cell", c.name)
	}
}

func (m *Manager) cellOf(ctx context.Context, tenant string) (*cell, error) {
	m.mu.RLock()
	name, ok := m.routes[tenant]
	m.mu.RUnlock()
	if !ok {
		// A tenant created since the last reload: ask once, remember.
		var err error
		if name, err = TenantCell(ctx, m.pool, tenant); err != nil {
			return nil, err
		}
		m.mu.Lock()
		m.routes[tenant] = name
		m.mu.Unlock()
	}
	m.mu.RLock()
	c := m.cells[name]
	m.mu.RUnlock()
	if c == nil {
		return nil, fmt.Errorf("cell: %s (of tenant %s) is not running", name, tenant)
	}
	return c, nil
}

// RedisOf returns the Redis client of the tenant's cell (the crawler keeps
// its fleet-wide politeness budget there).
func (m *Manager) RedisOf(ctx context.Context, tenant string) (*redis.Client, error) {
	c, err := m.cellOf(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return c.rdb, nil
}

// CellOf names the cell a tenant is routed to.
func (m *Manager) CellOf(ctx context.Context, tenant string) (string, error) {
	c, err := m.cellOf(ctx, tenant)
	if err != nil {
		return "", err
	}
	return c.name, nil
}

// detectScript is SET NX and XADD as one atomic step: a sighting is either a
// duplicate or queued, never marked seen without entering the stream.
var detectScript = redis.NewScript(`
if redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then
  return redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', 'e', ARGV[3])
end
return false`)

// Detect deduplicates a sighting in the tenant's cell and queues the first
// one. It reports whether this sighting was the first (queued) and the cell.
func (m *Manager) Detect(ctx context.Context, e Entry) (queued bool, cellName string, err error) {
	c, err := m.cellOf(ctx, e.Tenant)
	if err != nil {
		return false, "", err
	}
	if c.failing.Load() {
		m.m.sightings.WithLabelValues(c.name, "lost").Inc()
		return false, c.name, ErrFailing
	}
	now := m.cfg.Clock.Now()
	ttl := m.cfg.DedupeTTL
	if !e.Job.ExpiresAt.IsZero() {
		// Keep the key while the load can still be booked, plus a minute
		// for clock differences.
		if d := e.Job.ExpiresAt.Sub(now) + time.Minute; d > 0 {
			ttl = d
		}
	}
	e.QueuedAt = now
	body, err := json.Marshal(e)
	if err != nil {
		return false, c.name, fmt.Errorf("cell: encode entry: %w", err)
	}
	res, err := detectScript.Run(ctx, c.rdb, []string{seenPrefix + e.Tenant + ":" + e.Job.Key, streamKey},
		ttl.Milliseconds(), m.cfg.StreamMaxLen, body).Result()
	if errors.Is(err, redis.Nil) {
		m.m.sightings.WithLabelValues(c.name, "duplicate").Inc()
		return false, c.name, nil
	}
	if err != nil {
		if ctx.Err() == nil {
			m.fail(c, err)
		}
		m.m.sightings.WithLabelValues(c.name, "lost").Inc()
		return false, c.name, fmt.Errorf("cell: %s: %w", c.name, ErrFailing)
	}
	_ = res
	m.m.sightings.WithLabelValues(c.name, "queued").Inc()
	return true, c.name, nil
}

// OfferMeta is how an offer was published: when (the publishing replica's
// clock) and whether it is a re-offer (again: the leader's sweep, an
// approved review) rather than the dispatcher's first offer of the job.
type OfferMeta struct {
	PublishedAt time.Time
	Again       bool
}

// published is an offer as it travels over a cell's pub/sub. The extra
// fields are the panel's own; a replica of an older build decodes the offer
// and ignores them, and the gateway sends agents only the offer.
type published struct {
	wire.Offer
	PublishedAt time.Time `json:"fw_published_at,omitzero"`
	Again       bool      `json:"fw_again,omitempty"`
}

// Publish sends an offer to every replica's subscribers of the tenant, on
// the cell's Redis. again marks a re-offer (timed from its own start).
func (m *Manager) Publish(ctx context.Context, cellName, tenant string, o wire.Offer, again bool) error {
	m.mu.RLock()
	c := m.cells[cellName]
	m.mu.RUnlock()
	if c == nil {
		return fmt.Errorf("cell: %s is not running", cellName)
	}
	body, err := json.Marshal(published{Offer: o, PublishedAt: m.cfg.Clock.Now(), Again: again})
	if err != nil {
		return fmt.Errorf("cell: encode offer: %w", err)
	}
	if err := c.rdb.Publish(ctx, offerPrefix+tenant, body).Err(); err != nil {
		m.fail(c, err)
		return fmt.Errorf("cell: %s: publish: %w", cellName, err)
	}
	return nil
}

// dispatchLoop reads the cell's stream as this replica's consumer, takes over
// entries a dead consumer left pending, and hands each to Dispatch. Any Redis
// error marks the cell failing; the loop keeps trying with a short backoff,
// and its first success restores the cell.
func (m *Manager) dispatchLoop(ctx context.Context, c *cell) {
	backoff := 100 * time.Millisecond
	groupReady := false
	lastReclaim := time.Time{}
	for ctx.Err() == nil {
		err := func() error {
			if !groupReady {
				err := c.rdb.XGroupCreateMkStream(ctx, streamKey, group, "0").Err()
				if err != nil && !strings.Contains(err.Error(), "BUSYGROUP") {
					return err
				}
				groupReady = true
			}
			if m.cfg.Clock.Since(lastReclaim) >= m.cfg.ReclaimIdle/2 {
				if err := m.reclaim(ctx, c); err != nil {
					return err
				}
				lastReclaim = m.cfg.Clock.Now()
			}
			streams, err := c.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group: group, Consumer: m.cfg.Consumer, Streams: []string{streamKey, ">"},
				Count: readBatch, Block: 500 * time.Millisecond,
			}).Result()
			if errors.Is(err, redis.Nil) {
				return nil
			}
			if err != nil {
				return err
			}
			for _, s := range streams {
				m.handle(ctx, c, s.Messages)
			}
			return nil
		}()
		if err == nil {
			m.restore(c)
			backoff = 100 * time.Millisecond
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if strings.Contains(err.Error(), "NOGROUP") {
			// The Redis came back empty (data lost): make the group again.
			groupReady = false
		}
		m.fail(c, err)
		select {
		case <-ctx.Done():
			return
		case <-m.cfg.Clock.After(backoff):
		}
		if backoff < 2*time.Second {
			backoff *= 2
		}
	}
}

// reclaim takes over entries pending on any consumer for longer than
// ReclaimIdle (a replica that died holding them, or this one's own failed
// dispatches) and handles them again.
func (m *Manager) reclaim(ctx context.Context, c *cell) error {
	start := "0-0"
	for range 10 {
		msgs, next, err := c.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: streamKey, Group: group, Consumer: m.cfg.Consumer,
			MinIdle: m.cfg.ReclaimIdle, Start: start, Count: reclaimBatch,
		}).Result()
		if err != nil {
			return err
		}
		if len(msgs) > 0 {
			m.log.Info("reclaimed pending entries", "cell", c.name, "count", len(msgs))
			m.handle(ctx, c, msgs)
		}
		if next == "0-0" || next == "" {
			return nil
		}
		start = next
	}
	return nil
}

func (m *Manager) handle(ctx context.Context, c *cell, msgs []redis.XMessage) {
	var ids []string
	var entries []Entry
	for _, msg := range msgs {
		raw, _ := msg.Values[entryField].(string)
		var e Entry
		if err := json.Unmarshal([]byte(raw), &e); err != nil || e.Tenant == "" || e.Job.Key == "" {
			m.log.Warn("dropping a malformed stream entry", "cell", c.name, "id", msg.ID)
			m.ack(ctx, c, msg.ID)
			continue
		}
		if m.cfg.Clock.Since(e.QueuedAt) > m.cfg.MaxAge {
			// Not dispatched in time: its dispatch kept failing (Postgres
			// unreachable), or a replica died holding it. Watchers see a load
			// once, so dropping it would lose the load: while the load can
			// still be booked it is queued now; once it cannot, it is dropped
			// with its seen-key, which must not outlive a dispatch that never
			// recorded the job.
			if m.bookable(e) {
				e.QueuedAt = m.cfg.Clock.Now()
				m.m.dispatch.WithLabelValues(c.name, "late").Inc()
			} else {
				m.m.dispatch.WithLabelValues(c.name, "stale").Inc()
				m.forget(ctx, c, e)
				m.ack(ctx, c, msg.ID)
				continue
			}
		}
		ids, entries = append(ids, msg.ID), append(entries, e)
	}
	if len(entries) == 0 {
		return
	}
	var errs []error
	switch {
	case m.cfg.DispatchBatch != nil:
		// Everything one read returned at once (under load the stream fills
		// while the previous batch commits: batches grow with the load).
		errs = m.cfg.DispatchBatch(ctx, c.name, entries)
	case m.cfg.Dispatch != nil:
		errs = make([]error, len(entries))
		for i, e := range entries {
			errs[i] = m.cfg.Dispatch(ctx, c.name, e)
		}
	}
	var done []string
	for i, e := range entries {
		if i < len(errs) && errs[i] != nil {
			// Left pending: XAUTOCLAIM retries it after ReclaimIdle.
			m.m.dispatch.WithLabelValues(c.name, "error").Inc()
			m.log.Warn("dispatch failed; entry left pending", "cell", c.name, "tenant", e.Tenant, "job", e.Job.Key, "err", errs[i])
			continue
		}
		m.m.dispatch.WithLabelValues(c.name, "ok").Inc()
		done = append(done, ids[i])
	}
	m.ack(ctx, c, done...)
}

// bookable reports whether an entry's load can still be booked: before its
// expiry, or, without one, while its seen-key would live (DedupeTTL).
func (m *Manager) bookable(e Entry) bool {
	now := m.cfg.Clock.Now()
	if !e.Job.ExpiresAt.IsZero() {
		return now.Before(e.Job.ExpiresAt)
	}
	return now.Sub(e.QueuedAt) < m.cfg.DedupeTTL
}

// forget deletes the seen-key of an entry dropped without a record, so a
// later sighting of the job is queued again.
func (m *Manager) forget(ctx context.Context, c *cell, e Entry) {
	if err := c.rdb.Del(ctx, seenPrefix+e.Tenant+":"+e.Job.Key).Err(); err != nil && ctx.Err() == nil {
		m.fail(c, err)
	}
}

func (m *Manager) ack(ctx context.Context, c *cell, ids ...string) {
	if len(ids) == 0 {
		return
	}
	if err := c.rdb.XAck(ctx, streamKey, group, ids...).Err(); err != nil && ctx.Err() == nil {
		m.fail(c, err)
	}
}

// subscribeLoop delivers every offer published in this cell to this replica.
// go-redis re-subscribes after a lost connection; offers published meanwhile
// are lost, which costs a chance and never a duplicate.
func (m *Manager) subscribeLoop(ctx context.Context, c *cell) {
	// The grant channel is a pattern without a wildcard: one subscription
	// carries both.
	ps := c.rdb.PSubscribe(ctx, offerPattern, grantPrefix+m.cfg.Consumer)
	defer ps.Close()
	ch := ps.Channel(redis.WithChannelHealthCheckInterval(time.Second))
	for {
		select {
		case <-ctx.Done():
			return
		case msg, ok := <-ch:
			if !ok {
				return
			}
			if m.isGrant(msg.Channel) {
				if m.cfg.Grant != nil {
					m.cfg.Grant(ctx, []byte(msg.Payload))
				}
				continue
			}
			tenant := strings.TrimPrefix(msg.Channel, offerPrefix)
			var p published
			if err := json.Unmarshal([]byte(msg.Payload), &p); err != nil {
				m.log.Warn("dropping a malformed offer", "cell", c.name)
				continue
			}
			if m.cfg.Deliver != nil {
				m.cfg.Deliver(ctx, tenant, p.Offer, OfferMeta{PublishedAt: p.PublishedAt, Again: p.Again})
			}
		}
	}
}

// Status lists every running cell with its state and its tenants' count.
func (m *Manager) Status() []Status {
	m.mu.RLock()
	defer m.mu.RUnlock()
	count := map[string]int{}
	for _, name := range m.routes {
		count[name]++
	}
	out := make([]Status, 0, len(m.cells))
	for _, c := range m.cells {
		c.mu.Lock()
		out = append(out, Status{Name: c.name, RedisURL: RedactURL(c.url), Failing: c.failing.Load(),
			Since: c.since, LastError: c.lastErr, Tenants: count[c.name]})
		c.mu.Unlock()
	}
	sortStatus(out)
	return out
}

// Failing reports whether the named cell is failing.
func (m *Manager) Failing(name string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	c := m.cells[name]
	return c != nil && c.failing.Load()
}
