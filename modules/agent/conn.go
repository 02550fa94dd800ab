package agent

import (
	"context"
	"crypto/ecdh"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/fleetwright/fleetwright/modules/agent/store"
	"github.com/fleetwright/fleetwright/modules/agent/supervisor"
	"github.com/fleetwright/fleetwright/modules/link"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// agent is the running role. Its state (pause, workers, pending events)
// lives here, outside any connection, so a drop loses nothing and the next
// connection reports it.
type agent struct {
	cfg Config
	log *slog.Logger
	// platforms builds the workers' adapters from platform specs.
	platforms *Platforms
	store     *store.Store
	token     wire.Secret
	wsURL     string
	// installKey is the installation key from the state dir (credential.go
	// in modules/wire): credentials are sealed to it.
	installKey *ecdh.PrivateKey
	// client dials the panel: the system roots, or only --panel-ca-file.
	client *http.Client
	sup    *supervisor.Supervisor
	// started is when this agent process started (the state report's
	// StartedAt: the panel counts starts to see a crash loop).
	started time.Time

	changed chan struct{} // state changed: report soon (capacity 1)

	claims   *Claims
	sessions *Sessions
	crawl    *crawlHub
	browsers chan struct{} // browser slots: concurrency per agent
	cur      *session      // the live welcomed connection, or nil

	mu          sync.Mutex
	paused      bool
	account     wire.Account
	specs       map[string]wire.WorkerSpec
	unsupported map[string]wire.WorkerSpec
	events      []wire.Event
	results     map[string]wire.CommandResult // recent command results, for redelivered commands
	resultOrder []string
	gateStop    *gateStopper // the StopAfterGateEnv chaos switch
	// panelClock is the agent's clock corrected to the panel's (TOTP codes).
	panelClock *panelClock
	// released is done once the start-up pages were handed back (trim_linux.go).
	released sync.Once
	// budget counts the account's requests to the platform (budget.go).
	budget *requestBudget
	// browserTime adds up the seconds its browsers were open (browsertime.go).
	browserTime *browserTime
}

// processStart is when this process started.
var processStart = time.Now()

const (
	maxPendingEvents = 100
	maxKeptResults   = 256
)

func newAgent(cfg Config, log *slog.Logger, st *store.Store, token wire.Secret, wsURL string) *agent {
	a := &agent{
		cfg: cfg, log: log, store: st, token: token, wsURL: wsURL,
		started:     processStart,
		changed:     make(chan struct{}, 1),
		specs:       map[string]wire.WorkerSpec{},
		unsupported: map[string]wire.WorkerSpec{},
		results:     map[string]wire.CommandResult{},
	}
	a.panelClock = &panelClock{Clock: cfg.Clock}
	a.budget = newRequestBudget(cfg.LimitClock, log, a.event)
	a.browserTime = newBrowserTime(cfg.Clock, a.notify)
	a.claims = newClaims(a)
	a.sessions = newSessions(a)
	a.crawl = newCrawlHub()
	a.platforms = cfg.Platforms
	if a.platforms == nil {
		a.platforms = NewPlatforms()
	}
	a.browsers = make(chan struct{}, cfg.BrowserSlots)
	a.sup = supervisor.New(cfg.Clock, log, supervisor.Options{
		RestartDelay: cfg.RestartDelay,
		OnChange:     a.notify,
		OnNeedsPerson: func(s supervisor.State) {
			a.event(wire.Event{Level: wire.LevelError, Kind: "worker_needs_person", Worker: s.Name,
				Message: fmt.Sprintf("%s failed again after %d restarts within %s; it stays stopped until a person restarts it",
					s.Name, supervisor.Budget, supervisor.Window),
				At: cfg.Clock.Now(), Fields: map[string]string{"last_error": s.LastError}})
		},
	})
	return a
}

func (a *agent) notify() {
	select {
	case a.changed <- struct{}{}:
	default:
	}
}

func (a *agent) event(e wire.Event) {
	a.mu.Lock()
	a.events = append(a.events, e)
	if len(a.events) > maxPendingEvents {
		a.events = a.events[len(a.events)-maxPendingEvents:]
	}
	a.mu.Unlock()
	a.notify()
}

// outcome classifies how a connection ended.
type outcome int

const (
	outNetwork      outcome = iota // drop, timeout, 5xx, protocol trouble: reconnect backoff
	outUnknownToken                // an explicit unknown_token answer
	outIncompatible                // version reject: reconnect backoff, no count
	outRetire                      // tombstone or retire command
)

type sessionResult struct {
	out          outcome
	installation string // who answered (unknown_token) or welcomed
	reason       string // why we retire
	welcomed     bool
	err          error
}

func (a *agent) run(ctx context.Context) error {
	workersCtx, stopWorkers := context.WithCancel(ctx)
	defer func() {
		stopWorkers()
		a.sup.Wait()
	}()

	auth, err := a.store.Auth(ctx)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	// The schedule and the retirement rule are the panel link's; the count
	// and the installation that welcomed this agent live in its state.
	retry := link.Retry{Jitter: a.cfg.Jitter, Installation: auth.InstallationID, Unknown: auth.UnknownTokenCount}

	// The reconnect loop is deliberately not supervised: it has its own
	// recovery (the backoffs below), and a supervisor restarting it would race
	// that recovery. Only workers run under the supervisor.
	for {
		res := a.session(ctx, workersCtx)
		if ctx.Err() != nil {
			return nil
		}
		var pause time.Duration
		switch res.out {
		case outRetire:
			return a.retire(ctx, stopWorkers, res.reason)
		case outUnknownToken:
			v := retry.UnknownToken(res.installation)
			pause = v.Pause
			if !v.Counted {
				a.log.Warn("agent: unknown token from a panel installation that never welcomed this agent; not counted",
					"answered_by", res.installation, "welcomed_by", retry.Installation, "retry_in", pause)
				break
			}
			if err := a.store.SetUnknownTokenCount(ctx, retry.Unknown); err != nil {
				a.log.Error("agent: cannot record the unknown-token count", "err", err)
			}
			if v.Retire {
				return a.retire(ctx, stopWorkers, fmt.Sprintf("the panel answered unknown token %d times in a row", retry.Unknown))
			}
			a.log.Warn("agent: the panel does not know this agent's token", "consecutive", retry.Unknown,
				"retire_at", link.RetireAfter, "retry_in", pause)
		default:
			if res.welcomed {
				// The welcome was recorded (a.welcomed): the count is reset.
				retry.Welcomed(res.installation)
			}
			pause = retry.Failed()
			lvl := slog.LevelWarn
			if res.out == outIncompatible {
				lvl = slog.LevelError
			}
			a.log.Log(ctx, lvl, "agent: disconnected from the panel; reconnecting", "err", res.err, "retry_in", pause)
		}
		select {
		case <-a.cfg.Clock.After(pause):
		case <-ctx.Done():
			return nil
		}
	}
}

// retire stops the workers, wipes every secret (state dir and token file),
// leaves the retired mark and returns ErrRetired.
func (a *agent) retire(ctx context.Context, stopWorkers context.CancelFunc, reason string) error {
	a.log.Error("agent: retiring: wiping credentials, cookies and token", "reason", reason)
	stopWorkers()
	a.sup.Wait()
	// Use a context that outlives a cancelled run: a half-done wipe is worse.
	wctx := context.WithoutCancel(ctx)
	if err := a.store.Retire(wctx, reason, a.cfg.Clock.Now()); err != nil {
		return fmt.Errorf("agent: retire: %w", err)
	}
	if err := store.ShredFile(a.cfg.TokenFile); err != nil {
		a.log.Error("agent: could not remove the token file; remove it by hand", "path", a.cfg.TokenFile, "err", err)
	}
	a.token = wire.Secret{}
	return fmt.Errorf("%w: %s", ErrRetired, reason)
}

// session runs one connection: dial, hello, welcome or reject, then
// commands until the connection ends.
func (a *agent) session(ctx, workersCtx context.Context) sessionResult {
	dctx, cancel := context.WithTimeout(ctx, a.cfg.IOTimeout)
	defer cancel()
	c, err := link.Dialer{URL: a.wsURL, Client: a.client, CAFile: a.cfg.PanelCAFile, UserAgent: "fleetwright-agent/" + a.cfg.Build,
		Clock: a.cfg.Clock, WriteTimeout: a.cfg.IOTimeout}.Dial(dctx)
	if err != nil {
		return sessionResult{out: outNetwork, err: fmt.Errorf("agent: %w", err)}
	}
	defer c.CloseNow()

	s := &session{a: a, c: c}
	m, err := c.Hello(dctx, wire.Hello{Version: wire.Current, MinVersion: wire.MinSupported, Build: a.cfg.Build,
		Host: a.cfg.Hostname, Clock: a.cfg.Clock.Now(), Token: a.token,
		InstallKey: wire.InstallKeyString(a.installKey.PublicKey())})
	var rej *link.Rejected
	switch {
	case errors.As(err, &rej):
		switch rej.Reason {
		case wire.RejectUnknownToken:
			return sessionResult{out: outUnknownToken, installation: rej.InstallationID}
		case wire.RejectRetired:
			return sessionResult{out: outRetire, reason: "the panel answered retired: this agent was deleted"}
		case wire.RejectIncompatibleVersion:
			return sessionResult{out: outIncompatible, err: fmt.Errorf("agent: panel speaks protocol %d..%d, this agent %d..%d: %s",
				rej.MinVersion, rej.MaxVersion, wire.MinSupported, wire.Current, rej.Message)}
		}
		return sessionResult{out: outNetwork, err: fmt.Errorf("agent: rejected for an unknown reason %q", rej.Reason)}
	case errors.Is(err, link.ErrVersion):
		return sessionResult{out: outIncompatible, err: fmt.Errorf("agent: %w", err)}
	case err != nil:
		return sessionResult{out: outNetwork, err: fmt.Errorf("agent: %w", err)}
	}
	s.agentID = m.AgentID
	if err := a.welcomed(ctx, workersCtx, m); err != nil {
		return sessionResult{out: outNetwork, err: err}
	}
	a.log.Info("agent: welcomed by the panel", "agent_id", m.AgentID, "installation", m.InstallationID, "protocol", m.Version)
	a.released.Do(func() { go a.releaseStartup(ctx) })
	err = s.serve(ctx, workersCtx)
	return sessionResult{out: s.end, welcomed: true, installation: m.InstallationID, err: err, reason: s.retireReason}
}

// releaseStartup hands back the memory start-up used and no longer needs —
// the heap it dropped, the executable's pages (see releaseStartupPages) —
// once the first welcome has settled: the workers it
// configured started, the first state report went out. A real timer, not
// the agent's clock: this is housekeeping, not a time rule.
func (a *agent) releaseStartup(ctx context.Context) {
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	// What start-up allocated and dropped goes back to the system first
	// (a collection and a scavenge), then the executable's pages: the
	// collection itself reads type data it would otherwise fault back in.
	debug.FreeOSMemory()
	n, err := releaseStartupPages()
	if err != nil {
		a.log.Warn("agent: could not hand back start-up memory", "err", err)
		return
	}
	a.log.Debug("agent: handed back the executable's start-up pages", "mapped_bytes", n)
}

// welcomed records the welcome and applies its configuration.
func (a *agent) welcomed(ctx, workersCtx context.Context, w wire.Welcome) error {
	if err := a.store.SetWelcomed(ctx, w.InstallationID, w.AgentID); err != nil {
		return fmt.Errorf("agent: record welcome: %w", err)
	}
	if err := a.takeCredentials(ctx, w.AgentID, w.Credentials, w.SealedCredentials, w.CredentialsWithheld, w.CredentialOrigins); err != nil {
		// Not fatal: the agent keeps the credentials it has, and its
		// workers say so if they have none.
		a.log.Error("agent: no credentials from this welcome", "err", err)
	}
	a.budget.set(w.RequestLimit)
	a.configure(workersCtx, w.Config)
	return nil
}

// withheldAdvice tells the person reading the agent's log what to do.
var withheldAdvice = map[string]string{
	wire.WithheldCleartext: "the connection is not encrypted: give --panel as https:// or wss:// (behind a proxy, list it in the panel's --trusted-proxies)",
	wire.WithheldKeyMismatch: "this agent's installation key is not the one the panel pinned at its first welcome (a new or reset state dir): " +
		"an admin accepts this installation with \"New token\" and \"new installation\" on the fleet page, or `fleetwright admin issue-token --new-installation`",
	wire.WithheldNoKey: "the agent sent no installation key",
	wire.WithheldOtherBoard: "they were sealed for another board than the account's board now: nothing is sent to the new board; " +
		"an admin enters the account's credentials again for it (Board and client, on the fleet page)",
}

// takeCredentials stores credentials from a welcome or a rotate_credentials
// command: sealed to this installation's key (protocol v4), or in the clear
// from a panel before v4, with the origins the panel sealed them for
// (protocol v5). Credentials from a panel that names no origin are stored
// bound to none: they are sent nowhere (Sessions.Login says why). A
// withheld answer keeps the stored credentials.
func (a *agent) takeCredentials(ctx context.Context, agentID string, plain wire.Credentials, sealed *wire.SealedCredentials, withheld string, origins []string) error {
	switch {
	case withheld != "":
		advice := withheldAdvice[withheld]
		if advice == "" {
			advice = "see the panel's log"
		}
		return fmt.Errorf("agent: the panel withheld the account's credentials (%s): %s", withheld, advice)
	case sealed != nil:
		c, err := sealed.Open(a.installKey, agentID)
		if err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		plain = c
	case plain.Username == "" && plain.Password.IsZero():
		return nil // nothing sent (a panel before v4 with nothing to give)
	}
	plain.Origins = nil
	for _, o := range origins {
		if o = wire.Origin(o); o != "" {
			plain.Origins = append(plain.Origins, o)
		}
	}
	if old, ok, err := a.store.Credentials(ctx); err == nil && ok && !slices.Equal(old.Origins, plain.Origins) {
		// The session cookies belong to the board the old credentials were
		// sealed for: they never go to another.
		if err := a.store.SaveCookies(ctx, nil); err != nil {
			return fmt.Errorf("agent: could not drop the old board's session cookies: %w", err)
		}
	}
	if err := a.store.SaveCredentials(ctx, plain, a.cfg.Clock.Now()); err != nil {
		return fmt.Errorf("agent: could not store the new credentials: %w", err)
	}
	a.sessions.credentialsChanged()
	if len(plain.Origins) == 0 {
		a.log.Warn("agent: the panel did not say which board the credentials were sealed for (a panel before protocol v5): they are not sent to any board until it does; upgrade the panel")
	}
	return nil
}

// configure applies a configuration: the pause state, and the workers
// (unchanged workers keep running with their restart counts).
func (a *agent) configure(workersCtx context.Context, c wire.Config) {
	a.mu.Lock()
	a.paused = c.Paused
	// A new platform spec (or none where there was one) builds every
	// worker's adapter anew: the workers start again.
	replatformed := platformDigest(a.account) != platformDigest(c.Account)
	a.account = c.Account
	want := map[string]wire.WorkerSpec{}
	for _, w := range c.Workers {
		want[w.Name] = w
	}
	old := a.specs
	a.specs = map[string]wire.WorkerSpec{}
	a.unsupported = map[string]wire.WorkerSpec{}
	a.mu.Unlock()

	for name, spec := range old {
		if nw, ok := want[name]; !ok || !sameSpec(nw, spec) || replatformed {
			_ = a.sup.Remove(name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		spec := want[name]
		fn, ok := a.cfg.Kinds[spec.Kind]
		a.mu.Lock()
		if !ok {
			a.unsupported[name] = spec
			a.mu.Unlock()
			continue
		}
		a.specs[name] = spec
		a.mu.Unlock()
		if o, ok := old[name]; ok && sameSpec(o, spec) && !replatformed {
			continue
		}
		env := a.workerEnv(spec, c.Account)
		_ = a.sup.Start(workersCtx, supervisor.Worker{Name: name, Kind: spec.Kind,
			Run: func(ctx context.Context, h *supervisor.Handle) error { return fn(ctx, h, env) }})
	}
	a.notify()
}

func platformDigest(acct wire.Account) string {
	if acct.Platform == nil {
		return ""
	}
	return acct.Platform.Digest
}

func sameSpec(a, b wire.WorkerSpec) bool {
	return a.Name == b.Name && a.Kind == b.Kind && maps.Equal(a.Settings, b.Settings)
}

func (a *agent) isPaused() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.paused
}

func (a *agent) setPaused(p bool) {
	a.mu.Lock()
	a.paused = p
	a.mu.Unlock()
	a.notify()
}

// stateReport builds the state report.
func (a *agent) stateReport() wire.State {
	now := a.cfg.Clock.Now()
	var ws []wire.WorkerState
	for _, s := range a.sup.States() {
		age := int64(0)
		if !s.OldestTask.IsZero() {
			age = now.Sub(s.OldestTask).Milliseconds()
		}
		ws = append(ws, wire.WorkerState{Name: s.Name, Kind: s.Kind, State: s.State, Restarts: s.Restarts,
			LastOperation: s.LastOperation, OldestTaskAgeMillis: &age})
	}
	a.mu.Lock()
	paused := a.paused
	for _, spec := range a.unsupported {
		ws = append(ws, wire.WorkerState{Name: spec.Name, Kind: spec.Kind, State: wire.WorkerUnsupported})
	}
	a.mu.Unlock()
	slices.SortFunc(ws, func(x, y wire.WorkerState) int {
		if x.Name < y.Name {
			return -1
		}
		if x.Name > y.Name {
			return 1
		}
		return 0
	})
	if ws == nil {
		ws = []wire.WorkerState{}
	}
	started := a.started
	return wire.State{Paused: paused, Workers: ws, MemoryRSSBytes: rssBytes(), StartedAt: &started,
		BrowserSeconds: a.browserTime.seconds()}
}

// rssBytes reads the process's resident memory (Linux), nil elsewhere.
func rssBytes() *uint64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return nil
	}
	var size, resident uint64
	if _, err := fmt.Sscanf(string(data), "%d %d", &size, &resident); err != nil {
		return nil
	}
	v := resident * uint64(os.Getpagesize())
	return &v
}

var errClosedByPanel = errors.New("agent: the panel sent a protocol error")
