package agent

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/agent/store"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/board/boardtest"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/factory"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// claimPanel is a small panel for these tests: a real WebSocket server
// speaking wire whose claim statements run through the REAL claim.Store on
// a testenv Postgres database. It grants leases, fences the start of the
// action and records outcomes exactly as the panel's claim engine does;
// it only leaves out Redis queues, filters and the console.
type claimPanel struct {
	t        *testing.T
	srv      *httptest.Server
	claims   *claim.Store
	db       *testenv.Database
	tenant   string
	agentID  string
	welcome  wire.Welcome
	leaseFor time.Duration
	hardMS   int64
	noAck    atomic.Bool  // do not acknowledge outcomes (the agent must keep them)
	gates    atomic.Int64 // gate checks answered
	leases   atomic.Int64 // lease requests received

	detected chan wire.Sighting
	outcomes chan wire.Outcome
	events   chan wire.Event
	lookups  chan wire.LookupResult
	commands sync.Map // command id → wire.CommandResult: the agent carried it out

	mu   sync.Mutex
	conn *websocket.Conn
	ver  int
	// maxVer caps the version this panel speaks (0: wire.Current).
	maxVer int
	// state is the agent's latest state report.
	state wire.State
	// boardClock is the latest reading of the platform's clock a
	// detected message carried.
	boardClock *wire.BoardClock
}

func uuid() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func newClaimPanel(t *testing.T, boardURL string, creds wire.Credentials, workers ...wire.WorkerSpec) *claimPanel {
	t.Helper()
	ctx := context.Background()
	// testenv.DB reads the template name before starting Postgres, so the
	// first call of a test binary needs the server started first.
	testenv.PostgresServer(t)
	d := testenv.DB(t)
	var tenant string
	tenant = factory.Tenant(t, d, "acme", "Acme Freight")
	rc, err := river.NewClient(riverpgxv5.New(d.App), &river.Config{})
	require.NoError(t, err)
	p := &claimPanel{t: t, claims: claim.NewStore(d.App, rc), db: d, tenant: tenant, agentID: uuid(),
		leaseFor: 10 * time.Second, hardMS: 15000,
		detected: make(chan wire.Sighting, 1000), outcomes: make(chan wire.Outcome, 100),
		events: make(chan wire.Event, 100), lookups: make(chan wire.LookupResult, 10)}
	// The tenant wants every job (a tenant without filters wants nothing).
	_, err = p.claims.PutFilter(ctx, audit.Entry{Actor: "test"}, tenant, claim.Filter{Name: "everything", Enabled: true})
	require.NoError(t, err)
	p.welcome = wire.Welcome{AgentID: p.agentID, InstallationID: "inst-test",
		Config:      wire.Config{Account: wire.Account{Key: "acme-1", Region: "us-central", BoardURL: boardURL}, Workers: workers},
		Credentials: creds, CredentialOrigins: []string{boardURL}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *claimPanel) send(m wire.Message) error {
	p.mu.Lock()
	c, v := p.conn, p.ver
	p.mu.Unlock()
	if c == nil {
		return fmt.Errorf("no agent connected")
	}
	raw, err := wire.Encode(v, wire.Frame{Time: time.Now(), Message: m})
	if err != nil {
		return err
	}
	return c.Write(context.Background(), websocket.MessageText, raw)
}

func (p *claimPanel) serve(w http.ResponseWriter, r *http.Request) {
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
	v, err := wire.Negotiate(h.Version, h.MinVersion)
	if err != nil {
		return
	}
	if p.maxVer > 0 && v > p.maxVer {
		v = p.maxVer
	}
	wel := p.welcome
	wel.Version = v
	raw, _ := wire.Encode(v, wire.Frame{Time: time.Now(), Message: wel})
	if conn.Write(ctx, websocket.MessageText, raw) != nil {
		return
	}
	p.mu.Lock()
	p.conn, p.ver = conn, v
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		if p.conn == conn {
			p.conn = nil
		}
		p.mu.Unlock()
	}()
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			return
		}
		f, err := wire.Decode(data)
		if err != nil {
			p.t.Errorf("the agent sent an undecodable message: %v", err)
			return
		}
		go p.handle(ctx, f.Message)
	}
}

// record writes the panel's record of a queued job, as the real cell
// dispatcher does before any offer: the lease checks the tenant's filters
// against it.
func (p *claimPanel) record(ctx context.Context, key string) {
	now := time.Now()
	if _, err := p.claims.RecordJob(ctx, claim.QueuedJob{Tenant: p.tenant, Cell: "default", Job: wire.Job{Key: key},
		SeenAt: now, QueuedAt: now}); err != nil {
		p.t.Errorf("record job: %v", err)
	}
}

func (p *claimPanel) holder(worker string) claim.Holder {
	return claim.Holder{Agent: p.agentID, Worker: worker}
}

func (p *claimPanel) handle(ctx context.Context, m wire.Message) {
	switch m := m.(type) {
	case wire.Detected:
		if m.BoardClock != nil {
			p.mu.Lock()
			p.boardClock = m.BoardClock
			p.mu.Unlock()
		}
		for _, s := range m.Sightings {
			p.detected <- s
		}
	case wire.LeaseRequest:
		p.leases.Add(1)
		p.record(ctx, m.Key)
		l, err := p.claims.Lease(ctx, claim.LeaseRequest{Tenant: p.tenant, Key: m.Key, Holder: p.holder(m.Worker), For: p.leaseFor})
		res := wire.LeaseResult{RequestID: m.RequestID, Key: m.Key}
		switch {
		case err == nil:
			res.Granted, res.Token, res.OperationID = true, l.Token, l.OperationID
			res.RemainingMillis, res.HardTimeoutMillis = l.Remaining.Milliseconds(), p.hardMS
			res.BookingKey, res.KeysHonoured = l.BookingKey, l.KeysHonoured
		case errors.Is(err, claim.ErrNotGranted):
			res.Reason = wire.ReasonHeld
		case errors.As(err, new(*claim.Refusal)):
			res.Reason = wire.ReasonHeld
		default:
			p.t.Errorf("lease: %v", err)
			res.Reason = wire.ReasonInternal
		}
		_ = p.send(res)
	case wire.ActRequest:
		g, err := p.claims.StartActing(ctx, p.tenant, m.Key, m.Token, p.holder(m.Worker), time.Duration(p.hardMS)*time.Millisecond)
		res := wire.ActResult{RequestID: m.RequestID, Key: m.Key, OK: err == nil, OperationID: g.OperationID}
		if err != nil {
			res.Reason = err.Error()
		}
		_ = p.send(res)
	case wire.Outcome:
		o := claim.Outcome{Result: claim.State(m.Result), Detail: m.Detail}
		if m.SentAt != nil {
			o.SentAt = *m.SentAt
		}
		if m.ConfirmedAt != nil {
			o.ConfirmedAt = *m.ConfirmedAt
		}
		err := p.claims.Report(ctx, p.tenant, m.Key, m.Token, p.holder(m.Worker), o)
		p.outcomes <- m
		if p.noAck.Load() {
			return
		}
		// Answered as the panel's engine and gateway answer (claim.Engine.Outcome,
		// claim.Disposition): a refusal is definitive, a failed statement
		// transient.
		ack := wire.OutcomeAck{RequestID: m.RequestID, OK: err == nil}
		var r *claim.Refusal
		switch {
		case err == nil:
		case errors.As(err, &r) && r.Reason == claim.ReasonWrongState:
			ack.OK, ack.Reason = true, wire.ReasonWrongState
		case errors.As(err, &r):
			ack.Reason = r.Reason
		default:
			ack.Reason = wire.ReasonInternal
		}
		_ = p.send(claim.Disposition(ack))
	case wire.GateCheck:
		// The real gate: the store's read-only fenced check.
		res := wire.GateResult{RequestID: m.RequestID, Key: m.Key, OK: true}
		if err := p.claims.GateCheck(ctx, p.tenant, m.Key, m.Token, p.holder(m.Worker), 100*time.Millisecond); err != nil {
			var r *claim.Refusal
			res.OK, res.Reason = false, wire.ReasonInternal
			if errors.As(err, &r) {
				res.Reason = r.Reason
			}
		}
		p.gates.Add(1)
		_ = p.send(res)
	case wire.Event:
		p.events <- m
	case wire.State:
		p.mu.Lock()
		p.state = m
		p.mu.Unlock()
	case wire.LookupResult:
		p.lookups <- m
	case wire.CommandResult:
		p.commands.Store(m.CommandID, m)
	}
}

// command sends a command and waits for the agent's result: the agent
// answers once the command has taken effect (a pause is set).
func (p *claimPanel) command(t *testing.T, m wire.Message, id string) {
	t.Helper()
	require.NoError(t, p.send(m))
	require.Eventually(t, func() bool { _, ok := p.commands.Load(id); return ok }, 10*time.Second, 5*time.Millisecond,
		"the agent answered command %s", id)
	r, _ := p.commands.Load(id)
	require.True(t, r.(wire.CommandResult).OK, "command %s: %+v", id, r)
}

// offer sends an offer for a board load.
func (p *claimPanel) offer(t *testing.T, l *board.Load) {
	t.Helper()
	keys, err := p.claims.HonoursIdempotency(context.Background(), p.tenant)
	require.NoError(t, err)
	require.NoError(t, p.send(wire.Offer{OfferID: uuid(), Job: wire.Job{Key: l.ID, PublishedAt: l.PublishedAt, ExpiresAt: l.ExpiresAt},
		QueuedAt: time.Now(), Cell: "a", KeysHonoured: keys}))
}

func (p *claimPanel) waitConnected(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.conn != nil
	}, 15*time.Second, 20*time.Millisecond, "the agent never connected")
}

func (p *claimPanel) outcome(t *testing.T, wait time.Duration) wire.Outcome {
	t.Helper()
	select {
	case o := <-p.outcomes:
		return o
	case <-time.After(wait):
		t.Fatal("no outcome reported")
		return wire.Outcome{}
	}
}

// event waits for an event of kind.
// signInWait bounds a browser worker's first sign-in: Chromium's launch and
// three page loads, which a busy two-core machine (the rest of the suite
// beside it) has been seen to stretch past 30 s.
const signInWait = 90 * time.Second

func (p *claimPanel) event(t *testing.T, kind string, wait time.Duration) wire.Event {
	t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case e := <-p.events:
			if e.Kind == kind {
				return e
			}
		case <-deadline:
			t.Fatalf("no %s event", kind)
			return wire.Event{}
		}
	}
}

// runAgent starts the agent role against the panel; it stops when the test
// ends. It returns the state dir and a stop function (idempotent).
func runAgent(t *testing.T, p *claimPanel, stateDir string) (stop func(), logs *syncBuffer) {
	t.Helper()
	return runAgentWith(t, p, stateDir, nil)
}

// runAgentWith is runAgent with the agent's configuration adjusted by mod.
func runAgentWith(t *testing.T, p *claimPanel, stateDir string, mod func(*Config)) (stop func(), logs *syncBuffer) {
	t.Helper()
	if stateDir == "" {
		stateDir = filepath.Join(t.TempDir(), "state")
	}
	require.NoError(t, os.MkdirAll(stateDir, 0o700))
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600))
	cfg := Config{PanelURL: p.srv.URL, TokenFile: tokenFile, StateDir: stateDir, Build: "test", Hostname: "agent-test",
		Clock: clock.Real{}, StateEvery: time.Hour, IOTimeout: 5 * time.Second, BrowserSlots: 2}
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	logs = &syncBuffer{}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(logs, tlog{t}), &slog.HandlerOptions{Level: slog.LevelDebug}))
	go func() { done <- Run(ctx, cfg, log) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(45 * time.Second):
				// The agent's unit gives it 45 s (TimeoutStopSec) before a
				// SIGKILL; where it hangs is what the next reader needs.
				buf := make([]byte, 1<<20)
				t.Errorf("the agent did not stop within 45 s; goroutines:\n%s", buf[:runtime.Stack(buf, true)])
			}
		})
	}
	t.Cleanup(stop)
	return stop, logs
}

type tlog struct{ t *testing.T }

func (w tlog) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// noSecrets fails if a secret of the account or its session is in the logs.
func noSecrets(t *testing.T, logs *syncBuffer, creds wire.Credentials, stateDir string) {
	t.Helper()
	out := logs.String()
	require.NotContains(t, out, creds.Password.Reveal())
	require.NotContains(t, out, creds.TOTPSecret.Reveal())
	if stateDir == "" {
		return
	}
	st, err := store.Open(context.Background(), stateDir)
	require.NoError(t, err)
	defer st.Close()
	cs, err := st.Cookies(context.Background())
	require.NoError(t, err)
	for _, c := range cs {
		require.NotContains(t, out, c.Value.Reveal(), "cookie %s leaked into a log", c.Name)
	}
}

// boardAccount starts a board and creates the account acme-1.
func boardAccount(t *testing.T, mod ...func(*board.Config)) (*board.Server, wire.Credentials) {
	t.Helper()
	s := boardtest.Start(t, mod...)
	acct, err := s.CreateAccount(context.Background(), board.AccountSpec{Username: "acme-1", Password: testPassword, Client: "acme"})
	require.NoError(t, err)
	return s, wire.Credentials{Username: "acme-1", Password: wire.NewSecret(testPassword), TOTPSecret: wire.NewSecret(acct.TOTPSecret)}
}
