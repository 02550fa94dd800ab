package gateway_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/bench"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/panel"
)

// BenchmarkClaimPathWebSocket measures the whole claim path through the
// panel with the protocol-only agents of `fleetwright bench`
// (modules/bench): a watcher's DETECTED over the WebSocket → Redis dedupe →
// the cell's stream → the dispatcher → 72 actor connections. In race mode
// (default) every actor is offered the job and races for its lease, then
// acts on its grant (the fenced LEASED → ACTING); in assign mode
// (FLEET_BENCH_MODE=assign) one actor is granted the job and its gate runs
// the read-only check. FLEET_BENCH_JOBS jobs (default 1,000) are sighted on
// bench's absolute schedule at FLEET_BENCH_RATE jobs per second, or all at
// once (DETECTED messages of 50) when the rate is 0. It reports the jobs
// that reached act_sent per second, detect→leased and detect→act_sent as
// the clients saw them (one clock), the panel's own sighting → first send
// (panel_in), and queued→leased inside the panel from the claim rows.
func BenchmarkClaimPathWebSocket(b *testing.B) {
	jobs, rate := 1000, 0.0
	if v := os.Getenv("FLEET_BENCH_JOBS"); v != "" {
		fmt.Sscan(v, &jobs)
	}
	// FLEET_BENCH_RATE paces the sightings (jobs per second) to measure
	// latency below saturation; 0 sends them all at once (throughput).
	if v := os.Getenv("FLEET_BENCH_RATE"); v != "" {
		fmt.Sscan(v, &rate)
	}
	// FLEET_BENCH_MODE is the tenant's dispatch mode: assign (default, as
	// for a new tenant) or race (docs/CLAIMS.md, "Dispatch modes"); set
	// explicitly either way.
	mode := claim.DispatchAssign
	if v := os.Getenv("FLEET_BENCH_MODE"); v != "" {
		mode = v
	}
	ctx := context.Background()
	d := testenv.DB(b)
	key := make([]byte, vault.KeySize)
	p, err := panel.Start(ctx, panel.Config{Listen: "127.0.0.1:0", DataDir: b.TempDir(), DatabaseURL: d.OwnerURL,
		DatabaseAppURL: d.AppURL, RedisURL: testenv.RedisURL(b), DBMaxConns: 64, PGMaxConnections: 300,
		ShutdownTimeout: 10 * time.Second, SecretKeyFile: writeKey(b, key), SessionIdle: time.Hour, SessionMax: time.Hour,
		AuditSealInterval: time.Minute}, testenv.Logger(b).With("bench", true))
	require.NoError(b, err)
	go func() { _ = p.Serve() }()
	defer p.Stop()
	tenant, tokens, err := bench.Enrol(ctx, p, d.Owner, "bench", 72)
	require.NoError(b, err)
	require.NoError(b, p.Claims.SetDispatchMode(ctx, ops, tenant, mode))
	cp, err := bench.Connect(ctx, "ws://"+p.Addr()+"/agent/ws", tokens)
	require.NoError(b, err)
	defer cp.Close()
	p.Gateway.OnPanelIn(cp.PanelIn)
	defer p.Gateway.OnPanelIn(nil)
	// Real time, part of the benchmark's method: the measurement starts
	// once the swarm has settled.
	if mode == claim.DispatchAssign {
		// Every connection registered, measured and published as warm.
		time.Sleep(2500 * time.Millisecond)
	} else {
		time.Sleep(time.Second) // every connection registered
	}
	b.ResetTimer()
	if rate > 0 {
		require.NoError(b, cp.Paced(ctx, "J", jobs, rate))
	} else {
		require.NoError(b, cp.Burst(ctx, "J", jobs))
	}
	if n := cp.Wait(ctx, "J", 5*time.Minute); n > 0 {
		b.Fatalf("%d of %d jobs never reached act_sent", n, jobs)
	}
	b.StopTimer()
	ph := bench.Summarise(cp.Jobs("J"), time.Now())
	var inPanel []float64
	require.NoError(b, db.InTenant(ctx, d.App, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT extract(epoch FROM leased_at - queued_at)::float8 * 1000 FROM claims`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var ms float64
			if err := rows.Scan(&ms); err != nil {
				return err
			}
			inPanel = append(inPanel, ms)
		}
		return rows.Err()
	}))
	require.Len(b, inPanel, jobs, "exactly one lease per job")
	slices.Sort(inPanel)
	at := func(p float64) float64 { return inPanel[int(p*float64(len(inPanel)-1))] }
	b.ReportMetric(ph.LeasesPerS, "leases/s")
	b.ReportMetric(ph.DetectLeased.P50, "detect→leased-p50-ms")
	b.ReportMetric(ph.DetectLeased.P99, "detect→leased-p99-ms")
	b.ReportMetric(ph.DetectActSent.P50, "detect→act_sent-p50-ms")
	b.ReportMetric(ph.DetectActSent.P99, "detect→act_sent-p99-ms")
	b.ReportMetric(ph.PanelIn.P50, "panel_in-p50-ms")
	b.ReportMetric(ph.PanelIn.P99, "panel_in-p99-ms")
	b.ReportMetric(at(0.5), "queued→leased-p50-ms")
	b.ReportMetric(at(0.99), "queued→leased-p99-ms")
}

func writeKey(tb testing.TB, key []byte) string {
	f := tb.TempDir() + "/secret.key"
	require.NoError(tb, os.WriteFile(f, []byte(hex.EncodeToString(key)), 0o600))
	return f
}
