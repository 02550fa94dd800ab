package crawl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/crawl/spec"
	"github.com/fleetwright/fleetwright/modules/schedule"
)

// ScheduleKind is the scheduler kind that runs a crawl job.
const ScheduleKind = "crawl.run"

// Enqueuer inserts River jobs in a transaction (River's client is one).
type Enqueuer interface {
	InsertTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
}

// RunArgs is the River job of one run.
type RunArgs struct {
	Tenant string `json:"tenant"`
	RunID  string `json:"run_id"`
}

// Kind implements river.JobArgs.
func (RunArgs) Kind() string { return "crawl.run" }

// InsertOpts puts runs on their own queue. A run is attempted again only
// when the panel running it died (River rescues it); Execute then goes on
// with a run still marked running, and stored items make it idempotent.
func (RunArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: Queue, MaxAttempts: 3} }

// Queue is the River queue of crawl runs.
const Queue = "crawl"

// Queues are the River queues crawl runs need.
func Queues() map[string]river.QueueConfig {
	return map[string]river.QueueConfig{Queue: {MaxWorkers: 10}}
}

type runWorker struct {
	river.WorkerDefaults[RunArgs]
	r *Runner
}

// Timeout: a run stops itself at its job's run_time limit.
func (w *runWorker) Timeout(*river.Job[RunArgs]) time.Duration { return -1 }

func (w *runWorker) Work(ctx context.Context, j *river.Job[RunArgs]) error {
	return w.r.Execute(ctx, j.Args.Tenant, j.Args.RunID)
}

// AddWorkers registers the run worker.
func AddWorkers(w *river.Workers, r *Runner) { river.AddWorker(w, &runWorker{r: r}) }

// Service is what the CLI and the console use: jobs with their schedules,
// and runs queued durably.
type Service struct {
	Store     *Store
	Pool      *pgxpool.Pool
	River     Enqueuer
	Schedules *schedule.Scheduler
	Clock     clock.Clock
}

// NewService builds the service; schedules may be nil (no scheduling).
func NewService(pool *pgxpool.Pool, rv Enqueuer, sched *schedule.Scheduler) *Service {
	s := &Service{Pool: pool, River: rv, Schedules: sched, Clock: clock.Real{}}
	s.Store = NewStore(pool, spec.Options{CheckCron: func(expr, tz string) error {
		_, err := schedule.ParseCron(expr, tz)
		return err
	}})
	return s
}

// RegisterSchedule makes crawl jobs schedulable: the scheduler's run of a
// job queues a crawl run and waits for it, so the scheduler's no-overlap
// lease and catch-up policy hold for crawls too.
func (s *Service) RegisterSchedule() error {
	if s.Schedules == nil {
		return nil
	}
	return s.Schedules.Register(schedule.Kind{Name: ScheduleKind, Timeout: 25 * time.Hour, Handle: s.scheduled})
}

type scheduleArgs struct {
	JobID string `json:"job_id"`
}

func (s *Service) scheduled(ctx context.Context, r schedule.Run) error {
	var a scheduleArgs
	if err := json.Unmarshal(r.Args, &a); err != nil || a.JobID == "" {
		return fmt.Errorf("crawl: schedule %s has no job_id", r.Name)
	}
	runID, err := s.QueueRun(ctx, r.Tenant, a.JobID, "schedule", audit.Entry{Actor: "system"})
	if errors.Is(err, ErrRunActive) {
		return nil // the previous run still goes on: this fire time is covered by it
	}
	if err != nil {
		return err
	}
	for {
		run, err := s.Store.Run(ctx, r.Tenant, runID)
		if err != nil {
			return err
		}
		switch run.State {
		case "succeeded", "stopped":
			return nil
		case "failed":
			return fmt.Errorf("crawl: run %s failed: %s", runID, run.Reason)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.Clock.After(time.Second):
		}
	}
}

// Apply stores a job file as the job's next version and keeps its schedule
// in step (created, changed, or removed with the schedule section).
func (s *Service) Apply(ctx context.Context, tenant string, by audit.Entry, file string, src []byte) (Job, bool, error) {
	j, changed, err := s.Store.Apply(ctx, tenant, by, file, src)
	if err != nil {
		return j, changed, err
	}
	return j, changed, s.syncSchedule(ctx, tenant, j)
}

func (s *Service) syncSchedule(ctx context.Context, tenant string, j Job) error {
	if s.Schedules == nil {
		return nil
	}
	name := "crawl-" + j.Name
	sc := j.Spec.Schedule
	if sc == nil {
		if _, err := s.Schedules.Get(ctx, tenant, name); err != nil {
			return nil // none to remove
		}
		if err := s.Schedules.Delete(ctx, tenant, name); err != nil {
			return fmt.Errorf("crawl: remove schedule: %w", err)
		}
		return nil
	}
	args, _ := json.Marshal(scheduleArgs{JobID: j.ID})
	_, err := s.Schedules.Ensure(ctx, tenant, schedule.Spec{Name: name, Kind: ScheduleKind, Cron: sc.Cron, TimeZone: sc.Timezone,
		CatchUp: schedule.Policy(sc.CatchUp), Cap: sc.CatchUpCap, Args: args, Enabled: !sc.Paused && !j.Paused})
	if err != nil {
		return fmt.Errorf("crawl: schedule: %w", err)
	}
	return nil
}

// ErrPaused refuses a run of a paused job.
var ErrPaused = errors.New("crawl: the job is paused; resume it first")

// QueueRun records a run and its River job in one transaction. Audited.
func (s *Service) QueueRun(ctx context.Context, tenant, jobID, trigger string, by audit.Entry) (string, error) {
	var runID string
	err := db.InTenant(ctx, s.Pool, tenant, func(tx pgx.Tx) error {
		var paused bool
		if err := tx.QueryRow(ctx, `SELECT paused FROM crawl_jobs WHERE id = $1`, jobID).Scan(&paused); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrNoJob
			}
			return err
		}
		if paused {
			return ErrPaused
		}
		id, err := s.Store.QueueRun(ctx, tx, jobID, trigger)
		if err != nil {
			return err
		}
		if _, err := s.River.InsertTx(ctx, tx, RunArgs{Tenant: tenant, RunID: id}, nil); err != nil {
			return fmt.Errorf("crawl: queue run: %w", err)
		}
		by.Action, by.Target = "crawl.run.queue", "crawl_run:"+id
		by.Detail = map[string]any{"job_id": jobID, "trigger": trigger}
		if err := audit.Append(ctx, tx, by); err != nil {
			return err
		}
		runID = id
		return nil
	})
	return runID, err
}

// SetPaused pauses or resumes a job and its schedule.
func (s *Service) SetPaused(ctx context.Context, tenant string, by audit.Entry, jobID string, paused bool) error {
	if err := s.Store.SetPaused(ctx, tenant, by, jobID, paused); err != nil {
		return err
	}
	j, err := s.Store.JobByID(ctx, tenant, jobID)
	if err != nil {
		return err
	}
	return s.syncSchedule(ctx, tenant, j)
}
