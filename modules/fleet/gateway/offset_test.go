package gateway_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/fleet/gateway"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// sightings is a claim engine that only keeps the clock offset the gateway
// hands it with each sighting (what corrects the agent's timestamps).
type sightings struct {
	mu      sync.Mutex
	offsets []wire.Estimate
}

func (s *sightings) Detected(_ context.Context, _, _ string, _ wire.Detected, offset wire.Estimate) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.offsets = append(s.offsets, offset)
	return nil
}

// last returns how many sightings came and the offset handed with the last.
func (s *sightings) last() (int, wire.Estimate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.offsets) == 0 {
		return 0, wire.Estimate{}
	}
	return len(s.offsets), s.offsets[len(s.offsets)-1]
}

func (*sightings) Lease(context.Context, string, claim.Holder, wire.LeaseRequest) wire.LeaseResult {
	return wire.LeaseResult{}
}
func (*sightings) Act(context.Context, string, claim.Holder, wire.ActRequest) wire.ActResult {
	return wire.ActResult{}
}
func (*sightings) Outcome(context.Context, string, claim.Holder, wire.Outcome, wire.Estimate) wire.OutcomeAck {
	return wire.OutcomeAck{}
}
func (*sightings) Gate(context.Context, string, claim.Holder, wire.GateCheck) wire.GateResult {
	return wire.GateResult{}
}
func (*sightings) AgentLost(context.Context, string, string, string) error { return nil }

// TestClockOffsetIsWrittenOnlyWhenItChanges: the panel measures an agent's
// clock on every pong but writes it to the agents row only when it changed
// (more than 5 ms, or the error bound halved or doubled), a smaller
// difference at most once per refresh interval, and the last estimate when
// the agent leaves; the claim engine always gets the newest estimate from
// memory. The agent here is protocol-only, its clock exactly 100 ms ahead
// (round trip 0), the panel's clock a fake advanced a ping interval at a
// time.
func TestClockOffsetIsWrittenOnlyWhenItChanges(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	var inst string
	require.NoError(t, b.db.App.QueryRow(ctx, "SELECT id::text FROM installation").Scan(&inst))
	clk := clock.NewFake(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
	const every = 15 * time.Second
	engine := &sightings{}
	g := gateway.New(b.store, engine, gateway.Config{ReplicaID: newUUID(t, b), InstallationID: inst,
		PingEvery: every, PollEvery: time.Hour, Clock: clk}, testenv.Logger(t))
	r := chi.NewRouter()
	r.Get("/agent/ws", g.ServeHTTP)
	srv := httptest.NewServer(r)
	t.Cleanup(func() { g.CloseAll(); srv.Close() })

	id, token := b.agent(t, "clock")
	ws := dial(t, srv.URL)
	send := func(m wire.Message) {
		t.Helper()
		data, err := wire.Encode(wire.Current, wire.Frame{Time: clk.Now(), Message: m})
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, ws.Write(wctx, websocket.MessageText, data))
	}
	data, err := wire.Encode(wire.Current, wire.Frame{Time: clk.Now(), Message: wire.Hello{Version: wire.Current,
		MinVersion: wire.MinSupported, Build: "t", Host: "h", Clock: clk.Now(), Token: wire.NewSecret(token)}})
	require.NoError(t, err)
	_, ok := exchange(t, ws, data).Message.(wire.Welcome)
	require.True(t, ok)

	stored := func() *float64 {
		var v *float64
		require.NoError(t, db.InTenant(ctx, b.db.App, b.tenant, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT clock_offset_ms FROM agents WHERE id = $1`, id).Scan(&v)
		}))
		return v
	}
	// A sentinel in the row shows whether anything was written since.
	const sentinel = -999.0
	mark := func() {
		require.NoError(t, db.InTenant(ctx, b.db.App, b.tenant, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE agents SET clock_offset_ms = $2 WHERE id = $1`, id, sentinel)
			return err
		}))
	}
	n := 0
	// pong answers the panel's next ping with the agent's clock off ahead,
	// then waits until the panel has handled it: the panel handles one
	// connection's messages in order, so once the state report sent after
	// the pong is in the row, the pong's write (if any) is done.
	pong := func(off time.Duration) {
		t.Helper()
		if n > 0 {
			require.True(t, clk.BlockUntil(1, 10*time.Second), "the sweeper waits")
			clk.Advance(every)
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var ping wire.Ping
		for {
			_, raw, err := ws.Read(rctx)
			require.NoError(t, err, "ping %d", n)
			f, err := wire.Decode(raw)
			require.NoError(t, err)
			if p, ok := f.Message.(wire.Ping); ok {
				ping = p
				break
			}
		}
		at := ping.SentAt.Add(off)
		send(wire.Pong{CommandID: ping.CommandID, PingSentAt: ping.SentAt, ReceivedAt: at, SentAt: at})
		name := fmt.Sprintf("mark-%d", n)
		send(wire.State{Workers: []wire.WorkerState{running(name, "idle")}})
		require.Eventually(t, func() bool {
			var got *string
			require.NoError(t, db.InTenant(ctx, b.db.App, b.tenant, func(tx pgx.Tx) error {
				return tx.QueryRow(ctx, `SELECT state->'workers'->0->>'name' FROM agents WHERE id = $1`, id).Scan(&got)
			}))
			return got != nil && *got == name
		}, 10*time.Second, 5*time.Millisecond, "state report %d", n)
		n++
	}
	offsetInClaims := func() float64 {
		t.Helper()
		before, _ := engine.last()
		send(wire.Detected{Worker: "w", Sightings: []wire.Sighting{{Job: wire.Job{Key: fmt.Sprintf("job-%d", n)}, SeenAt: clk.Now()}}})
		var est wire.Estimate
		require.Eventually(t, func() bool {
			var got int
			got, est = engine.last()
			return got > before
		}, 10*time.Second, 5*time.Millisecond)
		return float64(est.Offset) / float64(time.Millisecond)
	}

	// The first estimate is written.
	pong(100 * time.Millisecond)
	require.NotNil(t, stored())
	require.InDelta(t, 100, *stored(), 0.001)

	// Forty more pings (ten minutes) with the same offset: not one write.
	mark()
	for range 40 {
		pong(100 * time.Millisecond)
	}
	require.InDelta(t, sentinel, *stored(), 0.001, "a steady offset is not written again")
	require.InDelta(t, 100, offsetInClaims(), 0.001)

	// A real change (50 ms) is written at once.
	pong(150 * time.Millisecond)
	require.InDelta(t, 150, *stored(), 0.001, "a 50 ms move is written at once")
	require.InDelta(t, 150, offsetInClaims(), 0.001)

	// A 2 ms move is known at once to the claim engine but written only
	// once the refresh interval (5 min) has passed since the last write.
	mark()
	pong(152 * time.Millisecond)
	require.InDelta(t, sentinel, *stored(), 0.001, "a 2 ms move is not written at once")
	require.InDelta(t, 152, offsetInClaims(), 0.001, "the claim engine has the newest estimate")
	waited := every
	for *stored() == sentinel {
		require.Less(t, waited, gateway.DefaultOffsetRefresh+2*every, "the small move was never written")
		pong(152 * time.Millisecond)
		waited += every
	}
	require.InDelta(t, 152, *stored(), 0.001)
	require.GreaterOrEqual(t, waited, gateway.DefaultOffsetRefresh, "not before the refresh interval")

	// The last estimate goes with the departure.
	mark()
	pong(154 * time.Millisecond)
	require.InDelta(t, sentinel, *stored(), 0.001)
	require.NoError(t, ws.Close(websocket.StatusNormalClosure, "bye"))
	require.Eventually(t, func() bool { return !b.read(t, id).Connected }, 10*time.Second, 10*time.Millisecond)
	require.InDelta(t, 154, *stored(), 0.001, "the unsaved estimate is written on disconnect")
}
