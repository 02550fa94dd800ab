package gateway_test

import (
	"context"
	"errors"
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

// TestIdleConnectionsCloseWithAHandshake: between frames an agent's reader
// waits on the socket itself, so a close asked for by another goroutine (a
// newer connection of the same agent, the panel shutting down) goes through
// that reader: the agent still gets a proper close frame with the panel's
// status, and a frame that arrives after a long quiet spell is still read.
func TestIdleConnectionsCloseWithAHandshake(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	var inst string
	require.NoError(t, b.db.App.QueryRow(ctx, "SELECT id::text FROM installation").Scan(&inst))
	g := gateway.New(b.store, nil, gateway.Config{ReplicaID: newUUID(t, b), InstallationID: inst,
		PollEvery: time.Hour, PingEvery: time.Hour}, testenv.Logger(t))
	r := chi.NewRouter()
	r.Get("/agent/ws", g.ServeHTTP)
	srv := httptest.NewServer(r)
	t.Cleanup(func() { g.CloseAll(); srv.Close() })
	id, token := b.agent(t, "idle")

	connect := func() *websocket.Conn {
		ws := dial(t, srv.URL)
		data, err := wire.Encode(wire.Current, wire.Frame{Time: time.Now(), Message: wire.Hello{Version: wire.Current,
			MinVersion: wire.MinSupported, Build: "t", Host: "h", Clock: time.Now(), Token: wire.NewSecret(token)}})
		require.NoError(t, err)
		_, ok := exchange(t, ws, data).Message.(wire.Welcome)
		require.True(t, ok)
		return ws
	}
	// closed reads until the panel closes ws and returns how.
	closed := func(ws *websocket.Conn) error {
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		for {
			if _, _, err := ws.Read(rctx); err != nil {
				require.False(t, errors.Is(err, context.DeadlineExceeded), "the panel never closed the connection")
				return err
			}
		}
	}

	first := connect()
	// A frame after a quiet spell is read: the state report lands. Real
	// time: the quiet spell is the point (the reader waits on the socket).
	time.Sleep(300 * time.Millisecond)
	data, err := wire.Encode(wire.Current, wire.Frame{Time: time.Now(), Message: wire.State{Workers: []wire.WorkerState{running("quiet", "idle")}}})
	require.NoError(t, err)
	require.NoError(t, first.Write(ctx, websocket.MessageText, data))
	require.Eventually(t, func() bool {
		st := b.read(t, id).State
		return len(st.Workers) == 1 && st.Workers[0].Name == "quiet"
	}, 10*time.Second, 10*time.Millisecond)

	// A newer connection of the same agent replaces the idle one.
	firstDone := make(chan error, 1)
	go func() { firstDone <- closed(first) }()
	second := connect()
	err = <-firstDone
	require.Equal(t, websocket.StatusPolicyViolation, websocket.CloseStatus(err), "%v", err)
	var ce websocket.CloseError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "replaced by a newer connection", ce.Reason)
	require.True(t, b.read(t, id).Connected, "the newer connection keeps the agent online")

	// The panel shutting down says so to every idle agent.
	secondDone := make(chan error, 1)
	go func() { secondDone <- closed(second) }()
	// Real time: the connection goes quiet (its reader in the idle wait)
	// before the panel shuts down.
	time.Sleep(100 * time.Millisecond)
	g.CloseAll()
	err = <-secondDone
	require.Equal(t, websocket.StatusGoingAway, websocket.CloseStatus(err), "%v", err)
	require.Eventually(t, func() bool { return !b.read(t, id).Connected && g.ConnectedCount() == 0 }, 10*time.Second, 10*time.Millisecond)
}
