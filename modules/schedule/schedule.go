// Package schedule runs recurring work — crawl runs, assistant tasks,
// maintenance — on River, with a cron expression and its time zone stored
// per schedule, an explicit catch-up policy, and never two runs of one
// schedule at once.
//
// A module registers a kind and its handler once, when the panel starts:
//
//	p.Schedules.Register(schedule.Kind{
//		Name:   "crawl.run",
//		Handle: func(ctx context.Context, r schedule.Run) error { return crawler.Start(ctx, r.Tenant, r.Args) },
//		Lease:  5 * time.Minute, // renewed every Lease/3 while the handler runs
//	})
//
// and creates schedules of that kind (from the console, the CLI or code):
//
//	s, err := p.Schedules.Create(ctx, tenantID, "ops@example.com", schedule.Spec{
//		Name: "shop-prices", Kind: "crawl.run", Cron: "0 6 * * mon-fri", TimeZone: "Europe/Berlin",
//		CatchUp: schedule.One, Args: json.RawMessage(`{"job":"…"}`),
//	})
//	next, _ := schedule.NextRuns(s.Cron, s.TimeZone, time.Now(), 5) // show before enabling
//	err = p.Schedules.SetEnabled(ctx, tenantID, "shop-prices", true, "ops@example.com")
//
// How it runs. A leader-elected River periodic job (Tick) reads every
// enabled schedule whose next run time has passed and decides from stored
// state — the last fire time already handled, never the assumption that
// every tick fired — which runs are due, by the schedule's catch-up policy:
//
//   - Skip: missed fire times are recorded as skipped; the latest runs only
//     if it is less than Config.Grace old (so a panel down over a run time
//     does not run it late).
//   - One: however many fire times were missed, one run (for the latest).
//   - All: every missed fire time runs, oldest first, at most Cap of them
//     (the most recent); older ones are recorded as skipped.
//
// Due runs are stored as pending rows of schedule_runs, and a River job per
// schedule takes the schedule's lease (owner and expiry in the schedules
// row), runs the pending rows one after another through the kind's handler,
// renews the lease while the handler runs and releases it at the end. A
// second job, on any replica, finds the lease held and leaves; a lease whose
// owner died expires, and its unfinished run is recorded as lost (not run
// again: it may have acted). Handlers must be idempotent per (schedule,
// ScheduledFor) all the same: a lost lease cancels the handler's context,
// but an action already sent cannot be called back.
//
// Time comes from an injected clock; leases compare against it, so panel
// replicas need synchronised clocks (NTP) — the lease is minutes long, a
// skew of seconds does not matter.
package schedule

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"runtime/debug"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/alarm"
)

// System is the tenant of schedules that belong to no tenant (maintenance).
const System = alarm.System

// Policy is a schedule's catch-up policy for fire times missed while the
// panel was down (or the schedule's previous run overran).
type Policy string

// The catch-up policies.
const (
	Skip Policy = "skip"
	One  Policy = "one"
	All  Policy = "all"
)

// Spec is what a person or a module sets on a schedule.
type Spec struct {
	// Name is unique per tenant: lower case, digits, '.', '_', '-'.
	Name string
	// Kind is a registered kind (Register) whose handler runs it.
	Kind string
	// Cron is a five-field expression or a macro (see Cron).
	Cron string
	// TimeZone is an IANA name the expression is read in.
	TimeZone string
	CatchUp  Policy
	// Cap bounds catch-up All (default 10, at most 1000).
	Cap int
	// Args is handed to the handler as it is (JSON; default {}).
	Args json.RawMessage
	// Enabled schedules run; a new schedule is created disabled unless set.
	Enabled bool
}

// Schedule is a stored schedule.
type Schedule struct {
	ID     string
	Tenant string
	Spec
	LastTickAt     *time.Time
	NextRunAt      *time.Time
	LeaseOwner     string
	LeaseExpiresAt *time.Time
	CreatedBy      string
	UpdatedAt      time.Time
}

// Run is one run handed to a handler.
type Run struct {
	ID         int64
	ScheduleID string
	Tenant     string
	Name       string
	Kind       string
	Args       json.RawMessage
	// ScheduledFor is the fire time this run stands for; with Covers > 1
	// (catch-up One) the latest of the fire times it covers.
	ScheduledFor time.Time
	Covers       int
}

// RunRecord is a run as the console lists it.
type RunRecord struct {
	ID           int64
	ScheduledFor time.Time
	Covers       int
	Status       string
	Owner        string
	StartedAt    *time.Time
	FinishedAt   *time.Time
	Error        string
}

// Handler does one run's work. Its context ends when the kind's Timeout
// passes, the lease is lost or the panel stops; an error marks the run
// failed (and raises the schedule.failed alarm), it is not retried.
type Handler func(ctx context.Context, r Run) error

// Kind is a kind of scheduled work and its handler.
type Kind struct {
	Name   string
	Handle Handler
	// Lease is how long a run holds the schedule without renewing (default
	// 5m); it is renewed every Lease/3 while the handler runs, so a dead
	// owner blocks the schedule for at most this long.
	Lease time.Duration
	// Timeout bounds one run (default 1h).
	Timeout time.Duration
}

// Config configures a Scheduler.
type Config struct {
	Clock clock.Clock
	Log   *slog.Logger
	// Owner names this process in leases (the panel replica's id).
	Owner string
	// Tick is how often due schedules are looked at (default 15s).
	Tick time.Duration
	// Grace is how late a fire time may still run under catch-up Skip
	// (default 2m).
	Grace      time.Duration
	Registerer prometheus.Registerer
}

// Enqueuer inserts River jobs (River's client satisfies it).
type Enqueuer interface {
	Insert(ctx context.Context, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
}

// Scheduler creates, ticks and runs schedules.
type Scheduler struct {
	pool  *pgxpool.Pool
	cfg   Config
	mu    sync.RWMutex
	kinds map[string]Kind
	river Enqueuer
	runs  *prometheus.CounterVec
}

// New returns a scheduler on the application role's pool.
func New(pool *pgxpool.Pool, cfg Config) *Scheduler {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Owner == "" {
		cfg.Owner = "panel"
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 15 * time.Second
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 2 * time.Minute
	}
	s := &Scheduler{pool: pool, cfg: cfg, kinds: map[string]Kind{},
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_schedule_runs_total",
			Help: "Scheduled runs finished, by kind and status (ok, failed, skipped, lost)."}, []string{"kind", "status"})}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(s.runs)
	}
	return s
}

var kindRE = regexp.MustCompile(`^[a-z][a-z0-9_.]*$`)
var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,99}$`)

// Register adds a kind of scheduled work; registering a name twice is an error.
func (s *Scheduler) Register(k Kind) error {
	if !kindRE.MatchString(k.Name) || k.Handle == nil {
		return fmt.Errorf("schedule: kind %q needs a dotted lower-case name and a handler", k.Name)
	}
	if k.Lease <= 0 {
		k.Lease = 5 * time.Minute
	}
	if k.Lease < 3*time.Second {
		return fmt.Errorf("schedule: kind %s: lease %s is shorter than 3s", k.Name, k.Lease)
	}
	if k.Timeout <= 0 {
		k.Timeout = time.Hour
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.kinds[k.Name]; dup {
		return fmt.Errorf("schedule: kind %s registered twice", k.Name)
	}
	s.kinds[k.Name] = k
	return nil
}

// Kinds lists the registered kinds' names.
func (s *Scheduler) Kinds() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.kinds))
	for k := range s.kinds {
		out = append(out, k)
	}
	return out
}

func (s *Scheduler) kind(name string) (Kind, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	k, ok := s.kinds[name]
	return k, ok
}

// SetEnqueuer sets the River client once it exists.
func (s *Scheduler) SetEnqueuer(e Enqueuer) { s.river = e }

// Check validates a spec and fills its defaults; the error says what to fix.
func (s *Scheduler) Check(sp *Spec) (*Cron, error) {
	if !nameRE.MatchString(sp.Name) {
		return nil, fmt.Errorf("schedule: name %q: use 1 to 100 lower-case letters, digits, '.', '_' or '-'", sp.Name)
	}
	if _, ok := s.kind(sp.Kind); !ok {
		return nil, fmt.Errorf("schedule: kind %q is not registered in this panel (known: %v)", sp.Kind, s.Kinds())
	}
	c, err := ParseCron(sp.Cron, sp.TimeZone)
	if err != nil {
		return nil, err
	}
	if c.Next(s.cfg.Clock.Now()).IsZero() {
		return nil, fmt.Errorf("schedule: cron expression %q never fires (no such date within five years)", sp.Cron)
	}
	switch sp.CatchUp {
	case Skip, One, All:
	case "":
		return nil, errors.New("schedule: a catch-up policy is required: skip, one or all")
	default:
		return nil, fmt.Errorf("schedule: catch-up policy %q is not skip, one or all", sp.CatchUp)
	}
	if sp.Cap == 0 {
		sp.Cap = 10
	}
	if sp.Cap < 1 || sp.Cap > 1000 {
		return nil, fmt.Errorf("schedule: catch-up cap %d must be from 1 to 1000", sp.Cap)
	}
	if len(sp.Args) == 0 {
		sp.Args = json.RawMessage(`{}`)
	}
	if !json.Valid(sp.Args) {
		return nil, errors.New("schedule: args must be valid JSON")
	}
	return c, nil
}

// Create stores a new schedule of tenant (System or "" for the system).
// When sp.Enabled, fire times from now on run; none before.
func (s *Scheduler) Create(ctx context.Context, tenant, by string, sp Spec) (Schedule, error) {
	tenant = orSystem(tenant)
	c, err := s.Check(&sp)
	if err != nil {
		return Schedule{}, err
	}
	now := s.cfg.Clock.Now()
	var last, next any
	if sp.Enabled {
		last, next = now, c.Next(now)
	}
	var id string
	err = db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `INSERT INTO schedules (name, kind, cron, time_zone, catch_up, catch_up_cap, args, enabled,
				last_tick_at, next_run_at, created_by, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12) RETURNING id::text`,
			sp.Name, sp.Kind, sp.Cron, sp.TimeZone, string(sp.CatchUp), sp.Cap, sp.Args, sp.Enabled, last, next, by, now).Scan(&id)
	})
	if err != nil {
		if isUnique(err) {
			return Schedule{}, fmt.Errorf("schedule: a schedule named %q exists already", sp.Name)
		}
		return Schedule{}, fmt.Errorf("schedule: create %s: %w", sp.Name, err)
	}
	return s.Get(ctx, tenant, sp.Name)
}

// Ensure creates the schedule, or updates its expression, zone, policy,
// args and enabled state to sp: for schedules defined in code (maintenance).
// Changing the expression or enabling it starts counting fire times from
// now; an unchanged schedule keeps its stored state.
func (s *Scheduler) Ensure(ctx context.Context, tenant string, sp Spec) (Schedule, error) {
	tenant = orSystem(tenant)
	c, err := s.Check(&sp)
	if err != nil {
		return Schedule{}, err
	}
	now := s.cfg.Clock.Now()
	var next any
	if sp.Enabled {
		next = c.Next(now)
	}
	err = db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO schedules AS s (name, kind, cron, time_zone, catch_up, catch_up_cap, args, enabled,
				last_tick_at, next_run_at, created_by, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CASE WHEN $8 THEN $9::timestamptz END, $10, 'system', $9, $9)
			ON CONFLICT (tenant_id, name) DO UPDATE SET kind = EXCLUDED.kind, cron = EXCLUDED.cron, time_zone = EXCLUDED.time_zone,
				catch_up = EXCLUDED.catch_up, catch_up_cap = EXCLUDED.catch_up_cap, args = EXCLUDED.args, enabled = EXCLUDED.enabled,
				last_tick_at = CASE WHEN NOT EXCLUDED.enabled THEN NULL
					WHEN s.enabled AND s.cron = EXCLUDED.cron AND s.time_zone = EXCLUDED.time_zone THEN s.last_tick_at
					ELSE EXCLUDED.last_tick_at END,
				next_run_at = CASE WHEN NOT EXCLUDED.enabled THEN NULL
					WHEN s.enabled AND s.cron = EXCLUDED.cron AND s.time_zone = EXCLUDED.time_zone THEN s.next_run_at
					ELSE EXCLUDED.next_run_at END,
				updated_at = CASE WHEN (s.kind, s.cron, s.time_zone, s.catch_up, s.catch_up_cap, s.args, s.enabled) IS NOT DISTINCT FROM
					(EXCLUDED.kind, EXCLUDED.cron, EXCLUDED.time_zone, EXCLUDED.catch_up, EXCLUDED.catch_up_cap, EXCLUDED.args, EXCLUDED.enabled)
					THEN s.updated_at ELSE EXCLUDED.updated_at END`,
			sp.Name, sp.Kind, sp.Cron, sp.TimeZone, string(sp.CatchUp), sp.Cap, sp.Args, sp.Enabled, now, next)
		return err
	})
	if err != nil {
		return Schedule{}, fmt.Errorf("schedule: ensure %s: %w", sp.Name, err)
	}
	return s.Get(ctx, tenant, sp.Name)
}

// SetEnabled turns a schedule on or off. Turning it on counts fire times
// from now: nothing missed while it was off runs.
func (s *Scheduler) SetEnabled(ctx context.Context, tenant, name string, on bool, by string) error {
	tenant = orSystem(tenant)
	sc, err := s.Get(ctx, tenant, name)
	if err != nil {
		return err
	}
	now := s.cfg.Clock.Now()
	var last, next any
	if on {
		c, err := ParseCron(sc.Cron, sc.TimeZone)
		if err != nil {
			return err
		}
		last, next = now, c.Next(now)
	}
	return db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE schedules SET enabled = $2,
				last_tick_at = CASE WHEN enabled = $2 THEN last_tick_at ELSE $3 END,
				next_run_at = CASE WHEN enabled = $2 THEN next_run_at ELSE $4 END, updated_at = $5
			WHERE id = $1`, sc.ID, on, last, next, now)
		if err != nil {
			return fmt.Errorf("schedule: enable %s: %w", name, err)
		}
		return nil
	})
}

// Delete removes a schedule and its run history.
func (s *Scheduler) Delete(ctx context.Context, tenant, name string) error {
	return db.InTenant(ctx, s.pool, orSystem(tenant), func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM schedules WHERE name = $1`, name)
		if err != nil {
			return fmt.Errorf("schedule: delete %s: %w", name, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("schedule: no schedule named %q", name)
		}
		return nil
	})
}

const scheduleCols = `id::text, tenant_id::text, name, kind, cron, time_zone, catch_up, catch_up_cap, args, enabled,
	last_tick_at, next_run_at, COALESCE(lease_owner, ''), lease_expires_at, created_by, updated_at`

func scanSchedule(r pgx.Row) (Schedule, error) {
	var sc Schedule
	var policy string
	err := r.Scan(&sc.ID, &sc.Tenant, &sc.Name, &sc.Kind, &sc.Cron, &sc.TimeZone, &policy, &sc.Cap, &sc.Args, &sc.Enabled,
		&sc.LastTickAt, &sc.NextRunAt, &sc.LeaseOwner, &sc.LeaseExpiresAt, &sc.CreatedBy, &sc.UpdatedAt)
	sc.CatchUp = Policy(policy)
	return sc, err
}

// Get returns a tenant's schedule by name.
func (s *Scheduler) Get(ctx context.Context, tenant, name string) (Schedule, error) {
	var sc Schedule
	err := db.InTenant(ctx, s.pool, orSystem(tenant), func(tx pgx.Tx) error {
		var err error
		sc, err = scanSchedule(tx.QueryRow(ctx, `SELECT `+scheduleCols+` FROM schedules WHERE name = $1`, name))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return sc, fmt.Errorf("schedule: no schedule named %q", name)
	}
	if err != nil {
		return sc, fmt.Errorf("schedule: get %s: %w", name, err)
	}
	return sc, nil
}

// List returns a tenant's schedules by name.
func (s *Scheduler) List(ctx context.Context, tenant string) ([]Schedule, error) {
	var out []Schedule
	err := db.InTenant(ctx, s.pool, orSystem(tenant), func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+scheduleCols+` FROM schedules ORDER BY name`)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Schedule, error) { return scanSchedule(r) })
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("schedule: list: %w", err)
	}
	return out, nil
}

// Runs returns a schedule's latest runs, newest first.
func (s *Scheduler) Runs(ctx context.Context, tenant, scheduleID string, limit int) ([]RunRecord, error) {
	if limit <= 0 {
		limit = 50
	}
	var out []RunRecord
	err := db.InTenant(ctx, s.pool, orSystem(tenant), func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, scheduled_for, covers, status, COALESCE(owner, ''), started_at, finished_at, COALESCE(error, '')
			FROM schedule_runs WHERE schedule_id = $1 ORDER BY scheduled_for DESC, id DESC LIMIT $2`, scheduleID, limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (RunRecord, error) {
			var x RunRecord
			err := r.Scan(&x.ID, &x.ScheduledFor, &x.Covers, &x.Status, &x.Owner, &x.StartedAt, &x.FinishedAt, &x.Error)
			return x, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("schedule: runs: %w", err)
	}
	return out, nil
}

// Tick looks at every tenant's and the system's enabled schedules whose
// next run time has passed, stores their due runs by catch-up policy, and
// starts a run job for each schedule with pending runs and a free lease.
// The panel's leader calls it every Config.Tick; tests call it directly.
func (s *Scheduler) Tick(ctx context.Context) error {
	tenants, err := tenantsOf(ctx, s.pool)
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range tenants {
		ready, err := s.tickTenant(ctx, t)
		if err != nil {
			errs = append(errs, err)
		}
		for _, id := range ready {
			if err := s.start(ctx, t, id); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func tenantsOf(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	rows, err := pool.Query(ctx, `SELECT id::text FROM tenants ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("schedule: tenants: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("schedule: tenants: %w", err)
	}
	return append(out, System), nil
}

// tickTenant stores the due runs of one tenant's schedules and returns the
// schedules that have pending runs and a free lease.
func (s *Scheduler) tickTenant(ctx context.Context, tenant string) (ready []string, err error) {
	now := s.cfg.Clock.Now()
	err = db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+scheduleCols+` FROM schedules
			WHERE enabled AND next_run_at <= $1 ORDER BY next_run_at FOR UPDATE SKIP LOCKED`, now)
		if err != nil {
			return err
		}
		due, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Schedule, error) { return scanSchedule(r) })
		if err != nil {
			return err
		}
		for _, sc := range due {
			if err := s.catchUp(ctx, tx, sc, now); err != nil {
				return err
			}
		}
		rows, err = tx.Query(ctx, `SELECT s.id::text FROM schedules s
			WHERE (s.lease_owner IS NULL OR s.lease_expires_at <= $1)
			  AND EXISTS (SELECT 1 FROM schedule_runs r WHERE r.schedule_id = s.id AND r.status IN ('pending', 'running'))`, now)
		if err != nil {
			return err
		}
		ready, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("schedule: tick tenant %s: %w", tenant, err)
	}
	return ready, nil
}

// maxEnumerate bounds the fire times counted after a long outage (an
// every-minute schedule down for 70 days); beyond it the count is a floor.
const maxEnumerate = 100_000

// dueTimes returns the fire times of c from first up to now: the most recent
// keep of them, oldest first, and how many there were.
func dueTimes(c *Cron, first, now time.Time, keep int) (recent []time.Time, total int) {
	t := first
	for !t.IsZero() && !t.After(now) && total < maxEnumerate {
		total++
		recent = append(recent, t)
		if len(recent) > keep {
			recent = recent[1:]
		}
		t = c.Next(t)
	}
	if total == maxEnumerate && !t.IsZero() && !t.After(now) {
		// Still behind: take the most recent fire times near now instead.
		step := t.Sub(first) / time.Duration(total)
		from := now.Add(-time.Duration(keep+1) * step)
		var near []time.Time
		for x := c.Next(from); !x.IsZero() && !x.After(now); x = c.Next(x) {
			near = append(near, x)
			if len(near) > keep {
				near = near[1:]
			}
		}
		if len(near) > 0 {
			recent = near
		}
	}
	return recent, total
}

// catchUp applies sc's policy to the fire times since its last handled one.
func (s *Scheduler) catchUp(ctx context.Context, tx pgx.Tx, sc Schedule, now time.Time) error {
	c, err := ParseCron(sc.Cron, sc.TimeZone)
	if err != nil {
		// A time zone removed from the system's database: say so, keep it.
		_, aerr := alarm.Raise(ctx, tx, alarm.Alarm{Kind: "schedule.invalid", Key: sc.ID, Tenant: sc.Tenant, Severity: alarm.Warning,
			Summary: "schedule " + sc.Name + " cannot be read: " + err.Error(), Link: schedulesLink(sc.Tenant)})
		return aerr
	}
	keep := 1
	if sc.CatchUp == All {
		keep = sc.Cap
	}
	recent, total := dueTimes(c, *sc.NextRunAt, now, keep)
	if total == 0 {
		_, err := tx.Exec(ctx, `UPDATE schedules SET next_run_at = $2 WHERE id = $1`, sc.ID, c.Next(now))
		return err
	}
	latest := recent[len(recent)-1]
	type row struct {
		at     time.Time
		covers int
		status string
	}
	var out []row
	switch sc.CatchUp {
	case Skip:
		if now.Sub(latest) <= s.cfg.Grace {
			if total > 1 {
				out = append(out, row{prevOf(c, latest, *sc.NextRunAt), total - 1, "skipped"})
			}
			out = append(out, row{latest, 1, "pending"})
		} else {
			out = append(out, row{latest, total, "skipped"})
		}
	case One:
		out = append(out, row{latest, total, "pending"})
	case All:
		if total > len(recent) {
			out = append(out, row{prevOf(c, recent[0], *sc.NextRunAt), total - len(recent), "skipped"})
		}
		for _, t := range recent {
			out = append(out, row{t, 1, "pending"})
		}
	}
	for _, r := range out {
		var finished any
		if r.status == "skipped" {
			finished = now
			s.runs.WithLabelValues(sc.Kind, "skipped").Add(float64(r.covers))
			s.cfg.Log.Info("schedule: missed fire times skipped by catch-up policy", "schedule", sc.Name, "tenant", sc.Tenant,
				"policy", string(sc.CatchUp), "skipped", r.covers, "latest_skipped", r.at)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schedule_runs (schedule_id, scheduled_for, covers, status, finished_at)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (schedule_id, scheduled_for) DO NOTHING`,
			sc.ID, r.at, r.covers, r.status, finished); err != nil {
			return err
		}
	}
	_, err = tx.Exec(ctx, `UPDATE schedules SET last_tick_at = $2, next_run_at = $3 WHERE id = $1`, sc.ID, latest, c.Next(latest))
	return err
}

// prevOf returns the fire time before t (at or after first), which a
// skipped row that stands for several fire times is recorded under.
func prevOf(c *Cron, t, first time.Time) time.Time {
	prev := first
	for x := first; !x.IsZero() && x.Before(t); x = c.Next(x) {
		prev = x
	}
	if !prev.Before(t) {
		return t.Add(-time.Second)
	}
	return prev
}

// RunArgs is the River job that runs a schedule's pending runs.
type RunArgs struct {
	Tenant     string `json:"tenant"`
	ScheduleID string `json:"schedule_id"`
}

// Kind implements river.JobArgs.
func (RunArgs) Kind() string { return "schedule.run" }

// Queue is the River queue schedule runs use; the panel gives it workers.
const Queue = "schedule"

// InsertOpts keeps one run job per schedule. Runs that fall due while it
// works are taken by its own loop, or by the job the next tick starts.
func (RunArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, MaxAttempts: 3, UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: liveStates}}
}

func (s *Scheduler) start(ctx context.Context, tenant, id string) error {
	if s.river == nil {
		return nil
	}
	if _, err := s.river.Insert(ctx, RunArgs{Tenant: tenant, ScheduleID: id}, nil); err != nil {
		return fmt.Errorf("schedule: enqueue run of %s: %w", id, err)
	}
	return nil
}

// RunPending takes the schedule's lease and runs its pending runs, oldest
// first, one at a time; if another owner holds a live lease it returns at
// once (that owner runs them). A run left "running" by an owner whose lease
// expired is recorded as lost.
func (s *Scheduler) RunPending(ctx context.Context, tenant, scheduleID string) error {
	tenant = orSystem(tenant)
	owner := s.cfg.Owner + "/" + randomID()
	var sc Schedule
	var lost []int64
	got := false
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		now := s.cfg.Clock.Now()
		var err error
		sc, err = scanSchedule(tx.QueryRow(ctx, `SELECT `+scheduleCols+` FROM schedules WHERE id = $1 FOR UPDATE`, scheduleID))
		if err != nil {
			return err
		}
		if sc.LeaseOwner != "" && sc.LeaseExpiresAt != nil && sc.LeaseExpiresAt.After(now) {
			return nil
		}
		k, ok := s.kind(sc.Kind)
		lease := 5 * time.Minute
		if ok {
			lease = k.Lease
		}
		if _, err := tx.Exec(ctx, `UPDATE schedules SET lease_owner = $2, lease_expires_at = $3 WHERE id = $1`,
			sc.ID, owner, now.Add(lease)); err != nil {
			return err
		}
		got = true
		rows, err := tx.Query(ctx, `UPDATE schedule_runs SET status = 'lost', finished_at = $2,
				error = 'its owner ' || COALESCE(owner, '?') || ' stopped renewing the lease; not run again, since it may have acted'
			WHERE schedule_id = $1 AND status = 'running' RETURNING id`, sc.ID, now)
		if err != nil {
			return err
		}
		lost, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // deleted meanwhile
	}
	if err != nil {
		return fmt.Errorf("schedule: take lease of %s: %w", scheduleID, err)
	}
	if !got {
		return nil
	}
	defer s.release(context.WithoutCancel(ctx), tenant, sc.ID, owner)
	for range lost {
		s.runs.WithLabelValues(sc.Kind, "lost").Inc()
	}
	if len(lost) > 0 {
		s.cfg.Log.Warn("schedule: run lost with its owner", "schedule", sc.Name, "tenant", tenant, "runs", lost)
		if _, err := alarm.Raise(ctx, s.pool, alarm.Alarm{Kind: "schedule.lost", Key: sc.ID, Tenant: tenant, Severity: alarm.Warning,
			Summary: fmt.Sprintf("schedule %s: a run's owner stopped (lease expired); the run is recorded as lost, not repeated", sc.Name),
			Link:    schedulesLink(tenant)}); err != nil {
			s.cfg.Log.Warn("schedule: alarm not raised", "err", err)
		}
	}
	for {
		r, ok, err := s.next(ctx, tenant, sc, owner)
		if err != nil || !ok {
			return err
		}
		if err := s.runOne(ctx, tenant, sc, owner, r); err != nil {
			return err
		}
	}
}

// next marks the oldest pending run as running under owner, if the lease
// is still owner's.
func (s *Scheduler) next(ctx context.Context, tenant string, sc Schedule, owner string) (Run, bool, error) {
	r := Run{ScheduleID: sc.ID, Tenant: tenant, Name: sc.Name, Kind: sc.Kind, Args: sc.Args}
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `UPDATE schedule_runs SET status = 'running', owner = $2, started_at = $3
			WHERE id = (SELECT r.id FROM schedule_runs r JOIN schedules s ON s.id = r.schedule_id
				WHERE r.schedule_id = $1 AND r.status = 'pending' AND s.lease_owner = $2 AND s.lease_expires_at > $3
				ORDER BY r.scheduled_for LIMIT 1 FOR UPDATE OF r)
			RETURNING id, scheduled_for, covers`, sc.ID, owner, s.cfg.Clock.Now()).Scan(&r.ID, &r.ScheduledFor, &r.Covers)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return r, false, nil
	}
	if err != nil {
		return r, false, fmt.Errorf("schedule: next run of %s: %w", sc.Name, err)
	}
	return r, true, nil
}

func (s *Scheduler) runOne(ctx context.Context, tenant string, sc Schedule, owner string, r Run) error {
	k, ok := s.kind(sc.Kind)
	var runErr error
	if !ok {
		runErr = fmt.Errorf("no handler for kind %q in this panel (known: %v)", sc.Kind, s.Kinds())
	} else {
		runErr = s.call(ctx, tenant, sc, owner, k, r)
	}
	status, msg := "ok", ""
	if runErr != nil {
		status, msg = "failed", runErr.Error()
		if len(msg) > 2000 {
			msg = msg[:2000]
		}
	}
	var still bool
	err := db.InTenant(context.WithoutCancel(ctx), s.pool, tenant, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE schedule_runs SET status = $3, finished_at = $4, error = NULLIF($5, '')
			WHERE id = $1 AND owner = $2 AND status = 'running'`, r.ID, owner, status, s.cfg.Clock.Now(), msg)
		still = tag.RowsAffected() == 1
		return err
	})
	if err != nil {
		return fmt.Errorf("schedule: record run of %s: %w", sc.Name, err)
	}
	if !still {
		// Another owner took the expired lease and recorded this run lost.
		return fmt.Errorf("schedule: %s: lease lost during the run for %s", sc.Name, r.ScheduledFor.Format(time.RFC3339))
	}
	s.runs.WithLabelValues(sc.Kind, status).Inc()
	if runErr != nil {
		s.cfg.Log.Warn("schedule: run failed", "schedule", sc.Name, "tenant", tenant, "scheduled_for", r.ScheduledFor, "err", runErr)
		if _, err := alarm.Raise(ctx, s.pool, alarm.Alarm{Kind: "schedule.failed", Key: sc.ID, Tenant: tenant, Severity: alarm.Warning,
			Summary: fmt.Sprintf("schedule %s: the run for %s failed", sc.Name, r.ScheduledFor.Format(time.RFC3339)),
			Detail:  msg, Link: schedulesLink(tenant)}); err != nil {
			s.cfg.Log.Warn("schedule: alarm not raised", "err", err)
		}
		return nil
	}
	s.cfg.Log.Info("schedule: run done", "schedule", sc.Name, "tenant", tenant, "scheduled_for", r.ScheduledFor, "covers", r.Covers)
	for _, kind := range []string{"schedule.failed", "schedule.lost"} {
		if _, err := alarm.Resolve(ctx, s.pool, tenant, kind, sc.ID, "schedule"); err != nil {
			s.cfg.Log.Warn("schedule: alarm not resolved", "err", err)
		}
	}
	return nil
}

// call runs the handler under the kind's timeout, renewing the lease every
// Lease/3 and cancelling the handler if the lease is lost; a panic is the
// run's error, not the panel's.
func (s *Scheduler) call(ctx context.Context, tenant string, sc Schedule, owner string, k Kind, r Run) (err error) {
	runCtx, cancel := context.WithTimeoutCause(ctx, k.Timeout, fmt.Errorf("schedule: run exceeded the kind's timeout %s", k.Timeout))
	defer cancel()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-runCtx.Done():
				return
			case <-s.cfg.Clock.After(k.Lease / 3):
			}
			if !s.renew(runCtx, tenant, sc.ID, owner, k.Lease) {
				s.cfg.Log.Warn("schedule: lease lost; cancelling the run", "schedule", sc.Name, "tenant", tenant)
				cancel()
				return
			}
		}
	}()
	defer func() {
		close(done)
		wg.Wait()
	}()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return k.Handle(runCtx, r)
}

func (s *Scheduler) renew(ctx context.Context, tenant, id, owner string, lease time.Duration) bool {
	now := s.cfg.Clock.Now()
	var n int64
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE schedules SET lease_expires_at = $3 WHERE id = $1 AND lease_owner = $2 AND lease_expires_at > $4`,
			id, owner, now.Add(lease), now)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		// A database hiccup is not a lost lease; the next renewal decides.
		s.cfg.Log.Warn("schedule: lease renewal failed", "schedule", id, "err", err)
		return ctx.Err() == nil
	}
	return n == 1
}

func (s *Scheduler) release(ctx context.Context, tenant, id, owner string) {
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE schedules SET lease_owner = NULL, lease_expires_at = NULL WHERE id = $1 AND lease_owner = $2`, id, owner)
		return err
	})
	if err != nil {
		s.cfg.Log.Warn("schedule: lease not released; it expires on its own", "schedule", id, "err", err)
	}
}

func schedulesLink(string) string { return "/schedules" }

func orSystem(t string) string {
	if t == "" {
		return System
	}
	return t
}

func randomID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func isUnique(err error) bool {
	var pe interface{ SQLState() string }
	return errors.As(err, &pe) && pe.SQLState() == "23505"
}
