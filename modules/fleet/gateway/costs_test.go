package gateway_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/fleet/gateway"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// counter reads one labelled value of a counter from reg (0 when absent).
func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func TestBrowserSecondsGrowth(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Hour)
	st := func(at time.Time, s map[string]float64) wire.State {
		return wire.State{StartedAt: &at, BrowserSeconds: s}
	}
	require.Equal(t, map[string]float64{"watcher": 10}, fleet.BrowserSecondsGrowth(wire.State{}, st(t0, map[string]float64{"watcher": 10})),
		"the first report of a process: all of it")
	require.Equal(t, map[string]float64{"watcher": 15, "crawler": 2}, fleet.BrowserSecondsGrowth(st(t0, map[string]float64{"watcher": 10}),
		st(t0, map[string]float64{"watcher": 25, "crawler": 2})), "the same process: what grew")
	require.Equal(t, map[string]float64{"watcher": 4}, fleet.BrowserSecondsGrowth(st(t0, map[string]float64{"watcher": 25}),
		st(t1, map[string]float64{"watcher": 4})), "a restarted process starts from zero")
	require.Empty(t, fleet.BrowserSecondsGrowth(st(t0, map[string]float64{"watcher": 25}), st(t0, map[string]float64{"watcher": 25})))
}

// fleet_browser_seconds_total moves with what agents report, per tenant and
// worker kind, and counts each second once: reports of one agent process
// through two replicas (a reconnect elsewhere) add only what grew, and a
// restarted process adds its new total.
func TestBrowserSecondsReachTheCounterOnce(t *testing.T) {
	b := setup(t)
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	urlA := b.gateway(t, gateway.Config{Registerer: regA})
	urlB := b.gateway(t, gateway.Config{Registerer: regB})
	id, token := b.agent(t, "acct-bs")
	started := time.Now().Add(-time.Minute).UTC()
	total := func() float64 {
		l := map[string]string{"tenant": "acme", "kind": "watcher"}
		return counter(t, regA, "fleet_browser_seconds_total", l) + counter(t, regB, "fleet_browser_seconds_total", l)
	}
	report := func(url string, at time.Time, s map[string]float64) {
		ws := dial(t, url)
		data, err := wire.Encode(wire.Current, wire.Frame{Time: time.Now(), Message: wire.Hello{Version: wire.Current, MinVersion: 1,
			Build: "test", Host: "h", Clock: time.Now(), Token: wire.NewSecret(token)}})
		require.NoError(t, err)
		_, ok := exchange(t, ws, data).Message.(wire.Welcome)
		require.True(t, ok)
		write(t, ws, wire.Current, wire.State{Workers: []wire.WorkerState{{Name: "w1", Kind: "watcher", State: wire.WorkerRunning}},
			StartedAt: &at, BrowserSeconds: s})
		require.Eventually(t, func() bool {
			return b.read(t, id).State.BrowserSeconds["watcher"] == s["watcher"]
		}, 10*time.Second, 20*time.Millisecond)
		ws.CloseNow()
	}
	near := func(want float64, msg string) {
		t.Helper()
		require.Eventually(t, func() bool { d := total() - want; return d > -1e-9 && d < 1e-9 }, 10*time.Second, 20*time.Millisecond,
			"%s: want %v, have %v", msg, want, total())
	}
	report(urlA, started, map[string]float64{"watcher": 10})
	near(10, "the first report")
	report(urlA, started, map[string]float64{"watcher": 25.5})
	near(25.5, "what grew")
	report(urlB, started, map[string]float64{"watcher": 30})
	near(30, "the other replica adds only what grew")
	require.InDelta(t, 4.5, counter(t, regB, "fleet_browser_seconds_total", map[string]string{"tenant": "acme", "kind": "watcher"}), 1e-9)
	report(urlB, started.Add(time.Minute), map[string]float64{"watcher": 4})
	near(34, "a restarted agent's seconds count from its start")
}
