package health

import (
	"context"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// SweepArgs is the leader's periodic health sweep.
type SweepArgs struct{}

// Kind implements river.JobArgs.
func (SweepArgs) Kind() string { return "health.sweep" }

// InsertOpts keeps one sweep at a time.
func (SweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: river.QueueDefault, MaxAttempts: 1, UniqueOpts: river.UniqueOpts{ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
		rivertype.JobStateRetryable, rivertype.JobStateScheduled}}}
}

type sweepWorker struct {
	river.WorkerDefaults[SweepArgs]
	s *Sweeper
}

func (w *sweepWorker) Work(ctx context.Context, _ *river.Job[SweepArgs]) error { return w.s.Sweep(ctx) }

// Timeout bounds one sweep.
func (w *sweepWorker) Timeout(*river.Job[SweepArgs]) time.Duration { return time.Minute }

// AddWorkers registers the sweep's River worker.
func (s *Sweeper) AddWorkers(w *river.Workers) { river.AddWorker(w, &sweepWorker{s: s}) }

// PeriodicJobs returns the leader-elected sweep, every interval.
func (s *Sweeper) PeriodicJobs(interval time.Duration) []*river.PeriodicJob {
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(interval),
		func() (river.JobArgs, *river.InsertOpts) { return SweepArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true, ID: "health.sweep"})}
}
