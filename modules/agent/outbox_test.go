package agent

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/agent/store"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// failSettling makes the panel's database refuse to settle any claim that
// is ACTING — a real statement failure, as when Postgres is unavailable —
// until the returned function lifts it.
func failSettling(t *testing.T, p *claimPanel) (lift func()) {
	t.Helper()
	ctx := context.Background()
	_, err := p.db.Owner.Exec(ctx, `
		CREATE FUNCTION test_refuse_settle() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'test: the database cannot record this now'; END $$;
		CREATE TRIGGER test_refuse_settle BEFORE UPDATE ON claims FOR EACH ROW
		    WHEN (OLD.state = 'ACTING' AND NEW.state <> 'ACTING') EXECUTE FUNCTION test_refuse_settle();`)
	require.NoError(t, err)
	return func() {
		_, err := p.db.Owner.Exec(ctx, `DROP TRIGGER test_refuse_settle ON claims; DROP FUNCTION test_refuse_settle();`)
		require.NoError(t, err)
	}
}

// TestTransientOutcomeFailureIsKeptAndRetried: the panel cannot record an
// outcome (its database refuses the statement) and answers "transient"; the
// agent keeps the report and sends the same one again with backoff, and
// once the database records it the claim has the report's own timestamps,
// and the report leaves the outbox. In both dispatch modes.
func TestTransientOutcomeFailureIsKeptAndRetried(t *testing.T) {
	for _, mode := range dispatchModes {
		t.Run(mode, func(t *testing.T) { transientOutcome(t, mode) })
	}
}

func transientOutcome(t *testing.T, mode string) {
	ctx := context.Background()
	s, creds := boardAccount(t)
	p := newClaimPanel(t, s.URL(), creds, wire.WorkerSpec{Name: "h1", Kind: KindHTTPActor})
	stateDir := filepath.Join(t.TempDir(), "state")
	stop, _ := runAgent(t, p, stateDir)
	p.waitConnected(t)
	p.event(t, "session_refreshed", 20*time.Second)
	lift := failSettling(t, p)

	loads, err := s.Publish(ctx, 1, nil)
	require.NoError(t, err)
	p.dispatch(t, mode, loads[0], "h1")
	first := p.outcome(t, 20*time.Second)
	require.Equal(t, wire.ResultConfirmed, first.Result, first.Detail)
	require.NotNil(t, first.SentAt)
	require.NotNil(t, first.ConfirmedAt)
	// Sent again, unchanged, after a backoff: the agent kept it.
	again := p.outcome(t, 5*time.Second)
	require.Equal(t, first.RequestID, again.RequestID)
	require.True(t, first.SentAt.Equal(*again.SentAt), "the send time survives the retry")
	require.True(t, first.ConfirmedAt.Equal(*again.ConfirmedAt), "the confirmation time survives the retry")
	c, err := p.claims.Get(ctx, p.tenant, loads[0].ID)
	require.NoError(t, err)
	require.Equal(t, claim.Acting, c.State, "nothing recorded yet")

	lift()
	require.Eventually(t, func() bool {
		c, err = p.claims.Get(ctx, p.tenant, loads[0].ID)
		return err == nil && c.State == claim.Confirmed
	}, 15*time.Second, 50*time.Millisecond, "a later retry is recorded")
	require.NotNil(t, c.ActSentAt)
	require.NotNil(t, c.ConfirmedAt)
	// Postgres keeps microseconds.
	require.WithinDuration(t, *first.SentAt, *c.ActSentAt, time.Microsecond, "act_sent_at is the agent's, from the first report")
	require.WithinDuration(t, *first.ConfirmedAt, *c.ConfirmedAt, time.Microsecond, "confirmed_at is the agent's, from the first report")
	require.True(t, c.LeasedAt.Before(*c.ActSentAt))

	// The applied acknowledgement arrives: the agent takes the report out
	// of its outbox (SQLite in WAL mode: a second reader is fine).
	require.Eventually(t, func() bool {
		st, err := store.Open(ctx, stateDir)
		if err != nil {
			return false
		}
		defer st.Close()
		q, err := st.Outbox(ctx)
		return err == nil && len(q) == 0
	}, 10*time.Second, 20*time.Millisecond, "the applied report left the outbox")
	stop()
	st, err := store.Open(ctx, stateDir)
	require.NoError(t, err)
	defer st.Close()
	q, err := st.Outbox(ctx)
	require.NoError(t, err)
	require.Empty(t, q, "applied: the report left the outbox")
}

// TestMismatchedIdempotencySettingRefusesToClaim: the board honours
// idempotency keys but the tenant's setting says it does not; the actor
// claims nothing (no lease is even asked for) and reports why, naming the
// setting to change. With the setting fixed it books.
func TestMismatchedIdempotencySettingRefusesToClaim(t *testing.T) {
	ctx := context.Background()
	s, creds := boardAccount(t, func(c *board.Config) { c.IdempotencyKeys = true })
	p := newClaimPanel(t, s.URL(), creds, wire.WorkerSpec{Name: "h1", Kind: KindHTTPActor})
	runAgent(t, p, "")
	p.waitConnected(t)
	p.event(t, "session_refreshed", 20*time.Second)

	loads, err := s.Publish(ctx, 1, nil)
	require.NoError(t, err)
	p.offer(t, loads[0])
	e := p.event(t, "idempotency_mismatch", 10*time.Second)
	require.Equal(t, wire.LevelError, e.Level)
	require.Contains(t, e.Message, "honours idempotency keys")
	require.Contains(t, e.Message, "Claim settings")
	_, err = p.claims.Get(ctx, p.tenant, loads[0].ID)
	require.Error(t, err, "not even leased")
	require.EqualValues(t, 0, s.Stats().BookingRequests)

	require.NoError(t, p.claims.SetHonoursIdempotency(ctx, audit.Entry{Actor: "admin"}, p.tenant, "sandbox", true))
	p.offer(t, loads[0])
	require.Equal(t, wire.ResultConfirmed, p.outcome(t, 20*time.Second).Result)
}
