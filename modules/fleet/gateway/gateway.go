// Package gateway is the panel's end of the agent protocol: the WebSocket
// endpoint agents dial (gateway.go: accept, register, offers, look-ups,
// commands across replicas) and, per agent, the connection's loop
// (conn.go: handshake, reader, pings and clock offset, claims, delivery of
// commands), with the crawl relay and the idle-connection machinery beside.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/server"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/fleet"
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

// Config configures the gateway.
type Config struct {
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
	cfg    Config
	store  *fleet.Store
	log    *slog.Logger
	claims Claims

	// seq numbers connections in the order they were accepted.
	seq      atomic.Uint64
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

// New returns a gateway; claims may be nil until the engine is wired.
func New(store *fleet.Store, claims Claims, cfg Config, log *slog.Logger) *Gateway {
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
	c := &conn{g: g, id: newConnID(), seq: g.seq.Add(1), ws: ws, remote: remoteAddr(r), secure: secure, transport: how,
		est: wire.NewEstimator(0), lookups: map[string]chan wire.LookupResult{}, pages: map[string]chan wire.PageResult{},
		sent: map[string]bool{}, sem: make(chan struct{}, g.cfg.MaxInFlight), idle: newIdleWait(lw.conn, lw.br)}
	// The request's context ends when this handler returns; the
	// connection's when the connection does.
	// Of the request's values it keeps only the audit's address keys
	// (entries it appends hash the agent's address with them).
	c.ctx, c.stop = context.WithCancel(audit.WithAddressKeys(context.Background(), audit.AddressKeysFrom(r.Context())))
	if !c.handshake(c.ctx) {
		c.stop()
		return
	}
	go c.run()
}

func (g *Gateway) register(c *conn) bool {
	g.mu.Lock()
	old := g.conns[c.agent.ID]
	if old != nil && old.seq > c.seq {
		// A newer connection of the same agent registered while this one
		// was still shaking hands (the agent gave up on this one and
		// dialled again): this one is the stale one, not the other.
		g.mu.Unlock()
		return false
	}
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
	return true
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
