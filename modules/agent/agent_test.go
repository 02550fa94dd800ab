package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/fleetwright/fleetwright/app/unit"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/agent/store"
	"github.com/fleetwright/fleetwright/modules/agent/supervisor"
	"github.com/fleetwright/fleetwright/modules/link"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// TestMain runs the end-of-suite secret scan (the token, passwords and TOTP
// seeds below), stops the test services (Postgres) and then checks that no
// goroutine outlived the tests; app/unit keeps one thread-locked spawner
// goroutine (Pdeathsig needs it) for the life of the binary.
func TestMain(m *testing.M) { testenv.MainNoLeaks(m, goleak.IgnoreTopFunction(unit.SpawnerFunction)) }

// Known secret values; tests look for them on disk and in logs.
const (
	testToken    = "fwa_5f1e0c9b7a6d4e3f2a1b0c9d8e7f6a5b"
	testPassword = "board-pass-Xy7#q2"
	testTOTP     = "KRSXG5CTMVRXEZLU"
	testCookie   = "sid-3b2a1f0e9d8c7b6a"
)

// --- a fake panel over a real WebSocket, speaking the wire package ---------

// action is what the fake panel does with connection n.
type action struct {
	status  int           // answer the upgrade with this HTTP status
	reject  *wire.Reject  // answer hello with this reject
	welcome *wire.Welcome // answer hello with this welcome (version: negotiated unless set)
	garbage bool          // after welcome, send a malformed message
}

type panelConn struct {
	conn    *websocket.Conn
	version int
	in      chan panelMsg
	closed  chan struct{}
}

type panelMsg struct {
	frame wire.Frame
	raw   []byte
}

type fakePanel struct {
	t        *testing.T
	srv      *httptest.Server
	n        atomic.Int32
	script   func(n int) action
	hellos   chan wire.Hello
	sessions chan *panelConn
	now      func() time.Time
}

func newFakePanel(t *testing.T, script func(n int) action) *fakePanel {
	p := &fakePanel{t: t, script: script, hellos: make(chan wire.Hello, 100), sessions: make(chan *panelConn, 10),
		now: time.Now}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *fakePanel) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/agent/ws" {
		http.NotFound(w, r)
		return
	}
	act := p.script(int(p.n.Add(1)))
	if act.status != 0 {
		http.Error(w, "panel unavailable", act.status)
		return
	}
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer conn.CloseNow()
	conn.SetReadLimit(wire.MaxMessageBytes)
	ctx := r.Context()
	_, data, err := conn.Read(ctx)
	if err != nil {
		return
	}
	f, err := wire.Decode(data)
	if err != nil {
		return
	}
	h := f.Message.(wire.Hello)
	p.hellos <- h
	send := func(v int, m wire.Message) {
		raw, err := wire.Encode(v, wire.Frame{Time: p.now(), Message: m})
		if err == nil {
			_ = conn.Write(ctx, websocket.MessageText, raw)
		}
	}
	switch {
	case act.reject != nil:
		send(wire.MinSupported, *act.reject)
		_ = conn.Close(websocket.StatusNormalClosure, "")
	case act.welcome != nil:
		wel := *act.welcome
		if wel.Version == 0 {
			v, err := wire.Negotiate(h.Version, h.MinVersion)
			if err != nil {
				return
			}
			wel.Version = v
		}
		send(wel.Version, wel)
		if act.garbage {
			_ = conn.Write(ctx, websocket.MessageText, []byte(`{"type":"pause","id":"x","time":"2026-01-01T00:00:00Z","body":[]}`))
		}
		pc := &panelConn{conn: conn, version: wel.Version, in: make(chan panelMsg, 100), closed: make(chan struct{})}
		p.sessions <- pc
		defer close(pc.closed)
		for {
			_, data, err := conn.Read(ctx)
			if err != nil {
				return
			}
			f, err := wire.Decode(data)
			if err != nil {
				p.t.Errorf("agent sent an undecodable message: %v", err)
				return
			}
			pc.in <- panelMsg{frame: f, raw: data}
		}
	}
}

func (pc *panelConn) send(t *testing.T, m wire.Message) {
	t.Helper()
	raw, err := wire.Encode(pc.version, wire.Frame{Time: time.Now(), Message: m})
	require.NoError(t, err)
	require.NoError(t, pc.conn.Write(context.Background(), websocket.MessageText, raw))
}

// next returns the next message of type T the agent sends, skipping others.
func next[T wire.Message](t *testing.T, pc *panelConn, match func(T) bool) (T, []byte) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-pc.in:
			if v, ok := m.frame.Message.(T); ok && (match == nil || match(v)) {
				return v, m.raw
			}
		case <-deadline:
			var zero T
			t.Fatalf("agent sent no %T", zero)
			return zero, nil
		}
	}
}

func (p *fakePanel) session(t *testing.T) *panelConn {
	t.Helper()
	select {
	case pc := <-p.sessions:
		return pc
	case <-time.After(10 * time.Second):
		t.Fatal("no welcomed session")
		return nil
	}
}

func (p *fakePanel) hello(t *testing.T) wire.Hello {
	t.Helper()
	select {
	case h := <-p.hellos:
		return h
	case <-time.After(10 * time.Second):
		t.Fatal("no hello")
		return wire.Hello{}
	}
}

func welcome(inst string, c wire.Config) action {
	return action{welcome: &wire.Welcome{AgentID: "ag_1", InstallationID: inst, Config: c,
		Credentials: wire.Credentials{Username: "dispatch42", Password: wire.NewSecret(testPassword), TOTPSecret: wire.NewSecret(testTOTP)}}}
}

func reject(reason wire.RejectReason, inst string) action {
	return action{reject: &wire.Reject{Reason: reason, InstallationID: inst, Message: string(reason), MinVersion: 1, MaxVersion: 2}}
}

// --- the agent under test ---------------------------------------------------

type harness struct {
	cfg   Config
	clk   *clock.Fake
	logs  *syncBuffer
	done  chan error
	stop  context.CancelFunc
	runs  atomic.Int32
	fails chan error
}

type syncBuffer = testenv.SyncBuffer

func newHarness(t *testing.T, p *fakePanel) *harness {
	dir := filepath.Join(t.TempDir(), "state")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	tokenFile := filepath.Join(dir, "token") // inside the state dir: the wipe test covers it
	require.NoError(t, os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600))
	h := &harness{clk: clock.NewFake(time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)), logs: &syncBuffer{}, fails: make(chan error)}
	h.cfg = Config{
		PanelURL: p.srv.URL, TokenFile: tokenFile, StateDir: dir, Build: "v0.0.0-test", Hostname: "agent-test",
		Clock: h.clk, Jitter: func() float64 { return 0.5 }, StateEvery: time.Hour, IOTimeout: 5 * time.Second,
		RestartDelay: -1,
		Kinds: map[string]WorkerFunc{
			"idle": func(ctx context.Context, _ *supervisor.Handle, _ WorkerEnv) error {
				h.runs.Add(1)
				<-ctx.Done()
				return ctx.Err()
			},
			"flaky": func(ctx context.Context, _ *supervisor.Handle, _ WorkerEnv) error {
				select {
				case err := <-h.fails:
					return err
				case <-ctx.Done():
					return ctx.Err()
				}
			},
		},
	}
	return h
}

// seed puts credentials and cookies in the state dir, as a running agent
// would have them.
func (h *harness) seed(t *testing.T, welcomedBy string) {
	ctx := context.Background()
	st, err := store.Open(ctx, h.cfg.StateDir)
	require.NoError(t, err)
	require.NoError(t, st.SaveCredentials(ctx, wire.Credentials{Username: "dispatch42", Password: wire.NewSecret(testPassword), TOTPSecret: wire.NewSecret(testTOTP)}, h.clk.Now()))
	require.NoError(t, st.SaveCookies(ctx, []store.Cookie{{Domain: "board.test", Name: "sid", Path: "/", Value: wire.NewSecret(testCookie)}}))
	if welcomedBy != "" {
		require.NoError(t, st.SetWelcomed(ctx, welcomedBy, "ag_1"))
	}
	require.NoError(t, st.Close())
}

func (h *harness) start(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	h.done = make(chan error, 1)
	logger := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	done := h.done
	go func() { done <- Run(ctx, h.cfg, logger) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("agent did not stop")
		}
	})
}

func (h *harness) result(t *testing.T) error {
	t.Helper()
	select {
	case err := <-h.done:
		h.done <- err // keep it for Cleanup
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("agent did not exit")
		return nil
	}
}

// nextSleep waits until the agent asks the clock for its (seen+1)-th pause and
// returns it.
func (h *harness) nextSleep(t *testing.T, seen int) time.Duration {
	t.Helper()
	require.Eventually(t, func() bool { return len(h.clk.Sleeps()) > seen }, 10*time.Second, time.Millisecond,
		"agent did not pause (seen %d)", seen)
	return h.clk.Sleeps()[seen]
}

// filesContaining lists the files under dir holding any of the needles.
func filesContaining(t *testing.T, dir string, needles ...string) []string {
	t.Helper()
	var hits []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		for _, n := range needles {
			if bytes.Contains(data, []byte(n)) {
				hits = append(hits, filepath.Base(p)+":"+n)
			}
		}
		return nil
	})
	return hits
}

func (h *harness) authState(t *testing.T) store.Auth {
	t.Helper()
	// The agent holds the database open; a second connection reads it (WAL).
	st, err := store.Open(context.Background(), h.cfg.StateDir)
	require.NoError(t, err)
	defer st.Close()
	a, err := st.Auth(context.Background())
	require.NoError(t, err)
	return a
}

// --- tests ------------------------------------------------------------------

func TestWelcomeStateCommandsAndReconnect(t *testing.T) {
	cfg := wire.Config{Account: wire.Account{Key: "acct-0042", Region: "us-east"}, Workers: []wire.WorkerSpec{
		{Name: "w1", Kind: "idle"}, {Name: "w2", Kind: "flaky"}, {Name: "w3", Kind: "no-such-kind"},
	}}
	p := newFakePanel(t, func(int) action { return welcome("inst_a", cfg) })
	h := newHarness(t, p)
	h.start(t)

	hello := p.hello(t)
	require.Equal(t, wire.Current, hello.Version)
	require.Equal(t, wire.MinSupported, hello.MinVersion)
	require.Equal(t, "v0.0.0-test", hello.Build)
	require.Equal(t, "agent-test", hello.Host)
	require.Equal(t, testToken, hello.Token.Reveal())
	require.True(t, hello.Clock.Equal(h.clk.Now()))

	pc := p.session(t)
	st, _ := next[wire.State](t, pc, func(s wire.State) bool { return len(s.Workers) == 3 && s.Workers[0].State == wire.WorkerRunning })
	require.False(t, st.Paused)
	require.Equal(t, "w1", st.Workers[0].Name)
	require.Equal(t, wire.WorkerUnsupported, st.Workers[2].State)
	require.NotNil(t, st.MemoryRSSBytes, "v2 reports memory")
	require.Positive(t, *st.MemoryRSSBytes)

	// Ping: the pong echoes t0 and carries the agent's receive and send times.
	t0 := time.Now().Add(-time.Second)
	pc.send(t, wire.Ping{CommandID: "p1", SentAt: t0})
	pong, _ := next[wire.Pong](t, pc, nil)
	require.Equal(t, "p1", pong.CommandID)
	require.True(t, pong.PingSentAt.Equal(t0))
	require.True(t, pong.ReceivedAt.Equal(h.clk.Now()))
	est := wire.NewEstimator(0)
	require.NoError(t, est.Add(wire.SampleFromPong(pong, t0.Add(2*time.Millisecond))))

	// Pause and resume change the reported state; every command is acknowledged.
	pc.send(t, wire.Pause{CommandID: "c1", Reason: "operator"})
	res, _ := next[wire.CommandResult](t, pc, nil)
	require.Equal(t, wire.CommandResult{CommandID: "c1", OK: true}, res)
	next[wire.State](t, pc, func(s wire.State) bool { return s.Paused })
	pc.send(t, wire.Pause{CommandID: "c1", Reason: "operator"}) // redelivered
	res, _ = next[wire.CommandResult](t, pc, nil)
	require.Equal(t, "c1", res.CommandID)
	pc.send(t, wire.RestartWorker{CommandID: "c2", Worker: "nope"})
	res, _ = next[wire.CommandResult](t, pc, nil)
	require.False(t, res.OK)
	require.Contains(t, res.Error, "no such worker")
	pc.send(t, wire.Resume{CommandID: "c3"})
	res, _ = next[wire.CommandResult](t, pc, nil)
	require.True(t, res.OK)
	next[wire.State](t, pc, func(s wire.State) bool { return !s.Paused })
	pc.send(t, wire.RotateCredentials{CommandID: "c4", Credentials: wire.Credentials{Username: "dispatch42",
		Password: wire.NewSecret("rotated-" + testPassword), TOTPSecret: wire.NewSecret(testTOTP)}})
	res, _ = next[wire.CommandResult](t, pc, nil)
	require.True(t, res.OK)

	// Drop the connection. While disconnected, w2 burns its restart budget.
	sleeps := len(h.clk.Sleeps())
	pc.conn.CloseNow()
	pause := h.nextSleep(t, sleeps)
	require.Equal(t, 750*time.Millisecond, pause, "network backoff, first attempt, jitter 0.5")
	for range supervisor.Budget + 1 {
		h.fails <- errors.New("board: 502")
	}
	h.clk.Advance(pause)

	p.hello(t)
	pc = p.session(t)
	ev, _ := next[wire.Event](t, pc, nil)
	require.Equal(t, "worker_needs_person", ev.Kind)
	require.Equal(t, "w2", ev.Worker)
	st, _ = next[wire.State](t, pc, nil)
	require.Equal(t, wire.WorkerRunning, st.Workers[0].State)
	require.Equal(t, wire.WorkerNeedsPerson, st.Workers[1].State)
	require.Equal(t, supervisor.Budget, st.Workers[1].Restarts)
	require.EqualValues(t, 1, h.runs.Load(), "w1 kept running across the reconnect")

	// A person restarts w2.
	pc.send(t, wire.RestartWorker{CommandID: "c5", Worker: "w2"})
	res, _ = next[wire.CommandResult](t, pc, nil)
	require.True(t, res.OK)
	next[wire.State](t, pc, func(s wire.State) bool { return s.Workers[1].State == wire.WorkerRunning })

	require.Equal(t, 0, h.authState(t).UnknownTokenCount)
	require.Equal(t, "inst_a", h.authState(t).InstallationID)
	for _, secret := range []string{testToken, testPassword, testTOTP} {
		require.NotContains(t, h.logs.String(), secret)
	}
	h.stop()
	require.NoError(t, h.result(t))
	require.Equal(t, ExitOK, ExitCode(h.result(t)))
}

// Twenty consecutive unknown-token answers: pauses of 3 s … 768 s, then ten
// in 15–25 min never decreasing, then retirement with everything wiped.
func TestUnknownTokenScheduleRetiresOnTheTwentieth(t *testing.T) {
	p := newFakePanel(t, func(int) action { return reject(wire.RejectUnknownToken, "inst_b") })
	h := newHarness(t, p)
	h.cfg.Jitter = func() float64 { return float64(time.Now().UnixNano()%1000) / 1000 }
	h.seed(t, "")
	h.start(t)

	for i := 0; i < link.RetireAfter-1; i++ {
		p.hello(t)
		d := h.nextSleep(t, i)
		h.clk.Advance(d)
	}
	p.hello(t)
	err := h.result(t)
	require.ErrorIs(t, err, ErrRetired)
	require.Equal(t, ExitRetired, ExitCode(err))
	require.EqualValues(t, link.RetireAfter, p.n.Load(), "retired exactly on the twentieth answer")

	sleeps := h.clk.Sleeps()
	require.Len(t, sleeps, link.RetireAfter-1)
	want := []time.Duration{3, 6, 12, 24, 48, 96, 192, 384, 768}
	for i, w := range want {
		require.Equal(t, w*time.Second, sleeps[i], "pause %d", i+1)
	}
	for i := len(want); i < len(sleeps); i++ {
		require.GreaterOrEqual(t, sleeps[i], 15*time.Minute, "pause %d", i+1)
		require.Less(t, sleeps[i], 25*time.Minute, "pause %d", i+1)
		require.GreaterOrEqual(t, sleeps[i], sleeps[i-1], "pause %d never decreases", i+1)
	}

	require.Empty(t, filesContaining(t, h.cfg.StateDir, testToken, testPassword, testTOTP, testCookie),
		"no byte of a secret may remain in the state dir")
	_, err = os.Stat(h.cfg.TokenFile)
	require.ErrorIs(t, err, fs.ErrNotExist)
	for _, secret := range []string{testToken, testPassword, testTOTP, testCookie} {
		require.NotContains(t, h.logs.String(), secret)
	}

	// A retired agent refuses to start, without dialling.
	require.NoError(t, os.WriteFile(h.cfg.TokenFile, []byte(testToken), 0o600))
	err = Run(context.Background(), h.cfg, slog.New(slog.DiscardHandler))
	require.ErrorIs(t, err, ErrAlreadyRetired)
	require.Equal(t, ExitRetired, ExitCode(err))
	require.Contains(t, err.Error(), "reset-state")
	require.EqualValues(t, link.RetireAfter, p.n.Load())

	// Until its state is reset on purpose.
	require.NoError(t, ResetState(h.cfg.StateDir))
	h.start(t)
	p.hello(t)
}

// Only the installation that welcomed the agent counts; 5xx and version
// rejects neither count nor reset; a welcome resets.
func TestOnlyTheWelcomingInstallationCounts(t *testing.T) {
	script := map[int]action{
		1: reject(wire.RejectUnknownToken, "inst_b"),
		2: reject(wire.RejectUnknownToken, "inst_b"),
		3: reject(wire.RejectUnknownToken, "inst_b"),
		4: reject(wire.RejectUnknownToken, "inst_a"),
		5: reject(wire.RejectUnknownToken, "inst_a"),
		6: {status: http.StatusServiceUnavailable},
		7: reject(wire.RejectIncompatibleVersion, "inst_a"),
		8: reject(wire.RejectUnknownToken, "inst_a"),
		9: welcome("inst_a", wire.Config{}),
	}
	p := newFakePanel(t, func(n int) action {
		if a, ok := script[n]; ok {
			return a
		}
		return reject(wire.RejectUnknownToken, "inst_a")
	})
	h := newHarness(t, p)
	h.seed(t, "inst_a")
	h.start(t)

	want := []time.Duration{
		750 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second, // inst_b: network backoff, not counted
		3 * time.Second, 6 * time.Second, // inst_a: counted 1, 2
		6 * time.Second,  // 503: network backoff
		12 * time.Second, // incompatible version: network backoff
		12 * time.Second, // inst_a: counted 3 (not reset by the two above)
	}
	var got []time.Duration
	for i := range want {
		d := h.nextSleep(t, i)
		got = append(got, d)
		if i == 7 {
			require.Equal(t, 3, h.authState(t).UnknownTokenCount)
		}
		if i == 2 {
			require.Equal(t, 0, h.authState(t).UnknownTokenCount, "another installation's answers are not counted")
		}
		h.clk.Advance(d)
	}
	require.Equal(t, want, got)

	// 9: welcome resets the count. Then the panel drops us and answers
	// unknown token again: the count starts from 1.
	pc := p.session(t)
	next[wire.State](t, pc, nil)
	require.Equal(t, 0, h.authState(t).UnknownTokenCount)
	pc.conn.CloseNow()
	// After the eight pauses above: the state ticker (1 h) and the backoff.
	require.Eventually(t, func() bool {
		s := h.clk.Sleeps()
		return len(s) >= 10 && slices.Equal(s[8:10], []time.Duration{time.Hour, 750 * time.Millisecond})
	}, 10*time.Second, time.Millisecond, "the network backoff restarts after a welcome")
	h.clk.Advance(750 * time.Millisecond)
	d := h.nextSleep(t, 10)
	require.Equal(t, link.AuthFirstPause, d)
	require.Equal(t, 1, h.authState(t).UnknownTokenCount)
	require.Contains(t, h.logs.String(), "not counted")
}

func TestTombstoneRetiresAtOnce(t *testing.T) {
	p := newFakePanel(t, func(int) action { return reject(wire.RejectRetired, "inst_a") })
	h := newHarness(t, p)
	h.seed(t, "inst_a")
	h.start(t)
	err := h.result(t)
	require.ErrorIs(t, err, ErrRetired)
	require.Equal(t, ExitRetired, ExitCode(err))
	require.EqualValues(t, 1, p.n.Load())
	require.Empty(t, h.clk.Sleeps())
	require.Empty(t, filesContaining(t, h.cfg.StateDir, testToken, testPassword, testTOTP, testCookie))
}

func TestRetireCommand(t *testing.T) {
	p := newFakePanel(t, func(int) action { return welcome("inst_a", wire.Config{}) })
	h := newHarness(t, p)
	h.seed(t, "")
	h.start(t)
	pc := p.session(t)
	next[wire.State](t, pc, nil)
	pc.send(t, wire.Retire{CommandID: "r1", Reason: "account deleted"})
	res, _ := next[wire.CommandResult](t, pc, nil)
	require.Equal(t, wire.CommandResult{CommandID: "r1", OK: true}, res)
	err := h.result(t)
	require.ErrorIs(t, err, ErrRetired)
	require.Empty(t, filesContaining(t, h.cfg.StateDir, testToken, testPassword, testTOTP, testCookie))
}

// An old panel that only speaks v1 gets v1 messages: no v2 fields.
func TestOldPanelGetsV1Messages(t *testing.T) {
	p := newFakePanel(t, func(int) action {
		a := welcome("inst_a", wire.Config{Workers: []wire.WorkerSpec{{Name: "w1", Kind: "idle"}}})
		a.welcome.Version = wire.V1
		return a
	})
	h := newHarness(t, p)
	h.start(t)
	pc := p.session(t)
	st, raw := next[wire.State](t, pc, func(s wire.State) bool { return len(s.Workers) == 1 })
	require.Nil(t, st.MemoryRSSBytes)
	require.NotContains(t, string(raw), "memory_rss_bytes")
	require.NotContains(t, string(raw), "oldest_task_age_ms")
}

// A malformed message from the panel is answered with a protocol error; the
// agent reconnects.
func TestMalformedMessageGetsAProtocolError(t *testing.T) {
	p := newFakePanel(t, func(n int) action {
		a := welcome("inst_a", wire.Config{})
		a.garbage = n == 1
		return a
	})
	h := newHarness(t, p)
	h.start(t)
	pc := p.session(t)
	e, _ := next[wire.Error](t, pc, nil)
	require.Equal(t, wire.CodeMalformed, e.Code)
	// The reconnect backoff (perhaps after the state ticker's 1 h).
	require.Eventually(t, func() bool {
		return slices.Contains(h.clk.Sleeps(), 750*time.Millisecond)
	}, 10*time.Second, time.Millisecond)
	h.clk.Advance(750 * time.Millisecond)
	p.hello(t)
	p.hello(t)
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tok, []byte(testToken), 0o644))
	_, err := ReadTokenFile(tok)
	require.ErrorIs(t, err, ErrConfig)
	require.Contains(t, err.Error(), "chmod 600")
	require.NotContains(t, err.Error(), testToken)
	require.Equal(t, ExitConfig, ExitCode(err))
	err = Run(context.Background(), Config{PanelURL: "http://127.0.0.1:1", TokenFile: tok, StateDir: dir}, slog.New(slog.DiscardHandler))
	require.ErrorIs(t, err, ErrConfig)

	require.NoError(t, os.Chmod(tok, 0o600))
	s, err := ReadTokenFile(tok)
	require.NoError(t, err)
	require.Equal(t, testToken, s.Reveal())
	require.NoError(t, os.WriteFile(tok, []byte("two tokens"), 0o600))
	_, err = ReadTokenFile(tok)
	require.ErrorIs(t, err, ErrConfig)

	for in, want := range map[string]string{
		"https://panel.test/":                  "wss://panel.test/agent/ws",
		"https://panel.test:8443/fleet":        "wss://panel.test:8443/fleet/agent/ws",
		"wss://panel.test/agent/ws":            "wss://panel.test/agent/ws",
		"wss://panel.test":                     "wss://panel.test/agent/ws",
		"wss://panel.test:8443/fleet/agent/ws": "wss://panel.test:8443/fleet/agent/ws",
		"http://127.0.0.1:8080":                "ws://127.0.0.1:8080/agent/ws",
		"http://localhost:8080/":               "ws://localhost:8080/agent/ws",
		"ws://[::1]:8080/agent/ws":             "ws://[::1]:8080/agent/ws",
		"http://127.9.8.7":                     "ws://127.9.8.7/agent/ws",
	} {
		got, err := WebSocketURL(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got)
	}
	for _, bad := range []string{"", "panel.test", "https://", "https://p.test/?x=1", "ftp://panel.test",
		"https://user:pw@panel.test"} {
		_, err := WebSocketURL(bad)
		require.ErrorIs(t, err, ErrConfig, bad)
	}
	// Cleartext outside loopback would carry the token and the credentials
	// readable: refused, with the way out in the message.
	for _, clear := range []string{"http://panel.test", "ws://panel.test/agent/ws", "http://10.0.0.5:8080",
		"http://[2001:db8::1]/", "ws://localhost.evil.test", "http://127.0.0.1.nip.io"} {
		_, err := WebSocketURL(clear)
		require.ErrorIs(t, err, ErrConfig, clear)
		require.ErrorContains(t, err, "https:// or wss://", clear)
	}
	require.Equal(t, ExitFailure, ExitCode(fmt.Errorf("boom")))
	require.Equal(t, ExitOK, ExitCode(nil))
	require.True(t, strings.HasPrefix(fmt.Sprint(ExitRetired), "78"))
}
