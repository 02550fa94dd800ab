package fleet

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/server"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Claims is the claim engine as the gateway sees it. Tenant and holder come
// from the authenticated connection, never from the message.
type Claims interface {
	Detected(ctx context.Context, tenant, agentID string, d wire.Detected, offset wire.Estimate) error
	Lease(ctx context.Context, tenant string, h claim.Holder, r wire.LeaseRequest) wire.LeaseResult
	Act(ctx context.Context, tenant string, h claim.Holder, r wire.ActRequest) wire.ActResult
	Outcome(ctx context.Context, tenant string, h claim.Holder, o wire.Outcome, offset wire.Estimate) wire.OutcomeAck
	// Gate is a granted action's read-only fenced check (assign mode, v4).
	Gate(ctx context.Context, tenant string, h claim.Holder, r wire.GateCheck) wire.GateResult
	// AgentLost is told when an agent's connection ends: the actions in
	// flight on that connection can no longer be reported and become
	// UNKNOWN. Only that connection's claims (connID), never those of the
	// same agent's newer connection.
	AgentLost(ctx context.Context, tenant, agentID, connID string) error
}

// GatewayConfig configures the gateway.
type GatewayConfig struct {
	ReplicaID      string
	InstallationID string
	// PingEvery is how often the clock offset is re-measured (default 15 s).
	PingEvery time.Duration
	// OffsetRefresh is how often, at most, a clock-offset estimate that
	// moved less than OffsetChange is written to the agents row (default
	// DefaultOffsetRefresh); a larger move is written at once (offset.go).
	OffsetRefresh time.Duration
	// PollEvery re-reads pending commands even without a wake-up, so a lost
	// notification delays a command by at most this much (default 10 s).
	PollEvery time.Duration
	// HelloTimeout bounds the wait for the first message (default 10 s).
	HelloTimeout time.Duration
	// MaxInFlight bounds concurrent claim requests per connection.
	MaxInFlight int
	// TrustedProxies are the proxies (Caddy) whose X-Forwarded-Proto says
	// whether the agent's own leg was TLS; credentials go only over TLS or
	// loopback (see transport).
	TrustedProxies []netip.Prefix
	Clock          clock.Clock
	Registerer     prometheus.Registerer
}

// Gateway serves the agents' WebSocket at /agent/ws.
type Gateway struct {
	cfg    GatewayConfig
	store  *Store
	log    *slog.Logger
	claims Claims

	mu       sync.Mutex
	conns    map[string]*conn            // agent id → its connection on this replica
	byTenant map[string]map[string]*conn // tenant → agent id → connection

	relayOnce sync.Once
	relays    *relayState
	rr        int
	// sweeping says the sweeper (sweep.go) runs; it stops when the last
	// connection has gone.
	sweeping bool

	connected   prometheus.Gauge
	messages    *prometheus.CounterVec
	silentDrops prometheus.Counter
	panelIn     *panelIn
	// completions counts the work agents' workers finished, by worker kind
	// and outcome; spend is each enrolled assistant's model spend today.
	completions *prometheus.CounterVec
	spend       *prometheus.GaugeVec
	// browserSeconds counts the seconds agents' browsers were open for
	// work, by tenant and worker kind (from their state reports).
	browserSeconds *prometheus.CounterVec
}

// NewGateway returns a gateway; claims may be nil until the engine is wired.
func NewGateway(store *Store, claims Claims, cfg GatewayConfig, log *slog.Logger) *Gateway {
	if cfg.PingEvery <= 0 {
		cfg.PingEvery = 15 * time.Second
	}
	if cfg.PollEvery <= 0 {
		cfg.PollEvery = 10 * time.Second
	}
	if cfg.OffsetRefresh <= 0 {
		cfg.OffsetRefresh = DefaultOffsetRefresh
	}
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = 10 * time.Second
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 64
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	g := &Gateway{cfg: cfg, store: store, log: log.With("component", "gateway"), claims: claims,
		conns: map[string]*conn{}, byTenant: map[string]map[string]*conn{},
		connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_agents_connected",
			Help: "Agents connected to this panel replica."}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_agent_messages_total",
			Help: "Protocol messages received from agents, by type."}, []string{"type"}),
		silentDrops: prometheus.NewCounter(prometheus.CounterOpts{Name: "fleet_agent_silent_drops_total",
			Help: "Agent connections this replica dropped after two ping intervals without a word from the agent (a dead path without FIN or RST)."}),
		completions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_worker_completions_total",
			Help: "Tasks agents' workers finished, by worker kind and outcome (claim outcomes: confirmed, taken, not_sent, unknown; crawl pages: ok, error), as this replica received them."},
			[]string{"kind", "outcome"}),
		spend: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fleet_model_spend_today_usd",
			Help: "Model spend of each enrolled assistant on its UTC day so far, in USD, from its latest report to this replica."},
			[]string{"tenant", "agent"}),
		browserSeconds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_browser_seconds_total",
			Help: "Seconds agents' browsers (Chromium) were open for work, by tenant and worker kind, from the agents' state reports (v4) as this replica received them."},
			[]string{"tenant", "kind"}),
		panelIn: newPanelIn(),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(g.connected, g.messages, g.silentDrops, g.completions, g.spend, g.panelIn.hist, g.browserSeconds)
	}
	return g
}

// SetClaims wires the claim engine after construction.
func (g *Gateway) SetClaims(c Claims) {
	g.mu.Lock()
	g.claims = c
	g.mu.Unlock()
}

func (g *Gateway) claimEngine() Claims {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.claims
}

// remoteAddr is the agent's egress address: the peer's, or what a trusted
// proxy (--trusted-proxies) reports.
func remoteAddr(r *http.Request) string { return server.ClientIP(r) }

// ServeHTTP accepts one agent connection and authenticates it; the
// connection's life then runs on goroutines of its own and this handler
// returns. Returning lets net/http drop what it keeps per connection while
// a handler runs (its 4 KiB read and write buffers, the request, the
// handler goroutine's stack grown by the handshake): an idle agent
// connection is then little more than its two goroutines and two 512-byte
// buffers (docs/BENCHMARKS.md, "Agent connections").
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	lw := &leanWriter{ResponseWriter: w}
	ws, err := websocket.Accept(lw, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return
	}
	// Frames up to twice the protocol's limit reach the decoder, which
	// answers an oversized message with a protocol error before closing;
	// anything larger is cut by the WebSocket layer itself.
	ws.SetReadLimit(2 * wire.MaxMessageBytes)
	secure, how := transport(r, g.cfg.TrustedProxies)
	c := &conn{g: g, id: newConnID(), ws: ws, remote: remoteAddr(r), secure: secure, transport: how,
		est: wire.NewEstimator(0), lookups: map[string]chan wire.LookupResult{}, pages: map[string]chan wire.PageResult{},
		sent: map[string]bool{}, sem: make(chan struct{}, g.cfg.MaxInFlight), idle: newIdleWait(lw.conn, lw.br)}
	// The request's context ends when this handler returns; the
	// connection's when the connection does.
	c.ctx, c.stop = context.WithCancel(context.Background())
	if !c.handshake(c.ctx) {
		c.stop()
		return
	}
	go c.run()
}

// pingOut is a ping sent and not answered yet.
type pingOut struct {
	id string
	at time.Time
}

type conn struct {
	g *Gateway
	// id names this connection (uuid): the claims leased or acted on
	// through it carry it, so its end settles only them.
	id string
	ws *websocket.Conn
	// idle is the reader's shallow wait between frames (idle.go), nil
	// where it cannot be used.
	idle    *idleWait
	remote  string
	agent   Agent
	version int
	// ctx is the connection's life; stop ends it.
	ctx  context.Context
	stop context.CancelFunc
	// heard is when the agent's last frame arrived (the gateway clock's
	// Unix nanoseconds): the sweeper drops a connection silent for two
	// ping intervals.
	heard atomic.Int64
	// handling is true while the reader waits for a frame's handling (a
	// slow database): the panel is not listening then, so the agent's
	// silence is not counted.
	handling atomic.Bool
	// delivering says a delivery of pending commands runs; again asks it
	// to read them once more when it ends (a wake-up arrived meanwhile).
	delivering, again atomic.Bool
	// bg counts the connection's short-lived goroutines (spawn); ending
	// (under mu) stops new ones once the connection has ended.
	bg     sync.WaitGroup
	ending bool
	// nextPing and nextPoll are the sweeper's schedule (under mu).
	nextPing, nextPoll time.Time
	// secure: TLS end to end, or a local peer (transport); credentials are
	// withheld otherwise. transport describes it for the log.
	secure    bool
	transport string
	// helloKey is the installation key the agent presented, pinnedKey the
	// one the panel pinned for it; credentials are sealed to pinnedKey and
	// sent only when both agree.
	helloKey, pinnedKey string

	mu     sync.Mutex
	est    *wire.Estimator
	offset wire.Estimate
	// stored is the estimate this connection last wrote to the agents row
	// (storedOK once it wrote one), at storedAt (offset.go).
	stored   wire.Estimate
	storedAt time.Time
	storedOK bool
	pings    []pingOut // sent, not answered yet: one or two at a time
	lookups  map[string]chan wire.LookupResult
	pages    map[string]chan wire.PageResult // crawl page tasks awaiting their result
	sent     map[string]bool                 // commands written on this connection
	kinds    map[string]string               // worker name → kind, from the agent's state reports
	sem      chan struct{}
	// The agent's last state report (its actors for assign mode) and the
	// grants sent on this connection without an outcome yet (assign.go).
	workers     []wire.WorkerState
	agentPaused bool
	grants      map[int64]grantOut
	// limitAlarms: an enrolled assistant's tasks by id, true while this
	// connection holds their limit alarm open (assistantAlarms).
	limitAlarms map[int64]bool
}

func (c *conn) send(ctx context.Context, m wire.Message) error {
	if !wire.InVersion(m.MessageType(), c.version) {
		return fmt.Errorf("fleet: %s is not part of protocol v%d", m.MessageType(), c.version)
	}
	data, err := wire.Encode(c.version, wire.Frame{Time: c.g.cfg.Clock.Now(), Message: m})
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return c.ws.Write(wctx, websocket.MessageText, data)
}

// fail answers a protocol error and closes the connection.
func (c *conn) fail(ctx context.Context, e wire.Error) {
	if c.version == 0 {
		c.version = wire.MinSupported
	}
	_ = c.send(ctx, e)
	_ = c.ws.Close(websocket.StatusPolicyViolation, string(e.Code))
}

func (c *conn) read(ctx context.Context) (wire.Frame, error) {
	typ, data, err := c.ws.Read(ctx)
	if err != nil {
		return wire.Frame{}, err
	}
	return c.decode(ctx, typ, data)
}

// decode checks and decodes one frame; a bad one is answered with a
// protocol error and ends the connection.
func (c *conn) decode(ctx context.Context, typ websocket.MessageType, data []byte) (wire.Frame, error) {
	if typ != websocket.MessageText {
		c.fail(ctx, wire.Error{Code: wire.CodeMalformed, Message: "binary messages are not part of the protocol"})
		return wire.Frame{}, errors.New("binary message")
	}
	f, err := wire.Decode(data)
	if err != nil {
		c.fail(ctx, wire.ErrorFor(err))
		return wire.Frame{}, err
	}
	c.g.messages.WithLabelValues(string(f.Type)).Inc()
	c.heard.Store(c.g.cfg.Clock.Now().UnixNano())
	return f, nil
}

// handshake reads the hello, authenticates the agent and welcomes it; it
// reports false when the connection ended.
func (c *conn) handshake(ctx context.Context) bool {
	g := c.g
	hctx, cancel := context.WithTimeout(ctx, g.cfg.HelloTimeout)
	f, err := c.read(hctx)
	cancel()
	if err != nil {
		_ = c.ws.CloseNow()
		return false
	}
	hello, ok := f.Message.(wire.Hello)
	if !ok {
		c.fail(ctx, wire.Error{Code: wire.CodeUnexpected, Message: "the first message must be hello"})
		return false
	}
	v, err := wire.Negotiate(hello.Version, hello.MinVersion)
	if err != nil {
		c.version = wire.MinSupported
		if hello.MinVersion > wire.Current {
			c.version = wire.Current
		}
		c.reject(ctx, wire.RejectFor(err, g.cfg.InstallationID))
		return false
	}
	c.version = v
	a, err := g.store.Authenticate(ctx, hello.Token.Reveal())
	switch {
	case errors.Is(err, ErrUnknownToken):
		c.reject(ctx, wire.Reject{Reason: wire.RejectUnknownToken, Message: "this panel does not know the agent's token",
			InstallationID: g.cfg.InstallationID})
		return false
	case errors.Is(err, ErrRetired):
		c.reject(ctx, wire.Reject{Reason: wire.RejectRetired, Message: "the agent was deleted; it must retire",
			InstallationID: g.cfg.InstallationID})
		return false
	case err != nil:
		g.log.Error("agent authentication failed", "err", err)
		_ = c.ws.Close(websocket.StatusTryAgainLater, "panel error")
		return false
	}
	c.agent = a
	if v >= wire.V4 {
		c.helloKey = hello.InstallKey
	}
	if !wire.InVersion(wire.TypeLeaseGrant, v) {
		// Assign mode (the default of a new tenant) cannot grant it a job.
		g.log.Info("agent speaks a protocol without lease_grant: in assign mode it is offered jobs only while no actor on protocol v4 is warm; upgrade it to be granted jobs",
			"agent", a.ID, "protocol", v)
	}
	if c.secure {
		// A key is pinned only over a connection nobody could tamper with.
		if c.pinnedKey, err = g.store.PinInstallKey(ctx, a, c.helloKey, c.remote); err != nil {
			g.log.Error("agent welcome failed", "agent", a.ID, "err", err)
			_ = c.ws.Close(websocket.StatusTryAgainLater, "panel error")
			return false
		}
	}
	cfg, creds, err := g.store.Welcome(ctx, a)
	if err != nil {
		g.log.Error("agent welcome failed", "agent", a.ID, "err", err)
		_ = c.ws.Close(websocket.StatusTryAgainLater, "panel error")
		return false
	}
	w := wire.Welcome{Version: v, AgentID: a.ID, InstallationID: g.cfg.InstallationID, Config: cfg}
	if v >= wire.V4 {
		// An assistant's limits (only an assistant reads them).
		if w.AssistantLimits, err = g.store.AssistantLimits(ctx, a.Tenant); err != nil {
			g.log.Error("agent welcome failed", "agent", a.ID, "err", err)
			_ = c.ws.Close(websocket.StatusTryAgainLater, "panel error")
			return false
		}
		// The account's request budget (the agent enforces it).
		if w.RequestLimit, err = g.store.RequestLimit(ctx, a.Tenant); err != nil {
			g.log.Error("agent welcome failed", "agent", a.ID, "err", err)
			_ = c.ws.Close(websocket.StatusTryAgainLater, "panel error")
			return false
		}
	}
	w.SealedCredentials, w.CredentialsWithheld = c.protect(ctx, creds)
	if err := c.send(ctx, w); err != nil {
		return false
	}
	if err := g.store.Connected(ctx, a, g.cfg.ReplicaID, c.remote, hello.Host, hello.Build, v); err != nil {
		g.log.Error("record agent connection", "agent", a.ID, "err", err)
	}
	g.register(c)
	g.log.Info("agent connected", "agent", a.ID, "tenant", a.Tenant, "protocol", v, "remote", c.remote, "build", hello.Build)
	return true
}

// run serves a welcomed connection until it ends, then records the
// departure. It is the connection's only long-lived goroutine: commands
// and pings are sent from short-lived ones the sweeper (sweep.go) and
// wake-ups start.
func (c *conn) run() {
	g, a, ctx := c.g, c.agent, c.ctx
	defer func() {
		// A panic here must not take the replica down with every other
		// agent's connection: this goroutine is not net/http's.
		if v := recover(); v != nil {
			g.log.Error("agent connection failed", "agent", a.ID, "panic", fmt.Sprint(v))
			_ = c.ws.CloseNow()
			g.unregister(c)
		}
	}()
	c.heard.Store(g.cfg.Clock.Now().UnixNano())
	c.kick()
	c.spawn(func() { c.ping(ctx) })
	c.reader(ctx)
	// Whatever ended the reader (the agent's error report, a failed read,
	// a close), the socket is released now, not by a finalizer.
	_ = c.ws.CloseNow()
	c.stop()
	c.mu.Lock()
	c.ending = true
	c.mu.Unlock()
	c.bg.Wait()
	current := g.unregister(c)
	// The connection's context is gone; record the departure regardless,
	// with the clock offset measured since the last write — unless a newer
	// connection of the agent on this replica replaced this one: the row
	// is that connection's now.
	bctx, cancel2 := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel2()
	if current {
		if err := g.store.Disconnected(bctx, a, g.cfg.ReplicaID, c.unsavedOffset()); err != nil {
			g.log.Warn("record agent disconnection", "agent", a.ID, "err", err)
		}
	}
	if cl := g.claimEngine(); cl != nil {
		if err := cl.AgentLost(bctx, a.Tenant, a.ID, c.id); err != nil {
			g.log.Warn("settle a lost agent's actions", "agent", a.ID, "err", err)
		}
	}
	g.log.Info("agent disconnected", "agent", a.ID, "tenant", a.Tenant)
}

func (c *conn) reject(ctx context.Context, r wire.Reject) {
	_ = c.send(ctx, r)
	_ = c.ws.Close(websocket.StatusNormalClosure, string(r.Reason))
}

func (g *Gateway) register(c *conn) {
	g.mu.Lock()
	old := g.conns[c.agent.ID]
	g.conns[c.agent.ID] = c
	if g.byTenant[c.agent.Tenant] == nil {
		g.byTenant[c.agent.Tenant] = map[string]*conn{}
	}
	g.byTenant[c.agent.Tenant][c.agent.ID] = c
	g.watch(c)
	g.mu.Unlock()
	if old != nil {
		// The same agent connected again before its old connection died.
		old.closeAndWait(websocket.StatusPolicyViolation, "replaced by a newer connection", 10*time.Second)
	} else {
		g.connected.Inc()
	}
}

// unregister forgets c; it reports false when c was no longer the agent's
// connection on this replica (a newer one replaced it).
func (g *Gateway) unregister(c *conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.conns[c.agent.ID] != c {
		return false
	}
	delete(g.conns, c.agent.ID)
	delete(g.byTenant[c.agent.Tenant], c.agent.ID)
	g.connected.Dec()
	return true
}

// Wake asks the connection of agentID on this replica, if any, to deliver
// its pending commands now.
func (g *Gateway) Wake(agentID string) {
	g.mu.Lock()
	c := g.conns[agentID]
	g.mu.Unlock()
	if c != nil {
		c.nudge()
	}
}

// local returns the connections on this replica, taken under the lock so the
// caller can act on them without holding it.
func (g *Gateway) local() []*conn {
	g.mu.Lock()
	defer g.mu.Unlock()
	cs := make([]*conn, 0, len(g.conns))
	for _, c := range g.conns {
		cs = append(cs, c)
	}
	return cs
}

// WakeAll nudges every local connection (after a lost LISTEN connection,
// notifications may have been missed).
func (g *Gateway) WakeAll() {
	cs := g.local()
	for _, c := range cs {
		c.nudge()
	}
}

func (c *conn) nudge() { c.kick() }

func (c *conn) deliver(ctx context.Context) {
	cmds, err := c.g.store.Pending(ctx, c.agent.Tenant, c.agent.ID)
	if err != nil {
		if ctx.Err() == nil {
			c.g.log.Warn("read pending commands", "agent", c.agent.ID, "err", err)
		}
		return
	}
	for _, cmd := range cmds {
		c.mu.Lock()
		already := c.sent[cmd.ID]
		c.mu.Unlock()
		if already {
			continue
		}
		m, err := c.g.store.message(ctx, c.agent, cmd)
		if err != nil {
			c.g.log.Error("build command", "agent", c.agent.ID, "command", cmd.ID, "err", err)
			continue
		}
		if rc, ok := m.(wire.RotateCredentials); ok {
			rc.Sealed, rc.Withheld = c.protect(ctx, rc.Credentials)
			rc.Credentials = wire.Credentials{}
			m = rc
		}
		if err := c.send(ctx, m); err != nil {
			return
		}
		c.mu.Lock()
		c.sent[cmd.ID] = true
		c.mu.Unlock()
		_ = c.g.store.MarkSent(ctx, c.agent.Tenant, cmd.ID)
	}
}

func (c *conn) ping(ctx context.Context) {
	id := wire.NewID()
	now := c.g.cfg.Clock.Now()
	c.mu.Lock()
	if len(c.pings) >= 16 {
		// Unanswered pings are not kept forever.
		c.pings = slices.DeleteFunc(c.pings, func(p pingOut) bool { return now.Sub(p.at) > time.Minute })
	}
	c.pings = append(c.pings, pingOut{id: id, at: now})
	c.mu.Unlock()
	_ = c.send(ctx, wire.Ping{CommandID: id, SentAt: now})
}

// Offset returns the agent's current clock-offset estimate.
func (c *conn) Offset() wire.Estimate {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

// reader reads the agent's frames. Each is read, decoded and handled on a
// short-lived goroutine while this one waits (order and back-pressure are
// unchanged), so the connection's only long-lived goroutine keeps a shallow
// stack: reading, decoding and database work grow a stack to 8–16 KiB,
// which an idle panel's collector seldom shrinks back. Between frames it
// waits on the socket itself where it can (idle.go).
func (c *conn) reader(ctx context.Context) {
	for {
		if c.idle != nil {
			if cr := c.idle.wait(); cr != nil {
				c.offload(func() { _ = c.ws.Close(cr.code, cr.reason) })
				return
			}
			more := false
			c.handled(func() {
				typ, data, err := c.ws.Read(ctx)
				if err == nil {
					more = c.handle(ctx, typ, data)
				}
			})
			if !more {
				return
			}
			continue
		}
		typ, data, err := c.ws.Read(ctx)
		if err != nil {
			return
		}
		more := false
		c.handled(func() { more = c.handle(ctx, typ, data) })
		if !more {
			return
		}
	}
}

// handled runs f (a frame's handling) as offload does, with the silence
// clock stopped: frames that arrive meanwhile wait unread, and the
// agent's silence counts again from when the reader listens again.
func (c *conn) handled(f func()) {
	c.handling.Store(true)
	c.offload(f)
	c.heard.Store(c.g.cfg.Clock.Now().UnixNano())
	c.handling.Store(false)
}

// handle decodes and handles one frame; false ends the connection.
func (c *conn) handle(ctx context.Context, typ websocket.MessageType, data []byte) bool {
	f, err := c.decode(ctx, typ, data)
	if err != nil {
		return false
	}
	at := c.g.cfg.Clock.Now()
	switch m := f.Message.(type) {
	case wire.Pong:
		c.pong(ctx, m, at)
	case wire.State:
		c.noteState(m)
		prev, err := c.g.store.SaveStateSince(ctx, c.agent, m)
		if err != nil && ctx.Err() == nil {
			c.g.log.Warn("save agent state", "agent", c.agent.ID, "err", err)
		}
		if err == nil {
			for kind, d := range BrowserSecondsGrowth(prev, m) {
				c.g.browserSeconds.WithLabelValues(c.agent.Tenant, kind).Add(d)
			}
		}
		c.mu.Lock()
		c.kinds = map[string]string{}
		for _, w := range m.Workers {
			c.kinds[w.Name] = w.Kind
		}
		c.mu.Unlock()
	case wire.Event:
		if err := c.g.store.AddEvent(ctx, c.agent, m); err != nil && ctx.Err() == nil {
			c.g.log.Warn("save agent event", "agent", c.agent.ID, "err", err)
		}
		c.requestLimitEvent(ctx, m)
	case wire.AssistantReport:
		if err := c.g.store.SaveAssistantReport(ctx, c.agent, m); err != nil && ctx.Err() == nil {
			c.g.log.Warn("save assistant report", "agent", c.agent.ID, "err", err)
		}
		c.g.spend.WithLabelValues(c.agent.Tenant, c.agent.ID).Set(m.CostTodayUSD)
		c.assistantAlarms(ctx, m)
	case wire.CommandResult:
		if _, err := c.g.store.Ack(ctx, c.agent.Tenant, c.agent.ID, m); err != nil && ctx.Err() == nil {
			c.g.log.Warn("ack command", "agent", c.agent.ID, "err", err)
		}
	case wire.LookupResult:
		c.mu.Lock()
		ch := c.lookups[m.RequestID]
		delete(c.lookups, m.RequestID)
		c.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	case wire.PageResult:
		c.pageResult(m)
	case wire.Detected, wire.LeaseRequest, wire.ActRequest, wire.Outcome, wire.GateCheck:
		if d, ok := m.(wire.Detected); ok {
			c.g.panelIn.seen(c.agent.Tenant, d, time.Now())
		}
		if !c.claim(ctx, f.Message) {
			return false
		}
	case wire.Error:
		c.g.log.Warn("agent reported a protocol error", "agent", c.agent.ID, "code", m.Code, "message", m.Message)
		return false
	default:
		c.fail(ctx, wire.Error{Code: wire.CodeUnexpected, Message: fmt.Sprintf("%s is not sent by agents", f.Type)})
		return false
	}
	return true
}

func (c *conn) pong(ctx context.Context, p wire.Pong, at time.Time) {
	c.mu.Lock()
	i := slices.IndexFunc(c.pings, func(x pingOut) bool { return x.id == p.CommandID })
	if i >= 0 {
		c.pings = slices.Delete(c.pings, i, i+1)
	}
	c.mu.Unlock()
	if i < 0 {
		return
	}
	c.mu.Lock()
	err := c.est.Add(wire.SampleFromPong(p, at))
	est, _ := c.est.Estimate()
	c.offset = est
	write := err == nil && offsetDue(c.stored, c.storedAt, c.storedOK, est, at, c.g.cfg.OffsetRefresh)
	c.mu.Unlock()
	if !write {
		return
	}
	if err := c.g.store.SaveOffset(ctx, c.agent, est); err != nil {
		if ctx.Err() == nil {
			c.g.log.Warn("save clock offset", "agent", c.agent.ID, "err", err)
		}
		return
	}
	c.mu.Lock()
	c.stored, c.storedAt, c.storedOK = est, at, true
	c.mu.Unlock()
}

// claim hands a claim message to the engine without blocking the reader;
// it reports false when the connection must end.
func (c *conn) claim(ctx context.Context, m wire.Message) bool {
	cl := c.g.claimEngine()
	if cl == nil {
		c.fail(ctx, wire.Error{Code: wire.CodeUnexpected, Message: "this panel runs no claim engine"})
		return false
	}
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	go func() {
		defer func() { <-c.sem }()
		tenant := c.agent.Tenant
		switch x := m.(type) {
		case wire.Detected:
			if err := cl.Detected(ctx, tenant, c.agent.ID, x, c.Offset()); err != nil && ctx.Err() == nil {
				// A failing cell refuses sightings; the watcher sees the job
				// again on its next poll once the cell is back.
				c.g.log.Debug("sighting refused", "agent", c.agent.ID, "err", err)
			}
		case wire.LeaseRequest:
			_ = c.send(ctx, cl.Lease(ctx, tenant, claim.Holder{Agent: c.agent.ID, Worker: x.Worker, Conn: c.id}, x))
		case wire.ActRequest:
			_ = c.send(ctx, cl.Act(ctx, tenant, claim.Holder{Agent: c.agent.ID, Worker: x.Worker, Conn: c.id}, x))
		case wire.GateCheck:
			_ = c.send(ctx, cl.Gate(ctx, tenant, claim.Holder{Agent: c.agent.ID, Worker: x.Worker, Conn: c.id}, x))
		case wire.Outcome:
			c.grantSettled(x.Token)
			c.completed(x.Worker, strings.ToLower(x.Result))
			ack := claim.Disposition(cl.Outcome(ctx, tenant, claim.Holder{Agent: c.agent.ID, Worker: x.Worker, Conn: c.id}, x, c.Offset()))
			if ack.Disposition == wire.AckTransient && c.version < wire.V4 {
				// A v3 agent drops a report on any answer; withheld, the
				// report stays in its outbox until its next connection.
				c.g.log.Warn("outcome not recorded; acknowledgement withheld from a v3 agent", "agent", c.agent.ID, "key", x.Key)
				return
			}
			_ = c.send(ctx, ack)
		}
	}()
	return true
}

// newConnID returns a random uuid (version 4) for a connection.
func newConnID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// Offer sends an offer to every agent of tenant connected to this replica
// that speaks the claim protocol. It implements the claim engine's Offerer.
func (g *Gateway) Offer(ctx context.Context, tenant string, o wire.Offer) {
	g.mu.Lock()
	cs := make([]*conn, 0, len(g.byTenant[tenant]))
	for _, c := range g.byTenant[tenant] {
		if wire.InVersion(wire.TypeOffer, c.version) {
			cs = append(cs, c)
		}
	}
	g.mu.Unlock()
	if len(cs) > 0 {
		g.panelIn.sending(tenant, o.Job.Key)
	}
	for _, c := range cs {
		go func() { _ = c.send(ctx, o) }()
	}
}

// ErrNoAgent means no agent of the tenant that could answer is connected here.
var ErrNoAgent = errors.New("fleet: no connected agent of that tenant's platform client can look up bookings")

// Lookup asks one connected agent of tenant whose account books as client
// as to look up that client's bookings, and waits for its answer. An agent
// of another client is never asked: its "no booking" would prove nothing.
// It implements the claim engine's Lookuper.
func (g *Gateway) Lookup(ctx context.Context, tenant string, as claim.Client, l wire.Lookup) (wire.LookupResult, error) {
	ofClient, err := g.store.ClientAgents(ctx, tenant, as.Board, as.Name)
	if err != nil {
		return wire.LookupResult{}, err
	}
	g.mu.Lock()
	var cs []*conn
	for _, c := range g.byTenant[tenant] {
		if wire.InVersion(wire.TypeLookup, c.version) && ofClient[c.agent.ID] {
			cs = append(cs, c)
		}
	}
	g.rr++
	var c *conn
	if len(cs) > 0 {
		c = cs[g.rr%len(cs)]
	}
	g.mu.Unlock()
	if c == nil {
		return wire.LookupResult{}, fmt.Errorf("%w (%s)", ErrNoAgent, as)
	}
	if l.RequestID == "" {
		l.RequestID = wire.NewID()
	}
	ch := make(chan wire.LookupResult, 1)
	c.mu.Lock()
	c.lookups[l.RequestID] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.lookups, l.RequestID)
		c.mu.Unlock()
	}()
	if err := c.send(ctx, l); err != nil {
		return wire.LookupResult{}, fmt.Errorf("fleet: lookup: %w", err)
	}
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		return wire.LookupResult{}, fmt.Errorf("fleet: lookup: %w", ctx.Err())
	}
}

// CloseAll ends every agent connection on this replica (at shutdown: the
// agents reconnect, to this replica when it returns or to another).
func (g *Gateway) CloseAll() {
	cs := g.local()
	// Every close handshake at once, then the wait for them all (at most
	// 10 s in all): one slow agent does not hold up the others.
	for _, c := range cs {
		c.requestClose(websocket.StatusGoingAway, "panel shutting down")
	}
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for _, c := range cs {
		select {
		case <-c.ctx.Done():
		case <-deadline.C:
			return
		}
	}
}

// ConnectedCount reports how many agents are connected to this replica.
func (g *Gateway) ConnectedCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.conns)
}
