package claim_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/board/boardtest"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// TestBookingKeyIsOneIdentityPerJob: every lease of a job carries the same
// booking key while its operation id is new, and a board that honours
// idempotency keys replays the second attempt instead of booking it twice.
// Sent with the operation id (the old rule), the same two attempts book a
// second load twice.
func TestBookingKeyIsOneIdentityPerJob(t *testing.T) {
	for _, d := range dialects(t) {
		t.Run(d.name, func(t *testing.T) { bookingKeyIdentity(t, d) })
	}
}

func bookingKeyIdentity(t *testing.T, d dialect) {
	ctx := context.Background()
	b := setup(t)
	s := boardtest.Start(t, func(c *board.Config) { c.IdempotencyKeys, c.Dialect = true, d.name })
	acct, err := s.CreateAccount(ctx, board.AccountSpec{Username: "acme-1", Password: "acme-password-1", Client: "acme"})
	require.NoError(t, err)
	sess := d.session(t, s.URL(), "acme-1", "acme-password-1", acct.TOTPSecret)
	loads, err := s.Publish(ctx, 2, nil)
	require.NoError(t, err)
	h := claim.Holder{Agent: uuid(), Worker: "actor-1"}

	// attempt leases the job, acts, books with the idempotency key the
	// rule picks, and (whatever the board said) reports NOT_SENT so the job
	// is released and can be leased again: two attempts of one job.
	attempt := func(key string, idem func(wire.LeaseResult) string) (wire.LeaseResult, string) {
		lr := b.engine.Lease(ctx, b.tenant, h, wire.LeaseRequest{RequestID: "l", Worker: h.Worker, Key: key})
		require.True(t, lr.Granted, lr.Reason)
		ar := b.engine.Act(ctx, b.tenant, h, wire.ActRequest{RequestID: "a", Worker: h.Worker, Key: key, Token: lr.Token})
		require.True(t, ar.OK, ar.Reason)
		res := sess.Book(ctx, key, idem(lr), nil)
		ack := b.engine.Outcome(ctx, b.tenant, h, wire.Outcome{RequestID: "o", Worker: h.Worker, Key: key,
			Token: lr.Token, OperationID: lr.OperationID, Result: wire.ResultNotSent}, claim.Offset{})
		require.True(t, ack.OK, ack.Reason)
		return lr, res.Result
	}

	key := loads[0].ID
	b.job(t, b.tenant, key, func(j *wire.Job) { j.ExpiresAt = loads[0].ExpiresAt })
	byKey := func(lr wire.LeaseResult) string { return lr.BookingKey }
	first, st1 := attempt(key, byKey)
	second, st2 := attempt(key, byKey)
	require.Equal(t, wire.ResultConfirmed, st1)
	require.Equal(t, wire.ResultConfirmed, st2, "the board replays the first answer")
	require.NotEmpty(t, first.BookingKey)
	require.Equal(t, first.BookingKey, second.BookingKey, "one booking identity per job")
	require.NotEqual(t, first.OperationID, second.OperationID, "the operation id names each lease")
	require.Len(t, s.Board.Bookings("acme"), 1, "one booking for two attempts")

	// The booking key is the panel's record of the job, not the claim row's.
	var recorded string
	require.NoError(t, db.InTenant(ctx, b.db.App, b.tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT booking_key::text FROM claim_jobs WHERE job_key = $1`, key).Scan(&recorded)
	}))
	require.Equal(t, first.BookingKey, recorded)

	// The old rule: the operation id as the key books the job twice.
	other := loads[1].ID
	b.job(t, b.tenant, other, func(j *wire.Job) { j.ExpiresAt = loads[1].ExpiresAt })
	byOp := func(lr wire.LeaseResult) string { return lr.OperationID }
	attempt(other, byOp)
	attempt(other, byOp)
	require.Len(t, s.Board.Bookings("acme"), 3, "with a key per lease the board books the second attempt too")
}

// TestHonoursIdempotencySetting: default off, changed per platform (audited),
// and true only when every platform the tenant books on honours keys; the
// lease result and the offer carry it.
func TestHonoursIdempotencySetting(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	on, err := b.store.HonoursIdempotency(ctx, b.tenant)
	require.NoError(t, err)
	require.False(t, on, "default off")
	b.job(t, b.tenant, "LD-1")
	lr := b.engine.Lease(ctx, b.tenant, claim.Holder{Agent: uuid(), Worker: "w"}, wire.LeaseRequest{RequestID: "l", Worker: "w", Key: "LD-1"})
	require.True(t, lr.Granted)
	require.False(t, lr.KeysHonoured)

	admin := testActor
	admin.Actor = "admin@example.com"
	require.NoError(t, b.engine.SetHonoursIdempotency(ctx, admin, b.tenant, "sandbox", true))
	on, err = b.store.HonoursIdempotency(ctx, b.tenant)
	require.NoError(t, err)
	require.True(t, on)
	b.job(t, b.tenant, "LD-2")
	lr = b.engine.Lease(ctx, b.tenant, claim.Holder{Agent: uuid(), Worker: "w"}, wire.LeaseRequest{RequestID: "l", Worker: "w", Key: "LD-2"})
	require.True(t, lr.Granted)
	require.True(t, lr.KeysHonoured)

	var n int
	require.NoError(t, db.InTenant(ctx, b.db.App, b.tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'claim.platform.idempotency'
			AND actor = 'admin@example.com' AND detail->>'honours_idempotency' = 'true'`).Scan(&n)
	}))
	require.Equal(t, 1, n, "the change is audited in the tenant's chain")

	// A second platform in use that nobody set: the tenant's answer is no.
	require.NoError(t, db.InTenant(ctx, b.db.App, b.tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO accounts (tenant_id, account_key, board_url, username, secret_box, workers)
			VALUES ($1, 'acct-2', 'http://127.0.0.1:1', 'u', '\x00', '[{"name":"a","kind":"http_actor","settings":{"platform":"otherboard"}}]')`, b.tenant)
		return err
	}))
	on, err = b.store.HonoursIdempotency(ctx, b.tenant)
	require.NoError(t, err)
	require.False(t, on, "otherboard has no setting")
	list, err := b.store.PlatformSettings(ctx, b.tenant)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "otherboard", list[0].Platform)
	require.True(t, list[0].InUse)
	require.False(t, list[0].HonoursIdempotency)
	require.Equal(t, "sandbox", list[1].Platform)
	require.False(t, list[1].InUse, "the account's workers name otherboard only")
	require.True(t, list[1].HonoursIdempotency)

	require.ErrorAs(t, b.store.SetHonoursIdempotency(ctx, admin, b.tenant, "Bad Name!", true), new(claim.Invalid))
}
