package gateway_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/fleet/gateway"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// An agent that stops answering (a partition without FIN or RST, a frozen
// host) is dropped after two ping intervals; one that answers its pings is
// kept however long it has nothing else to say.
func TestSilentAgentIsDroppedAfterTwoPingIntervals(t *testing.T) {
	b := setup(t)
	var inst string
	require.NoError(t, b.db.App.QueryRow(context.Background(), "SELECT id::text FROM installation").Scan(&inst))
	const every = 150 * time.Millisecond
	g := gateway.New(b.store, nil, gateway.Config{ReplicaID: newUUID(t, b), InstallationID: inst,
		PollEvery: time.Hour, PingEvery: every}, testenv.Logger(t))
	r := chi.NewRouter()
	r.Get("/agent/ws", g.ServeHTTP)
	srv := httptest.NewServer(r)
	t.Cleanup(func() { g.CloseAll(); srv.Close() })

	liveID, liveToken := b.agent(t, "live")
	runAgent(t, srv.URL, liveToken)
	_, silentToken := b.agent(t, "silent")
	ws := dial(t, srv.URL)
	h := wire.Hello{Version: wire.Current, MinVersion: wire.MinSupported, Build: "t", Host: "h", Clock: time.Now(), Token: wire.NewSecret(silentToken)}
	data, err := wire.Encode(wire.Current, wire.Frame{Time: time.Now(), Message: h})
	require.NoError(t, err)
	_, ok := exchange(t, ws, data).Message.(wire.Welcome)
	require.True(t, ok)

	// Read the panel's pings and say nothing back.
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pings := 0
	var readErr error
	for {
		_, msg, err := ws.Read(ctx)
		if err != nil {
			readErr = err
			require.NotErrorIs(t, err, context.DeadlineExceeded, "the panel never dropped the silent agent")
			break
		}
		if f, err := wire.Decode(msg); err == nil {
			if _, ok := f.Message.(wire.Ping); ok {
				pings++
			}
		}
	}
	require.GreaterOrEqual(t, time.Since(start), 2*every-every/3, "not before two intervals")
	require.GreaterOrEqual(t, pings, 2, "it was pinged meanwhile")
	require.Equal(t, websocket.StatusCode(-1), websocket.CloseStatus(readErr), "dropped without a close handshake (the path is dead)")

	// The agent that answers its pings stays connected.
	require.Eventually(t, func() bool { return b.read(t, liveID).Connected }, 10*time.Second, 20*time.Millisecond)
	// Real time, not an event: what is shown is that nothing happens — an
	// agent answering its pings stays connected across five ping intervals.
	time.Sleep(5 * every)
	require.True(t, b.read(t, liveID).Connected, "an agent answering its pings is kept")
}
