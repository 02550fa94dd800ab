package gateway

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/tenant"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// pingOut is a ping sent and not answered yet.
type pingOut struct {
	id string
	at time.Time
}

// conn is one agent's connection on this replica, from its handshake to
// its end: it reads frames, answers pings, runs claim statements, delivers
// commands and keeps the agent's clock offset.
type conn struct {
	g *Gateway
	// id names this connection (uuid): the claims leased or acted on
	// through it carry it, so its end settles only them.
	id string
	// seq orders this replica's connections by their start: of two
	// connections of one agent, the later one is the agent's.
	seq uint64
	// connectedAt is the agents row's connected_at this connection wrote:
	// its departure is recorded only while the row is still its own.
	connectedAt time.Time
	ws          *websocket.Conn
	// idle is the reader's shallow wait between frames (idle.go), nil
	// where it cannot be used.
	idle    *idleWait
	remote  string
	agent   fleet.Agent
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
	accepted := g.cfg.Clock.Now()
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
	c.offset = helloOffset(hello.Clock, accepted, g.cfg.Clock.Now())
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
	case errors.Is(err, fleet.ErrUnknownToken):
		c.reject(ctx, wire.Reject{Reason: wire.RejectUnknownToken, Message: "this panel does not know the agent's token",
			InstallationID: g.cfg.InstallationID})
		return false
	case errors.Is(err, fleet.ErrRetired):
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
	withhold := ""
	if errors.Is(err, fleet.ErrSealedElsewhere) {
		// Welcomed all the same, without the credentials: the agent stays
		// in sight and under control, and says why it signs in nowhere.
		g.log.Warn("agent welcomed without credentials", "agent", a.ID, "tenant", a.Tenant, "err", err)
		withhold, err = wire.WithheldOtherBoard, nil
	}
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
	w.SealedCredentials, w.CredentialsWithheld = c.protect(ctx, creds, withhold)
	if w.SealedCredentials != nil {
		// v5: the origins the credentials were sealed for; the agent sends
		// them nowhere else (ForVersion drops the field for a v4 agent).
		w.CredentialOrigins = creds.Origins
	}
	if err := c.send(ctx, w); err != nil {
		return false
	}
	// Registered before the row is written, so a stale handshake that
	// loses to a newer connection of the agent writes nothing.
	if !g.register(c) {
		g.log.Info("agent connection superseded by a newer one during its handshake", "agent", a.ID)
		_ = c.ws.Close(websocket.StatusPolicyViolation, "replaced by a newer connection")
		return false
	}
	at, err := g.store.Connected(ctx, a, g.cfg.ReplicaID, c.remote, hello.Host, hello.Build, v)
	if err != nil {
		g.log.Error("record agent connection", "agent", a.ID, "err", err)
	}
	c.connectedAt = at
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
		if err := g.store.Disconnected(bctx, a, g.cfg.ReplicaID, c.connectedAt, c.unsavedOffset()); err != nil {
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
		m, err := c.g.store.Message(ctx, c.agent, cmd)
		if err != nil {
			c.g.log.Error("build command", "agent", c.agent.ID, "command", cmd.ID, "err", err)
			continue
		}
		if rc, ok := m.(wire.RotateCredentials); ok {
			rc.Sealed, rc.Withheld = c.protect(ctx, rc.Credentials, "")
			if rc.Sealed != nil {
				// v5: where the agent may send them (dropped for v4 by ForVersion).
				rc.Origins = rc.Credentials.Origins
			}
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
			for kind, d := range fleet.BrowserSecondsGrowth(prev, m) {
				c.g.browserSeconds.WithLabelValues(tenant.Slug(ctx, c.g.store.Pool(), c.agent.Tenant), kind).Add(d)
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
		c.g.spend.WithLabelValues(tenant.Slug(ctx, c.g.store.Pool(), c.agent.Tenant), c.agent.Name).Set(m.CostTodayUSD)
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

// helloOffset is the clock offset a hello tells before the first ping has
// been answered: the agent stamped its hello after the upgrade was accepted
// and before it arrived, so its clock then matches a panel time between
// those two moments. Without it, the outcomes an agent resends the moment
// it reconnects (its outbox) would be read as if its clock were right.
func helloOffset(agentClock, accepted, received time.Time) wire.Estimate {
	if agentClock.IsZero() || received.Before(accepted) {
		return wire.Estimate{}
	}
	span := received.Sub(accepted)
	mid := accepted.Add(span / 2)
	return wire.Estimate{Offset: agentClock.Sub(mid), ErrorBound: span / 2, RoundTrip: span, MeasuredAt: received}
}
