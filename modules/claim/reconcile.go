package claim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/fleetwright/fleetwright/modules/wire"
)

// ReconcileQueue is the River queue of the reconciler; the panel must
// configure it (Queues does).
const ReconcileQueue = "reconcile"

// SweepQueue carries the leader's periodic sweeps.
const SweepQueue = "claim_sweep"

// RescueStuckJobsAfter is what the panel gives River's rescuer: a job still
// "running" this long belongs to a replica that died (SIGKILL, OOM, a lost
// host) and is retried. River's default is an hour, during which an UNKNOWN
// whose reconcile job was running on the dead replica stays unsettled — the
// load test's replica kills left two so. It must exceed every job's timeout
// (the reconciler's and the duplicate sweep's are below it; River's default
// job timeout is a minute); a live job rescued early would only run twice,
// which every claim job tolerates (decisions are fenced by token and state).
const RescueStuckJobsAfter = 90 * time.Second

// Queues returns the River queues the claim engine needs.
func Queues() map[string]river.QueueConfig {
	return map[string]river.QueueConfig{
		ReconcileQueue: {MaxWorkers: 10},
		SweepQueue:     {MaxWorkers: 2},
	}
}

// reconcileWorker settles UNKNOWN claims from board evidence.
type reconcileWorker struct {
	river.WorkerDefaults[ReconcileArgs]
	e *Engine
}

// NextRetry is the injectable backoff (Config.Backoff).
func (w *reconcileWorker) NextRetry(job *river.Job[ReconcileArgs]) time.Time {
	return time.Now().Add(w.e.cfg.Backoff(job.Attempt))
}

// Timeout bounds one attempt (a look-up through an agent included).
func (w *reconcileWorker) Timeout(*river.Job[ReconcileArgs]) time.Duration { return time.Minute }

// Evidence is what a reconciler decision rests on; it is audited.
type Evidence struct {
	LookupID string         `json:"lookup_id"`
	Complete bool           `json:"complete"`
	Bookings []wire.Booking `json:"bookings"`
	// GraceLeftMS is the grace remaining (by the database clock) when the
	// look-up was sent; ≤ 0 means the look-up began after grace.
	GraceLeftMS int64 `json:"grace_left_ms"`
}

// Work settles one UNKNOWN claim: it asks an agent of the tenant for the
// client's bookings, accepts only a complete answer, confirms when the board
// has the booking, and releases only when a look-up sent after grace found
// none. Anything else is retried with backoff; nothing is retried blind.
func (w *reconcileWorker) Work(ctx context.Context, job *river.Job[ReconcileArgs]) error {
	e, a := w.e, job.Args
	c, err := e.store.Get(ctx, a.Tenant, a.Key)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	if c.State != Unknown || c.Token != a.Token {
		e.m.reconciled.WithLabelValues("settled").Inc()
		return nil
	}
	left, err := e.store.GraceLeft(ctx, a.Tenant, a.Key, e.cfg.Grace)
	if err != nil {
		return err
	}
	lk := e.lookup()
	if lk == nil {
		return errors.New("claim: reconcile: no look-up path attached (no gateway)")
	}
	as, err := e.store.ClientOf(ctx, a.Tenant, a.Key)
	if err != nil {
		e.m.reconciled.WithLabelValues("incomplete").Inc()
		return fmt.Errorf("claim: reconcile %s: %w", a.Key, err)
	}
	req := wire.Lookup{RequestID: newID(), Keys: []string{a.Key}, Since: c.LeasedAt.Add(-time.Hour)}
	lctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	res, err := e.lookupAll(lctx, lk, a.Tenant, as, req)
	cancel()
	if err != nil {
		e.m.reconciled.WithLabelValues("incomplete").Inc()
		return fmt.Errorf("claim: reconcile %s: look-up failed: %w", a.Key, err)
	}
	if !res.Complete {
		// A signed-out page, a partial list, an error: proves nothing.
		e.m.reconciled.WithLabelValues("incomplete").Inc()
		return fmt.Errorf("claim: reconcile %s: look-up incomplete (%s): nothing decided", a.Key, res.Error)
	}
	var ours []wire.Booking
	for _, b := range res.Bookings {
		if b.Key == a.Key {
			ours = append(ours, b)
		}
	}
	ev := Evidence{LookupID: req.RequestID, Complete: true, Bookings: ours, GraceLeftMS: left.Milliseconds()}
	if len(ours) >= 2 {
		if _, err := e.store.RecordDuplicate(ctx, a.Tenant, a.Key, ours); err != nil {
			return err
		}
	}
	if len(ours) > 0 {
		// Each booking is attributed to the attempt that made it and the
		// claim confirmed, whichever attempt it was.
		_, err := e.store.ApplyBookings(ctx, a.Tenant, a.Key, ours, sourceReconciler(ev))
		return w.settled(a, err, "confirmed")
	}
	if left > 0 {
		// No booking yet, but the board may still commit: look again once
		// grace has passed. A snooze is not a failed attempt.
		e.m.reconciled.WithLabelValues("too_early").Inc()
		return river.JobSnooze(left + 50*time.Millisecond)
	}
	if c.LateEvidence && c.EvidenceToken != nil {
		// An earlier attempt's booking was already applied (the claim was
		// marked while ACTING): evidence is never thrown away, so the claim
		// settles CONFIRMED by it rather than being released.
		_, err := e.store.ApplyAttempt(ctx, a.Tenant, a.Key, *c.EvidenceToken, sourceReconciler(ev))
		return w.settled(a, err, "confirmed")
	}
	honours, err := e.store.HonoursIdempotencyKeys(ctx, a.Tenant)
	if err != nil {
		return err
	}
	err = e.store.Resolve(ctx, a.Tenant, a.Key, a.Token, e.cfg.Grace,
		Resolution{Evidence: ev, GiveUp: !honours})
	if err == nil && !honours {
		e.m.givenUp.Inc()
		e.log.Warn("claim given up after an unknown outcome", "tenant", a.Tenant, "key", a.Key, "token", a.Token)
	}
	if err == nil {
		// Leasable again at once, on this replica too.
		e.forgetFlight(a.Tenant+"\x00"+a.Key, nil)
	}
	if errors.Is(err, ErrTooEarly) {
		e.m.reconciled.WithLabelValues("too_early").Inc()
		return river.JobSnooze(time.Second)
	}
	return w.settled(a, err, "released")
}

func (w *reconcileWorker) settled(a ReconcileArgs, err error, result string) error {
	var r *Refusal
	if errors.As(err, &r) {
		// Someone settled it meanwhile (a late CONFIRMED report).
		w.e.m.reconciled.WithLabelValues("settled").Inc()
		return nil
	}
	if err != nil {
		return err
	}
	w.e.m.reconciled.WithLabelValues(result).Inc()
	w.e.log.Info("claim reconciled", "tenant", a.Tenant, "key", a.Key, "token", a.Token, "result", result)
	return nil
}

// SweepArgs is the leader's periodic sweep of every tenant.
type SweepArgs struct{}

// Kind implements river.JobArgs.
func (SweepArgs) Kind() string { return "claim.sweep" }

// InsertOpts keeps one sweep at a time.
func (SweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: SweepQueue, MaxAttempts: 1, UniqueOpts: river.UniqueOpts{ByState: liveStates}}
}

var liveStates = []rivertype.JobState{rivertype.JobStateAvailable, rivertype.JobStatePending,
	rivertype.JobStateRunning, rivertype.JobStateRetryable, rivertype.JobStateScheduled}

type sweepWorker struct {
	river.WorkerDefaults[SweepArgs]
	e *Engine
}

// Work sweeps each tenant: ACTING past its deadline → UNKNOWN (with its
// reconcile job), LEASED past expiry → RELEASED, stranded UNKNOWNs get a new
// reconcile job, settled claims whose load expired are archived.
func (w *sweepWorker) Work(ctx context.Context, _ *river.Job[SweepArgs]) error {
	return w.e.SweepAll(ctx)
}

// reoffer offers again the tenant's queued jobs that nobody holds. An offer
// is fire-and-forget (pub/sub, and an agent whose actors are all busy lets
// it go): without this a job whose offers all went unanswered would never be
// claimed, since the cell's dedupe drops its later sightings. A re-offer can
// only cost a refused lease, never a duplicate.
func (e *Engine) reoffer(ctx context.Context, tenant string) error {
	jobs, err := e.store.Unleased(ctx, tenant, e.cfg.ReofferAfter, e.cfg.ReofferWindow, 500)
	if err != nil {
		return err
	}
	looked := 0
	assign := len(jobs) > 0 && e.dispatchMode(ctx, tenant) == DispatchAssign
	for _, j := range jobs {
		if j.AfterUnknown {
			// Released after an UNKNOWN where the platform honours
			// idempotency keys: offered again only after a fresh complete
			// look-up, a few per sweep (each is a round trip to an agent).
			if looked >= reofferLookups {
				continue
			}
			looked++
			if !e.clearForReoffer(ctx, tenant, j.Job.Key) {
				continue
			}
		}
		if assign {
			// Assign mode: granted again, timed from this re-grant's start;
			// offered only when no warm actor is known.
			done, err := e.assign(ctx, j, time.Now(), PanelStepRegrant, nil)
			if err != nil {
				return nil
			}
			if done {
				e.m.dispatched.WithLabelValues("regranted").Inc()
				continue
			}
		}
		if err := e.publish(ctx, j.Cell, tenant, j.Job, j.SeenAt, j.QueuedAt, true); err != nil {
			// A failing cell: its tenants wait for it to come back.
			return nil
		}
		e.m.dispatched.WithLabelValues("reoffered").Inc()
	}
	return nil
}

// strandedWatchDue: a tenant's lost watches are looked for at most once per
// StrandedAfter (the query walks a day of attempts), and at the first sweep.
func (e *Engine) strandedWatchDue(tenant string) bool {
	e.smu.Lock()
	defer e.smu.Unlock()
	if e.watchChecked == nil {
		e.watchChecked = map[string]time.Time{}
	}
	now := e.cfg.Clock.Now()
	if last, ok := e.watchChecked[tenant]; ok && now.Sub(last) < e.cfg.StrandedAfter {
		return false
	}
	e.watchChecked[tenant] = now
	return true
}

// reofferLookups bounds the fresh look-ups one sweep makes per tenant.
const reofferLookups = 3

// clearForReoffer looks a job released after an UNKNOWN up afresh: a
// booking found is applied as evidence (the job is then CONFIRMED, not
// offered); a complete answer without one clears the job for ClearanceFor.
// Anything else leaves it for the next sweep.
func (e *Engine) clearForReoffer(ctx context.Context, tenant, key string) bool {
	lk := e.lookup()
	if lk == nil {
		return false
	}
	as, err := e.store.ClientOf(ctx, tenant, key)
	if err != nil {
		return false
	}
	req := wire.Lookup{RequestID: newID(), Keys: []string{key}, Since: e.cfg.Clock.Now().Add(-e.cfg.DuplicateWindow)}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	res, err := e.lookupAll(lctx, lk, tenant, as, req)
	cancel()
	if err != nil || !res.Complete {
		return false
	}
	var ours []wire.Booking
	for _, b := range res.Bookings {
		if b.Key == key {
			ours = append(ours, b)
		}
	}
	ev := Evidence{LookupID: req.RequestID, Complete: true, Bookings: ours}
	if len(ours) > 0 {
		if _, err := e.store.ApplyBookings(ctx, tenant, key, ours, evidenceSource{Name: "reoffer", Actor: actorEngine,
			ConfirmAction: "claim.reconcile.confirm", Detail: map[string]any{"evidence": ev}}); err != nil {
			e.log.Warn("re-offer look-up: applying the evidence failed", "tenant", tenant, "key", key, "err", err)
		}
		return false
	}
	ok, err := e.store.Clear(ctx, tenant, key, ev)
	if err != nil {
		e.log.Warn("re-offer: clearing failed", "tenant", tenant, "key", key, "err", err)
	}
	return ok
}

// SweepAll runs one sweep over every tenant.
func (e *Engine) SweepAll(ctx context.Context) error {
	tenants, err := e.store.allTenants(ctx)
	if err != nil {
		return err
	}
	var first error
	for _, t := range tenants {
		unknown, released, err := e.store.Sweep(ctx, t.ID)
		if err == nil {
			_, err = e.store.Stranded(ctx, t.ID, e.cfg.StrandedAfter)
		}
		if err == nil && e.strandedWatchDue(t.ID) {
			_, err = e.store.StrandedWatches(ctx, t.ID, e.cfg.ClockErrorBound)
		}
		if err == nil {
			_, err = e.store.Archive(ctx, t.ID, e.cfg.ArchiveMargin)
		}
		if err == nil {
			err = e.restoreHeld(ctx, t.ID)
		}
		if err == nil && !t.Paused {
			err = e.reoffer(ctx, t.ID)
		}
		if err != nil {
			e.log.Warn("sweep failed for a tenant", "tenant", t.Slug, "err", err)
			if first == nil {
				first = err
			}
			continue
		}
		if unknown+released > 0 {
			e.log.Info("sweep", "tenant", t.Slug, "unknown", unknown, "released", released)
		}
	}
	return first
}

// DuplicateSweepArgs is the periodic comparison of the board's bookings with
// our claims.
type DuplicateSweepArgs struct{}

// Kind implements river.JobArgs.
func (DuplicateSweepArgs) Kind() string { return "claim.duplicate_sweep" }

// InsertOpts keeps one duplicate sweep at a time.
func (DuplicateSweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: SweepQueue, MaxAttempts: 1, UniqueOpts: river.UniqueOpts{ByState: liveStates}}
}

type duplicateSweepWorker struct {
	river.WorkerDefaults[DuplicateSweepArgs]
	e *Engine
}

// Timeout bounds a whole duplicate sweep.
func (w *duplicateSweepWorker) Timeout(*river.Job[DuplicateSweepArgs]) time.Duration {
	return 75 * time.Second // one look-up (45 s at most), then recording; below RescueStuckJobsAfter
}

func (w *duplicateSweepWorker) Work(ctx context.Context, _ *river.Job[DuplicateSweepArgs]) error {
	return w.e.DuplicateSweep(ctx)
}

// DuplicateSweep asks an agent of each tenant for the client's bookings over
// the window and records every load booked more than once. The count comes
// from the board's evidence only: our own claim rows would always say 0.
func (e *Engine) DuplicateSweep(ctx context.Context) error {
	lk := e.lookup()
	if lk == nil {
		return nil
	}
	tenants, err := e.store.allTenants(ctx)
	if err != nil {
		return err
	}
	for _, t := range tenants {
		if err := e.duplicateSweepTenant(ctx, lk, t.ID); err != nil {
			e.log.Info("duplicate sweep: no complete look-up for a tenant", "tenant", t.Slug, "err", err)
		}
	}
	return nil
}

// duplicateSweepTenant reads the bookings of each client the tenant books
// as (one, by the one-client rule; more only after a move) through an
// account of that client, and compares them with the claims.
func (e *Engine) duplicateSweepTenant(ctx context.Context, lk Lookuper, tenant string) error {
	since := e.cfg.Clock.Now().Add(-e.cfg.DuplicateWindow)
	clients, err := e.store.Clients(ctx, tenant, since)
	if err != nil {
		return err
	}
	if len(clients) == 0 {
		return fmt.Errorf("%w: the tenant's accounts state no platform client", ErrNoClient)
	}
	var first error
	for _, as := range clients {
		if err := e.duplicateSweepClient(ctx, lk, tenant, as, since); err != nil && first == nil {
			first = fmt.Errorf("%s: %w", as, err)
		}
	}
	if first != nil {
		return first
	}
	total, _, err := e.store.DuplicateConfirmations(ctx, tenant)
	if err != nil {
		return err
	}
	e.m.duplicates.WithLabelValues(tenant).Set(float64(total))
	return nil
}

func (e *Engine) duplicateSweepClient(ctx context.Context, lk Lookuper, tenant string, as Client, since time.Time) error {
	lctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	res, err := e.lookupAll(lctx, lk, tenant, as, wire.Lookup{RequestID: newID(), Since: since})
	if err != nil {
		return err
	}
	if !res.Complete {
		return fmt.Errorf("incomplete look-up: %s", res.Error)
	}
	byKey := map[string][]wire.Booking{}
	for _, b := range res.Bookings {
		byKey[b.Key] = append(byKey[b.Key], b)
	}
	keys := make([]string, 0, len(byKey))
	for key, bs := range byKey {
		keys = append(keys, key)
		if len(bs) >= 2 {
			if _, err := e.store.RecordDuplicate(ctx, tenant, key, bs); err != nil {
				return err
			}
		}
	}
	// The board's bookings are evidence too: each one our claims do not
	// yet reflect is applied (a late commit nothing else looked for).
	need, err := e.store.NeedEvidence(ctx, tenant, keys)
	if err != nil {
		return err
	}
	for key, bs := range byKey {
		if len(bs) >= 2 && !slices.Contains(need, key) {
			need = append(need, key) // a possible conflict: its attempts are marked
		}
	}
	for _, key := range need {
		ev := Evidence{LookupID: "duplicate-sweep", Complete: true, Bookings: byKey[key]}
		if _, err := e.store.ApplyBookings(ctx, tenant, key, byKey[key], evidenceSource{Name: "duplicate_sweep",
			Actor: actorDuplicates, ConfirmAction: "claim.reconcile.confirm", Detail: map[string]any{"evidence": ev}}); err != nil {
			return err
		}
	}
	return nil
}

// AddWorkers registers the reconciler, the watch and the sweeps with River.
func (e *Engine) AddWorkers(w *river.Workers) {
	river.AddWorker(w, &reconcileWorker{e: e})
	river.AddWorker(w, &watchWorker{e: e})
	river.AddWorker(w, &sweepWorker{e: e})
	river.AddWorker(w, &duplicateSweepWorker{e: e})
	river.AddWorker(w, &restoreWorker{e: e})
}

// PeriodicJobs are the leader-elected sweeps: River runs periodic jobs on
// the elected leader only, so replicas never overlap, and a missed interval
// is simply run at the next one (no catch-up burst).
func (e *Engine) PeriodicJobs() []*river.PeriodicJob {
	return []*river.PeriodicJob{
		river.NewPeriodicJob(river.PeriodicInterval(e.cfg.SweepEvery),
			func() (river.JobArgs, *river.InsertOpts) { return SweepArgs{}, nil },
			&river.PeriodicJobOpts{ID: "claim.sweep", RunOnStart: true}),
		river.NewPeriodicJob(river.PeriodicInterval(e.cfg.DuplicateSweepEvery),
			func() (river.JobArgs, *river.InsertOpts) { return DuplicateSweepArgs{}, nil },
			&river.PeriodicJobOpts{ID: "claim.duplicate_sweep"}),
	}
}

// WatchArgs is the River job that keeps looking a job up while an attempt's
// fate is in doubt (released or given up after an UNKNOWN, superseded while
// UNKNOWN, or a second CONFIRMED without a booking id), until the load
// expires: a late commit is found within WatchMaxInterval, not at the next
// duplicate sweep.
type WatchArgs struct {
	Tenant string `json:"tenant"`
	Key    string `json:"key"`
}

// Kind implements river.JobArgs.
func (WatchArgs) Kind() string { return "claim.watch" }

// InsertOpts keeps one live watch per job (a finished one does not block
// the next).
func (WatchArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: ReconcileQueue, MaxAttempts: 10000,
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: liveStates}}
}

type watchWorker struct {
	river.WorkerDefaults[WatchArgs]
	e *Engine
}

// NextRetry: a failed or incomplete look-up is tried again with the
// reconciler's backoff, never later than WatchMaxInterval.
func (w *watchWorker) NextRetry(job *river.Job[WatchArgs]) time.Time {
	return time.Now().Add(min(w.e.cfg.Backoff(job.Attempt), WatchMaxInterval))
}

// Timeout bounds one look-up.
func (w *watchWorker) Timeout(*river.Job[WatchArgs]) time.Duration { return time.Minute }

// Work looks the job up once: every booking found is applied as evidence;
// while an attempt's fate is still in doubt and the load has not expired
// (by the database clock, past the clock error bound) it looks again after
// WatchDelay.
func (w *watchWorker) Work(ctx context.Context, job *river.Job[WatchArgs]) error {
	e, a := w.e, job.Args
	doubt, expired, err := e.store.WatchState(ctx, a.Tenant, a.Key, e.cfg.ClockErrorBound, e.cfg.DuplicateWindow)
	if err != nil {
		return err
	}
	if !doubt {
		e.m.watched.WithLabelValues("settled").Inc()
		return nil
	}
	if expired {
		e.m.watched.WithLabelValues("expired").Inc()
		e.log.Info("claim watch: the load expired with an attempt still in doubt", "tenant", a.Tenant, "key", a.Key)
		return nil
	}
	lk := e.lookup()
	if lk == nil {
		return errors.New("claim: watch: no look-up path attached (no gateway)")
	}
	as, err := e.store.ClientOf(ctx, a.Tenant, a.Key)
	if err != nil {
		e.m.watched.WithLabelValues("incomplete").Inc()
		return fmt.Errorf("claim: watch %s: %w", a.Key, err)
	}
	req := wire.Lookup{RequestID: newID(), Keys: []string{a.Key}, Since: e.cfg.Clock.Now().Add(-e.cfg.DuplicateWindow)}
	lctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	res, err := e.lookupAll(lctx, lk, a.Tenant, as, req)
	cancel()
	if err != nil {
		e.m.watched.WithLabelValues("incomplete").Inc()
		return fmt.Errorf("claim: watch %s: look-up failed: %w", a.Key, err)
	}
	if !res.Complete {
		e.m.watched.WithLabelValues("incomplete").Inc()
		return fmt.Errorf("claim: watch %s: look-up incomplete (%s)", a.Key, res.Error)
	}
	var ours []wire.Booking
	for _, b := range res.Bookings {
		if b.Key == a.Key {
			ours = append(ours, b)
		}
	}
	if len(ours) >= 2 {
		if _, err := e.store.RecordDuplicate(ctx, a.Tenant, a.Key, ours); err != nil {
			return err
		}
	}
	if len(ours) > 0 {
		ev := Evidence{LookupID: req.RequestID, Complete: true, Bookings: ours, GraceLeftMS: 0}
		if _, err := e.store.ApplyBookings(ctx, a.Tenant, a.Key, ours, sourceWatch(ev)); err != nil {
			return err
		}
		if doubt, _, err = e.store.WatchState(ctx, a.Tenant, a.Key, e.cfg.ClockErrorBound, e.cfg.DuplicateWindow); err != nil {
			return err
		}
		if !doubt {
			e.m.watched.WithLabelValues("found").Inc()
			return nil
		}
	}
	e.m.watched.WithLabelValues("none").Inc()
	return river.JobSnooze(WatchDelay(e.cfg.Clock.Since(job.CreatedAt), e.cfg.WatchFirst))
}

func sourceReconciler(ev Evidence) evidenceSource {
	return evidenceSource{Name: "reconciler", Actor: actorReconciler, ConfirmAction: "claim.reconcile.confirm",
		Detail: map[string]any{"evidence": ev}}
}

func sourceWatch(ev Evidence) evidenceSource {
	return evidenceSource{Name: "watch", Actor: actorReconciler, ConfirmAction: "claim.reconcile.confirm",
		Detail: map[string]any{"evidence": ev}}
}
