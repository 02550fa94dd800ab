// Package health tells a crash loop from a hung worker, for workers, agent
// processes, the panel's own River queues and its cells, and raises alarms
// for both. It never restarts anything: restarts on an outside liveness
// guess are what the supervisor rule forbids; a person restarts a hung
// worker from the fleet page (audited).
//
// A leader-elected River job (Sweep, every 15 s) reads every tenant's agents
// and their latest state reports, in each tenant's own scope:
//
//   - hung: the agent is connected, the worker is running, its oldest task
//     is older than the kind's threshold (HungAfter; watcher 2m, actor 5m,
//     crawler 10m, assistant 15m, others 10m) and it completed nothing
//     within that time → alarm worker.hung;
//   - crash loop: the worker spent its supervisor budget (5 restarts in
//     300 s: it reports needs_person), or restarted at least 3 times within
//     15 minutes (restarts counted from the agents' cumulative counters
//     into worker_restarts, so a worker failing every 70 s is not missed)
//     → alarm worker.crash_loop; an agent process started at least 3 times
//     within 15 minutes (its StartedAt, protocol v4) → agent.crash_loop;
//   - the panel's River queues: the oldest available job older than 5
//     minutes, or the oldest running job (outside the schedule queue, whose
//     runs hold their own leases) older than 30 minutes → queue.stuck;
//   - cells: a failing cell → cell.failing;
//   - agents: one not heard from past its heartbeat allowance
//     (DefaultOfflineAfter, 90 s), connected or not → agent.offline, with
//     an agent event at each end of the outage (outages).
//
// Each alarm resolves itself at the first sweep that no longer sees its
// condition.
package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/page"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/cell"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// DefaultHungAfter are the hang thresholds per worker kind; "*" is every
// other kind.
var DefaultHungAfter = map[string]time.Duration{
	"watcher": 2 * time.Minute, "actor": 5 * time.Minute, "http_actor": 5 * time.Minute,
	"crawler": 10 * time.Minute, "assistant": 15 * time.Minute, "*": 10 * time.Minute,
}

// The crash-loop rule besides a spent budget.
const (
	CrashLoopRestarts = 3
	CrashLoopWindow   = 15 * time.Minute
)

// Config tunes a Sweeper; zero values take the documented defaults.
type Config struct {
	Clock clock.Clock
	Log   *slog.Logger
	// HungAfter overrides DefaultHungAfter per kind.
	HungAfter map[string]time.Duration
	// QueueAvailableAfter and QueueRunningAfter are the River queue ages
	// that raise queue.stuck (default 5m and 30m).
	QueueAvailableAfter, QueueRunningAfter time.Duration
	// Cells reports the cells' state (nil: no cell alarms).
	Cells func() []cell.Status
	// OfflineAfter is how long an agent may go without a word before it
	// is offline (default DefaultOfflineAfter).
	OfflineAfter time.Duration
}

// DefaultOfflineAfter is an agent's heartbeat allowance: it reports its
// state every 30 s and answers the panel's pings, so three missed reports
// mean it is gone (frozen, or its host or network is down), not slow.
const DefaultOfflineAfter = 90 * time.Second

// Sweeper runs the health sweep.
type Sweeper struct {
	pool *pgxpool.Pool
	cfg  Config
}

// New returns a sweeper on the application role's pool.
func New(pool *pgxpool.Pool, cfg Config) *Sweeper {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	hung := map[string]time.Duration{}
	for k, v := range DefaultHungAfter {
		hung[k] = v
	}
	for k, v := range cfg.HungAfter {
		hung[k] = v
	}
	cfg.HungAfter = hung
	if cfg.QueueAvailableAfter <= 0 {
		cfg.QueueAvailableAfter = 5 * time.Minute
	}
	if cfg.QueueRunningAfter <= 0 {
		cfg.QueueRunningAfter = 30 * time.Minute
	}
	if cfg.OfflineAfter <= 0 {
		cfg.OfflineAfter = DefaultOfflineAfter
	}
	return &Sweeper{pool: pool, cfg: cfg}
}

// ParseHungAfter reads "watcher=2m,actor=5m,*=10m".
func ParseHungAfter(s string) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if !ok || strings.TrimSpace(k) == "" || err != nil || d < 10*time.Second {
			return nil, fmt.Errorf("health: %q: use kind=duration pairs of at least 10s, like watcher=2m,actor=5m,*=10m", part)
		}
		out[strings.TrimSpace(k)] = d
	}
	return out, nil
}

// HungAfter is the threshold of a kind.
func (s *Sweeper) HungAfter(kind string) time.Duration {
	if d, ok := s.cfg.HungAfter[kind]; ok {
		return d
	}
	return s.cfg.HungAfter["*"]
}

// Kinds of alarm the sweep manages (raises and resolves).
const (
	KindHung           = "worker.hung"
	KindCrashLoop      = "worker.crash_loop"
	KindAgentCrashLoop = "agent.crash_loop"
	KindQueueStuck     = "queue.stuck"
	KindCellFailing    = "cell.failing"
	KindAgentOffline   = "agent.offline"
)

type tenantRow struct{ id, slug string }

// Sweep looks at every tenant's workers and agents, the River queues and
// the cells once.
func (s *Sweeper) Sweep(ctx context.Context) error {
	rows, err := s.pool.Query(ctx, `SELECT id::text, slug FROM tenants ORDER BY slug`)
	if err != nil {
		return fmt.Errorf("health: tenants: %w", err)
	}
	tenants, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (tenantRow, error) {
		var t tenantRow
		return t, r.Scan(&t.id, &t.slug)
	})
	if err != nil {
		return fmt.Errorf("health: tenants: %w", err)
	}
	var errs []error
	for _, t := range tenants {
		if err := s.sweepTenant(ctx, t); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.sweepSystem(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

type agentRow struct {
	id, name string
	live     bool
	// connected is the row's flag alone: a frozen agent's connection may
	// still be open. lastSeen is its last sign of life and silent how long
	// ago that was (the database's clock); nil if never heard from.
	connected bool
	lastSeen  *time.Time
	silent    *time.Duration
	// sinceReport is how long ago its last state report arrived, by the
	// database's clock (the clock that stamped it).
	sinceReport *time.Duration
	state       *wire.State
}

type seen struct {
	restarts int
	started  *time.Time
}

func (s *Sweeper) sweepTenant(ctx context.Context, t tenantRow) error {
	now := s.cfg.Clock.Now()
	link := "/t/" + t.slug + "/fleet"
	err := db.InTenant(ctx, s.pool, t.id, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT ag.id::text, ag.name,
				ag.connected AND EXISTS (SELECT 1 FROM panel_replicas r WHERE r.id = ag.replica_id AND r.last_seen > now() - interval '30 seconds'),
				EXTRACT(EPOCH FROM (now() - COALESCE(ag.state_at, ag.last_seen)))::float8, ag.state,
				ag.connected, ag.last_seen, EXTRACT(EPOCH FROM (now() - ag.last_seen))::float8
			FROM agents ag WHERE ag.retired_at IS NULL ORDER BY ag.name`)
		if err != nil {
			return err
		}
		agents, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (agentRow, error) {
			var a agentRow
			var st []byte
			var since, silent *float64
			if err := r.Scan(&a.id, &a.name, &a.live, &since, &st, &a.connected, &a.lastSeen, &silent); err != nil {
				return a, err
			}
			if silent != nil {
				d := time.Duration(*silent * float64(time.Second))
				a.silent = &d
			}
			if since != nil {
				d := time.Duration(*since * float64(time.Second))
				a.sinceReport = &d
			}
			if st != nil {
				a.state = &wire.State{}
				if err := json.Unmarshal(st, a.state); err != nil {
					a.state = nil
				}
			}
			return a, nil
		})
		if err != nil {
			return err
		}
		prev := map[[2]string]seen{}
		rows, err = tx.Query(ctx, `SELECT agent_id::text, worker, restarts_seen, started_at FROM worker_health`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var a, w string
			var x seen
			if err := rows.Scan(&a, &w, &x.restarts, &x.started); err != nil {
				rows.Close()
				return err
			}
			prev[[2]string{a, w}] = x
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		// Record what changed since the last sweep: new process starts and
		// restarts counted by the agents' cumulative counters.
		for _, a := range agents {
			if a.state == nil {
				continue
			}
			if st := a.state.StartedAt; st != nil {
				p, known := prev[[2]string{a.id, ""}]
				// The database keeps microseconds; the report has nanoseconds.
				if known && (p.started == nil || !p.started.Truncate(time.Microsecond).Equal(st.Truncate(time.Microsecond))) {
					if err := recordRestarts(ctx, tx, a.id, "", 1, now); err != nil {
						return err
					}
				}
				if err := upsertSeen(ctx, tx, a.id, "", 0, st, now); err != nil {
					return err
				}
			}
			for _, w := range a.state.Workers {
				p, known := prev[[2]string{a.id, w.Name}]
				n := 0
				switch {
				case !known:
				case w.Restarts > p.restarts:
					n = w.Restarts - p.restarts
				case w.Restarts < p.restarts:
					n = w.Restarts // the agent process restarted: its counter began at 0
				}
				if n > 0 {
					if err := recordRestarts(ctx, tx, a.id, w.Name, min(n, 20), now); err != nil {
						return err
					}
				}
				if !known || n > 0 || w.Restarts != p.restarts {
					if err := upsertSeen(ctx, tx, a.id, w.Name, w.Restarts, nil, now); err != nil {
						return err
					}
				}
			}
		}
		if _, err := tx.Exec(ctx, `DELETE FROM worker_restarts WHERE at < $1`, now.Add(-24*time.Hour)); err != nil {
			return err
		}
		recent := map[[2]string]int{}
		rows, err = tx.Query(ctx, `SELECT agent_id::text, worker, count(*) FROM worker_restarts WHERE at > $1 GROUP BY 1, 2`, now.Add(-CrashLoopWindow))
		if err != nil {
			return err
		}
		for rows.Next() {
			var a, w string
			var n int
			if err := rows.Scan(&a, &w, &n); err != nil {
				rows.Close()
				return err
			}
			recent[[2]string{a, w}] = n
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}

		want := map[string]alarm.Alarm{} // kind + "|" + key → alarm
		add := func(a alarm.Alarm) {
			a.Tenant, a.Link, a.At = t.id, link, now
			want[a.Kind+"|"+a.Key] = a
		}
		for _, a := range agents {
			if off, ok := s.offline(a); ok {
				add(off)
			}
			if n := recent[[2]string{a.id, ""}]; n >= CrashLoopRestarts {
				add(alarm.Alarm{Kind: KindAgentCrashLoop, Key: a.id, Severity: alarm.Critical,
					Summary: fmt.Sprintf("agent %s: its process started %d times within %s (crash loop)", a.name, n+1, page.Duration(CrashLoopWindow)),
					Detail:  "Read the agent's log (journalctl -u fleetwright-agent@…); its unit stops restarting it at its start limit."})
			}
			if a.state == nil {
				continue
			}
			for _, w := range a.state.Workers {
				key := a.id + "/" + w.Name
				if w.State == wire.WorkerNeedsPerson {
					add(alarm.Alarm{Kind: KindCrashLoop, Key: key, Severity: alarm.Critical,
						Summary: fmt.Sprintf("%s on %s: restart budget spent (crash loop); it stays stopped until a person restarts it", w.Name, a.name),
						Detail:  fmt.Sprintf("%d restarts reported; the supervisor stops a worker after 5 restarts within 300 s.", w.Restarts)})
				} else if n := recent[[2]string{a.id, w.Name}]; n >= CrashLoopRestarts {
					add(alarm.Alarm{Kind: KindCrashLoop, Key: key, Severity: alarm.Critical,
						Summary: fmt.Sprintf("%s on %s: %d restarts within %s (crash loop)", w.Name, a.name, n, page.Duration(CrashLoopWindow)),
						Detail:  "It restarts within its budget but keeps failing; read its last error on the fleet page."})
				}
				if hung, detail := s.isHung(a, w, now); hung {
					add(alarm.Alarm{Kind: KindHung, Key: key, Severity: alarm.Critical,
						Summary: fmt.Sprintf("%s on %s is hung: alive with work, nothing completed for %s", w.Name, a.name, page.Duration(s.HungAfter(w.Kind))),
						Detail:  detail + " The panel never restarts it on its own: restart it from the fleet page."})
				}
			}
		}
		if err := outages(ctx, tx, agents, want, now); err != nil {
			return err
		}
		return reconcile(ctx, tx, want, []string{KindHung, KindCrashLoop, KindAgentCrashLoop, KindAgentOffline}, "health sweep")
	})
	if err != nil {
		return fmt.Errorf("health: tenant %s: %w", t.slug, err)
	}
	return nil
}

// offline is the agent.offline alarm of an agent not heard from within its
// allowance; ok is false while it is heard from (or was never heard from:
// an agent not deployed yet is not down).
func (s *Sweeper) offline(a agentRow) (alarm.Alarm, bool) {
	if a.silent == nil || a.lastSeen == nil || *a.silent <= s.cfg.OfflineAfter {
		return alarm.Alarm{}, false
	}
	reason := "it disconnected and has not come back: check its host and its unit (journalctl -u fleetwright-agent@…)"
	if a.connected {
		reason = "its connection is still open but it has sent nothing (a frozen process, or a network path that died without closing)"
	}
	return alarm.Alarm{Kind: KindAgentOffline, Key: a.id, Severity: alarm.Critical,
		Summary: fmt.Sprintf("agent %s is offline: not heard from since %s (%s ago; allowance %s); its workers are unknown",
			a.name, a.lastSeen.UTC().Format("2006-01-02 15:04:05 UTC"), page.Duration(*a.silent), page.Duration(s.cfg.OfflineAfter)),
		Detail: "Reason: " + reason + ". The alarm resolves itself when the agent is heard from again."}, true
}

// outages keeps an agent's outages in its history (agent_events, shown on
// the fleet page): one event when the sweep first finds it offline, with
// the time of its last word, and one when it is heard from again, with how
// long it was gone.
func outages(ctx context.Context, tx pgx.Tx, agents []agentRow, want map[string]alarm.Alarm, now time.Time) error {
	rows, err := tx.Query(ctx, `SELECT key FROM alarms WHERE tenant_id = app_tenant() AND kind = $1 AND resolved_at IS NULL`, KindAgentOffline)
	if err != nil {
		return err
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	open := map[string]bool{}
	for _, k := range keys {
		open[k] = true
	}
	for _, a := range agents {
		_, down := want[KindAgentOffline+"|"+a.id]
		switch {
		case down && !open[a.id]:
			if _, err := tx.Exec(ctx, `INSERT INTO agent_events (tenant_id, agent_id, at, level, kind, message, fields)
				VALUES (app_tenant(), $1, $2, 'error', $3, $4, jsonb_build_object('since', $5::timestamptz))`,
				a.id, now, KindAgentOffline, fmt.Sprintf("offline: not heard from since %s", a.lastSeen.UTC().Format("15:04:05 UTC")), *a.lastSeen); err != nil {
				return err
			}
		case !down && open[a.id]:
			var since *time.Time
			err := tx.QueryRow(ctx, `SELECT (fields->>'since')::timestamptz FROM agent_events
				WHERE tenant_id = app_tenant() AND agent_id = $1 AND kind = $2 ORDER BY id DESC LIMIT 1`, a.id, KindAgentOffline).Scan(&since)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			msg := "back online"
			if since != nil && a.lastSeen != nil {
				msg = fmt.Sprintf("back online after %s without a word (%s to %s)", page.Duration(a.lastSeen.Sub(*since)),
					since.UTC().Format("15:04:05"), a.lastSeen.UTC().Format("15:04:05 UTC"))
			}
			if _, err := tx.Exec(ctx, `INSERT INTO agent_events (tenant_id, agent_id, at, level, kind, message)
				VALUES (app_tenant(), $1, $2, 'info', 'agent.back', $3)`, a.id, now, msg); err != nil {
				return err
			}
		}
	}
	return nil
}

// ReportGrace is how long an agent's state report stays current: agents
// report every 30 s and on every change, plus a margin for the trip.
const ReportGrace = 35 * time.Second

// isHung applies the rule: alive, running, with work older than the kind's
// threshold, and nothing completed within it.
func (s *Sweeper) isHung(a agentRow, w wire.WorkerState, now time.Time) (bool, string) {
	if !a.live || w.State != wire.WorkerRunning || w.OldestTaskAgeMillis == nil || *w.OldestTaskAgeMillis <= 0 || a.sinceReport == nil {
		return false, ""
	}
	limit := s.HungAfter(w.Kind)
	// A report on time is the newest word on its workers: the progress made
	// since it is not known yet, so only the time it is overdue is added to
	// its ages. Adding all of it made a healthy worker look hung between two
	// reports whenever its threshold was under the report interval plus its
	// own cadence, and a worker near its threshold flap with the age of the
	// agent's last sign of life.
	since := max(0, *a.sinceReport)
	onTime := min(since, ReportGrace)
	age := time.Duration(*w.OldestTaskAgeMillis)*time.Millisecond + since - onTime
	if age < limit {
		return false, ""
	}
	if op := w.LastOperation; op != nil && now.Sub(op.FinishedAt)-onTime < limit {
		return false, ""
	}
	last := "no operation completed since the agent started"
	if op := w.LastOperation; op != nil {
		last = fmt.Sprintf("last operation completed %s ago (%s)", page.Duration(now.Sub(op.FinishedAt)), op.Outcome)
	}
	return true, fmt.Sprintf("Oldest task %s old; %s; threshold for %s workers %s.", page.Duration(age), last, w.Kind, page.Duration(limit))
}

func recordRestarts(ctx context.Context, tx pgx.Tx, agent, worker string, n int, at time.Time) error {
	for range n {
		if _, err := tx.Exec(ctx, `INSERT INTO worker_restarts (agent_id, worker, at) VALUES ($1, $2, $3)`, agent, worker, at); err != nil {
			return err
		}
	}
	return nil
}

func upsertSeen(ctx context.Context, tx pgx.Tx, agent, worker string, restarts int, started *time.Time, at time.Time) error {
	_, err := tx.Exec(ctx, `INSERT INTO worker_health (agent_id, worker, restarts_seen, started_at, updated_at)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, agent_id, worker)
		DO UPDATE SET restarts_seen = EXCLUDED.restarts_seen, started_at = EXCLUDED.started_at, updated_at = EXCLUDED.updated_at`,
		agent, worker, restarts, started, at)
	return err
}

// reconcile raises every wanted alarm and resolves the open ones of kinds
// that are no longer wanted, in tx (scoped to the alarms' tenant).
func reconcile(ctx context.Context, tx pgx.Tx, want map[string]alarm.Alarm, kinds []string, by string) error {
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, err := alarm.Raise(ctx, tx, want[k]); err != nil {
			return err
		}
	}
	rows, err := tx.Query(ctx, `SELECT kind, key FROM alarms WHERE resolved_at IS NULL AND tenant_id = app_tenant() AND kind = ANY($1)`, kinds)
	if err != nil {
		return err
	}
	type kk struct{ kind, key string }
	var open []kk
	for rows.Next() {
		var x kk
		if err := rows.Scan(&x.kind, &x.key); err != nil {
			rows.Close()
			return err
		}
		open = append(open, x)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var tenant string
	if err := tx.QueryRow(ctx, `SELECT app_tenant()::text`).Scan(&tenant); err != nil {
		return err
	}
	for _, o := range open {
		if _, ok := want[o.kind+"|"+o.key]; ok {
			continue
		}
		if _, err := alarm.Resolve(ctx, tx, tenant, o.kind, o.key, by); err != nil {
			return err
		}
	}
	return nil
}

// QueueAge is the oldest job of a River queue in one state.
type QueueAge struct {
	Queue, State string
	Oldest       time.Duration
}

// QueueAges reads the age of the oldest available and running job of every
// River queue (the database's clock).
func QueueAges(ctx context.Context, pool *pgxpool.Pool) ([]QueueAge, error) {
	// A job scheduled for a time already past waits to start like an
	// available one (River's scheduler moves it there).
	rows, err := pool.Query(ctx, `SELECT queue, CASE WHEN state = 'running' THEN 'running' ELSE 'available' END AS st,
			EXTRACT(EPOCH FROM (now() - min(CASE WHEN state = 'running' THEN attempted_at ELSE scheduled_at END)))::float8
		FROM river_job WHERE state = 'running' OR (state IN ('available', 'scheduled', 'retryable') AND scheduled_at <= now())
		GROUP BY 1, 2 ORDER BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("health: queue ages: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (QueueAge, error) {
		var q QueueAge
		var secs float64
		err := r.Scan(&q.Queue, &q.State, &secs)
		q.Oldest = time.Duration(secs * float64(time.Second))
		return q, err
	})
}

// RunningExempt lists queues whose jobs legitimately run long (schedule
// runs hold their own leases with expiry).
var RunningExempt = map[string]bool{"schedule": true}

func (s *Sweeper) sweepSystem(ctx context.Context) error {
	now := s.cfg.Clock.Now()
	want := map[string]alarm.Alarm{}
	kinds := []string{KindQueueStuck}
	ages, err := QueueAges(ctx, s.pool)
	if err != nil {
		return err
	}
	for _, q := range ages {
		switch {
		case q.State == "available" && q.Oldest >= s.cfg.QueueAvailableAfter:
			want[KindQueueStuck+"|"+q.Queue+"/available"] = alarm.Alarm{Kind: KindQueueStuck, Key: q.Queue + "/available", Severity: alarm.Warning,
				Summary: fmt.Sprintf("River queue %s: a job has waited %s to start", q.Queue, page.Duration(q.Oldest)),
				Detail:  "No worker takes it: the queue is saturated or the panel's workers are stuck.", Link: "/", At: now}
		case q.State == "running" && !RunningExempt[q.Queue] && q.Oldest >= s.cfg.QueueRunningAfter:
			want[KindQueueStuck+"|"+q.Queue+"/running"] = alarm.Alarm{Kind: KindQueueStuck, Key: q.Queue + "/running", Severity: alarm.Warning,
				Summary: fmt.Sprintf("River queue %s: a job has been running for %s", q.Queue, page.Duration(q.Oldest)),
				Detail:  "A job that runs this long is likely hung; River rescues jobs of a killed replica on its own.", Link: "/", At: now}
		}
	}
	if s.cfg.Cells != nil {
		kinds = append(kinds, KindCellFailing)
		for _, c := range s.cfg.Cells() {
			if c.Failing {
				want[KindCellFailing+"|"+c.Name] = alarm.Alarm{Kind: KindCellFailing, Key: c.Name, Severity: alarm.Critical,
					Summary: fmt.Sprintf("cell %s is failing since %s: its tenants' claims wait", c.Name, c.Since.UTC().Format("15:04:05 UTC")),
					Detail:  c.LastError, Link: "/admin/cells", At: now}
			}
		}
	}
	err = db.InTenant(ctx, s.pool, alarm.System, func(tx pgx.Tx) error {
		return reconcile(ctx, tx, want, kinds, "health sweep")
	})
	if err != nil {
		return fmt.Errorf("health: system: %w", err)
	}
	return nil
}
