package claim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
)

// The console's reads of a claim's story: the claims page (paged and
// filtered), a load's timeline, agents by name, and the tenant's win rate.
// They only read; nothing here changes a claim.

// AgentNames maps the tenant's agents' ids to their names (retired agents
// included: old claims still name them).
func (s *Store) AgentNames(ctx context.Context, tenant string) (map[string]string, error) {
	out := map[string]string{}
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id::text, name FROM agents WHERE tenant_id = $1`, tenant)
		if err != nil {
			return err
		}
		var id, name string
		_, err = pgx.ForEachRow(rows, []any{&id, &name}, func() error {
			out[id] = name
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim: agent names: %w", err)
	}
	return out, nil
}

// ClaimQuery selects a page of the tenant's claims.
type ClaimQuery struct {
	// State: one stored state, or "" for any.
	State State
	// Worker matches the worker's name, its agent's name, or both as
	// "agent/worker"; "" matches every worker.
	Worker string
	// From and To bound leased_at (To zero: now); with From zero the
	// claims leased in the last Window, by the database clock.
	From, To time.Time
	Window   time.Duration
	// Offset and Limit page the result, newest first.
	Offset, Limit int
}

// ClaimPage is one page of claims and what the whole selection counts.
type ClaimPage struct {
	Claims  []Claim
	Total   int
	ByState map[State]int
}

// claimWhere is the selection of a ClaimQuery over claims; its arguments
// start at $1.
const claimWhere = `tenant_id = $1 AND leased_at >= COALESCE($2::timestamptz, clock_timestamp() - make_interval(secs => $6))
	AND ($3::timestamptz IS NULL OR leased_at < $3)
	AND ($4 = '' OR state = $4)
	AND ($5 = '' OR holder_worker = $5 OR EXISTS (SELECT 1 FROM agents a WHERE a.id = claims.holder_agent
	    AND (a.name = $5 OR a.name || '/' || claims.holder_worker = $5)))`

// Claims reads one page of the tenant's current claims, newest first, and
// counts the whole selection by state.
func (s *Store) Claims(ctx context.Context, tenant string, q ClaimQuery) (ClaimPage, error) {
	p := ClaimPage{ByState: map[State]int{}}
	var from, to any
	if !q.From.IsZero() {
		from = q.From
	}
	if !q.To.IsZero() {
		to = q.To
	}
	if q.Limit <= 0 {
		q.Limit = 50
	}
	args := []any{tenant, from, to, string(q.State), strings.TrimSpace(q.Worker), q.Window.Seconds()}
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT state, count(*) FROM claims WHERE `+claimWhere+` GROUP BY state`, args...)
		if err != nil {
			return err
		}
		var st string
		var n int
		if _, err := pgx.ForEachRow(rows, []any{&st, &n}, func() error {
			p.ByState[State(st)] = n
			p.Total += n
			return nil
		}); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT `+claimCols+` FROM claims WHERE `+claimWhere+`
			ORDER BY leased_at DESC, target_job_key LIMIT $7 OFFSET $8`,
			append(args, q.Limit, q.Offset)...)
		if err != nil {
			return err
		}
		p.Claims, err = pgx.CollectRows(rows, scanClaim)
		return err
	})
	if err != nil {
		return ClaimPage{}, fmt.Errorf("claim: claims page: %w", err)
	}
	return p, nil
}

// Sighting is the panel's record of the job's first sighting that passed
// the filters (claim_jobs).
type Sighting struct {
	QueuedJob
	PublishedAt, ExpiresAt *time.Time
}

// Transition is one row of the claim's transition log.
type Transition struct {
	From, To string
	Outcome  string
	Token    int64
	Holder   Holder
	At       time.Time
}

// BackgroundJob is a reconciler or watch job of the claim, as River keeps
// it: its attempts and the errors of those that decided nothing.
type BackgroundJob struct {
	Kind        string
	State       string
	Attempts    int
	CreatedAt   time.Time
	FinalizedAt *time.Time
	Errors      []JobError
}

// JobError is one failed attempt of a background job.
type JobError struct {
	At      time.Time `json:"at"`
	Attempt int       `json:"attempt"`
	Error   string    `json:"error"`
}

// Story is everything the panel keeps about one load of a tenant.
type Story struct {
	// Claim is the current claim row (or the last archived one); nil when
	// the load was never leased.
	Claim    *Claim
	Archived bool
	Sighting *Sighting
	Attempts []Attempt
	// Transitions are the claim's state changes, oldest first.
	Transitions []Transition
	// Audit are the claim engine's entries for the load (outcomes,
	// unknowns, the reconciler's and the duplicate sweep's decisions with
	// their evidence, reviews), oldest first.
	Audit []AuditRecord
	// Jobs are the reconciler's and the watch's jobs while River keeps
	// them.
	Jobs []BackgroundJob
	// Review is the load's review, if it needed one.
	Review *Review
	// Duplicate is the board's evidence of two or more bookings.
	Duplicate *Duplicate
}

// ErrNoStory means the panel has no record of the load.
var ErrNoStory = errors.New("claim: no record of this load")

// LoadStory reads one load's story in one tenant-scoped transaction.
func (s *Store) LoadStory(ctx context.Context, tenant, key string) (Story, error) {
	var st Story
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+claimCols+` FROM claims WHERE tenant_id = $1 AND target_job_key = $2`, tenant, key)
		if err != nil {
			return err
		}
		cs, err := pgx.CollectRows(rows, scanClaim)
		if err != nil {
			return err
		}
		if len(cs) == 0 {
			rows, err = tx.Query(ctx, `SELECT `+claimCols+` FROM claims_archive WHERE tenant_id = $1 AND target_job_key = $2
				ORDER BY token DESC LIMIT 1`, tenant, key)
			if err != nil {
				return err
			}
			if cs, err = pgx.CollectRows(rows, scanClaim); err != nil {
				return err
			}
			st.Archived = len(cs) > 0
		}
		if len(cs) > 0 {
			st.Claim = &cs[0]
		}

		var sg Sighting
		err = tx.QueryRow(ctx, `SELECT cell, origin, destination, equipment, weight_lbs, miles, rate_cents, published_at, expires_at,
			seen_at, queued_at, clock_error_ms, board_clock_error_ms, COALESCE(seen_by_agent::text, ''), seen_by_worker
			FROM claim_jobs WHERE tenant_id = $1 AND job_key = $2`, tenant, key).
			Scan(&sg.Cell, &sg.Job.Origin, &sg.Job.Destination, &sg.Job.Equipment, &sg.Job.WeightLbs, &sg.Job.Miles, &sg.Job.RateCents,
				&sg.PublishedAt, &sg.ExpiresAt, &sg.SeenAt, &sg.QueuedAt, &sg.ClockErrorMS, &sg.BoardClockErrorMS, &sg.Agent, &sg.Worker)
		switch {
		case err == nil:
			sg.Tenant, sg.Job.Key = tenant, key
			st.Sighting = &sg
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}

		rows, err = tx.Query(ctx, `SELECT `+attemptCols+` FROM claim_attempts WHERE tenant_id = $1 AND target_job_key = $2 ORDER BY token`, tenant, key)
		if err != nil {
			return err
		}
		if st.Attempts, err = pgx.CollectRows(rows, scanAttempt); err != nil {
			return err
		}

		rows, err = tx.Query(ctx, `SELECT COALESCE(from_state, ''), to_state, COALESCE(outcome, ''), token, holder_agent::text, holder_worker, at
			FROM claim_transitions WHERE tenant_id = $1 AND target_job_key = $2 ORDER BY id`, tenant, key)
		if err != nil {
			return err
		}
		if st.Transitions, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Transition, error) {
			var t Transition
			err := r.Scan(&t.From, &t.To, &t.Outcome, &t.Token, &t.Holder.Agent, &t.Holder.Worker, &t.At)
			return t, err
		}); err != nil {
			return err
		}

		if st.Claim == nil && st.Sighting == nil && len(st.Attempts) == 0 {
			return ErrNoStory
		}
		// The audit log has no index by target: its entries for the load
		// are read in the time range the load lived (from its sighting or
		// first lease, to an hour past its expiry on the board), on the
		// index by time.
		from, until := storyRange(st)
		var end any
		if !until.IsZero() {
			end = until
		}
		rows, err = tx.Query(ctx, `SELECT id, actor, action, target, detail::text, at FROM audit_log
			WHERE at >= $1 AND ($2::timestamptz IS NULL OR at <= $2) AND target = $3 AND action LIKE 'claim.%' ORDER BY at, id LIMIT 500`, from, end, key)
		if err != nil {
			return err
		}
		if st.Audit, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditRecord, error) {
			var a AuditRecord
			err := r.Scan(&a.ID, &a.Actor, &a.Action, &a.Target, &a.Detail, &a.At)
			return a, err
		}); err != nil {
			return err
		}

		rows, err = tx.Query(ctx, `SELECT kind, state::text, attempt, created_at, finalized_at, COALESCE(to_jsonb(errors), '[]')::text
			FROM river_job WHERE kind IN ('claim.reconcile', 'claim.watch') AND args->>'tenant' = $1::text AND args->>'key' = $2
			ORDER BY id LIMIT 20`, tenant, key)
		if err != nil {
			return err
		}
		if st.Jobs, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (BackgroundJob, error) {
			var j BackgroundJob
			var errs string
			if err := r.Scan(&j.Kind, &j.State, &j.Attempts, &j.CreatedAt, &j.FinalizedAt, &errs); err != nil {
				return j, err
			}
			// River's own record; one it cannot be read is left out.
			_ = json.Unmarshal([]byte(errs), &j.Errors)
			return j, nil
		}); err != nil {
			return err
		}

		var rv Review
		err = tx.QueryRow(ctx, `SELECT job_key, rate_cents, state, requested_at, decided_at, decided_by FROM claim_reviews
			WHERE tenant_id = $1 AND job_key = $2`, tenant, key).Scan(&rv.Key, &rv.RateCents, &rv.State, &rv.RequestedAt, &rv.DecidedAt, &rv.DecidedBy)
		switch {
		case err == nil:
			st.Review = &rv
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}

		var d Duplicate
		err = tx.QueryRow(ctx, `SELECT job_key, bookings, evidence::text, found_at FROM claim_duplicates WHERE tenant_id = $1 AND job_key = $2`,
			tenant, key).Scan(&d.Key, &d.Bookings, &d.Evidence, &d.FoundAt)
		switch {
		case err == nil:
			st.Duplicate = &d
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrNoStory) {
			return Story{}, ErrNoStory
		}
		return Story{}, fmt.Errorf("claim: story of %s: %w", key, err)
	}
	return st, nil
}

// storyRange is the time range in which the load's audit entries lie
// (until zero: no end).
func storyRange(st Story) (from, until time.Time) {
	first := func(t time.Time) {
		if !t.IsZero() && (from.IsZero() || t.Before(from)) {
			from = t
		}
	}
	if st.Sighting != nil {
		first(st.Sighting.SeenAt)
		first(st.Sighting.QueuedAt)
	}
	for _, a := range st.Attempts {
		first(a.LeasedAt)
	}
	for _, t := range st.Transitions {
		first(t.At)
	}
	if st.Claim != nil {
		first(st.Claim.LeasedAt)
	}
	from = from.Add(-time.Minute)
	var exp *time.Time
	if st.Claim != nil && st.Claim.LoadExpiresAt != nil {
		exp = st.Claim.LoadExpiresAt
	} else if st.Sighting != nil && st.Sighting.ExpiresAt != nil {
		exp = st.Sighting.ExpiresAt
	}
	if exp != nil {
		// Nothing is recorded of a load an hour past its expiry (the watch
		// ends at expiry; the archive follows).
		until = exp.Add(time.Hour)
	}
	return from, until
}

// HourWins is one hour of the tenant's contested loads.
type HourWins struct {
	Hour time.Time
	// Contested: loads whose booking request reached the board and got its
	// verdict (CONFIRMED or TAKEN); Booked: those confirmed for us.
	Contested, Booked int
}

// WinRate counts, per hour of leased_at over the last window by the
// database clock (UTC hours, current and archived claims), the loads the
// board gave a verdict on and those it booked for the tenant, oldest first.
func (s *Store) WinRate(ctx context.Context, tenant string, window time.Duration) ([]HourWins, error) {
	var out []HourWins
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT date_trunc('hour', leased_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
				count(*), count(*) FILTER (WHERE state = 'CONFIRMED')
			FROM (SELECT leased_at, state FROM claims WHERE tenant_id = $1 AND state IN ('CONFIRMED', 'TAKEN')
			        AND leased_at >= clock_timestamp() - make_interval(secs => $2)
			      UNION ALL
			      SELECT leased_at, state FROM claims_archive WHERE tenant_id = $1 AND state IN ('CONFIRMED', 'TAKEN')
			        AND leased_at >= clock_timestamp() - make_interval(secs => $2)) c
			GROUP BY 1 ORDER BY 1`, tenant, window.Seconds())
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (HourWins, error) {
			var h HourWins
			err := r.Scan(&h.Hour, &h.Contested, &h.Booked)
			return h, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim: win rate: %w", err)
	}
	return out, nil
}
