package claim_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// lateFixture leases key to a1, acts and reports UNKNOWN; the reconciler's
// release is done by hand (grace 0) so the tests decide every step.
type lateFixture struct {
	b      *bundle
	a1, a2 claim.Holder
	key    string
	t1     int64
}

func newLate(t *testing.T, key string) *lateFixture {
	t.Helper()
	b := setup(t)
	ctx := context.Background()
	f := &lateFixture{b: b, key: key, a1: claim.Holder{Agent: uuid(), Worker: "actor-1"}, a2: claim.Holder{Agent: uuid(), Worker: "actor-2"}}
	b.job(t, b.tenant, key)
	l, err := b.store.Lease(ctx, claim.LeaseRequest{Tenant: b.tenant, Key: key, Holder: f.a1, For: time.Minute})
	require.NoError(t, err)
	f.t1 = l.Token
	_, err = b.store.StartActing(ctx, b.tenant, key, l.Token, f.a1, 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, b.store.Report(ctx, b.tenant, key, l.Token, f.a1, claim.Outcome{Result: claim.Unknown, Detail: "HTTP 504"}))
	return f
}

// release settles the UNKNOWN as the reconciler does after grace; when the
// platform honours keys the job is cleared for a re-lease as the re-offer's
// fresh look-up would.
func (f *lateFixture) release(t *testing.T, giveUp bool) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, f.b.store.Resolve(ctx, f.b.tenant, f.key, f.t1, 0, claim.Resolution{GiveUp: giveUp}))
	if !giveUp {
		ok, err := f.b.store.Clear(ctx, f.b.tenant, f.key, claim.Evidence{Complete: true})
		require.NoError(t, err)
		require.True(t, ok)
	}
}

func (f *lateFixture) lease2(t *testing.T) claim.Lease {
	t.Helper()
	l, err := f.b.store.Lease(context.Background(), claim.LeaseRequest{Tenant: f.b.tenant, Key: f.key, Holder: f.a2, For: time.Minute})
	require.NoError(t, err)
	return l
}

func (f *lateFixture) confirm1(t *testing.T) {
	t.Helper()
	require.NoError(t, f.b.store.Report(context.Background(), f.b.tenant, f.key, f.t1, f.a1,
		claim.Outcome{Result: claim.Confirmed, ConfirmedAt: time.Now()}), "a CONFIRMED of an earlier attempt is never refused")
}

func (f *lateFixture) claim(t *testing.T) claim.Claim {
	t.Helper()
	c, err := f.b.store.Get(context.Background(), f.b.tenant, f.key)
	require.NoError(t, err)
	return c
}

func (f *lateFixture) attempts(t *testing.T) map[int64]claim.Attempt {
	t.Helper()
	as, err := f.b.store.Attempts(context.Background(), f.b.tenant, f.key)
	require.NoError(t, err)
	out := map[int64]claim.Attempt{}
	for _, a := range as {
		out[a.Token] = a
	}
	return out
}

// inDoubt: an attempt's fate is unknown, so the job's watch keeps looking.
func (f *lateFixture) inDoubt(t *testing.T) bool {
	t.Helper()
	doubt, _, err := f.b.store.WatchState(context.Background(), f.b.tenant, f.key, time.Second, time.Hour)
	require.NoError(t, err)
	return doubt
}

// watched: a watch job for the job is queued.
func (f *lateFixture) watched(t *testing.T) bool {
	t.Helper()
	var n int
	require.NoError(t, f.b.db.Owner.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE kind = 'claim.watch'
		AND args->>'key' = $1 AND state IN ('available','scheduled','retryable','running','pending')`, f.key).Scan(&n))
	return n > 0
}

func auditCount(t *testing.T, b *bundle, action string) int {
	t.Helper()
	log, err := b.store.AuditLog(context.Background(), b.tenant, action, 100)
	require.NoError(t, err)
	return len(log)
}

// A CONFIRMED of an earlier attempt is applied to the job's claim in every
// state it may have reached, in one transaction, audited.
func TestLateConfirmedOfAnEarlierAttempt(t *testing.T) {
	ctx := context.Background()

	t.Run("LEASED by another holder: CONFIRMED with a fresh token, the holder's act fails", func(t *testing.T) {
		f := newLate(t, "LD-LEASED")
		f.release(t, false)
		l2 := f.lease2(t)
		f.confirm1(t)
		c := f.claim(t)
		require.Equal(t, claim.Confirmed, c.State)
		require.Greater(t, c.Token, l2.Token, "a fresh fencing token")
		require.Equal(t, f.a1, c.Holder, "the claim carries the attempt whose booking it is")
		require.True(t, c.LateEvidence)
		require.EqualValues(t, f.t1, *c.EvidenceToken)
		_, err := f.b.store.StartActing(ctx, f.b.tenant, f.key, l2.Token, f.a2, 10*time.Second)
		require.Equal(t, claim.ReasonStaleToken, reason(t, err), "the current holder's act statement fails")
		as := f.attempts(t)
		require.Len(t, as, 2, "the re-lease did not erase its predecessor")
		require.Equal(t, "CONFIRMED", as[f.t1].Outcome)
		require.True(t, as[f.t1].LateEvidence)
		require.Equal(t, "RELEASED", as[l2.Token].Outcome)
		require.Contains(t, as[l2.Token].Detail, "superseded")
		require.Equal(t, 1, auditCount(t, f.b, "claim.late_evidence"))
	})

	t.Run("RELEASED and given up: CONFIRMED", func(t *testing.T) {
		f := newLate(t, "LD-GIVENUP")
		f.release(t, true)
		require.Equal(t, claim.GivenUp, f.claim(t).Outcome)
		f.confirm1(t)
		c := f.claim(t)
		require.Equal(t, claim.Confirmed, c.State)
		require.Greater(t, c.Token, f.t1)
		require.True(t, c.LateEvidence)
		require.Equal(t, 1, auditCount(t, f.b, "claim.late_evidence"))
		// A repeat is acknowledged and changes nothing.
		require.NoError(t, f.b.store.Report(ctx, f.b.tenant, f.key, f.t1, f.a1, claim.Outcome{Result: claim.Confirmed}))
		require.Equal(t, c.Token, f.claim(t).Token)
		require.Equal(t, 1, auditCount(t, f.b, "claim.late_evidence"))
	})

	t.Run("UNKNOWN of another attempt: CONFIRMED, and the job watched", func(t *testing.T) {
		f := newLate(t, "LD-UNKNOWN")
		f.release(t, false)
		l2 := f.lease2(t)
		_, err := f.b.store.StartActing(ctx, f.b.tenant, f.key, l2.Token, f.a2, 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, f.b.store.Report(ctx, f.b.tenant, f.key, l2.Token, f.a2, claim.Outcome{Result: claim.Unknown}))
		f.confirm1(t)
		c := f.claim(t)
		require.Equal(t, claim.Confirmed, c.State)
		require.Greater(t, c.Token, l2.Token)
		require.Equal(t, "UNKNOWN", f.attempts(t)[l2.Token].Outcome, "the second attempt's fate stays unknown")
		require.True(t, f.inDoubt(t), "so the job is looked up again until its load expires")
		require.True(t, f.watched(t))
	})

	t.Run("ACTING by another attempt: marked, settled when it reports", func(t *testing.T) {
		for _, reported := range []claim.State{claim.NotSent, claim.Taken, claim.Unknown, claim.Confirmed} {
			f := newLate(t, "LD-ACTING-"+string(reported))
			f.release(t, false)
			l2 := f.lease2(t)
			_, err := f.b.store.StartActing(ctx, f.b.tenant, f.key, l2.Token, f.a2, 10*time.Second)
			require.NoError(t, err)
			f.confirm1(t)
			c := f.claim(t)
			require.Equal(t, claim.Acting, c.State, "ACTING keeps its state")
			require.True(t, c.LateEvidence)
			require.Equal(t, l2.Token, c.Token)
			require.NoError(t, f.b.store.Report(ctx, f.b.tenant, f.key, l2.Token, f.a2, claim.Outcome{Result: reported}), reported)
			c = f.claim(t)
			require.Equal(t, claim.Confirmed, c.State, "settled CONFIRMED when %s is reported", reported)
			require.Equal(t, string(reported), f.attempts(t)[l2.Token].Outcome, "the acting attempt keeps what it reported")
			require.Equal(t, reported == claim.Unknown || reported == claim.Confirmed, f.inDoubt(t),
				"%s: a possible second booking is looked for", reported)
		}
	})

	t.Run("a CONFIRMED for a token that is no attempt of the job is refused", func(t *testing.T) {
		f := newLate(t, "LD-FOREIGN")
		err := f.b.store.Report(ctx, f.b.tenant, f.key, f.t1+1000, f.a1, claim.Outcome{Result: claim.Confirmed})
		require.Equal(t, claim.ReasonStaleToken, reason(t, err))
		err = f.b.store.Report(ctx, f.b.tenant, f.key, f.t1, f.a2, claim.Outcome{Result: claim.Confirmed})
		require.Equal(t, claim.ReasonNotHolder, reason(t, err), "an attempt's evidence comes from its own holder")
	})
}

// Keys off: a job released after an UNKNOWN is given up; no path leases it
// again, and the trigger refuses it too.
func TestGivenUpJobIsNeverLeasedAgain(t *testing.T) {
	f := newLate(t, "LD-GU")
	ctx := context.Background()
	f.release(t, true)
	c := f.claim(t)
	require.Equal(t, claim.Released, c.State)
	require.Equal(t, claim.GivenUp, c.Outcome)
	require.Contains(t, c.Detail, "given up after an unknown outcome")
	lr := f.b.engine.Lease(ctx, f.b.tenant, f.a2, wire.LeaseRequest{RequestID: "r", Worker: f.a2.Worker, Key: f.key})
	require.False(t, lr.Granted)
	require.Equal(t, wire.ReasonHeld, lr.Reason)
	// Not cleared by a look-up either.
	ok, err := f.b.store.Clear(ctx, f.b.tenant, f.key, claim.Evidence{Complete: true})
	require.NoError(t, err)
	require.False(t, ok)
	_, err = f.b.store.Lease(ctx, claim.LeaseRequest{Tenant: f.b.tenant, Key: f.key, Holder: f.a2, For: time.Minute})
	require.Equal(t, claim.ReasonHeld, reason(t, err))
	// Not re-offered.
	jobs, err := f.b.store.Unleased(ctx, f.b.tenant, 0, time.Hour, 100)
	require.NoError(t, err)
	for _, j := range jobs {
		require.NotEqual(t, f.key, j.Job.Key)
	}
	// Even a statement that bypasses the lease statement is refused.
	err = db.InTenant(ctx, f.b.db.App, f.b.tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE claims SET state = 'LEASED', token = nextval('claim_token') WHERE target_job_key = $1`, f.key)
		return err
	})
	require.ErrorContains(t, err, "never leased again")
	require.Equal(t, 1, auditCount(t, f.b, "claim.reconcile.give_up"))
	require.True(t, f.inDoubt(t), "a given-up job is still watched for a late commit")
	require.True(t, f.watched(t))
	counts, err := f.b.store.Safety(ctx, f.b.tenant)
	require.NoError(t, err)
	require.Equal(t, 1, counts.GivenUp)

	// Other releases keep being re-offered: an expired lease, NOT_SENT.
	f.b.job(t, f.b.tenant, "LD-NS")
	l, err := f.b.store.Lease(ctx, claim.LeaseRequest{Tenant: f.b.tenant, Key: "LD-NS", Holder: f.a1, For: time.Minute})
	require.NoError(t, err)
	_, err = f.b.store.StartActing(ctx, f.b.tenant, "LD-NS", l.Token, f.a1, 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, f.b.store.Report(ctx, f.b.tenant, "LD-NS", l.Token, f.a1, claim.Outcome{Result: claim.NotSent}))
	_, err = f.b.store.Lease(ctx, claim.LeaseRequest{Tenant: f.b.tenant, Key: "LD-NS", Holder: f.a2, For: time.Minute})
	require.NoError(t, err, "a NOT_SENT release is leased again at once")
}

// Conflicts are board evidence only: two bookings of one job for one client
// with different booking ids mark the attempts, are listed, audited and
// alarmed; the same booking seen again changes nothing.
func TestConflictIsBoardEvidence(t *testing.T) {
	r := setupReconcile(t)
	ctx := context.Background()
	key := r.load()
	token := r.act(t, key)
	status, _, err := r.client.Book(ctx, key, "")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)
	ack := r.engine.Outcome(ctx, r.tenant, r.h, wire.Outcome{RequestID: "o", Worker: r.h.Worker, Key: key, Token: token,
		Result: wire.ResultConfirmed}, claim.Offset{})
	require.True(t, ack.OK)
	// The first sweep records the booking id on the attempt: no conflict.
	require.NoError(t, r.engine.DuplicateSweep(ctx))
	as, err := r.store.Attempts(ctx, r.tenant, key)
	require.NoError(t, err)
	require.Len(t, as, 1)
	require.NotEmpty(t, as[0].BookingID, "the board's booking id is recorded on its attempt")
	require.False(t, as[0].Conflict)
	audits := auditCount(t, r.bundle, "")
	// The same booking again is applied silently.
	res, err := r.store.ApplyBookings(ctx, r.tenant, key, r.lookupBookings(t, key), claim.SourceForTest("test"))
	require.NoError(t, err)
	require.False(t, res.Applied)
	require.False(t, res.Conflict)
	require.Equal(t, audits, auditCount(t, r.bundle, ""), "nothing audited for evidence already recorded")

	_, err = r.board.InjectBooking(ctx, "acme-1", key)
	require.NoError(t, err)
	require.NoError(t, r.engine.DuplicateSweep(ctx))
	conflicts, err := r.store.Conflicts(ctx, r.tenant, 10)
	require.NoError(t, err)
	require.Len(t, conflicts, 1)
	require.Equal(t, key, conflicts[0].Key)
	require.True(t, conflicts[0].Attempts[0].Conflict)
	require.Equal(t, 1, auditCount(t, r.bundle, "claim.conflict"))
	require.Contains(t, r.logs.String(), claim.ConflictAlarm)
	require.EqualValues(t, 1, r.metric(t, "fleet_claim_conflicts_total", nil))
	open, err := alarm.ListTenant(ctx, r.db.App, r.tenant, true, 10)
	require.NoError(t, err)
	require.Len(t, open, 1, "the conflict alarm is raised")
	require.Equal(t, claim.ConflictAlarmKind, open[0].Kind)
	require.Equal(t, key, open[0].Key)
	require.Equal(t, alarm.Critical, open[0].Severity)
	counts, err := r.store.Safety(ctx, r.tenant)
	require.NoError(t, err)
	require.Equal(t, 1, counts.Conflicts)
	// Found again: not a new conflict.
	require.NoError(t, r.engine.DuplicateSweep(ctx))
	require.Equal(t, 1, auditCount(t, r.bundle, "claim.conflict"))
}

// The regression of issue 11, against the real sandbox board, keys off: a
// booking answered 504 and committed after the reconciler's grace. The
// UNKNOWN is released after grace and given up (the board does not honour
// idempotency keys); no second lease is granted; the watch finds the late
// commit and the claim ends CONFIRMED from the late evidence, one booking.
func TestRegressionLateCommitAfterGraceKeysOff(t *testing.T) {
	r := setupReconcile(t)
	ctx := context.Background()
	key := r.load()
	token := r.act(t, key)
	grace := r.engine.Config().Grace
	calm := r.board.Chaos()
	ch := calm
	ch.LateCommitRate, ch.LateCommitDelay = 1, board.Duration(grace+3*time.Second)
	require.NoError(t, r.board.SetChaos(ch))
	status, _, err := r.client.Book(ctx, key, "")
	require.NoError(t, err)
	require.Equal(t, http.StatusGatewayTimeout, status)
	require.NoError(t, r.board.SetChaos(calm))
	r.reportUnknown(t, key, token, "HTTP 504")

	// 2. The complete look-up after grace finds nothing: released, given up.
	require.Eventually(t, func() bool { return r.state(t, key) == claim.Released }, 10*time.Second, 20*time.Millisecond)
	c, err := r.store.Get(ctx, r.tenant, key)
	require.NoError(t, err)
	require.Equal(t, claim.GivenUp, c.Outcome)
	require.Empty(t, r.board.Bookings("acme"), "the commit has not landed yet")
	// 4. Nothing leases it again: not a lease request, not the sweep's re-offer.
	other := claim.Holder{Agent: uuid(), Worker: "actor-2"}
	lr := r.engine.Lease(ctx, r.tenant, other, wire.LeaseRequest{RequestID: "again", Worker: other.Worker, Key: key})
	require.False(t, lr.Granted)
	require.Equal(t, wire.ReasonHeld, lr.Reason)
	require.NoError(t, r.engine.SweepAll(ctx))

	// 3. The board's commit lands; the watch finds it within its interval.
	require.Eventually(t, func() bool { return len(r.board.Bookings("acme")) == 1 }, 10*time.Second, 20*time.Millisecond)
	landed := time.Now()
	require.Eventually(t, func() bool { return r.state(t, key) == claim.Confirmed }, 10*time.Second, 20*time.Millisecond)
	t.Logf("late commit applied %s after it landed", time.Since(landed).Round(time.Millisecond))
	c, err = r.store.Get(ctx, r.tenant, key)
	require.NoError(t, err)
	require.True(t, c.LateEvidence, "confirmed from the late evidence")
	require.Greater(t, c.Token, token)
	require.Equal(t, r.then(t, "UNKNOWN", "RELEASED", "CONFIRMED"), r.transitions(t, key), "no second lease")
	require.Len(t, r.board.Bookings("acme"), 1, "one booking")
	as, err := r.store.Attempts(ctx, r.tenant, key)
	require.NoError(t, err)
	require.Len(t, as, 1)
	require.Equal(t, "CONFIRMED", as[0].Outcome)
	require.NotEmpty(t, as[0].BookingID)
	require.True(t, as[0].LateEvidence)
	require.Equal(t, 1, auditCount(t, r.bundle, "claim.late_evidence"))
	require.Zero(t, r.board.Stats().DuplicateConfirmations)
	require.EqualValues(t, 1, r.metric(t, "fleet_claim_late_evidence_total", map[string]string{"from_state": "RELEASED"}))
	require.EqualValues(t, 1, r.metric(t, "fleet_claim_given_up_total", nil))
	// The watch counts "found" after it has read the settled state back,
	// so the count may trail the CONFIRMED the test just saw.
	require.Eventually(t, func() bool {
		return r.metric(t, "fleet_claim_watch_total", map[string]string{"result": "found"}) == 1
	}, 10*time.Second, 20*time.Millisecond, "the watch found the late commit")
	require.Zero(t, r.metric(t, "fleet_claim_conflicts_total", nil))
}

// The watch's waits grow with the time watched and never exceed 30 s.
func TestWatchDelayIsBackoffCappedAt30s(t *testing.T) {
	first := 2 * time.Second
	require.Equal(t, first, claim.WatchDelay(0, first))
	require.Equal(t, 5*time.Second, claim.WatchDelay(10*time.Second, first))
	prev := time.Duration(0)
	for e := time.Duration(0); e < 2*time.Hour; e += 7 * time.Second {
		d := claim.WatchDelay(e, first)
		require.GreaterOrEqual(t, d, prev, "never shrinks")
		require.LessOrEqual(t, d, claim.WatchMaxInterval)
		prev = d
	}
	require.Equal(t, 30*time.Second, prev)
	require.Equal(t, 30*time.Second, claim.WatchMaxInterval)
}

// An ACTING claim marked late_evidence whose actor never reports: the
// sweeper makes it UNKNOWN, and the reconciler, finding no booking on the
// board after grace, settles it CONFIRMED by the earlier attempt's evidence
// rather than releasing it.
func TestMarkedActingThatGoesUnknownIsConfirmedNotReleased(t *testing.T) {
	r := setupReconcile(t)
	r.store.SetHonoursIdempotencyKeysForTest(true)
	ctx := context.Background()
	key := r.load()
	t1 := r.act(t, key)
	r.reportUnknown(t, key, t1, "HTTP 504")
	require.Eventually(t, func() bool { return r.state(t, key) == claim.Released }, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, r.engine.SweepAll(ctx)) // the fresh look-up clears it for a re-lease
	a2 := claim.Holder{Agent: uuid(), Worker: "actor-2"}
	lr := r.engine.Lease(ctx, r.tenant, a2, wire.LeaseRequest{RequestID: "l2", Worker: a2.Worker, Key: key})
	require.True(t, lr.Granted, lr.Reason)
	require.True(t, r.engine.Act(ctx, r.tenant, a2, wire.ActRequest{RequestID: "a2", Worker: a2.Worker, Key: key, Token: lr.Token}).OK)
	// The first attempt's actor reports its booking late.
	ack := r.engine.Outcome(ctx, r.tenant, r.h, wire.Outcome{RequestID: "late", Worker: r.h.Worker, Key: key, Token: t1,
		Result: wire.ResultConfirmed}, claim.Offset{})
	require.True(t, ack.OK, ack.Reason)
	require.Equal(t, claim.Acting, r.state(t, key))
	// The second actor never reports: past its hard deadline it is UNKNOWN.
	require.Eventually(t, func() bool {
		_, _, err := r.store.Sweep(ctx, r.tenant)
		require.NoError(t, err)
		return r.state(t, key) != claim.Acting
	}, 10*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { return r.state(t, key) == claim.Confirmed }, 15*time.Second, 20*time.Millisecond)
	c, err := r.store.Get(ctx, r.tenant, key)
	require.NoError(t, err)
	require.True(t, c.LateEvidence)
	require.EqualValues(t, t1, *c.EvidenceToken)
	require.NotContains(t, r.transitions(t, key)[len(r.then(t, "UNKNOWN", "RELEASED")):], "RELEASED", "never released after the evidence")
}

// The regression of issue 11, keys on: the board honours idempotency keys
// and every attempt of the job sends the same key. The UNKNOWN is released
// (not given up), offered again only after a fresh complete look-up, leased
// and booked by a second attempt; the first attempt's late commit is
// replayed by the board. One booking, CONFIRMED, no conflict.
func TestRegressionLateCommitAfterGraceKeysOn(t *testing.T) {
	r := setupReconcile(t, func(c *board.Config) { c.IdempotencyKeys = true })
	r.store.SetHonoursIdempotencyKeysForTest(true)
	ctx := context.Background()
	key := r.load()
	lr1 := r.engine.Lease(ctx, r.tenant, r.h, wire.LeaseRequest{RequestID: "l1", Worker: r.h.Worker, Key: key})
	require.True(t, lr1.Granted, lr1.Reason)
	require.True(t, r.engine.Act(ctx, r.tenant, r.h, wire.ActRequest{RequestID: "a1", Worker: r.h.Worker, Key: key, Token: lr1.Token}).OK)
	t1 := lr1.Token
	// One booking identity per job: the key every attempt sends.
	bookingKey := lr1.BookingKey
	require.NotEmpty(t, bookingKey)
	grace := r.engine.Config().Grace
	calm := r.board.Chaos()
	ch := calm
	ch.LateCommitRate, ch.LateCommitDelay = 1, board.Duration(grace+3*time.Second)
	require.NoError(t, r.board.SetChaos(ch))
	status, _, err := r.client.Book(ctx, key, bookingKey)
	require.NoError(t, err)
	require.Equal(t, http.StatusGatewayTimeout, status)
	require.NoError(t, r.board.SetChaos(calm))
	r.reportUnknown(t, key, t1, "HTTP 504")

	require.Eventually(t, func() bool { return r.state(t, key) == claim.Released }, 10*time.Second, 20*time.Millisecond)
	c, err := r.store.Get(ctx, r.tenant, key)
	require.NoError(t, err)
	require.Equal(t, "RELEASED", c.Outcome, "keys honoured: not given up")
	a2 := claim.Holder{Agent: uuid(), Worker: "actor-2"}
	lr := r.engine.Lease(ctx, r.tenant, a2, wire.LeaseRequest{RequestID: "early", Worker: a2.Worker, Key: key})
	require.False(t, lr.Granted, "not before a fresh look-up")
	require.NoError(t, r.engine.SweepAll(ctx))
	lr = r.engine.Lease(ctx, r.tenant, a2, wire.LeaseRequest{RequestID: "l2", Worker: a2.Worker, Key: key})
	require.True(t, lr.Granted, lr.Reason)
	require.Equal(t, bookingKey, lr.BookingKey, "the same booking key on every attempt of the job")
	require.NotEqual(t, lr1.OperationID, lr.OperationID, "the operation id stays unique per lease")
	require.True(t, r.engine.Act(ctx, r.tenant, a2, wire.ActRequest{RequestID: "a2", Worker: a2.Worker, Key: key, Token: lr.Token}).OK)
	status, _, err = r.client.Book(ctx, key, lr.BookingKey)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)
	ack := r.engine.Outcome(ctx, r.tenant, a2, wire.Outcome{RequestID: "o2", Worker: a2.Worker, Key: key, Token: lr.Token,
		Result: wire.ResultConfirmed}, claim.Offset{})
	require.True(t, ack.OK, ack.Reason)

	// The first attempt's commit lands and is replayed: still one booking.
	require.Eventually(t, func() bool {
		for _, e := range r.board.Events(0, 10000) {
			if e.Type == board.EvIdempotentReplay && e.LoadID == key {
				return true
			}
		}
		return false
	}, 15*time.Second, 50*time.Millisecond, "the late commit is answered with the first booking")
	require.Len(t, r.board.Bookings("acme"), 1, "one booking")
	// The watch attributes the one booking and finds no conflict.
	require.Eventually(t, func() bool {
		as, err := r.store.Attempts(ctx, r.tenant, key)
		require.NoError(t, err)
		return len(as) == 2 && as[1].BookingID != ""
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, claim.Confirmed, r.state(t, key))
	conflicts, err := r.store.Conflicts(ctx, r.tenant, 10)
	require.NoError(t, err)
	require.Empty(t, conflicts)
	require.Zero(t, r.board.Stats().DuplicateConfirmations)
	require.Zero(t, auditCount(t, r.bundle, "claim.conflict"))
}

// A job in doubt whose watch job was lost gets a new one from the sweep.
func TestStrandedWatchIsEnqueuedAgain(t *testing.T) {
	f := newLate(t, "LD-STRANDED")
	ctx := context.Background()
	f.release(t, true)
	require.True(t, f.watched(t))
	_, err := f.b.db.Owner.Exec(ctx, `DELETE FROM river_job WHERE kind = 'claim.watch'`)
	require.NoError(t, err)
	require.False(t, f.watched(t))
	require.NoError(t, f.b.engine.SweepAll(ctx))
	require.True(t, f.watched(t), "the sweep re-enqueued the watch")
	// A single CONFIRMED without a booking id is no doubt: not watched.
	f.b.job(t, f.b.tenant, "LD-ONE")
	l, err := f.b.store.Lease(ctx, claim.LeaseRequest{Tenant: f.b.tenant, Key: "LD-ONE", Holder: f.a1, For: time.Minute})
	require.NoError(t, err)
	_, err = f.b.store.StartActing(ctx, f.b.tenant, "LD-ONE", l.Token, f.a1, 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, f.b.store.Report(ctx, f.b.tenant, "LD-ONE", l.Token, f.a1, claim.Outcome{Result: claim.Confirmed}))
	n, err := f.b.store.StrandedWatches(ctx, f.b.tenant, time.Second)
	require.NoError(t, err)
	require.Zero(t, n, "not twice")
}
