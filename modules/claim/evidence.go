package claim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Evidence of a booking is never thrown away (docs/CLAIMS.md, "Late
// evidence"). Every lease of a job is an attempt (claim_attempts, opened by
// the claims trigger); a CONFIRMED for any attempt of the job — an actor's
// report, or a booking a look-up shows — is recorded on that attempt and
// applied to the job's current claim in the same transaction.

// ClearanceFor is how long a fresh complete look-up that found no booking
// lets a job released after an UNKNOWN be leased again (where the platform
// honours idempotency keys): the re-offer looks, clears and offers at once.
const ClearanceFor = 10 * time.Second

// WatchMaxInterval bounds the look-ups of a job whose attempt's fate is in
// doubt (released after an UNKNOWN): at least one every 30 s until the load
// expires.
const WatchMaxInterval = 30 * time.Second

// WatchDelay is the wait before the next look-up of a watched job that has
// been watched for elapsed: half the time watched so far (so the look-ups
// thin out geometrically), at least first, at most WatchMaxInterval.
func WatchDelay(elapsed, first time.Duration) time.Duration {
	return min(max(elapsed/2, first), WatchMaxInterval)
}

// HonoursIdempotencyKeys reports whether the tenant's platform honours
// idempotency keys, so a job released after an UNKNOWN may be booked again.
//
// The per-platform tenant setting is added by issue 11 item 4 ("one booking
// identity per job"); until it lands this is false for every tenant, which
// gives up every job released after an UNKNOWN (safe: a load not booked is
// a lost chance, a load booked twice is the failure the product exists to
// prevent).
func (s *Store) HonoursIdempotencyKeys(ctx context.Context, tenant string) (bool, error) {
	if s.honours != nil {
		return s.honours(ctx, tenant)
	}
	return false, nil
}

// evidence is one booking of a job: seen by the board (a look-up, with its
// booking id) or by the actor that made it (a CONFIRMED report).
type evidence struct {
	// Token is the attempt that made it; 0: attribute it by time.
	Token     int64
	BookingID string
	BookedAt  time.Time
	Account   string
}

// evidenceSource names who brought the evidence, for the audit and metrics.
type evidenceSource struct {
	Name  string // report, reconciler, watch, reoffer, duplicate_sweep
	Actor audit.Entry
	// ConfirmAction is the audit action of an ordinary confirmation (the
	// current attempt's own booking); late applications are
	// claim.late_evidence whoever brings them.
	ConfirmAction string
	Detail        map[string]any
}

// EvidenceResult is what applying evidence did; the engine counts it and
// raises the conflict alarm from it.
type EvidenceResult struct {
	Tenant, Key, Source string
	// Applied: the claim moved, or an ACTING claim was marked, because of it.
	Applied bool
	// Late: the evidence was an attempt other than the claim's current
	// ACTING or UNKNOWN one (or the claim had been released).
	Late bool
	// From is the claim's state before.
	From State
	// Conflict: a new conflict was found (two or more bookings of the job
	// for the client with different booking ids); BookingIDs and Tokens
	// name them.
	Conflict   bool
	BookingIDs []string
	Tokens     []int64
	// Watch: the job is watched again (an attempt's fate is in doubt).
	Watch bool
}

// attemptRow is an attempt as applyEvidence sees it.
type attemptRow struct {
	Token                       int64
	Agent, Worker, OperationID  string
	ActStartedAt                *time.Time
	Outcome, BookingID          string
	Conflict                    bool
	confirm, extra, markConflct bool
	newBooking                  string
	newBookedAt, evAt           time.Time
}

// ApplyBookings applies a look-up's bookings of one job (board evidence) in
// one transaction: each booking is attributed to the attempt that made it,
// recorded on it, conflicts are marked, and the job's claim is confirmed
// whatever state it reached. A booking already recorded changes nothing.
func (s *Store) ApplyBookings(ctx context.Context, tenant, key string, bs []wire.Booking, src evidenceSource) (EvidenceResult, error) {
	evs := make([]evidence, 0, len(bs))
	for _, b := range bs {
		if b.Key == key {
			evs = append(evs, evidence{BookingID: b.BookingID, BookedAt: b.BookedAt, Account: b.Account})
		}
	}
	var res EvidenceResult
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		var err error
		res, err = s.applyEvidence(ctx, tx, tenant, key, evs, src)
		return err
	})
	if err != nil {
		return EvidenceResult{}, fmt.Errorf("claim: apply bookings of %s: %w", key, err)
	}
	s.notify(res)
	return res, nil
}

// applyEvidence is the one place a booking reaches a claim. It locks the
// claim, then the job's attempts (the order every statement on a claim
// takes), attributes each booking, marks conflicts, records the bookings on
// their attempts and applies the confirming one to the claim:
//
//	ACTING, UNKNOWN of the same attempt → CONFIRMED (the ordinary case)
//	ACTING of another attempt          → stays ACTING, marked late_evidence
//	UNKNOWN of another attempt         → CONFIRMED, fresh token
//	LEASED, RELEASED (given up or not) → CONFIRMED, fresh token
//	CONFIRMED, TAKEN                   → unchanged (recorded on the attempt)
func (s *Store) applyEvidence(ctx context.Context, tx pgx.Tx, tenant, key string, evs []evidence, src evidenceSource) (EvidenceResult, error) {
	res := EvidenceResult{Tenant: tenant, Key: key, Source: src.Name}
	var cl struct {
		exists bool
		state  State
		token  int64
		late   bool
	}
	err := tx.QueryRow(ctx, `SELECT state, token, late_evidence FROM claims
		WHERE tenant_id = $1 AND target_job_key = $2 FOR UPDATE`, tenant, key).Scan(&cl.state, &cl.token, &cl.late)
	switch {
	case err == nil:
		cl.exists = true
	case !errors.Is(err, pgx.ErrNoRows):
		return res, err
	}
	res.From = cl.state
	rows, err := tx.Query(ctx, `SELECT token, holder_agent::text, holder_worker, operation_id::text, act_started_at,
		COALESCE(outcome, ''), COALESCE(booking_id, ''), conflict FROM claim_attempts
		WHERE tenant_id = $1 AND target_job_key = $2 ORDER BY token FOR UPDATE`, tenant, key)
	if err != nil {
		return res, err
	}
	atts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*attemptRow, error) {
		a := &attemptRow{}
		err := r.Scan(&a.Token, &a.Agent, &a.Worker, &a.OperationID, &a.ActStartedAt, &a.Outcome, &a.BookingID, &a.Conflict)
		return a, err
	})
	if err != nil {
		return res, err
	}
	if len(atts) == 0 {
		return res, nil // not a job of ours: the duplicate record keeps the evidence
	}
	// Attribute each booking to its attempt.
	ids := map[string]bool{}
	for _, a := range atts {
		if a.BookingID != "" {
			ids[a.BookingID] = true
		}
	}
	for _, ev := range evs {
		var a *attemptRow
		if ev.Token != 0 {
			for _, x := range atts {
				if x.Token == ev.Token {
					a = x
				}
			}
		} else {
			a = attribute(atts, ev.BookedAt, s.clockBound())
		}
		if a == nil {
			continue
		}
		a.confirm = true
		if a.evAt.IsZero() || (!ev.BookedAt.IsZero() && ev.BookedAt.Before(a.evAt)) {
			a.evAt = ev.BookedAt
		}
		if ev.BookingID == "" {
			continue
		}
		ids[ev.BookingID] = true
		switch {
		case a.BookingID == ev.BookingID || a.newBooking == ev.BookingID:
		case a.BookingID == "" && a.newBooking == "":
			a.newBooking, a.newBookedAt = ev.BookingID, ev.BookedAt
		default:
			a.extra = true // a second booking attributed to one attempt
		}
	}
	if len(ids) >= 2 {
		for _, a := range atts {
			if a.extra || (a.BookingID != "" && ids[a.BookingID]) || a.newBooking != "" {
				if !a.Conflict {
					a.markConflct = true
					res.Conflict = true
				}
				res.Tokens = append(res.Tokens, a.Token)
			}
		}
		for id := range ids {
			res.BookingIDs = append(res.BookingIDs, id)
		}
		sort.Strings(res.BookingIDs)
	}
	// The attempt whose booking confirms the claim: the claim's own current
	// attempt when it is among them, else the earliest.
	var conf *attemptRow
	for _, a := range atts {
		if a.confirm && (conf == nil || (cl.exists && a.Token == cl.token)) {
			conf = a
		}
	}
	current := func(a *attemptRow) bool {
		return cl.exists && a.Token == cl.token && (cl.state == Acting || cl.state == Unknown)
	}
	newlyLate := false
	for _, a := range atts {
		if !a.confirm && !a.markConflct {
			continue
		}
		late := a.confirm && a.Outcome != string(Confirmed) && !current(a)
		newlyLate = newlyLate || late
		detail := "confirmed by " + src.Name
		if late {
			detail = "late evidence (" + src.Name + "): the board has this attempt's booking"
		}
		if _, err := tx.Exec(ctx, `UPDATE claim_attempts SET
				outcome = CASE WHEN $4 THEN 'CONFIRMED' ELSE outcome END,
				outcome_detail = CASE WHEN $4 AND outcome IS DISTINCT FROM 'CONFIRMED' THEN $5 ELSE outcome_detail END,
				outcome_at = CASE WHEN $4 AND outcome IS DISTINCT FROM 'CONFIRMED' THEN clock_timestamp() ELSE outcome_at END,
				booking_id = COALESCE(booking_id, NULLIF($6, '')), booked_at = COALESCE(booked_at, $7),
				late_evidence = late_evidence OR $8, conflict = conflict OR $9
			WHERE tenant_id = $1 AND target_job_key = $2 AND token = $3`,
			tenant, key, a.Token, a.confirm, detail, a.newBooking, nullTime(a.newBookedAt), late, a.markConflct); err != nil {
			return res, err
		}
	}
	if res.Conflict {
		if err := appendAudit(ctx, tx, src.Actor, "claim.conflict", key, map[string]any{
			"booking_ids": res.BookingIDs, "attempts": res.Tokens, "source": src.Name}); err != nil {
			return res, err
		}
		if err := raiseConflict(ctx, tx, tenant, key, res); err != nil {
			return res, err
		}
	}
	if cl.exists && conf != nil {
		if err := s.applyToClaim(ctx, tx, tenant, key, cl.state, cl.token, cl.late, conf, src, &res); err != nil {
			return res, err
		}
	}
	if newlyLate && !res.Applied {
		// Recorded on its attempt; the claim had already settled.
		if err := appendAudit(ctx, tx, src.Actor, "claim.late_evidence", key, map[string]any{
			"applied": false, "state": string(cl.state), "attempt": conf.Token, "source": src.Name,
			"booking_id": conf.newBooking}); err != nil {
			return res, err
		}
	}
	if res.Watch, err = s.watchIfInDoubt(ctx, tx, tenant, key); err != nil {
		return res, err
	}
	return res, nil
}

// ConflictAlarmKind is the alarm a conflict raises (modules/alarm), one per
// job, critical: a person must cancel the extra booking on the platform.
const ConflictAlarmKind = "claim.conflict"

// raiseConflict raises the conflict alarm in the transaction that marks the
// attempts, so the two never disagree.
func raiseConflict(ctx context.Context, tx pgx.Tx, tenant, key string, res EvidenceResult) error {
	var slug string
	if err := tx.QueryRow(ctx, `SELECT slug FROM tenants WHERE id = $1`, tenant).Scan(&slug); err != nil {
		return err
	}
	_, err := alarm.Raise(ctx, tx, alarm.Alarm{Kind: ConflictAlarmKind, Key: key, Tenant: tenant, Severity: alarm.Critical,
		Summary: "job " + key + " is booked more than once for this client: a person must cancel the extra booking",
		Detail: fmt.Sprintf("booking ids %s (board evidence), attempts %v, found by %s",
			strings.Join(res.BookingIDs, ", "), res.Tokens, res.Source),
		Link: "/t/" + slug + "/claims"})
	return err
}

// attribute picks the attempt that made a booking: the latest attempt that
// started acting before the booking (allowing the clock error bound), else
// the earliest that acted. Nil when no attempt ever acted.
func attribute(atts []*attemptRow, at time.Time, bound time.Duration) *attemptRow {
	var best, first *attemptRow
	for _, a := range atts {
		if a.ActStartedAt == nil {
			continue
		}
		if first == nil || a.ActStartedAt.Before(*first.ActStartedAt) {
			first = a
		}
		if at.IsZero() || !a.ActStartedAt.After(at.Add(bound)) {
			if best == nil || a.ActStartedAt.After(*best.ActStartedAt) {
				best = a
			}
		}
	}
	if best != nil {
		return best
	}
	return first
}

// applyToClaim moves the claim by the confirming attempt's booking (the
// table on applyEvidence).
func (s *Store) applyToClaim(ctx context.Context, tx pgx.Tx, tenant, key string, state State, token int64, marked bool,
	conf *attemptRow, src evidenceSource, res *EvidenceResult) error {
	confirmedAt := nullTime(conf.evAt)
	switch {
	case state == Confirmed || state == Taken:
		return nil
	case (state == Acting || state == Unknown) && token == conf.Token:
		st, err := scanSettled(tx.QueryRow(ctx, `UPDATE claims SET state = 'CONFIRMED', outcome = 'CONFIRMED',
				settled_at = clock_timestamp(), confirmed_at = COALESCE(confirmed_at, $3, clock_timestamp()),
				outcome_detail = $4
			WHERE tenant_id = $1 AND target_job_key = $2 RETURNING `+settledCols,
			tenant, key, confirmedAt, "reconciled: the board has our booking ("+src.Name+")"))
		if err != nil {
			return err
		}
		res.Applied = true
		d := st.detail()
		for k, v := range src.Detail {
			d[k] = v
		}
		return appendAudit(ctx, tx, src.Actor, src.ConfirmAction, key, d)
	case state == Acting:
		res.Applied, res.Late = true, true
		if marked {
			res.Applied = false
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE claims SET late_evidence = true, evidence_token = $3
			WHERE tenant_id = $1 AND target_job_key = $2`, tenant, key, conf.Token); err != nil {
			return err
		}
		return appendAudit(ctx, tx, src.Actor, "claim.late_evidence", key, map[string]any{
			"applied": true, "from_state": string(state), "token": token, "attempt": conf.Token,
			"booking_id": conf.newBooking, "source": src.Name,
			"note": "the claim stays ACTING and is settled when its actor reports"})
	}
	// UNKNOWN of another attempt, LEASED, RELEASED: CONFIRMED with a fresh
	// fencing token, carrying the confirming attempt's holder and times.
	if state == Leased {
		if _, err := tx.Exec(ctx, `UPDATE claim_attempts SET outcome = 'RELEASED', outcome_at = clock_timestamp(),
				outcome_detail = $4 WHERE tenant_id = $1 AND target_job_key = $2 AND token = $3`,
			tenant, key, token, fmt.Sprintf("superseded before acting: late evidence of attempt %d", conf.Token)); err != nil {
			return err
		}
	}
	var newToken int64
	err := tx.QueryRow(ctx, `UPDATE claims c SET state = 'CONFIRMED', outcome = 'CONFIRMED', token = nextval('claim_token'),
			holder_agent = a.holder_agent, holder_worker = a.holder_worker, operation_id = a.operation_id,
			leased_at = a.leased_at, act_started_at = a.act_started_at, act_sent_at = a.act_sent_at,
			act_deadline = NULL, late_evidence = true, evidence_token = a.token,
			settled_at = clock_timestamp(), confirmed_at = COALESCE($4, clock_timestamp()), outcome_detail = $5
		FROM claim_attempts a
		WHERE c.tenant_id = $1 AND c.target_job_key = $2 AND a.tenant_id = $1 AND a.target_job_key = $2 AND a.token = $3
		RETURNING c.token`, tenant, key, conf.Token, confirmedAt,
		fmt.Sprintf("late evidence (%s): attempt %d's booking, applied to a %s claim", src.Name, conf.Token, state)).Scan(&newToken)
	if err != nil {
		return err
	}
	res.Applied, res.Late = true, true
	return appendAudit(ctx, tx, src.Actor, "claim.late_evidence", key, map[string]any{
		"applied": true, "from_state": string(state), "from_token": token, "token": newToken, "attempt": conf.Token,
		"booking_id": conf.newBooking, "source": src.Name})
}

// doubtSQL is true while an attempt of the job acted and its fate is not
// known from the board: released (or given up) after an UNKNOWN, an UNKNOWN
// the claim no longer carries (its reconcile job stopped), or one of two
// CONFIRMED attempts without a booking id (a possible second booking).
const doubtSQL = `EXISTS (SELECT 1 FROM claim_attempts a WHERE a.tenant_id = $1 AND a.target_job_key = $2
	AND a.act_started_at IS NOT NULL AND a.booking_id IS NULL
	AND (a.outcome IN ('RELEASED', 'GIVEN_UP')
	     OR (a.outcome = 'UNKNOWN' AND NOT EXISTS (SELECT 1 FROM claims c WHERE c.tenant_id = $1
	         AND c.target_job_key = $2 AND c.token = a.token AND c.state = 'UNKNOWN'))
	     OR (a.outcome = 'CONFIRMED' AND (SELECT count(*) FROM claim_attempts b WHERE b.tenant_id = $1
	         AND b.target_job_key = $2 AND b.outcome = 'CONFIRMED') >= 2)))`

// watchIfInDoubt enqueues the job's watch (unique per job) when an attempt's
// fate is in doubt.
func (s *Store) watchIfInDoubt(ctx context.Context, tx pgx.Tx, tenant, key string) (bool, error) {
	var doubt bool
	if err := tx.QueryRow(ctx, `SELECT `+doubtSQL, tenant, key).Scan(&doubt); err != nil {
		return false, err
	}
	if !doubt {
		return false, nil
	}
	if _, err := s.river.InsertTx(ctx, tx, WatchArgs{Tenant: tenant, Key: key}, nil); err != nil {
		return false, fmt.Errorf("enqueue watch: %w", err)
	}
	return true, nil
}

// WatchState says whether a watched job still needs looking up: an
// attempt's fate is in doubt and the load has not expired. The load's expiry
// is the board's clock: it counts as passed only once the database clock is
// past it by the clock error bound (issue 11, one clock for archival and
// watching). A job without a known expiry is watched for window after its
// first lease.
func (s *Store) WatchState(ctx context.Context, tenant, key string, bound, window time.Duration) (doubt, expired bool, err error) {
	var exp *bool
	err = db.TenantRow(ctx, s.pool, tenant, `SELECT `+doubtSQL+`,
		COALESCE((SELECT load_expires_at FROM claims WHERE tenant_id = $1 AND target_job_key = $2),
		         (SELECT expires_at FROM claim_jobs WHERE tenant_id = $1 AND job_key = $2))
		    + make_interval(secs => $3) < clock_timestamp(),
		COALESCE((SELECT min(leased_at) FROM claim_attempts WHERE tenant_id = $1 AND target_job_key = $2)
		    < clock_timestamp() - make_interval(secs => $4), true)`,
		tenant, key, bound.Seconds(), window.Seconds()).Scan(&doubt, &exp, &expired)
	if err != nil {
		return false, false, fmt.Errorf("claim: watch state %s: %w", key, err)
	}
	if exp != nil {
		expired = *exp
	}
	return doubt, expired, nil
}

// Clear records a fresh complete look-up that found no booking of a job
// released after an UNKNOWN: for ClearanceFor the lease statement may lease
// it again. It reports whether the claim was such a release (given-up ones
// are never cleared).
func (s *Store) Clear(ctx context.Context, tenant, key string, ev Evidence) (bool, error) {
	var n int64
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE claims c SET cleared_at = clock_timestamp()
			WHERE c.tenant_id = $1 AND c.target_job_key = $2 AND c.state = 'RELEASED' AND c.outcome = 'RELEASED'
			  AND c.act_started_at IS NOT NULL`, tenant, key)
		if err != nil {
			return err
		}
		if n = tag.RowsAffected(); n == 0 {
			return nil
		}
		return appendAudit(ctx, tx, actorEngine, "claim.reoffer.cleared", key, map[string]any{"evidence": ev})
	})
	if err != nil {
		return false, fmt.Errorf("claim: clear %s: %w", key, err)
	}
	return n > 0, nil
}

// reportSlow handles a report the fast statement did not match: a CONFIRMED
// of any attempt of the job is applied (never refused as stale); the current
// ACTING attempt's report on a claim marked late_evidence settles it
// CONFIRMED; anything else is refused as today (stale TAKEN, NOT_SENT and
// UNKNOWN are definitive refusals).
func (s *Store) reportSlow(ctx context.Context, tenant, key string, token int64, h Holder, o Outcome) error {
	var res EvidenceResult
	var refusal error
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		res, refusal = EvidenceResult{}, nil
		var st State
		var cur int64
		var late, exists bool
		var evTok *int64
		err := tx.QueryRow(ctx, `SELECT state, token, late_evidence, evidence_token FROM claims
			WHERE tenant_id = $1 AND target_job_key = $2 FOR UPDATE`, tenant, key).Scan(&st, &cur, &late, &evTok)
		switch {
		case err == nil:
			exists = true
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		var agent, worker string
		err = tx.QueryRow(ctx, `SELECT holder_agent::text, holder_worker FROM claim_attempts
			WHERE tenant_id = $1 AND target_job_key = $2 AND token = $3`, tenant, key, token).Scan(&agent, &worker)
		switch {
		case errors.Is(err, pgx.ErrNoRows) && !exists:
			refusal = &Refusal{Reason: ReasonMissing}
			return nil
		case errors.Is(err, pgx.ErrNoRows):
			refusal = &Refusal{Reason: ReasonStaleToken, State: st}
			return nil
		case err != nil:
			return err
		case agent != h.Agent || worker != h.Worker:
			refusal = &Refusal{Reason: ReasonNotHolder, State: st}
			return nil
		}
		if o.Result == Confirmed {
			if o.SentAt.IsZero() && o.ConfirmedAt.IsZero() {
				// nothing to add to the attempt's times
			} else if _, err := tx.Exec(ctx, `UPDATE claim_attempts SET act_sent_at = COALESCE(act_sent_at, $4)
				WHERE tenant_id = $1 AND target_job_key = $2 AND token = $3`, tenant, key, token, nullTime(o.SentAt)); err != nil {
				return err
			}
			res, err = s.applyEvidence(ctx, tx, tenant, key, []evidence{{Token: token, BookedAt: o.ConfirmedAt}}, evidenceSource{
				Name: "report", Actor: agentActor(h), ConfirmAction: "claim.outcome",
				Detail: map[string]any{"reported": string(Confirmed)}})
			if err == nil && !res.Applied && exists && cur == token && st == Confirmed {
				// A repeat of the report the claim already reflects.
				refusal = &Refusal{Reason: ReasonWrongState, State: st}
			}
			return err
		}
		if exists && cur == token && st == Acting && late && evTok != nil {
			return s.settleMarked(ctx, tx, tenant, key, token, *evTok, h, o, &res)
		}
		if !exists || cur != token {
			refusal = &Refusal{Reason: ReasonStaleToken, State: st}
			return nil
		}
		refusal = &Refusal{Reason: ReasonWrongState, State: st}
		return nil
	})
	if err != nil {
		return fmt.Errorf("claim: report %s: %w", key, err)
	}
	s.notify(res)
	return refusal
}

// settleMarked settles an ACTING claim marked late_evidence when its actor
// reports TAKEN, NOT_SENT or UNKNOWN: the outcome is recorded on the acting
// attempt, and the claim becomes CONFIRMED by the earlier attempt's booking
// (fresh token). After an UNKNOWN the job is watched: the acting attempt may
// have booked a second time.
func (s *Store) settleMarked(ctx context.Context, tx pgx.Tx, tenant, key string, token, evTok int64, h Holder, o Outcome, res *EvidenceResult) error {
	if _, err := tx.Exec(ctx, `UPDATE claim_attempts SET outcome = $4, outcome_detail = $5, outcome_at = clock_timestamp(),
			act_sent_at = COALESCE($6, act_sent_at)
		WHERE tenant_id = $1 AND target_job_key = $2 AND token = $3`,
		tenant, key, token, string(o.Result), truncate(o.Detail, 500), nullTime(o.SentAt)); err != nil {
		return err
	}
	var newToken int64
	err := tx.QueryRow(ctx, `UPDATE claims c SET state = 'CONFIRMED', outcome = 'CONFIRMED', token = nextval('claim_token'),
			holder_agent = a.holder_agent, holder_worker = a.holder_worker, operation_id = a.operation_id,
			leased_at = a.leased_at, act_started_at = a.act_started_at, act_sent_at = a.act_sent_at, act_deadline = NULL,
			settled_at = clock_timestamp(), confirmed_at = COALESCE(a.booked_at, a.outcome_at, clock_timestamp()),
			outcome_detail = $4
		FROM claim_attempts a
		WHERE c.tenant_id = $1 AND c.target_job_key = $2 AND a.tenant_id = $1 AND a.target_job_key = $2 AND a.token = $3
		RETURNING c.token`, tenant, key, evTok,
		fmt.Sprintf("late evidence: attempt %d's booking; the acting attempt %d reported %s", evTok, token, o.Result)).Scan(&newToken)
	if err != nil {
		return err
	}
	res.Tenant, res.Key, res.Source, res.From, res.Applied, res.Late = tenant, key, "report", Acting, true, true
	if err := appendAudit(ctx, tx, agentActor(h), "claim.late_evidence", key, map[string]any{
		"applied": true, "from_state": string(Acting), "from_token": token, "token": newToken, "attempt": evTok,
		"reported": string(o.Result), "source": "report"}); err != nil {
		return err
	}
	res.Watch, err = s.watchIfInDoubt(ctx, tx, tenant, key)
	return err
}

// Attempt is one lease of a job as the console shows it.
type Attempt struct {
	Key                     string
	Token                   int64
	Holder                  Holder
	OperationID             string
	LeasedAt                time.Time
	ActStartedAt, ActSentAt *time.Time
	Outcome, Detail         string
	OutcomeAt               *time.Time
	BookingID               string
	BookedAt                *time.Time
	LateEvidence, Conflict  bool
}

const attemptCols = `target_job_key, token, holder_agent::text, holder_worker, operation_id::text, leased_at,
	act_started_at, act_sent_at, COALESCE(outcome, ''), COALESCE(outcome_detail, ''), outcome_at,
	COALESCE(booking_id, ''), booked_at, late_evidence, conflict`

func scanAttempt(r pgx.CollectableRow) (Attempt, error) {
	var a Attempt
	err := r.Scan(&a.Key, &a.Token, &a.Holder.Agent, &a.Holder.Worker, &a.OperationID, &a.LeasedAt,
		&a.ActStartedAt, &a.ActSentAt, &a.Outcome, &a.Detail, &a.OutcomeAt, &a.BookingID, &a.BookedAt,
		&a.LateEvidence, &a.Conflict)
	return a, err
}

// Attempts lists every attempt at one job, oldest first.
func (s *Store) Attempts(ctx context.Context, tenant, key string) ([]Attempt, error) {
	var out []Attempt
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+attemptCols+` FROM claim_attempts
			WHERE tenant_id = $1 AND target_job_key = $2 ORDER BY token`, tenant, key)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, scanAttempt)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim: attempts of %s: %w", key, err)
	}
	return out, nil
}

// Conflict is one job booked more than once for the tenant's client with
// different booking ids (board evidence), and the attempts marked.
type Conflict struct {
	Key        string
	BookingIDs []string
	Attempts   []Attempt
	FoundAt    time.Time
}

// Conflicts lists the tenant's conflicts, newest first (the claims page and
// the overview read them).
func (s *Store) Conflicts(ctx context.Context, tenant string, limit int) ([]Conflict, error) {
	var atts []Attempt
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+attemptCols+` FROM claim_attempts
			WHERE tenant_id = $1 AND conflict AND target_job_key IN (SELECT target_job_key FROM claim_attempts
			    WHERE tenant_id = $1 AND conflict GROUP BY target_job_key ORDER BY max(outcome_at) DESC NULLS LAST LIMIT $2)
			ORDER BY target_job_key, token`, tenant, limit)
		if err != nil {
			return err
		}
		atts, err = pgx.CollectRows(rows, scanAttempt)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim: conflicts: %w", err)
	}
	var out []Conflict
	for _, a := range atts {
		if len(out) == 0 || out[len(out)-1].Key != a.Key {
			out = append(out, Conflict{Key: a.Key})
		}
		c := &out[len(out)-1]
		c.Attempts = append(c.Attempts, a)
		if a.BookingID != "" && !slices.Contains(c.BookingIDs, a.BookingID) {
			c.BookingIDs = append(c.BookingIDs, a.BookingID)
		}
		if a.OutcomeAt != nil && a.OutcomeAt.After(c.FoundAt) {
			c.FoundAt = *a.OutcomeAt
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].FoundAt.After(out[j].FoundAt) })
	return out, nil
}

// SafetyCounts are the tenant's figures of issue 11 for the claims page and
// the overview: conflicts (jobs), attempts confirmed from late evidence,
// claims given up after an unknown outcome.
type SafetyCounts struct {
	Conflicts, LateEvidence, GivenUp int
}

// Safety counts the tenant's conflicts, late evidence and given-up claims
// (current claims and attempts; archived claims are not counted).
func (s *Store) Safety(ctx context.Context, tenant string) (SafetyCounts, error) {
	var c SafetyCounts
	err := db.TenantRow(ctx, s.pool, tenant, `SELECT
		(SELECT count(DISTINCT target_job_key) FROM claim_attempts WHERE tenant_id = $1 AND conflict),
		(SELECT count(*) FROM claim_attempts WHERE tenant_id = $1 AND late_evidence),
		(SELECT count(*) FROM claims WHERE tenant_id = $1 AND state = 'RELEASED' AND outcome = 'GIVEN_UP')`, tenant).
		Scan(&c.Conflicts, &c.LateEvidence, &c.GivenUp)
	if err != nil {
		return SafetyCounts{}, fmt.Errorf("claim: safety counts: %w", err)
	}
	return c, nil
}

// notify hands a result to the engine (metrics, the conflict alarm).
func (s *Store) notify(res EvidenceResult) {
	if s.observer != nil && (res.Applied || res.Conflict) {
		s.observer(res)
	}
}

func (s *Store) clockBound() time.Duration {
	if s.bound > 0 {
		return s.bound
	}
	return 2 * time.Second
}

// ApplyAttempt applies one attempt's booking (known from an earlier report)
// to the job's claim, in one transaction.
func (s *Store) ApplyAttempt(ctx context.Context, tenant, key string, token int64, src evidenceSource) (EvidenceResult, error) {
	var res EvidenceResult
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		var err error
		res, err = s.applyEvidence(ctx, tx, tenant, key, []evidence{{Token: token}}, src)
		return err
	})
	if err != nil {
		return EvidenceResult{}, fmt.Errorf("claim: apply attempt %d of %s: %w", token, key, err)
	}
	s.notify(res)
	return res, nil
}

// NeedEvidence returns which of keys (jobs the board shows booked for the
// client) our records do not yet reflect: a claim not CONFIRMED, or an
// attempt that acted without a recorded booking.
func (s *Store) NeedEvidence(ctx context.Context, tenant string, keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	var out []string
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT target_job_key FROM claims WHERE tenant_id = $1 AND target_job_key = ANY($2)
			  AND state <> 'CONFIRMED'
			UNION SELECT target_job_key FROM claim_attempts WHERE tenant_id = $1 AND target_job_key = ANY($2)
			  AND act_started_at IS NOT NULL AND booking_id IS NULL AND outcome IS DISTINCT FROM 'NOT_SENT'
			  AND outcome IS DISTINCT FROM 'TAKEN'`, tenant, keys)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim: keys needing evidence: %w", err)
	}
	return out, nil
}

// StrandedWatches re-enqueues the watch of every job of the tenant whose
// attempt's fate is in doubt, whose load has not expired (past bound) and
// that has no live watch job (one River discarded, or lost with a replica
// before the rescuer ran). Unique jobs make a repeat harmless.
func (s *Store) StrandedWatches(ctx context.Context, tenant string, bound time.Duration) (int, error) {
	n := 0
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT DISTINCT a.target_job_key FROM claim_attempts a
			LEFT JOIN claims c ON c.tenant_id = a.tenant_id AND c.target_job_key = a.target_job_key
			WHERE a.tenant_id = $1 AND a.act_started_at IS NOT NULL AND a.booking_id IS NULL
			  AND (a.outcome IN ('RELEASED', 'GIVEN_UP')
			       OR (a.outcome = 'UNKNOWN' AND (c.token IS DISTINCT FROM a.token OR c.state <> 'UNKNOWN'))
			       OR (a.outcome = 'CONFIRMED' AND EXISTS (SELECT 1 FROM claim_attempts b WHERE b.tenant_id = a.tenant_id
			           AND b.target_job_key = a.target_job_key AND b.token <> a.token AND b.outcome = 'CONFIRMED')))
			  AND (c.load_expires_at IS NULL OR c.load_expires_at + make_interval(secs => $2) > clock_timestamp())
			  AND a.outcome_at > clock_timestamp() - interval '1 day'
			  AND NOT EXISTS (SELECT 1 FROM river_job r WHERE r.kind = 'claim.watch'
			      AND r.state IN ('available','pending','retryable','running','scheduled')
			      AND r.args->>'tenant' = $1::text AND r.args->>'key' = a.target_job_key)`, tenant, bound.Seconds())
		if err != nil {
			return err
		}
		keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, k := range keys {
			ok, err := s.watchIfInDoubt(ctx, tx, tenant, k)
			if err != nil {
				return err
			}
			if ok {
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("claim: stranded watches: %w", err)
	}
	return n, nil
}
