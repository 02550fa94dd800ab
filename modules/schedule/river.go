package schedule

import (
	"context"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// TickArgs is the leader's periodic look at due schedules.
type TickArgs struct{}

// Kind implements river.JobArgs.
func (TickArgs) Kind() string { return "schedule.tick" }

// InsertOpts keeps one tick at a time, on the default queue so that long
// runs filling the schedule queue never delay it.
func (TickArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: river.QueueDefault, MaxAttempts: 1, UniqueOpts: river.UniqueOpts{ByState: liveStates}}
}

type tickWorker struct {
	river.WorkerDefaults[TickArgs]
	s *Scheduler
}

func (w *tickWorker) Work(ctx context.Context, _ *river.Job[TickArgs]) error { return w.s.Tick(ctx) }

type runWorker struct {
	river.WorkerDefaults[RunArgs]
	s *Scheduler
}

// Timeout is off: each run has its kind's own timeout, and a run job works
// through several pending runs in a row.
func (w *runWorker) Timeout(*river.Job[RunArgs]) time.Duration { return -1 }

func (w *runWorker) Work(ctx context.Context, j *river.Job[RunArgs]) error {
	return w.s.RunPending(ctx, j.Args.Tenant, j.Args.ScheduleID)
}

// AddWorkers registers the scheduler's River workers.
func (s *Scheduler) AddWorkers(w *river.Workers) {
	river.AddWorker(w, &tickWorker{s: s})
	river.AddWorker(w, &runWorker{s: s})
}

// Queues is the River queue configuration the scheduler needs: runs of
// different schedules proceed side by side, up to 10 at once per replica.
func Queues() map[string]river.QueueConfig {
	return map[string]river.QueueConfig{Queue: {MaxWorkers: 10}}
}

// PeriodicJobs returns the leader-elected tick.
func (s *Scheduler) PeriodicJobs() []*river.PeriodicJob {
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(s.cfg.Tick),
		func() (river.JobArgs, *river.InsertOpts) { return TickArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true})}
}

var liveStates = []rivertype.JobState{rivertype.JobStateAvailable, rivertype.JobStatePending,
	rivertype.JobStateRunning, rivertype.JobStateRetryable, rivertype.JobStateScheduled}
