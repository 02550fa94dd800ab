package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// rawAgent speaks the protocol on one WebSocket: it answers nothing and
// returns the answer to each request it makes (matched by request id).
type rawAgent struct {
	t  *testing.T
	ws *websocket.Conn
}

func connectRaw(t *testing.T, url, token string) *rawAgent {
	return connectRawV(t, url, token, wire.Current)
}

func connectRawV(t *testing.T, url, token string, v int) *rawAgent {
	t.Helper()
	ws := dial(t, url)
	data, err := wire.Encode(wire.Current, wire.Frame{Time: time.Now(), Message: wire.Hello{Version: v,
		MinVersion: wire.V3, Build: "test", Host: "h", Clock: time.Now(), Token: wire.NewSecret(token)}})
	require.NoError(t, err)
	f := exchange(t, ws, data)
	_, ok := f.Message.(wire.Welcome)
	require.True(t, ok, "%#v", f.Message)
	return &rawAgent{t: t, ws: ws}
}

func (a *rawAgent) ask(m wire.Message, id string) wire.Message {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	data, err := wire.Encode(wire.Current, wire.Frame{Time: time.Now(), Message: m})
	require.NoError(a.t, err)
	require.NoError(a.t, a.ws.Write(ctx, websocket.MessageText, data))
	for {
		_, raw, err := a.ws.Read(ctx)
		require.NoError(a.t, err)
		f, err := wire.Decode(raw)
		require.NoError(a.t, err)
		switch x := f.Message.(type) {
		case wire.LeaseResult:
			if x.RequestID == id {
				return x
			}
		case wire.ActResult:
			if x.RequestID == id {
				return x
			}
		case wire.OutcomeAck:
			if x.RequestID == id {
				return x
			}
		}
	}
}

func (a *rawAgent) lease(key string) wire.LeaseResult {
	id := "l-" + key
	lr := a.ask(wire.LeaseRequest{RequestID: id, Worker: "actor-1", Key: key}, id).(wire.LeaseResult)
	require.True(a.t, lr.Granted, "lease %s: %s", key, lr.Reason)
	return lr
}

func (a *rawAgent) act(key string, token int64) {
	id := "a-" + key
	ar := a.ask(wire.ActRequest{RequestID: id, Worker: "actor-1", Key: key, Token: token}, id).(wire.ActResult)
	require.True(a.t, ar.OK, "act %s: %s", key, ar.Reason)
}

// TestLostConnectionSettlesOnlyItsOwnClaims: an agent connected to replica 1
// reconnects to replica 2 (its old connection not yet noticed dead), leases
// and acts there, and acts there on a lease from its old connection. When
// the old connection finally ends, only the claims it held are settled; the
// newer connection's lease, its action, and the action it started on the
// old lease are untouched.
func TestLostConnectionSettlesOnlyItsOwnClaims(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	rc, err := river.NewClient(riverpgxv5.New(b.db.App), &river.Config{})
	require.NoError(t, err)
	eng, err := claim.NewEngine(claim.NewStore(b.db.App, rc), claim.Config{LeaseFor: time.Minute, Log: testenv.Logger(t)})
	require.NoError(t, err)
	_, err = eng.PutFilter(ctx, ops, b.tenant, claim.Filter{Name: "everything", Enabled: true})
	require.NoError(t, err)
	now := time.Now()
	for _, k := range []string{"LD-OLD-ACT", "LD-OLD-LEASE", "LD-MOVED", "LD-NEW-LEASE", "LD-NEW-ACT"} {
		_, err := eng.Store().RecordJob(ctx, claim.QueuedJob{Tenant: b.tenant, Cell: "default",
			Job: wire.Job{Key: k, PublishedAt: now, ExpiresAt: now.Add(time.Hour)}, SeenAt: now, QueuedAt: now})
		require.NoError(t, err)
	}
	g1, url1 := b.replica(t, "one")
	g2, url2 := b.replica(t, "two")
	g1.SetClaims(eng)
	g2.SetClaims(eng)
	_, token := b.agent(t, "acct-conn")

	old := connectRaw(t, url1, token)
	old.act("LD-OLD-ACT", old.lease("LD-OLD-ACT").Token)
	old.lease("LD-OLD-LEASE")
	moved := old.lease("LD-MOVED")

	newer := connectRaw(t, url2, token)
	newer.lease("LD-NEW-LEASE")
	newer.act("LD-NEW-ACT", newer.lease("LD-NEW-ACT").Token)
	newer.act("LD-MOVED", moved.Token) // the action belongs to the newer connection

	// The old connection ends; replica one settles what it held.
	require.NoError(t, old.ws.Close(websocket.StatusGoingAway, "network gone"))
	state := func(key string) claim.State {
		c, err := eng.Store().Get(ctx, b.tenant, key)
		require.NoError(t, err)
		return c.State
	}
	require.Eventually(t, func() bool {
		return state("LD-OLD-ACT") == claim.Unknown && state("LD-OLD-LEASE") == claim.Released
	}, 10*time.Second, 20*time.Millisecond, "the old connection's claims are settled")
	// Settled in one transaction: the others were left alone, not just not yet.
	require.Equal(t, claim.Leased, state("LD-NEW-LEASE"), "the newer connection's lease stands")
	require.Equal(t, claim.Acting, state("LD-NEW-ACT"), "the newer connection's action stands")
	require.Equal(t, claim.Acting, state("LD-MOVED"), "an action started on the newer connection stands")

	// Its own end settles the rest.
	require.NoError(t, newer.ws.Close(websocket.StatusGoingAway, "bye"))
	require.Eventually(t, func() bool {
		return state("LD-NEW-LEASE") == claim.Released && state("LD-NEW-ACT") == claim.Unknown && state("LD-MOVED") == claim.Unknown
	}, 10*time.Second, 20*time.Millisecond)
}

// TestTransientOutcomeAnswers: when the database cannot record an outcome,
// a v4 agent is told "transient" (keep it, retry) and a v3 agent gets no
// acknowledgement at all (a v3 agent drops a report on any answer); once
// the database records it, both are told it was applied.
func TestTransientOutcomeAnswers(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	rc, err := river.NewClient(riverpgxv5.New(b.db.App), &river.Config{})
	require.NoError(t, err)
	eng, err := claim.NewEngine(claim.NewStore(b.db.App, rc), claim.Config{LeaseFor: time.Minute, Log: testenv.Logger(t)})
	require.NoError(t, err)
	_, err = eng.PutFilter(ctx, ops, b.tenant, claim.Filter{Name: "everything", Enabled: true})
	require.NoError(t, err)
	now := time.Now()
	for _, k := range []string{"LD-V3", "LD-V4"} {
		_, err := eng.Store().RecordJob(ctx, claim.QueuedJob{Tenant: b.tenant, Cell: "default",
			Job: wire.Job{Key: k, PublishedAt: now, ExpiresAt: now.Add(time.Hour)}, SeenAt: now, QueuedAt: now})
		require.NoError(t, err)
	}
	g, url := b.replica(t, "one")
	g.SetClaims(eng)
	_, tok3 := b.agent(t, "acct-v3")
	_, tok4 := b.agent(t, "acct-v4")
	v3, v4 := connectRawV(t, url, tok3, wire.V3), connectRawV(t, url, tok4, wire.V4)
	l3, l4 := v3.lease("LD-V3"), v4.lease("LD-V4")
	v3.act("LD-V3", l3.Token)
	v4.act("LD-V4", l4.Token)

	// Each refusal is counted in a sequence, which a rollback does not undo.
	_, err = b.db.Owner.Exec(ctx, `
		CREATE SEQUENCE test_settle_refusals;
		GRANT USAGE ON SEQUENCE test_settle_refusals TO PUBLIC;
		CREATE FUNCTION test_refuse_settle() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM nextval('test_settle_refusals'); RAISE EXCEPTION 'test: the database cannot record this now'; END $$;
		CREATE TRIGGER test_refuse_settle BEFORE UPDATE ON claims FOR EACH ROW
		    WHEN (OLD.state = 'ACTING' AND NEW.state <> 'ACTING') EXECUTE FUNCTION test_refuse_settle();`)
	require.NoError(t, err)
	sent := time.Now()
	outcome := func(key string, token int64, id string) wire.Outcome {
		return wire.Outcome{RequestID: id, Worker: "actor-1", Key: key, Token: token, OperationID: "op", Result: wire.ResultConfirmed,
			SentAt: &sent, ConfirmedAt: &sent}
	}
	ack := v4.ask(outcome("LD-V4", l4.Token, "o4"), "o4").(wire.OutcomeAck)
	require.False(t, ack.OK)
	require.Equal(t, wire.AckTransient, ack.Disposition)

	// v3: the answer is withheld (a later message still gets its answer).
	data, err := wire.Encode(wire.V3, wire.Frame{Time: time.Now(), Message: outcome("LD-V3", l3.Token, "o3")})
	require.NoError(t, err)
	require.NoError(t, v3.ws.Write(ctx, websocket.MessageText, data))
	_, err = eng.Store().RecordJob(ctx, claim.QueuedJob{Tenant: b.tenant, Cell: "default",
		Job: wire.Job{Key: "LD-V3-NEXT", PublishedAt: now, ExpiresAt: now.Add(time.Hour)}, SeenAt: now, QueuedAt: now})
	require.NoError(t, err)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	data, err = wire.Encode(wire.V3, wire.Frame{Time: time.Now(), Message: wire.LeaseRequest{RequestID: "l-next", Worker: "actor-1", Key: "LD-V3-NEXT"}})
	require.NoError(t, err)
	// The outcome is handled first: Postgres refused it (the v4 agent's
	// was the first refusal).
	require.Eventually(t, func() bool {
		var n int64
		err := b.db.Owner.QueryRow(ctx, `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM test_settle_refusals`).Scan(&n)
		return err == nil && n >= 2
	}, 10*time.Second, 10*time.Millisecond, "the v3 outcome was tried and refused")
	require.NoError(t, v3.ws.Write(ctx, websocket.MessageText, data))
	for {
		_, raw, err := v3.ws.Read(rctx)
		require.NoError(t, err)
		f, err := wire.Decode(raw)
		require.NoError(t, err)
		_, isAck := f.Message.(wire.OutcomeAck)
		require.False(t, isAck, "a v3 agent gets no answer to an outcome that was not recorded")
		if lr, ok := f.Message.(wire.LeaseResult); ok && lr.RequestID == "l-next" {
			break
		}
	}

	_, err = b.db.Owner.Exec(ctx, `DROP TRIGGER test_refuse_settle ON claims; DROP FUNCTION test_refuse_settle(); DROP SEQUENCE test_settle_refusals;`)
	require.NoError(t, err)
	ack = v4.ask(outcome("LD-V4", l4.Token, "o4"), "o4").(wire.OutcomeAck)
	require.True(t, ack.OK)
	require.Equal(t, wire.AckApplied, ack.Disposition)
	ack = v3.ask(outcome("LD-V3", l3.Token, "o3"), "o3").(wire.OutcomeAck)
	require.True(t, ack.OK)
	require.Empty(t, ack.Disposition, "v3 has no disposition")
	ack = v4.ask(outcome("LD-V4", l4.Token+1000, "o4b"), "o4b").(wire.OutcomeAck)
	require.False(t, ack.OK)
	require.Equal(t, wire.AckDefinitive, ack.Disposition, "a stale token is a definitive refusal")
}
