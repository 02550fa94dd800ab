package gateway_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// rssKiB reads a process's resident set size.
func rssKiB(tb testing.TB, pid int) int { return statusKiB(tb, pid, "VmRSS") }

// statusKiB reads one kB figure of /proc/PID/status (VmRSS, RssAnon,
// RssFile).
func statusKiB(tb testing.TB, pid int, field string) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(tb, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			require.NoError(tb, err)
			return n
		}
	}
	tb.Fatalf("no %s", field)
	return 0
}

// goMetrics reads the Go runtime's figures from a panel's /metrics.
func goMetrics(tb testing.TB, metrics string) map[string]float64 {
	res, err := http.Get(metrics)
	require.NoError(tb, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(tb, err)
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		for _, name := range []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes"} {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				require.NoError(tb, err)
				out[name] = f
			}
		}
	}
	return out
}

// protocolClient is a protocol-only agent: hello, then it answers pings and
// acknowledges commands, as an idle agent does.
func protocolClient(ctx context.Context, url, token string, welcomed *atomic.Int64) error {
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		return err
	}
	defer ws.CloseNow()
	h := wire.Hello{Version: wire.Current, MinVersion: wire.MinSupported, Build: "swarm", Host: "swarm", Clock: time.Now(), Token: wire.NewSecret(token)}
	data, _ := wire.Encode(wire.Current, wire.Frame{Time: time.Now(), Message: h})
	if err := ws.Write(ctx, websocket.MessageText, data); err != nil {
		return err
	}
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			return err
		}
		f, err := wire.Decode(data)
		if err != nil {
			return err
		}
		var reply wire.Message
		switch m := f.Message.(type) {
		case wire.Welcome:
			welcomed.Add(1)
		case wire.Reject:
			return fmt.Errorf("rejected: %s", m.Message)
		case wire.Ping:
			now := time.Now()
			reply = wire.Pong{CommandID: m.CommandID, PingSentAt: m.SentAt, ReceivedAt: now, SentAt: now}
		}
		if reply != nil {
			out, _ := wire.Encode(wire.Current, wire.Frame{Time: time.Now(), Message: reply})
			if err := ws.Write(ctx, websocket.MessageText, out); err != nil {
				return err
			}
		}
	}
}

// BenchmarkIdleAgentConnections measures how many idle agent connections one
// panel holds per GiB: a swarm of FLEET_SWARM (default 2000) protocol-only
// clients on loopback connects to a real panel process, and the panel's RSS
// is read before and after, with the Go heap, stacks and goroutines per
// connection from its /metrics. It also reports the RSS of three idle agent
// processes (median, 5 s and 45 s after their welcome, and their
// proportional set size), and the panel again two minutes after the last
// welcome, once the collector has run a few times. It
// runs once whatever b.N is (the figures are memory, not time).
func BenchmarkIdleAgentConnections(b *testing.B) {
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("FLEET_SWARM")); err == nil && v > 0 {
		n = v
	}
	ctx := context.Background()
	d := testenv.DB(b)
	key := make([]byte, vault.KeySize)
	for i := range key {
		key[i] = byte(i * 7)
	}
	v, _ := vault.New(key)
	store := fleet.NewStore(d.App, v)
	var tenant string
	require.NoError(b, d.Owner.QueryRow(ctx, `INSERT INTO tenants (slug, name) VALUES ('swarm', 'Swarm') RETURNING id::text`).Scan(&tenant))
	acct, err := store.CreateAccount(ctx, tenant, fleet.AccountInput{Key: "swarm", BoardURL: "http://127.0.0.1:1", Client: "acme",
		Username: "u", Password: "swarm-password", TOTPSecret: "JBSWY3DPEHPK3PXP"}, ops)
	require.NoError(b, err)
	tokens := make([]string, n+3)
	var cwg sync.WaitGroup
	var (
		cmu  sync.Mutex
		cerr error
	)
	for w := range 8 {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			for i := w; i < len(tokens); i += 8 {
				var err error
				if _, tokens[i], err = store.CreateAgent(ctx, tenant, acct, fmt.Sprintf("a%d", i), ops); err != nil {
					cmu.Lock()
					cerr = err
					cmu.Unlock()
					return
				}
			}
		}()
	}
	cwg.Wait()
	require.NoError(b, cerr)
	dir, _ := os.MkdirTemp(testenv.Dir(b), "swarm-")
	panel := testenv.Start(b, testenv.Binary(b), []string{"--role=panel", "--listen=127.0.0.1:0", "--data-dir=" + dir},
		"FLEET_DATABASE_URL="+d.OwnerURL, "FLEET_DATABASE_APP_URL="+d.AppURL, "FLEET_REDIS_URL="+testenv.RedisURL(b),
		"FLEET_SECRET_KEY="+hex.EncodeToString(key), "FLEET_DB_MAX_CONNS=32")
	base := panel.WaitFor(`panel ready" console=(http://127\.0\.0\.1:\d+)/`, time.Minute)
	metrics := panel.MetricsURL(time.Minute)
	wsURL := strings.Replace(base, "http", "ws", 1) + "/agent/ws"
	// The sleeps of this benchmark are its method, in real time: memory is
	// read at set times after start-up and after the reconnect storm
	// (docs/BENCHMARKS.md, "Agent connections and idle agent memory").
	time.Sleep(2 * time.Second)
	before := rssKiB(b, panel.Cmd.Process.Pid)
	mBefore := goMetrics(b, metrics)

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var welcomed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := protocolClient(cctx, wsURL, tokens[i], &welcomed); err != nil && cctx.Err() == nil {
				errs <- err
			}
		}()
		if i%100 == 99 {
			time.Sleep(50 * time.Millisecond) // a reconnect storm, not a single burst
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for welcomed.Load() < int64(n) && time.Now().Before(deadline) {
		select {
		case err := <-errs:
			b.Fatalf("client failed: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	require.EqualValues(b, n, welcomed.Load())
	lastWelcome := time.Now()
	// The reconnect storm's transient (handshakes, the first pings' offset
	// writes) settles over two ping intervals; the figure is the idle
	// swarm's, read then (and, for comparison, 5 s after the last welcome).
	time.Sleep(5 * time.Second)
	early := rssKiB(b, panel.Cmd.Process.Pid)
	time.Sleep(25 * time.Second)
	after := rssKiB(b, panel.Cmd.Process.Pid)
	b.ReportMetric(float64(early-before)/float64(n), "KiB/conn-5s")
	mAfter := goMetrics(b, metrics)
	perConn := float64(after-before) / float64(n)
	b.ReportMetric(float64(before)/1024, "panel-idle-MiB")
	b.ReportMetric(float64(after)/1024, "panel-MiB-with-swarm")
	b.ReportMetric(perConn, "KiB/conn")
	b.ReportMetric(1024*1024/perConn, "conns/GiB")
	// Where a connection's memory is: the Go heap in use, goroutine stacks,
	// goroutines (the rest of the RSS is the collector's headroom).
	per := func(name string) float64 { return (mAfter[name] - mBefore[name]) / float64(n) }
	b.ReportMetric(per("go_memstats_heap_inuse_bytes")/1024, "heap-KiB/conn")
	b.ReportMetric(per("go_memstats_stack_inuse_bytes")/1024, "stack-KiB/conn")
	b.ReportMetric(per("go_goroutines"), "goroutines/conn")

	// Three real idle agent processes (no browser, no workers) side by
	// side: the median of their RSS 5 s after the welcome (start-up just
	// over) and 45 s after it (idle: three pings answered).
	var agents []*testenv.Proc
	for i := range 3 {
		stateDir := filepath.Join(dir, fmt.Sprintf("agent%d", i))
		require.NoError(b, os.MkdirAll(stateDir, 0o700))
		tok := filepath.Join(stateDir, "token")
		require.NoError(b, os.WriteFile(tok, []byte(tokens[n+i]), 0o600))
		agents = append(agents, testenv.Start(b, testenv.Binary(b), []string{"--role=agent", "--panel=" + base, "--token-file=" + tok, "--state-dir=" + stateDir}))
	}
	for _, ag := range agents {
		ag.WaitFor(`welcomed by the panel`, 3*time.Minute)
	}
	median := func(field string) float64 {
		var v []int
		for _, ag := range agents {
			v = append(v, statusKiB(b, ag.Cmd.Process.Pid, field))
		}
		slices.Sort(v)
		return float64(v[1]) / 1024
	}
	time.Sleep(5 * time.Second)
	b.ReportMetric(median("VmRSS"), "agent-5s-MiB")
	time.Sleep(40 * time.Second)
	b.ReportMetric(median("VmRSS"), "agent-idle-MiB")
	b.ReportMetric(median("RssAnon"), "agent-anon-MiB")
	b.ReportMetric(median("RssFile"), "agent-file-MiB")
	// The proportional share: the executable's pages are shared by every
	// process of the binary on the host (the panel, the other agents) and
	// counted once in the page cache; RSS counts them in full in each.
	var pss []int
	for _, ag := range agents {
		pss = append(pss, rollupKiB(b, ag.Cmd.Process.Pid, "Pss"))
	}
	slices.Sort(pss)
	b.ReportMetric(float64(pss[1])/1024, "agent-pss-MiB")
	for _, ag := range agents {
		_ = ag.Cmd.Process.Signal(syscall.SIGTERM)
	}
	// The swarm again two minutes after its last welcome: the collector
	// has run a few times since (the periodic one included) and shrunk
	// the stacks of readers started during the storm, when new goroutines
	// started with the handshakes' larger stacks.
	time.Sleep(time.Until(lastWelcome.Add(2 * time.Minute)))
	b.ReportMetric(float64(rssKiB(b, panel.Cmd.Process.Pid)-before)/float64(n), "KiB/conn-120s")
	mLate := goMetrics(b, metrics)
	b.ReportMetric((mLate["go_memstats_stack_inuse_bytes"]-mBefore["go_memstats_stack_inuse_bytes"])/float64(n)/1024, "stack-KiB/conn-120s")
	cancel()
	wg.Wait()
}

// rollupKiB reads one kB figure of /proc/PID/smaps_rollup (Pss).
func rollupKiB(tb testing.TB, pid int, field string) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	require.NoError(tb, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			require.NoError(tb, err)
			return n
		}
	}
	tb.Fatalf("no %s in smaps_rollup", field)
	return 0
}
