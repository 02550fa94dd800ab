package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/panel"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// client is one protocol-only agent connection.
type client struct {
	ws *websocket.Conn
	mu sync.Mutex // one writer at a time
	// leases holds the grants this actor acts on, by job key.
	lmu    sync.Mutex
	leases map[string]wire.LeaseResult
}

func (c *client) send(ctx context.Context, m wire.Message) error {
	data, err := wire.Encode(wire.Current, wire.Frame{Time: time.Now(), Message: m})
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ws.Write(ctx, websocket.MessageText, data)
}

// dial connects one protocol-only agent and waits for its welcome.
func dial(ctx context.Context, url, token string) (*client, error) {
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return nil, fmt.Errorf("bench: connect to the panel: %w", err)
	}
	ws.SetReadLimit(2 * wire.MaxMessageBytes)
	c := &client{ws: ws, leases: map[string]wire.LeaseResult{}}
	// An installation key, as every agent of this version has: the panel
	// pins it and seals the account's credentials to it.
	key, err := wire.NewInstallKey()
	if err != nil {
		ws.CloseNow()
		return nil, fmt.Errorf("bench: installation key: %w", err)
	}
	if err := c.send(ctx, wire.Hello{Version: wire.Current, MinVersion: wire.Current, Build: "bench", Host: "bench",
		Clock: time.Now(), Token: wire.NewSecret(token), InstallKey: wire.InstallKeyString(key.PublicKey())}); err != nil {
		ws.CloseNow()
		return nil, fmt.Errorf("bench: hello: %w", err)
	}
	_, data, err := ws.Read(ctx)
	if err != nil {
		ws.CloseNow()
		return nil, fmt.Errorf("bench: welcome: %w", err)
	}
	f, err := wire.Decode(data)
	if err != nil {
		ws.CloseNow()
		return nil, fmt.Errorf("bench: welcome: %w", err)
	}
	if _, ok := f.Message.(wire.Welcome); !ok {
		ws.CloseNow()
		return nil, fmt.Errorf("bench: the panel answered hello with %s, not welcome", f.Type)
	}
	return c, nil
}

// Job is one job's path as the protocol-only agents saw it, on this
// process's monotonic clock (watcher and actors share it).
type Job struct {
	Key string
	// Sent is when the watcher sent the DETECTED that held it; Leased when
	// an actor received its grant; ActSent when the actor was free to send
	// the booking request (the last message before the click).
	Sent, Leased, ActSent time.Time
	// PanelIn is the panel replica's own time from the sighting's arrival
	// to the first send of the job to its actors (0: not measured).
	PanelIn time.Duration
}

// Enrol creates a tenant (slug) with a filter that wants every job, one
// platform account, and actors+1 agents; it returns the tenant's id and
// the agents' tokens (the first is the watcher's). owner is a pool of the
// schema's owner role (tenants are created by operators, not the app role).
func Enrol(ctx context.Context, p *panel.Panel, owner *pgxpool.Pool, slug string, actors int) (string, []string, error) {
	ops := audit.Entry{Actor: "fleetwright bench"}
	var tenant string
	if err := owner.QueryRow(ctx, `INSERT INTO tenants (slug, name) VALUES ($1, $1) RETURNING id::text`, slug).Scan(&tenant); err != nil {
		return "", nil, fmt.Errorf("bench: create tenant %s: %w", slug, err)
	}
	if _, err := p.Claims.PutFilter(ctx, ops, tenant, claim.Filter{Name: "every job", Enabled: true}); err != nil {
		return "", nil, fmt.Errorf("bench: %w", err)
	}
	acct, err := p.Fleet.CreateAccount(ctx, tenant, fleet.AccountInput{Key: "bench", BoardURL: "http://127.0.0.1:1", Client: "bench", Username: "bench",
		Password: "bench-" + randomHex(8), TOTPSecret: "JBSWY3DPEHPK3PXP"}, ops)
	if err != nil {
		return "", nil, fmt.Errorf("bench: %w", err)
	}
	tokens := make([]string, actors+1)
	for i := range tokens {
		if _, tokens[i], err = p.Fleet.CreateAgent(ctx, tenant, acct, fmt.Sprintf("bench-%d", i), ops); err != nil {
			return "", nil, fmt.Errorf("bench: %w", err)
		}
	}
	return tenant, tokens, nil
}

// ClaimPath drives a panel's claim path with protocol-only agents over real
// WebSockets: one watcher sends DETECTED; every actor answers an offer with
// a lease request at once (every matching warm actor races), acts on its
// grant (act_request → act_result) and reports CONFIRMED, as an actor whose
// booking went through does. Nothing on the panel's side is stubbed.
type ClaimPath struct {
	watcher *client
	actors  []*client
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu   sync.Mutex
	jobs map[string]*Job
	// pending counts, per key prefix (the key up to its last '-'), the
	// jobs not yet at act_sent.
	pending map[string]int
	// moved is signalled (without blocking) when a job reaches act_sent.
	moved chan struct{}
	// reporting counts outcomes sent and not yet acknowledged.
	reporting atomic.Int64
}

// Connect dials the watcher (tokens[0]) and the actors (the rest) to the
// panel's agent endpoint at url (ws://host:port/agent/ws).
func Connect(ctx context.Context, url string, tokens []string) (*ClaimPath, error) {
	if len(tokens) < 2 {
		return nil, errors.New("bench: the claim path needs a watcher and at least one actor")
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cp := &ClaimPath{cancel: cancel, jobs: map[string]*Job{}, pending: map[string]int{}, moved: make(chan struct{}, 1)}
	var err error
	if cp.watcher, err = dial(ctx, url, tokens[0]); err != nil {
		cancel()
		return nil, err
	}
	cp.wg.Add(1)
	go cp.serve(rctx, cp.watcher)
	for _, tok := range tokens[1:] {
		c, err := dial(ctx, url, tok)
		if err != nil {
			cp.Close()
			return nil, err
		}
		// As a real agent does on connect: its state, one running actor
		// (assign mode chooses among the actors agents report running).
		if err := c.send(ctx, wire.State{Workers: []wire.WorkerState{{Name: "actor", Kind: "http_actor", State: wire.WorkerRunning}}}); err != nil {
			cp.Close()
			return nil, fmt.Errorf("bench: state: %w", err)
		}
		cp.actors = append(cp.actors, c)
		cp.wg.Add(1)
		go cp.serve(rctx, c)
	}
	return cp, nil
}

// Close ends every connection, once the outcomes in flight are
// acknowledged (for at most 5 s).
func (cp *ClaimPath) Close() {
	for deadline := time.Now().Add(5 * time.Second); cp.reporting.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	cp.cancel()
	if cp.watcher != nil {
		_ = cp.watcher.ws.Close(websocket.StatusNormalClosure, "bench done")
	}
	for _, c := range cp.actors {
		_ = c.ws.Close(websocket.StatusNormalClosure, "bench done")
	}
	cp.wg.Wait()
}

// PanelIn records a panel replica's own figure for a job (wire it to the
// gateway's OnPanelIn).
func (cp *ClaimPath) PanelIn(_, key string, d time.Duration) {
	cp.mu.Lock()
	if j := cp.jobs[key]; j != nil && j.PanelIn == 0 {
		j.PanelIn = d
	}
	cp.mu.Unlock()
}

func (cp *ClaimPath) mark(key string, leased bool, at time.Time) {
	cp.mu.Lock()
	j := cp.jobs[key]
	if j != nil {
		if leased && j.Leased.IsZero() {
			j.Leased = at
		}
		if !leased && j.ActSent.IsZero() {
			j.ActSent = at
			cp.pending[prefixOf(key)]--
		}
	}
	cp.mu.Unlock()
	if !leased {
		select {
		case cp.moved <- struct{}{}:
		default:
		}
	}
}

// serve reads one connection: every agent answers pings (or the panel
// drops it as silent) and look-ups; actors race for offers and act.
func (cp *ClaimPath) serve(ctx context.Context, c *client) {
	defer cp.wg.Done()
	for {
		_, data, err := c.ws.Read(ctx)
		if err != nil {
			return
		}
		f, err := wire.Decode(data)
		if err != nil {
			continue
		}
		switch m := f.Message.(type) {
		case wire.Ping:
			now := time.Now()
			_ = c.send(ctx, wire.Pong{CommandID: m.CommandID, PingSentAt: m.SentAt, ReceivedAt: now, SentAt: now})
		case wire.Lookup:
			// A protocol-only actor cannot look anything up: incomplete, so
			// the reconciler never takes it as proof.
			_ = c.send(ctx, wire.LookupResult{RequestID: m.RequestID, Error: "fleetwright bench: protocol-only agent"})
		case wire.Offer:
			if c != cp.watcher {
				_ = c.send(ctx, wire.LeaseRequest{RequestID: wire.NewID(), Worker: "actor", Key: m.Job.Key, OfferID: m.OfferID})
			}
		case wire.LeaseResult:
			if m.Granted {
				cp.mark(m.Key, true, time.Now())
				c.lmu.Lock()
				c.leases[m.Key] = wire.LeaseResult{Key: m.Key, Token: m.Token, OperationID: m.OperationID}
				c.lmu.Unlock()
				_ = c.send(ctx, wire.ActRequest{RequestID: wire.NewID(), Worker: "actor", Key: m.Key, Token: m.Token})
			}
		case wire.LeaseGrant:
			// Assign mode: the job is this actor's, already ACTING; its
			// gate asks the panel's read-only fenced check before the
			// request leaves.
			cp.mark(m.Job.Key, true, time.Now())
			c.lmu.Lock()
			// RequestID carries the grant's worker, for the outcome.
			c.leases[m.Job.Key] = wire.LeaseResult{RequestID: m.Worker, Key: m.Job.Key, Token: m.Token, OperationID: m.OperationID}
			c.lmu.Unlock()
			_ = c.send(ctx, wire.GateCheck{RequestID: wire.NewID(), Worker: m.Worker, Key: m.Job.Key, Token: m.Token})
		case wire.GateResult:
			cp.acted(ctx, c, m.Key, m.OK, "")
		case wire.ActResult:
			cp.acted(ctx, c, m.Key, m.OK, m.OperationID)
		case wire.OutcomeAck:
			cp.reporting.Add(-1)
		}
	}
}

// acted is an actor's answer to its act request or gate check: on OK it is
// at act_sent, and reports CONFIRMED as an actor whose booking went through.
func (cp *ClaimPath) acted(ctx context.Context, c *client, key string, ok bool, op string) {
	c.lmu.Lock()
	l, found := c.leases[key]
	delete(c.leases, key)
	c.lmu.Unlock()
	if !ok || !found {
		return
	}
	now := time.Now()
	cp.mark(key, false, now)
	if op == "" {
		op = l.OperationID
	}
	worker := l.RequestID // the grant's worker (assign), or "actor"
	if worker == "" {
		worker = "actor"
	}
	cp.reporting.Add(1)
	if c.send(ctx, wire.Outcome{RequestID: wire.NewID(), Worker: worker, Key: key, Token: l.Token, OperationID: op,
		Result: wire.ResultConfirmed, SentAt: &now, ConfirmedAt: &now}) != nil {
		cp.reporting.Add(-1)
	}
}

// Detect sends the jobs keys as sightings in DETECTED messages of at most
// batch sightings each, back to back, and registers them for timing.
func (cp *ClaimPath) Detect(ctx context.Context, keys []string, batch int) error {
	for i := 0; i < len(keys); i += batch {
		part := keys[i:min(i+batch, len(keys))]
		now := time.Now()
		sights := make([]wire.Sighting, len(part))
		cp.mu.Lock()
		for j, k := range part {
			if _, dup := cp.jobs[k]; !dup {
				// A key sighted again keeps its first sighting's time.
				cp.pending[prefixOf(k)]++
				cp.jobs[k] = &Job{Key: k, Sent: now}
			}
			sights[j] = wire.Sighting{Job: wire.Job{Key: k, PublishedAt: now, ExpiresAt: now.Add(time.Hour)}, SeenAt: now}
		}
		cp.mu.Unlock()
		if err := cp.watcher.send(ctx, wire.Detected{Worker: "watcher", Sightings: sights}); err != nil {
			return fmt.Errorf("bench: send DETECTED: %w", err)
		}
	}
	return nil
}

// Paced sights n jobs named prefix-0 … at rate per second on an absolute
// schedule: every 5 ms the jobs now due go out in one DETECTED (one at a
// time at modest rates, as a watcher's poll sees them; batched at high
// rates). It returns when the last is sent.
func (cp *ClaimPath) Paced(ctx context.Context, prefix string, n int, rate float64) error {
	start := time.Now()
	next := 0
	for next < n {
		due := min(n, int(time.Since(start).Seconds()*rate)+1)
		if due > next {
			keys := make([]string, 0, due-next)
			for ; next < due; next++ {
				keys = append(keys, fmt.Sprintf("%s-%d", prefix, next))
			}
			if err := cp.Detect(ctx, keys, 100); err != nil {
				return err
			}
		}
		if next < n {
			wait := time.Until(start.Add(time.Duration(float64(next) / rate * float64(time.Second))))
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(min(max(wait, 0), 5*time.Millisecond)):
			}
		}
	}
	return nil
}

// Burst sights n jobs named prefix-0 … at once (DETECTED messages of 50, as
// a watcher's page of results).
func (cp *ClaimPath) Burst(ctx context.Context, prefix string, n int) error {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return cp.Detect(ctx, keys, 50)
}

// Wait blocks until every job whose key starts with prefix has reached
// act_sent, or limit passes; it returns how many did not.
func (cp *ClaimPath) Wait(ctx context.Context, prefix string, limit time.Duration) int {
	deadline := time.Now().Add(limit)
	for {
		cp.mu.Lock()
		missing := cp.pending[prefix]
		cp.mu.Unlock()
		if missing == 0 || time.Now().After(deadline) {
			return missing
		}
		select {
		case <-ctx.Done():
			return missing
		case <-cp.moved:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// prefixOf is a job key's prefix: the key up to its last '-'.
func prefixOf(key string) string {
	if i := strings.LastIndexByte(key, '-'); i >= 0 {
		return key[:i]
	}
	return key
}

// Jobs returns a copy of the timings of the jobs whose key starts with prefix.
func (cp *ClaimPath) Jobs(prefix string) []Job {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var out []Job
	for k, j := range cp.jobs {
		if strings.HasPrefix(k, prefix+"-") {
			out = append(out, *j)
		}
	}
	return out
}

// Phase summarises a set of jobs.
type Phase struct {
	Jobs int `json:"jobs"`
	// Unfinished jobs never reached act_sent within the wait.
	Unfinished int `json:"unfinished"`
	// LeasesPerS is the jobs that reached act_sent per second, from the
	// first sighting sent to the last act_sent.
	LeasesPerS    float64 `json:"leases_per_s"`
	DetectLeased  Pct     `json:"detect_leased"`
	DetectActSent Pct     `json:"detect_act_sent"`
	PanelIn       Pct     `json:"panel_in_ms"`
	// MaxActSentMS is the slowest job's sighting → act_sent.
	MaxActSentMS float64 `json:"max_act_sent_ms"`
	// PanelInMeasured is how many jobs carry the panel's own figure.
	PanelInMeasured int `json:"panel_in_measured"`
}

// Summarise computes a phase's figures at time at. A job that has not
// reached a stage by then counts as reaching it at that moment: its figure
// is a lower bound, and Unfinished says how many there were.
func Summarise(jobs []Job, at time.Time) Phase {
	ph := Phase{Jobs: len(jobs)}
	var leased, acted, in []time.Duration
	var first, last time.Time
	done := 0
	for _, j := range jobs {
		if first.IsZero() || j.Sent.Before(first) {
			first = j.Sent
		}
		l, a := j.Leased, j.ActSent
		if l.IsZero() {
			l = at
		}
		if a.IsZero() {
			ph.Unfinished++
			a = at
		} else {
			done++
			if a.After(last) {
				last = a
			}
		}
		leased = append(leased, l.Sub(j.Sent))
		acted = append(acted, a.Sub(j.Sent))
		if j.PanelIn > 0 {
			in = append(in, j.PanelIn)
		}
	}
	if done > 0 && last.After(first) {
		ph.LeasesPerS = math.Round(float64(done)/last.Sub(first).Seconds()*10) / 10
	}
	ph.DetectLeased = pcts(leased)
	ph.DetectActSent = pcts(acted)
	ph.PanelIn = pcts(in)
	ph.PanelInMeasured = len(in)
	if len(acted) > 0 {
		ph.MaxActSentMS = ms(slices.Max(acted))
	}
	return ph
}
