// Package durability checks that a replicated Postgres promises what the
// claim engine relies on — a commit is acknowledged only once it is on a
// synchronous standby too — and holds new leases and actions while it does
// not (docs/DEPLOY.md, "High availability").
//
// Every panel replica runs its own Watcher: at start and on every health
// interval it asks the primary (fleet_replication(): pg_stat_replication,
// synchronous_standby_names, synchronous_commit). When the promise is broken
// it holds at once in memory (the claim store refuses before sending a
// statement that, under Patroni's synchronous_mode_strict, would wait for a
// standby that is not there), sets the hold in the database (read inside
// every lease and act statement, as the pause switch is, so every replica's
// next statement stops too) and raises a critical alarm. When a synchronous
// standby is back it lifts both and resolves the alarm: claiming resumes by
// itself. The check runs on its own loop and its own small pool, not as a
// River job: under strict synchronous mode every write waits while the
// primary is alone — River's own job fetch among them — and the check must
// still run to say so.
package durability

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/alarm"
)

// AlarmKind is the system alarm of a cluster that cannot promise durability.
const AlarmKind = "db.no_sync_standby"

// Status is what one check found.
type Status struct {
	// Promised: the primary has a streaming synchronous standby and commits
	// wait for it.
	Promised bool
	// Reason says what is wrong and what to change (empty when Promised).
	Reason       string
	SyncStandbys int
	Standbys     int
	SyncNames    string
	SyncCommit   string
	InRecovery   bool
	CanSee       bool
	Primary      string // the primary's address (inet_server_addr:port), or "local"
	CheckedAt    time.Time
	HeldSince    *time.Time
	SingleNodeOK map[string]bool
}

// ErrCannotSee means the schema owner cannot read pg_stat_replication.
var ErrCannotSee = errors.New("durability: the schema owner cannot read pg_stat_replication")

// Check asks the primary what it promises.
func Check(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (Status, error) {
	var s Status
	err := q.QueryRow(ctx, `SELECT r.sync_standbys, r.standbys, r.sync_names, r.sync_commit, r.can_see, r.in_recovery,
		COALESCE(host(inet_server_addr()) || ':' || inet_server_port(), 'local')
		FROM fleet_replication() r`).
		Scan(&s.SyncStandbys, &s.Standbys, &s.SyncNames, &s.SyncCommit, &s.CanSee, &s.InRecovery, &s.Primary)
	if err != nil {
		return s, fmt.Errorf("durability: check: %w", err)
	}
	switch {
	case !s.CanSee:
		s.Reason = "the schema owner cannot read pg_stat_replication, so nothing says a standby has each commit: GRANT pg_read_all_stats TO the owner role"
	case s.InRecovery:
		s.Reason = "the panel's connection reached a standby (read-only): the URL needs target_session_attrs=read-write"
	case s.SyncCommit != "on" && s.SyncCommit != "remote_apply":
		s.Reason = fmt.Sprintf("synchronous_commit is %s, so a commit does not wait for a standby's flush: set it to on (Patroni: postgresql.parameters)", s.SyncCommit)
	case s.SyncNames == "":
		s.Reason = "the cluster replicates asynchronously (synchronous_standby_names is empty): run Patroni with synchronous_mode: true and synchronous_mode_strict: true"
	case s.SyncStandbys == 0:
		s.Reason = fmt.Sprintf("no synchronous standby is streaming (%d standby connected): the primary runs alone; start or repair a replica — claiming resumes by itself when one is back", s.Standbys)
	default:
		s.Promised = true
	}
	return s, nil
}

// Config configures a Watcher.
type Config struct {
	Clock    clock.Clock
	Interval time.Duration
	Log      *slog.Logger
	// Registerer receives the watcher's gauges (nil: none).
	Registerer prometheus.Registerer
}

// Watcher checks the cluster on an interval and holds claims while it
// cannot promise durability.
type Watcher struct {
	pool *pgxpool.Pool
	cfg  Config
	held atomic.Bool
	mu   sync.RWMutex
	last Status
	// lastPrimary is the primary seen by the previous check.
	lastPrimary string
	cancel      context.CancelFunc
	done        chan struct{}
	m           metrics
}

type metrics struct {
	syncStandbys prometheus.Gauge
	held         prometheus.Gauge
	changes      prometheus.Counter
	checkErrors  prometheus.Counter
}

// New returns a watcher on pool: a small pool of its own (two connections),
// so writes stuck waiting for a standby cannot take the connection the check
// needs.
func New(pool *pgxpool.Pool, cfg Config) *Watcher {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 15 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{pool: pool, cfg: cfg}
	w.m = metrics{
		syncStandbys: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_db_sync_standbys",
			Help: "Streaming synchronous standbys of the primary, as the panel's durability check last saw them."}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_db_durability_held",
			Help: "1 while new leases and actions are held because the cluster cannot promise that a commit is on two nodes."}),
		changes: prometheus.NewCounter(prometheus.CounterOpts{Name: "fleet_db_primary_changes_total",
			Help: "Times the durability check found a different primary than the check before (a failover or switchover)."}),
		checkErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "fleet_db_durability_check_errors_total",
			Help: "Durability checks that could not reach the primary."}),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(w.m.syncStandbys, w.m.held, w.m.changes, w.m.checkErrors)
	}
	return w
}

// Start runs the first check (a schema owner that cannot read
// pg_stat_replication is an error: the panel refuses to start, saying what
// to grant), then checks every interval until Stop.
func (w *Watcher) Start(ctx context.Context) error {
	st, err := w.Sweep(ctx)
	if err != nil {
		return err
	}
	if !st.CanSee {
		return fmt.Errorf("%w: GRANT pg_read_all_stats TO the role that owns the schema (the one in --database-url), then start the panel again", ErrCannotSee)
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.cancel = cancel
	w.done = make(chan struct{})
	go w.loop(lctx)
	return nil
}

// Stop ends the loop.
func (w *Watcher) Stop() {
	if w.cancel == nil {
		return
	}
	w.cancel()
	<-w.done
}

func (w *Watcher) loop(ctx context.Context) {
	defer close(w.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.cfg.Clock.After(w.cfg.Interval):
		}
		if _, err := w.Sweep(ctx); err != nil && ctx.Err() == nil {
			w.cfg.Log.Warn("durability check failed; the hold stays as it was", "err", err)
		}
	}
}

// Held reports whether claims are held now.
func (w *Watcher) Held() bool { return w.held.Load() }

// Status is the last check's result.
func (w *Watcher) Status() Status {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.last
}

// Gate is the claim store's DurabilityGate: while held, a tenant's
// statements are refused before they are sent, unless it accepted
// single-node durability — then they commit on the primary alone.
func (w *Watcher) Gate(tenant string) (refuse, local bool) {
	if !w.held.Load() {
		return false, false
	}
	w.mu.RLock()
	ok := w.last.SingleNodeOK[tenant]
	w.mu.RUnlock()
	return !ok, ok
}

// Sweep checks once and applies the result: holds (in memory, then in the
// database and as an alarm) or lifts the hold. A check that cannot reach
// the primary changes nothing (a failover in progress: the statements fail
// on their own meanwhile).
func (w *Watcher) Sweep(ctx context.Context) (Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := Check(ctx, w.pool)
	if err != nil {
		w.m.checkErrors.Inc()
		return st, err
	}
	st.CheckedAt = w.cfg.Clock.Now()
	st.SingleNodeOK = map[string]bool{}
	rows, err := w.pool.Query(ctx, `SELECT id::text FROM tenants WHERE single_node_ok`)
	if err != nil {
		return st, fmt.Errorf("durability: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return st, fmt.Errorf("durability: %w", err)
	}
	for _, id := range ids {
		st.SingleNodeOK[id] = true
	}
	if w.lastPrimary != "" && st.Primary != w.lastPrimary {
		w.m.changes.Inc()
		w.cfg.Log.Warn("the database's primary changed (failover or switchover)", "from", w.lastPrimary, "to", st.Primary)
	}
	w.lastPrimary = st.Primary
	w.m.syncStandbys.Set(float64(st.SyncStandbys))
	if !st.Promised {
		// In memory first: this replica's next statement is refused now,
		// whatever the writes below take.
		if !w.held.Swap(true) {
			w.cfg.Log.Error("claims held: the database cannot promise that a commit is on two nodes", "reason", st.Reason)
		}
		w.m.held.Set(1)
		since, err := w.hold(ctx, st.Reason)
		if err != nil {
			w.store(st)
			return st, err
		}
		st.HeldSince = &since
		w.store(st)
		return st, nil
	}
	if err := w.lift(ctx); err != nil {
		// The database still holds: every statement refuses until a later
		// sweep lifts it, so this replica keeps refusing too.
		w.store(st)
		return st, err
	}
	if w.held.Swap(false) {
		w.cfg.Log.Info("claims resume: a synchronous standby is back", "sync_standbys", st.SyncStandbys)
	}
	w.m.held.Set(0)
	w.store(st)
	return st, nil
}

func (w *Watcher) store(st Status) {
	w.mu.Lock()
	w.last = st
	w.mu.Unlock()
}

// hold writes the hold and raises the alarm in one transaction that commits
// on the primary alone (synchronous_commit local): with no standby a normal
// commit would wait under strict synchronous mode, and the hold is exactly
// what must land then.
func (w *Watcher) hold(ctx context.Context, reason string) (time.Time, error) {
	var since time.Time
	err := db.InTenant(ctx, w.pool, alarm.System, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('synchronous_commit', 'local', true)`); err != nil {
			return err
		}
		var was *string
		if err := tx.QueryRow(ctx, `SELECT durability_hold FROM fleet_switches FOR UPDATE`).Scan(&was); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `UPDATE fleet_switches SET durability_hold = $1,
			durability_hold_since = COALESCE(durability_hold_since, clock_timestamp()) RETURNING durability_hold_since`, reason).
			Scan(&since); err != nil {
			return err
		}
		// The panel's own writes that began before the hold wait for a
		// standby that is gone, each holding a pooled connection: enough of
		// them and the console waits too. They are ended (their
		// transactions are committed locally, their clients get an error
		// and not an acknowledgement; a claim statement among them is read
		// back, and acknowledged only once a standby has it).
		if _, err := tx.Exec(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE usename = current_user AND wait_event = 'SyncRep' AND pid <> pg_backend_pid()`); err != nil {
			return err
		}
		if was != nil && *was == reason {
			return nil
		}
		_, err := alarm.Raise(ctx, tx, alarm.Alarm{Kind: AlarmKind, Key: "cluster", Severity: alarm.Critical,
			Summary: "claims held: the database cannot promise that a commit is on two nodes",
			Detail: reason + ". New leases and actions stop (the console keeps serving) and resume by themselves once " +
				"a synchronous standby streams again. A tenant may accept single-node durability on its settings page."})
		return err
	})
	if err != nil {
		return since, fmt.Errorf("durability: set the hold: %w", err)
	}
	return since, nil
}

// lift clears the hold and resolves the alarm (a plain commit: the standby
// is there).
func (w *Watcher) lift(ctx context.Context) error {
	var held bool
	if err := w.pool.QueryRow(ctx, `SELECT durability_hold IS NOT NULL FROM fleet_switches`).Scan(&held); err != nil {
		return fmt.Errorf("durability: %w", err)
	}
	if !held {
		return nil
	}
	err := db.InTenant(ctx, w.pool, alarm.System, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE fleet_switches SET durability_hold = NULL, durability_hold_since = NULL`); err != nil {
			return err
		}
		_, err := alarm.Resolve(ctx, tx, alarm.System, AlarmKind, "cluster", "durability check")
		return err
	})
	if err != nil {
		return fmt.Errorf("durability: lift the hold: %w", err)
	}
	return nil
}

// Hold reads the database's hold (for pages): the reason and since when,
// or "" when not held.
func Hold(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (reason string, since *time.Time, err error) {
	var r *string
	if err := q.QueryRow(ctx, `SELECT durability_hold, durability_hold_since FROM fleet_switches`).Scan(&r, &since); err != nil {
		return "", nil, fmt.Errorf("durability: %w", err)
	}
	if r == nil {
		return "", nil, nil
	}
	return *r, since, nil
}
