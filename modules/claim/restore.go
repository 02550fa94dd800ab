package claim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// A restored database has forgotten every lease and booking made after its
// backup was taken (fleetwright restore records it in restores). Until a
// complete look-up of a tenant's client's bookings has been applied as
// evidence, the lease and grant statements refuse the tenant's jobs
// (claim_restore_held); the look-up runs as a River job the sweep enqueues
// (RestoreArgs), and bookings of loads the database never saw are recorded
// as CONFIRMED claims from the board's evidence. Agents' outcomes of
// leases of the lost history (their tokens lie between the restore's
// tokens_before and tokens_from) are applied as evidence, never refused.
// docs/CLAIMS.md, "A restore never books twice".

// RestoreAlarmKind is the alarm a tenant held after a restore raises
// (warning), resolved when its look-up has been applied.
const RestoreAlarmKind = "claim.restore"

// restoreHolder is the holder recorded for a booking of the lost history
// that no agent's outcome names (only the board's look-up shows it).
var restoreHolder = Holder{Agent: "00000000-0000-0000-0000-000000000000", Worker: "restore"}

var actorRestore = audit.Entry{Actor: "restore"}

// RestoreHold is a restore a tenant has not been cleared of.
type RestoreHold struct {
	ID int64
	// BackupStartedAt is the backup's start; LostFrom is where the lost
	// history begins: everything after it may be missing (the backup's
	// start, or the moment a point-in-time recovery recovered to).
	BackupStartedAt, LostFrom, RestoredAt time.Time
	// Recovered says the restore replayed a WAL archive past the backup.
	Recovered bool
}

// RestoreHold returns the oldest restore tenant is held by, if any.
func (s *Store) RestoreHold(ctx context.Context, tenant string) (RestoreHold, bool, error) {
	var h RestoreHold
	err := db.TenantRow(ctx, s.pool, tenant, `SELECT r.id, r.backup_started_at, COALESCE(r.recovered_to, r.backup_started_at),
			r.recovered_to IS NOT NULL, r.restored_at FROM restores r
		WHERE r.restored_at > (SELECT created_at FROM tenants WHERE id = $1)
		  AND NOT EXISTS (SELECT 1 FROM claim_restore_clears c WHERE c.tenant_id = $1 AND c.restore_id = r.id)
		ORDER BY r.id LIMIT 1`, tenant).Scan(&h.ID, &h.BackupStartedAt, &h.LostFrom, &h.Recovered, &h.RestoredAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return h, false, nil
	}
	if err != nil {
		return h, false, fmt.Errorf("claim: restore hold: %w", err)
	}
	return h, true, nil
}

// holdRestored raises the restore alarm of a held tenant (once; the
// sweep sees it again every round) and enqueues its look-up.
func (s *Store) holdRestored(ctx context.Context, tenant string, h RestoreHold) error {
	return db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		var slug string
		if err := tx.QueryRow(ctx, `SELECT slug FROM tenants WHERE id = $1`, tenant).Scan(&slug); err != nil {
			return err
		}
		summary, lost := "restored from a backup taken "+h.BackupStartedAt.UTC().Format(time.RFC3339), "the backup"
		if h.Recovered {
			summary = "recovered to " + h.LostFrom.UTC().Format(time.RFC3339) + " from a backup taken " + h.BackupStartedAt.UTC().Format(time.RFC3339)
			lost = h.LostFrom.UTC().Format(time.RFC3339)
		}
		if _, err := alarm.Raise(ctx, tx, alarm.Alarm{Kind: RestoreAlarmKind, Key: fmt.Sprint(h.ID), Tenant: tenant,
			Severity: alarm.Warning,
			Summary:  summary + ": no lease until the client's bookings have been looked up",
			Detail: "everything after " + lost + " is missing from the database; the leases and bookings made since " +
				"are looked up on the board and applied as evidence before any load of this tenant is leased again",
			Link: "/t/" + slug + "/claims"}); err != nil {
			return err
		}
		if s.river == nil {
			return nil
		}
		_, err := s.river.InsertTx(ctx, tx, RestoreArgs{Tenant: tenant, Restore: h.ID}, nil)
		return err
	})
}

// restoreHeld, run by the sweep for each tenant, raises the alarm of a
// tenant held after a restore and enqueues its look-up (one live job).
func (e *Engine) restoreHeld(ctx context.Context, tenant string) error {
	h, held, err := e.store.RestoreHold(ctx, tenant)
	if err != nil || !held {
		return err
	}
	return e.store.holdRestored(ctx, tenant, h)
}

// ApplyRestoreBookings applies one job's bookings found by a restore's
// look-up. A booking an attempt records, or one an attempt acted before,
// goes through applyEvidence as any look-up's (attributed by time); a
// booking no attempt of the job acted before is of the lost history: it
// is recorded as an attempt of its own (with the job, when the database
// never saw it) and applied by that attempt's token, so the claim ends
// CONFIRMED whatever state the backup left it in.
func (s *Store) ApplyRestoreBookings(ctx context.Context, tenant, key string, bs []wire.Booking, h RestoreHold, lookupID string) (EvidenceResult, error) {
	src := evidenceSource{Name: "restore", Actor: actorRestore, ConfirmAction: "claim.restore.confirm",
		Detail: map[string]any{"restore": h.ID, "lookup_id": lookupID}}
	var res EvidenceResult
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		var evs []evidence
		for _, b := range bs {
			if b.Key != key {
				continue
			}
			ev := evidence{BookingID: b.BookingID, BookedAt: b.BookedAt, Account: b.Account}
			// Attributed by time to the attempt that acted before it, as any
			// look-up's booking, unless no attempt of the job acted by then.
			var attributable bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM claim_attempts WHERE tenant_id = $1
					AND target_job_key = $2 AND (booking_id = $3 OR act_started_at <= $4))`,
				tenant, key, b.BookingID, b.BookedAt.Add(s.clockBound())).Scan(&attributable); err != nil {
				return err
			}
			if !attributable {
				tok, err := s.recordLostAttempt(ctx, tx, tenant, key, restoreHolder, b.BookedAt)
				if err != nil {
					return err
				}
				ev.Token = tok
			}
			evs = append(evs, ev)
		}
		var err error
		res, err = s.applyEvidence(ctx, tx, tenant, key, evs, src)
		return err
	})
	if err != nil {
		return EvidenceResult{}, fmt.Errorf("claim: apply a restore's bookings of %s: %w", key, err)
	}
	s.notify(res)
	return res, nil
}

// recordLostAttempt records an attempt of the lost history that acted at
// actedAt: the job's record when the database never saw it, then the claim
// as ACTING of that attempt when it has none, else the attempt beside the
// claim. token 0 takes a fresh token; it returns the attempt's token.
func (s *Store) recordLostAttempt(ctx context.Context, tx pgx.Tx, tenant, key string, h Holder, actedAt time.Time) (int64, error) {
	return s.recordLostAttemptToken(ctx, tx, tenant, key, 0, h, actedAt)
}

func (s *Store) recordLostAttemptToken(ctx context.Context, tx pgx.Tx, tenant, key string, token int64, h Holder, actedAt time.Time) (int64, error) {
	if actedAt.IsZero() {
		actedAt = time.Now()
	}
	if token == 0 {
		if err := tx.QueryRow(ctx, `SELECT nextval('claim_token')`).Scan(&token); err != nil {
			return 0, err
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO claim_jobs (tenant_id, job_key, cell, seen_at, queued_at)
		VALUES ($1, $2, COALESCE((SELECT cell FROM tenants WHERE id = $1), 'default'), $3, $3)
		ON CONFLICT DO NOTHING`, tenant, key, actedAt); err != nil {
		return 0, err
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM claims WHERE tenant_id = $1 AND target_job_key = $2)`,
		tenant, key).Scan(&exists); err != nil {
		return 0, err
	}
	if !exists {
		// The trigger opens the attempt.
		_, err := tx.Exec(ctx, `INSERT INTO claims (tenant_id, target_job_key, state, token, holder_agent, holder_worker,
				operation_id, lease_expires_at, leased_at, act_started_at, act_deadline, seen_at, queued_at, load_expires_at, cell)
			SELECT $1, $2, 'ACTING', $3, $4, $5, gen_random_uuid(), $6, $6, $6, clock_timestamp(), j.seen_at, j.queued_at,
			       j.expires_at, j.cell
			FROM claim_jobs j WHERE j.tenant_id = $1 AND j.job_key = $2`, tenant, key, token, h.Agent, h.Worker, actedAt)
		if err != nil {
			return 0, err
		}
	} else if _, err := tx.Exec(ctx, `INSERT INTO claim_attempts (tenant_id, target_job_key, token, holder_agent, holder_worker,
			operation_id, leased_at, act_started_at) VALUES ($1, $2, $3, $4, $5, gen_random_uuid(), $6, $6)
		ON CONFLICT DO NOTHING`, tenant, key, token, h.Agent, h.Worker, actedAt); err != nil {
		return 0, err
	}
	return token, appendAudit(ctx, tx, actorRestore, "claim.restore.lost_attempt", key, map[string]any{
		"token": token, "holder_agent": h.Agent, "holder_worker": h.Worker, "acted_at": actedAt, "new_claim": !exists})
}

// ClearRestore records that tenant's complete look-up after restore h has
// been applied: its leases are granted again, the alarm resolves.
func (s *Store) ClearRestore(ctx context.Context, tenant string, h RestoreHold, lookupID string, bookings, applied int) error {
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO claim_restore_clears (tenant_id, restore_id, lookup_id, bookings, applied)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`, tenant, h.ID, lookupID, bookings, applied)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		if _, err := alarm.Resolve(ctx, tx, tenant, RestoreAlarmKind, fmt.Sprint(h.ID), "restore look-up"); err != nil {
			return err
		}
		return appendAudit(ctx, tx, actorRestore, "claim.restore.cleared", tenant, map[string]any{
			"restore": h.ID, "backup_started_at": h.BackupStartedAt, "lost_from": h.LostFrom, "lookup_id": lookupID,
			"bookings": bookings, "applied": applied})
	})
	if err != nil {
		return fmt.Errorf("claim: clear restore: %w", err)
	}
	return nil
}

// lostToken reports whether token was issued by the history a restore
// lost (between a restore's tokens_before and tokens_from).
func (s *Store) lostToken(ctx context.Context, token int64) (bool, error) {
	var lost bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM restores WHERE $1 > tokens_before AND $1 < tokens_from)`,
		token).Scan(&lost)
	if err != nil {
		return false, fmt.Errorf("claim: %w", err)
	}
	return lost, nil
}

// reportLost applies an outcome of a lease the restored database never
// saw, reported from an agent's outbox or journal: the lease is recorded
// as the attempt it was (ACTING, held by the reporting worker; the claim
// itself when the database has none), then the outcome is reported on it
// as on any attempt: a CONFIRMED settles the claim (or is late evidence
// beside a claim the backup knew), an UNKNOWN is reconciled.
func (s *Store) reportLost(ctx context.Context, tenant, key string, token int64, h Holder, o Outcome) error {
	acted := o.SentAt
	if acted.IsZero() {
		acted = o.ConfirmedAt
	}
	var onClaim bool
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		var have bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM claim_attempts WHERE tenant_id = $1 AND target_job_key = $2
				AND token = $3)`, tenant, key, token).Scan(&have); err != nil {
			return err
		}
		if !have {
			if _, err := s.recordLostAttemptToken(ctx, tx, tenant, key, token, h, acted); err != nil {
				return err
			}
		}
		return tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM claims WHERE tenant_id = $1 AND target_job_key = $2
			AND token = $3)`, tenant, key, token).Scan(&onClaim)
	})
	if err != nil {
		return fmt.Errorf("claim: record a lost lease of %s: %w", key, err)
	}
	if onClaim || o.Result == Confirmed {
		// The ordinary report: on the claim, or as late evidence beside it.
		return s.report(ctx, tenant, key, token, h, o, false)
	}
	// TAKEN, NOT_SENT or UNKNOWN of an attempt beside a claim the backup
	// knew: kept on the attempt; an UNKNOWN puts the job under watch.
	return db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		outcome := string(o.Result)
		if o.Result == NotSent {
			outcome = "NOT_SENT"
		}
		if _, err := tx.Exec(ctx, `UPDATE claim_attempts SET outcome = $4, outcome_detail = $5, outcome_at = clock_timestamp(),
				act_sent_at = $6 WHERE tenant_id = $1 AND target_job_key = $2 AND token = $3 AND outcome IS NULL`,
			tenant, key, token, outcome, truncate("lost with a restore; reported later: "+o.Detail, 500), nullTime(o.SentAt)); err != nil {
			return err
		}
		if err := appendAudit(ctx, tx, agentActor(h), "claim.outcome", key, map[string]any{
			"token": token, "reported": outcome, "lost_with_restore": true}); err != nil {
			return err
		}
		_, err := s.watchIfInDoubt(ctx, tx, tenant, key)
		return err
	})
}

// RestoreArgs is the River job that looks a held tenant's bookings up after
// a restore.
type RestoreArgs struct {
	Tenant  string `json:"tenant"`
	Restore int64  `json:"restore"`
}

// Kind implements river.JobArgs.
func (RestoreArgs) Kind() string { return "claim.restore_lookup" }

// InsertOpts keeps one live look-up per tenant and restore, retried with
// backoff for as long as it takes.
func (RestoreArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: ReconcileQueue, MaxAttempts: 10000, UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: liveStates}}
}

type restoreWorker struct {
	river.WorkerDefaults[RestoreArgs]
	e *Engine
}

// NextRetry is the injectable backoff (Config.Backoff).
func (w *restoreWorker) NextRetry(job *river.Job[RestoreArgs]) time.Time {
	return time.Now().Add(w.e.cfg.Backoff(job.Attempt))
}

// Timeout bounds one attempt: one look-up per client, then applying.
func (w *restoreWorker) Timeout(*river.Job[RestoreArgs]) time.Duration { return 80 * time.Second }

func (w *restoreWorker) Work(ctx context.Context, job *river.Job[RestoreArgs]) error {
	return w.e.RestoreLookup(ctx, job.Args.Tenant)
}

// RestoreLookup clears tenant of its oldest restore: it reads every
// booking of each client the tenant books as since the duplicate window
// before the backup, each look-up complete or nothing is decided, applies
// them as evidence, and only then lets the tenant's leases be granted.
func (e *Engine) RestoreLookup(ctx context.Context, tenant string) error {
	h, held, err := e.store.RestoreHold(ctx, tenant)
	if err != nil || !held {
		return err
	}
	lk := e.lookup()
	if lk == nil {
		return errors.New("claim: restore look-up: no look-ups yet (no gateway)")
	}
	since := h.LostFrom.Add(-e.cfg.DuplicateWindow)
	clients, err := e.store.Clients(ctx, tenant, since)
	if err != nil {
		return err
	}
	if len(clients) == 0 {
		return fmt.Errorf("claim: restore look-up: %w: the tenant's accounts state no platform client", ErrNoClient)
	}
	id := newID()
	byKey := map[string][]wire.Booking{}
	total := 0
	for _, as := range clients {
		lctx, cancel := context.WithTimeout(ctx, 45*time.Second)
		res, err := e.lookupAll(lctx, lk, tenant, as, wire.Lookup{RequestID: id, Since: since})
		cancel()
		if err != nil {
			return fmt.Errorf("claim: restore look-up of %s: %w", as, err)
		}
		if !res.Complete {
			return fmt.Errorf("claim: restore look-up of %s: incomplete: %s", as, res.Error)
		}
		for _, b := range res.Bookings {
			byKey[b.Key] = append(byKey[b.Key], b)
			total++
		}
	}
	applied := 0
	for key, bs := range byKey {
		res, err := e.store.ApplyRestoreBookings(ctx, tenant, key, bs, h, id)
		if err != nil {
			return err
		}
		e.observeEvidence(res)
		if res.Applied {
			applied++
		}
	}
	if err := e.store.ClearRestore(ctx, tenant, h, id, total, applied); err != nil {
		return err
	}
	e.log.Info("restore look-up applied: the tenant's leases are granted again", "tenant", tenant,
		"restore", h.ID, "bookings", total, "applied", applied)
	return nil
}
