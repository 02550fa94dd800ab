package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/limit"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// readUntil reads the panel's frames (answering pings) until one of type T.
func readUntil[T wire.Message](t *testing.T, ws *websocket.Conn, v int) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		_, raw, err := ws.Read(ctx)
		require.NoError(t, err)
		f, err := wire.Decode(raw)
		require.NoError(t, err)
		if m, ok := f.Message.(T); ok {
			return m
		}
		if p, ok := f.Message.(wire.Ping); ok {
			now := time.Now()
			write(t, ws, v, wire.Pong{CommandID: p.CommandID, PingSentAt: p.SentAt, ReceivedAt: now, SentAt: now})
		}
	}
}

func write(t *testing.T, ws *websocket.Conn, v int, m wire.Message) {
	t.Helper()
	data, err := wire.Encode(v, wire.Frame{Time: time.Now(), Message: m})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, ws.Write(ctx, websocket.MessageText, data))
}

// The account_requests_hour limit reaches the agents: the lowest of the
// tenant's and the global one is in a v4 welcome (a v3 agent sees no such
// field), a change from the console or the CLI (limit.Set) is pushed to the
// connected agent in a configure, and the agent's request_limit_reached
// event is recorded and raises the tenant's limit.reached alarm, which its
// request_limit_resumed event resolves.
func TestRequestLimitReachesAgentsAndItsHoldRaisesAnAlarm(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	_, url := b.replica(t, "a")
	id, token := b.agent(t, "acct-rl")
	require.NoError(t, limit.Set(ctx, b.db.App, ops, b.tenant, limit.AccountRequestsPerHour, 500, true, fleet.LimitNotifier{}))
	require.NoError(t, limit.Set(ctx, b.db.App, ops, limit.Global, limit.AccountRequestsPerHour, 200, true, fleet.LimitNotifier{}))

	// A v3 agent: the field does not exist for it.
	data, err := wire.Encode(wire.V3, wire.Frame{Time: time.Now(), Message: wire.Hello{Version: wire.V3, MinVersion: 1,
		Build: "old", Host: "h", Clock: time.Now(), Token: wire.NewSecret(token)}})
	require.NoError(t, err)
	old := dial(t, url)
	require.NoError(t, old.Write(ctx, websocket.MessageText, data))
	_, raw, err := old.Read(ctx)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "request_limit")
	old.CloseNow()

	ws := dial(t, url)
	data, err = wire.Encode(wire.Current, wire.Frame{Time: time.Now(), Message: wire.Hello{Version: wire.Current, MinVersion: 1,
		Build: "test", Host: "h", Clock: time.Now(), Token: wire.NewSecret(token)}})
	require.NoError(t, err)
	w, ok := exchange(t, ws, data).Message.(wire.Welcome)
	require.True(t, ok)
	require.Equal(t, &wire.RequestLimit{PerHour: 200, From: "global"}, w.RequestLimit, "the lowest applies")
	require.Eventually(t, func() bool { return b.read(t, id).Connected }, 15*time.Second, 20*time.Millisecond)

	// The global limit is removed: the tenant's now applies, pushed at once.
	require.NoError(t, limit.Set(ctx, b.db.App, ops, limit.Global, limit.AccountRequestsPerHour, 0, false, fleet.LimitNotifier{}))
	c := readUntil[wire.Configure](t, ws, wire.Current)
	require.Equal(t, &wire.RequestLimit{PerHour: 500, From: "tenant"}, c.RequestLimit)
	write(t, ws, wire.Current, wire.CommandResult{CommandID: c.CommandID, OK: true})
	// And removed altogether: the configure carries none.
	require.NoError(t, limit.Set(ctx, b.db.App, ops, b.tenant, limit.AccountRequestsPerHour, 0, false, fleet.LimitNotifier{}))
	c = readUntil[wire.Configure](t, ws, wire.Current)
	require.Nil(t, c.RequestLimit)
	write(t, ws, wire.Current, wire.CommandResult{CommandID: c.CommandID, OK: true})

	key := string(limit.AccountRequestsPerHour) + ":" + id
	write(t, ws, wire.Current, wire.Event{Level: wire.LevelWarn, Kind: wire.EventRequestLimitReached, At: time.Now(),
		Message: "limit: account_requests_hour 500 (tenant limit) reached: 500 requests to the platform in the last hour",
		Fields: map[string]string{"limit": "account_requests_hour", "value": "500", "from": "tenant", "counted": "500",
			"frees_at": "2026-12-01T07:00:00Z"}})
	require.Eventually(t, func() bool {
		open, err := alarm.IsOpen(ctx, b.db.App, b.tenant, limit.AlarmKind, key)
		require.NoError(t, err)
		return open
	}, 15*time.Second, 20*time.Millisecond, "the hold raised an alarm")
	open, err := alarm.ListTenant(ctx, b.db.App, b.tenant, true, 10)
	require.NoError(t, err)
	require.Len(t, open, 1)
	require.Equal(t, "account of agent agent-acct-rl (until 2026-12-01T07:00:00Z) stopped: limit: account_requests_hour 500 (tenant limit)", open[0].Summary)
	require.Equal(t, "/t/acme/fleet", open[0].Link)
	f, err := b.store.List(ctx, b.tenant)
	require.NoError(t, err)
	found := false
	for _, a := range f.Agents {
		for _, e := range a.Events {
			if a.ID == id && e.Kind == wire.EventRequestLimitReached && strings.Contains(e.Message, "account_requests_hour 500") {
				found = true
			}
		}
	}
	require.True(t, found, "the event is recorded with the agent's events")

	write(t, ws, wire.Current, wire.Event{Level: wire.LevelInfo, Kind: wire.EventRequestLimitResumed, At: time.Now(),
		Message: "the request window freed: polling and work resume"})
	require.Eventually(t, func() bool {
		open, err := alarm.IsOpen(ctx, b.db.App, b.tenant, limit.AlarmKind, key)
		require.NoError(t, err)
		return !open
	}, 15*time.Second, 20*time.Millisecond, "the resumption resolved it")
}
