package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/modules/wire"
)

// Pct is a pair of percentiles in milliseconds.
type Pct struct {
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
}

// ms is a duration in milliseconds, rounded to microseconds.
func ms(d time.Duration) float64 { return math.Round(float64(d.Microseconds())) / 1000 }

// pct returns the nearest-rank percentile p (0..1) of ds; ds is sorted.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(p*float64(len(ds)))) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

// Millis is the percentile p (0..1) of ds in milliseconds (ds is sorted).
func Millis(ds []time.Duration, p float64) float64 { return ms(pct(ds, p)) }

func pcts(ds []time.Duration) Pct {
	return Pct{P50: ms(pct(ds, 0.5)), P99: ms(pct(ds, 0.99))}
}

// bareInsert is the physical floor of a durable claim: clients connections
// each run `INSERT … ON CONFLICT (tenant, key) DO NOTHING` of a fresh key,
// one row per commit (autocommit: every statement is its own durable
// transaction), for d. It returns the commits per second and each
// statement's latency.
func bareInsert(ctx context.Context, ownerURL string, clients int, d time.Duration) (float64, []time.Duration, error) {
	cfg, err := pgxpool.ParseConfig(ownerURL)
	if err != nil {
		return 0, nil, errors.New("bench: malformed database URL")
	}
	cfg.MaxConns, cfg.MinConns = int32(clients), int32(clients)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, nil, fmt.Errorf("bench: bare insert: %w", err)
	}
	defer pool.Close()
	table := pgx.Identifier{"bench_insert_" + randomHex(6)}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (tenant int NOT NULL, key text NOT NULL, PRIMARY KEY (tenant, key))`); err != nil {
		return 0, nil, fmt.Errorf("bench: bare insert: create its table: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = pool.Exec(dctx, `DROP TABLE IF EXISTS `+table)
	}()
	var commit string
	if err := pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&commit); err != nil {
		return 0, nil, fmt.Errorf("bench: bare insert: %w", err)
	}
	if commit == "off" {
		return 0, nil, errors.New("bench: bare insert: synchronous_commit is off on this database: its commits are not durable, so it cannot give the floor of a durable claim")
	}
	q := `INSERT INTO ` + table + ` (tenant, key) VALUES (1, $1) ON CONFLICT (tenant, key) DO NOTHING`
	run := func(until time.Time, record bool) (int, []time.Duration, error) {
		var (
			mu    sync.Mutex
			all   []time.Duration
			total int
			first error
			wg    sync.WaitGroup
		)
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				conn, err := pool.Acquire(ctx)
				if err != nil {
					mu.Lock()
					first = cmpErr(first, err)
					mu.Unlock()
					return
				}
				defer conn.Release()
				var lat []time.Duration
				for i := 0; time.Now().Before(until); i++ {
					t0 := time.Now()
					if _, err := conn.Exec(ctx, q, strconv.Itoa(c)+"-"+strconv.Itoa(i)+"-"+strconv.FormatBool(record)); err != nil {
						mu.Lock()
						first = cmpErr(first, err)
						mu.Unlock()
						return
					}
					lat = append(lat, time.Since(t0))
				}
				mu.Lock()
				all, total = append(all, lat...), total+len(lat)
				mu.Unlock()
			}()
		}
		wg.Wait()
		return total, all, first
	}
	// A short warm-up prepares the statement on every connection.
	if _, _, err := run(time.Now().Add(200*time.Millisecond), false); err != nil {
		return 0, nil, fmt.Errorf("bench: bare insert: %w", err)
	}
	start := time.Now()
	n, lat, err := run(start.Add(d), true)
	if err != nil {
		return 0, nil, fmt.Errorf("bench: bare insert: %w", err)
	}
	return float64(n) / time.Since(start).Seconds(), lat, nil
}

func cmpErr(first, err error) error {
	if first == nil {
		return err
	}
	return first
}

// wsRoundTrip measures n loopback WebSocket round trips of a protocol-sized
// frame (a ping) between two ends of this process over 127.0.0.1: the
// network share of the floor.
func wsRoundTrip(ctx context.Context, n int) ([]time.Duration, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: round trip: %w", err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
		if err != nil {
			return
		}
		defer ws.CloseNow()
		for {
			typ, data, err := ws.Read(r.Context())
			if err != nil {
				return
			}
			if err := ws.Write(r.Context(), typ, data); err != nil {
				return
			}
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	ws, _, err := websocket.Dial(ctx, "ws://"+ln.Addr().String()+"/", &websocket.DialOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return nil, fmt.Errorf("bench: round trip: %w", err)
	}
	defer ws.CloseNow()
	frame, err := wire.Encode(wire.Current, wire.Frame{Time: time.Now(), Message: wire.Ping{CommandID: wire.NewID(), SentAt: time.Now()}})
	if err != nil {
		return nil, fmt.Errorf("bench: round trip: %w", err)
	}
	out := make([]time.Duration, 0, n)
	for i := range n + n/10 {
		t0 := time.Now()
		if err := ws.Write(ctx, websocket.MessageText, frame); err != nil {
			return nil, fmt.Errorf("bench: round trip: %w", err)
		}
		if _, _, err := ws.Read(ctx); err != nil {
			return nil, fmt.Errorf("bench: round trip: %w", err)
		}
		if i >= n/10 { // the first tenth warms up
			out = append(out, time.Since(t0))
		}
	}
	_ = ws.Close(websocket.StatusNormalClosure, "")
	return out, nil
}
