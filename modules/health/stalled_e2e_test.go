package health_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/factory"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/notify"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// descendants lists the pids below pid, read from /proc.
func descendants(pid int) []int {
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so read after ')'.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 {
			pp, _ := strconv.Atoi(f[1])
			parent[p] = pp
		}
	}
	var out []int
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// TestStalledWatcherIsHungAndAlerted is the hung-worker rule end to end with
// a real stalled process: the panel binary (hang threshold 20 s for
// watchers, a sweep every second), a sandbox board and an agent process with
// a browser watcher. Its Chromium is stopped with SIGSTOP, and so is every
// Chromium the watcher relaunches while the stall lasts: the agent stays
// alive and connected and keeps reporting, but the watcher reads nothing.
// Within its threshold (20 s here) the panel raises worker.hung, the fleet store marks
// it hung and a signed webhook receives the alarm; after SIGCONT the watcher
// reads again and the alarm resolves, with a resolve message. The panel
// restarts nothing on its own.
func TestStalledWatcherIsHungAndAlerted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	d := testenv.DB(t)
	key := make([]byte, vault.KeySize)
	for i := range key {
		key[i] = byte(7*i + 2)
	}
	v, err := vault.New(key)
	require.NoError(t, err)
	ops := audit.Entry{Actor: "e2e"}

	bcfg := board.Defaults()
	bcfg.Listen, bcfg.Rate, bcfg.AdminToken = "127.0.0.1:0", 0, "e2e-admin-token-0123456789"
	brd, err := board.Start(ctx, bcfg, testenv.Logger(t))
	require.NoError(t, err)
	t.Cleanup(func() { brd.Close() })
	var tenant string
	tenant = factory.Tenant(t, d, "acme", "Acme")
	st := fleet.NewStore(d.App, v)
	acct, err := brd.CreateAccount(ctx, board.AccountSpec{Username: "acme-1", Password: "pw-acme-1-Zq9", Client: "acme"})
	require.NoError(t, err)
	accountID, err := st.CreateAccount(ctx, tenant, fleet.AccountInput{Key: "acme-1", BoardURL: brd.URL(), Client: "acme", Username: "acme-1",
		Password: "pw-acme-1-Zq9", TOTPSecret: acct.TOTPSecret, Workers: []wire.WorkerSpec{{Name: "watcher-1", Kind: "watcher"}}}, ops)
	require.NoError(t, err)
	agentID, tok, err := st.CreateAgent(ctx, tenant, accountID, "agent-1", ops)
	require.NoError(t, err)

	// The webhook receiver, on a real socket.
	var mu sync.Mutex
	type event struct {
		Event string `json:"event"`
		Alarm struct {
			Kind string `json:"kind"`
			Key  string `json:"key"`
		} `json:"alarm"`
	}
	var events []event
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	n := notify.New(d.App, v, notify.Config{})
	var secret string
	require.NoError(t, audit.InSystem(ctx, d.App, func(tx pgx.Tx) error {
		secret, err = n.Create(ctx, tx, notify.Channel{Name: "ops-hook", Kind: "webhook", Target: "http://" + ln.Addr().String() + "/hook",
			MinSeverity: alarm.Warning}, "e2e")
		return err
	}))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if notify.Verify(secret, r.Header.Get("X-Fleetwright-Signature"), body, time.Now(), 5*time.Minute) != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var ev event
		_ = json.Unmarshal(body, &ev)
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	received := func(what, kind string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range events {
			if e.Event == what && e.Alarm.Kind == kind {
				return true
			}
		}
		return false
	}

	dir, err := os.MkdirTemp(testenv.Dir(t), "stalled-e2e-")
	require.NoError(t, err)
	bin := testenv.Binary(t)
	panel := testenv.Start(t, bin, []string{"--role=panel", "--listen=127.0.0.1:0", "--data-dir=" + dir,
		"--hung-after=watcher=20s", "--health-interval=1s", "--notify-allow=127.0.0.0/8", "--notify-ports=" + port},
		"FLEET_DATABASE_URL="+d.OwnerURL, "FLEET_DATABASE_APP_URL="+d.AppURL, "FLEET_REDIS_URL="+testenv.RedisURL(t),
		"FLEET_SECRET_KEY="+hex.EncodeToString(key))
	base := panel.WaitFor(`panel ready" console=(http://127\.0\.0\.1:\d+)/`, time.Minute)
	state := filepath.Join(dir, "agent")
	require.NoError(t, os.MkdirAll(state, 0o700))
	tf := filepath.Join(state, "token")
	require.NoError(t, os.WriteFile(tf, []byte(tok), 0o600))
	agent := testenv.Start(t, bin, []string{"--role=agent", "--panel=" + base, "--token-file=" + tf, "--state-dir=" + state})

	health := func() string {
		fl, err := st.List(ctx, tenant)
		if err != nil || len(fl.Agents) == 0 {
			return ""
		}
		return fl.Agents[0].Health["watcher-1"]
	}
	workerKey := agentID + "/watcher-1"
	running := func() bool {
		fl, err := st.List(ctx, tenant)
		if err != nil || len(fl.Agents) == 0 {
			return false
		}
		for _, w := range fl.Agents[0].State.Workers {
			if w.Name == "watcher-1" && w.State == wire.WorkerRunning {
				return true
			}
		}
		return false
	}
	require.Eventually(t, running, 2*time.Minute, 250*time.Millisecond, "the watcher runs")
	// Healthy for longer than its threshold: never hung while it reads.
	// Real time, not an event: the agent is a separate process whose
	// watcher reports on its own clock, and what is shown is that no alarm
	// is raised across the threshold.
	time.Sleep(25 * time.Second)
	open, err := alarm.IsOpen(ctx, d.App, tenant, "worker.hung", workerKey)
	require.NoError(t, err)
	require.False(t, open, "a reading watcher is not hung")

	// The stall lasts until the test ends it: every Chromium under the agent
	// is stopped, and so is each one the watcher launches when it gives up
	// on a stopped page (it recovers from a stalled browser on its own; a
	// stall that outlasts every relaunch is what "hung" is for).
	require.NotEmpty(t, descendants(agent.Cmd.Process.Pid), "the watcher's Chromium runs under the agent")
	var (
		stallMu sync.Mutex
		stalled = map[int]bool{}
	)
	stopStall := make(chan struct{})
	stallDone := make(chan struct{})
	go func() {
		defer close(stallDone)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			stallMu.Lock()
			for _, p := range descendants(agent.Cmd.Process.Pid) {
				if !stalled[p] {
					_ = syscall.Kill(p, syscall.SIGSTOP)
					stalled[p] = true
				}
			}
			stallMu.Unlock()
			select {
			case <-stopStall:
				return
			case <-tick.C:
			}
		}
	}()
	thaw := func() {
		select {
		case <-stopStall:
			return
		default:
		}
		close(stopStall)
		<-stallDone
		stallMu.Lock()
		defer stallMu.Unlock()
		for p := range stalled {
			_ = syscall.Kill(p, syscall.SIGCONT)
		}
	}
	stopped := time.Now()
	defer thaw()
	require.Eventually(t, func() bool {
		open, err := alarm.IsOpen(ctx, d.App, tenant, "worker.hung", workerKey)
		return err == nil && open
	}, 45*time.Second, 250*time.Millisecond, "worker.hung raised")
	t.Logf("hung alarm %s after SIGSTOP (threshold 20s, sweep 1s)", time.Since(stopped).Round(time.Second))
	require.Equal(t, "hung", health(), "the fleet page marks it hung")
	require.Eventually(t, func() bool { return received("raised", "worker.hung") }, 30*time.Second, 250*time.Millisecond,
		"the webhook received the alarm")
	require.True(t, running(), "the agent still reports the worker running: the panel restarted nothing")
	select {
	case <-agent.Exited():
		t.Fatal("the agent process exited")
	default:
	}

	thaw()
	require.Eventually(t, func() bool {
		open, err := alarm.IsOpen(ctx, d.App, tenant, "worker.hung", workerKey)
		return err == nil && !open
	}, time.Minute, 250*time.Millisecond, "the alarm resolves once the watcher reads again")
	require.Eventually(t, func() bool { return received("resolved", "worker.hung") }, 30*time.Second, 250*time.Millisecond,
		"the webhook received the resolve message")
}
