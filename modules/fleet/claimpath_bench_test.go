package fleet_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/panel"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// benchClient is a protocol-only agent for the claim-path benchmark.
type benchClient struct {
	ws *websocket.Conn
	mu sync.Mutex
	// tokens (race) and grants (assign) per job this actor holds.
	tokens map[string]int64
	grants map[string]wire.LeaseGrant
}

func (c *benchClient) send(ctx context.Context, m wire.Message) error {
	data, err := wire.Encode(wire.Current, wire.Frame{Time: time.Now(), Message: m})
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ws.Write(ctx, websocket.MessageText, data)
}

func dialBench(ctx context.Context, tb testing.TB, url, token string) *benchClient {
	ws, _, err := websocket.Dial(ctx, url, nil)
	require.NoError(tb, err)
	ws.SetReadLimit(1 << 20)
	c := &benchClient{ws: ws, tokens: map[string]int64{}, grants: map[string]wire.LeaseGrant{}}
	require.NoError(tb, c.send(ctx, wire.Hello{Version: wire.Current, MinVersion: wire.Current, Build: "bench", Host: "bench",
		Clock: time.Now(), Token: wire.NewSecret(token)}))
	_, data, err := ws.Read(ctx)
	require.NoError(tb, err)
	f, err := wire.Decode(data)
	require.NoError(tb, err)
	_, ok := f.Message.(wire.Welcome)
	require.True(tb, ok, "%#v", f.Message)
	return c
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[int(p*float64(len(ds)-1))]
}

// BenchmarkClaimPathWebSocket measures the whole claim path through the
// panel: a watcher's DETECTED over the WebSocket → Redis dedupe → the cell's
// stream → the dispatcher → offers to 72 actor connections → 72 lease
// requests racing over their WebSockets → Postgres grants one → the winner's
// lease_result. FLEET_BENCH_JOBS jobs (default 1,000) are detected in batches
// of ten (FLEET_BENCH_RATE paces them). It reports leases granted per second and detect→leased as the
// clients saw it (send of DETECTED to receipt of the grant, one clock), and
// queued→leased inside the panel from the claim rows. Each actor then acts
// as the real one does: in race mode an act request (the fenced LEASED →
// ACTING), in assign mode (FLEET_BENCH_MODE=assign) the gate's read-only
// check of its grant; detect→act_sent is the sighting to that answer, the
// moment the booking request would leave, so the modes compare like for
// like.
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
	v, _ := vault.New(key)
	st := fleet.NewStore(d.App, v)
	var tenant string
	require.NoError(b, d.Owner.QueryRow(ctx, `INSERT INTO tenants (slug, name) VALUES ('bench', 'Bench') RETURNING id::text`).Scan(&tenant))
	_, err = p.Claims.PutFilter(ctx, ops, tenant, claim.Filter{Name: "all", Enabled: true})
	require.NoError(b, err)
	require.NoError(b, p.Claims.SetDispatchMode(ctx, ops, tenant, mode))
	acct, err := st.CreateAccount(ctx, tenant, fleet.AccountInput{Key: "bench", BoardURL: "http://127.0.0.1:1", Client: "acme", Username: "u",
		Password: "bench-password", TOTPSecret: "JBSWY3DPEHPK3PXP"}, ops)
	require.NoError(b, err)
	url := "ws://" + p.Addr() + "/agent/ws"
	token := func(i int) string {
		_, tok, err := st.CreateAgent(ctx, tenant, acct, fmt.Sprintf("b%d", i), ops)
		require.NoError(b, err)
		return tok
	}
	watcher := dialBench(ctx, b, url, token(0))
	sent := make([]time.Time, jobs)
	var mu sync.Mutex
	var lat, actLat []time.Duration
	var granted, acting atomic.Int64
	done := make(chan struct{})
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i := 1; i <= 72; i++ {
		c := dialBench(ctx, b, url, token(i))
		// One HTTP actor per connection: warm for assign mode.
		require.NoError(b, c.send(ctx, wire.State{Workers: []wire.WorkerState{{Name: "actor", Kind: "http_actor", State: wire.WorkerRunning}}}))
		go func() {
			for {
				_, data, err := c.ws.Read(rctx)
				if err != nil {
					return
				}
				f, err := wire.Decode(data)
				if err != nil {
					continue
				}
				// since records the time from a job's sighting to now.
				since := func(key string, into *[]time.Duration) {
					var n int
					fmt.Sscanf(key, "J-%d", &n)
					mu.Lock()
					*into = append(*into, time.Since(sent[n]))
					mu.Unlock()
				}
				// actSent: the request would leave now; the outcome frees
				// the actor.
				actSent := func(key string, token int64, op string) {
					since(key, &actLat)
					now := time.Now()
					_ = c.send(rctx, wire.Outcome{RequestID: wire.NewID(), Worker: "actor", Key: key, Token: token,
						OperationID: op, Result: wire.ResultConfirmed, SentAt: &now, ConfirmedAt: &now})
					if acting.Add(1) == int64(jobs) {
						close(done)
					}
				}
				switch m := f.Message.(type) {
				case wire.Offer:
					_ = c.send(rctx, wire.LeaseRequest{RequestID: wire.NewID(), Worker: "actor", Key: m.Job.Key, OfferID: m.OfferID})
				case wire.LeaseResult:
					if m.Granted {
						since(m.Key, &lat)
						granted.Add(1)
						c.mu.Lock()
						c.tokens[m.Key] = m.Token
						c.mu.Unlock()
						_ = c.send(rctx, wire.ActRequest{RequestID: m.Key, Worker: "actor", Key: m.Key, Token: m.Token})
					}
				case wire.ActResult:
					if m.OK {
						c.mu.Lock()
						tok := c.tokens[m.Key]
						c.mu.Unlock()
						actSent(m.Key, tok, m.OperationID)
					}
				case wire.LeaseGrant:
					// Assign mode: the claim is ACTING already; the gate's
					// read-only check is the last step before the request.
					since(m.Job.Key, &lat)
					granted.Add(1)
					c.mu.Lock()
					c.grants[m.Job.Key] = m
					c.mu.Unlock()
					_ = c.send(rctx, wire.GateCheck{RequestID: m.Job.Key, Worker: "actor", Key: m.Job.Key, Token: m.Token})
				case wire.GateResult:
					c.mu.Lock()
					g := c.grants[m.Key]
					c.mu.Unlock()
					if m.OK {
						actSent(m.Key, g.Token, g.OperationID)
					} else {
						_ = c.send(rctx, wire.Outcome{RequestID: wire.NewID(), Worker: "actor", Key: m.Key, Token: g.Token,
							OperationID: g.OperationID, Result: wire.ResultNotSent, Detail: m.Reason})
					}
				case wire.Ping:
					now := time.Now()
					_ = c.send(rctx, wire.Pong{CommandID: m.CommandID, PingSentAt: m.SentAt, ReceivedAt: now, SentAt: now})
				}
			}
		}()
	}
	if mode == claim.DispatchAssign {
		// Every connection registered, measured and published as warm.
		time.Sleep(2500 * time.Millisecond)
	} else {
		time.Sleep(time.Second) // every connection registered
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < jobs; i += 10 {
		var sights []wire.Sighting
		now := time.Now()
		mu.Lock()
		for j := i; j < i+10 && j < jobs; j++ {
			sent[j] = now
			sights = append(sights, wire.Sighting{Job: wire.Job{Key: fmt.Sprintf("J-%d", j), PublishedAt: now, ExpiresAt: now.Add(time.Hour)}, SeenAt: now})
		}
		mu.Unlock()
		require.NoError(b, watcher.send(ctx, wire.Detected{Worker: "watcher", Sightings: sights}))
		if rate > 0 {
			time.Sleep(time.Duration(float64(len(sights)) / rate * float64(time.Second)))
		}
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("only %d of %d jobs leased, %d acted on", granted.Load(), jobs, acting.Load())
	}
	elapsed := time.Since(start)
	b.StopTimer()
	var inPanel []time.Duration
	require.NoError(b, db.InTenant(ctx, d.App, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT extract(epoch FROM leased_at - queued_at)::float8 FROM claims`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var s float64
			if err := rows.Scan(&s); err != nil {
				return err
			}
			inPanel = append(inPanel, time.Duration(s*float64(time.Second)))
		}
		return rows.Err()
	}))
	require.Len(b, inPanel, jobs, "exactly one lease per job")
	b.ReportMetric(float64(jobs)/elapsed.Seconds(), "leases/s")
	b.ReportMetric(float64(pct(lat, 0.5).Microseconds())/1000, "detect→leased-p50-ms")
	b.ReportMetric(float64(pct(lat, 0.99).Microseconds())/1000, "detect→leased-p99-ms")
	b.ReportMetric(float64(pct(actLat, 0.5).Microseconds())/1000, "detect→act_sent-p50-ms")
	b.ReportMetric(float64(pct(actLat, 0.99).Microseconds())/1000, "detect→act_sent-p99-ms")
	b.ReportMetric(float64(pct(inPanel, 0.5).Microseconds())/1000, "queued→leased-p50-ms")
	b.ReportMetric(float64(pct(inPanel, 0.99).Microseconds())/1000, "queued→leased-p99-ms")
}

func writeKey(tb testing.TB, key []byte) string {
	f := tb.TempDir() + "/secret.key"
	require.NoError(tb, os.WriteFile(f, []byte(hex.EncodeToString(key)), 0o600))
	return f
}
