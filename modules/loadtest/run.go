package loadtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/fleetwright/fleetwright/app/browser"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/app/unit"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/migrations"
	"github.com/fleetwright/fleetwright/modules/agent"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/cell"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/platform/spec"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// secret is a value of the run that must appear in no output and no file,
// except the agent's own credential files for its own secrets.
type secret struct {
	value, kind, owner string
}

// runner holds one run's parts.
type runner struct {
	cfg     Config
	out     io.Writer
	log     *slog.Logger
	dir     string
	logs    string
	bin     string
	lock    *embedded.Lock
	pg      *embedded.Postgres
	redis   [2]*embedded.Redis
	redisMu sync.Mutex
	super   *pgxpool.Pool
	app     *pgxpool.Pool
	brd     *board.Server // guarded by brdMu: board_restart replaces it
	brdMu   sync.RWMutex
	bcfg    board.Config
	// boardLog is the board's own log (logs/board.log).
	boardLog *slog.Logger
	eng      *claim.Engine
	fleet    *fleet.Store
	key      string

	tenants   []*tenantPlan
	tenantIDs []string
	ports     [2]int
	mports    [2]int // the replicas' metrics listeners
	panels    [2]*proc
	agents    []*proc
	byAgentID map[string]*proc
	secrets   []secret

	rng  *mrand.Rand
	bg   sync.WaitGroup // chaos that outlives its step (a frozen agent)
	mu   sync.Mutex
	hits map[string]int
	// restarts counts the supervised services' restarts (postgres, redis:a, redis:b).
	restarts map[string]int
	// gateStop ends the agent_stop_after_gate watcher.
	gateStop context.CancelFunc
	gateWG   sync.WaitGroup
	// afterGrace counts board_commit_after_grace's bookings, and
	// afterGraceLate names those not CONFIRMED within 2 minutes.
	afterGrace     int
	afterGraceLate []string
	// partitioned is the agent whose relay is blocked, if any.
	partitioned *proc
	// pgStopped are the cluster's processes a postgres_stall stopped.
	pgStopped []int
	notes     []string
	stopped   map[*proc]bool
	// maxBrowsers is the most Chromium instances seen at once.
	maxBrowsers int
	started     time.Time
	measured    time.Duration
	// meter counts every process's log output; scrape keeps the replicas'
	// own histograms across their restarts.
	meter      *logMeter
	scrape     *scraper
	scrapeStop context.CancelFunc
	scrapeWG   sync.WaitGroup
	svcMu      sync.Mutex
	svcLogs    map[string]*slog.Logger
	// outage is the --board-outage phase's record (nil without one).
	outage *outageRun
}

// Run performs a whole load test and returns its report. stdout receives
// the progress lines and the text report; logs go to errOut and to the
// run's loadtest.log. The error is about the run itself (a service that
// would not start); the report's Failed says whether the fleet passed.
func Run(ctx context.Context, cfg Config, stdout, errOut io.Writer) (rep *Report, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, out: stdout, hits: map[string]int{}, restarts: map[string]int{}, stopped: map[*proc]bool{},
		byAgentID: map[string]*proc{}, rng: mrand.New(mrand.NewPCG(uint64(cfg.Seed), 0x10ad7e57)),
		meter: newLogMeter(), scrape: newScraper(), svcLogs: map[string]*slog.Logger{}}
	if r.bin = cfg.Binary; r.bin == "" {
		if r.bin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("loadtest: own executable: %w", err)
		}
	}
	removeDir := false
	if cfg.DataDir == "" {
		d, err := os.MkdirTemp("", "fleet-loadtest-")
		if err != nil {
			return nil, fmt.Errorf("loadtest: data dir: %w", err)
		}
		r.dir, removeDir = d, true
	} else if r.dir, err = filepath.Abs(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("loadtest: data dir: %w", err)
	}
	// The postgres system user must reach the cluster under it.
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, fmt.Errorf("loadtest: data dir: %w", err)
	}
	_ = os.Chmod(r.dir, 0o755)
	if r.lock, err = embedded.LockDataDir(r.dir, "fleetwright loadtest"); err != nil {
		return nil, err
	}
	r.logs = filepath.Join(r.dir, "logs")
	for _, d := range []string{r.logs, filepath.Join(r.dir, "agents"), r.scratch()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("loadtest: %w", err)
		}
	}
	// As root, the agents' Chromium runs as an unprivileged user
	// (app/browser): its profiles stay under scratch, where they are counted
	// and reaped, only if that user owns it.
	if err := browser.PrepareTmpDir(r.scratch()); err != nil {
		return nil, fmt.Errorf("loadtest: %w", err)
	}
	own, err := os.OpenFile(filepath.Join(r.logs, "loadtest.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("loadtest: %w", err)
	}
	r.log = logging.New(io.MultiWriter(errOut, r.meter.writer("loadtest", own)), logging.Options{Level: slog.LevelInfo})
	redis.SetLogger(&logging.Printf{Log: r.log.With("component", "go-redis"), Level: slog.LevelWarn, Every: 10 * time.Second})
	defer func() {
		r.teardown()
		if rep != nil {
			if r.pg != nil {
				r.meter.addFiles("postgres", r.pg.LogDir())
			}
			rep.LogVolume = r.meter.volume(time.Now())
			rep.Warnings = append(rep.Warnings, rep.LogVolume.warnings()...)
			r.scanSecrets(rep)
			rep.finish(r.cfg.Chaos == "on")
		}
		r.meter.closeAll()
		_ = own.Close()
		if n := reapUnder(r.scratch()); n > 0 {
			r.log.Warn("killed processes left under the run's directory", "count", n)
			if rep != nil {
				rep.LeftBehind = n
			}
		}
		r.lock.Release()
		if removeDir {
			_ = os.RemoveAll(r.dir)
		}
	}()
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	if err := r.measure(ctx); err != nil {
		return nil, err
	}
	rep, err = r.conclude(ctx)
	return rep, err
}

// scratch is the agents' TMPDIR: Chromium's user-data dirs live there.
func (r *runner) scratch() string { return filepath.Join(r.dir, "agent-tmp") }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (r *runner) printf(format string, args ...any) {
	fmt.Fprintf(r.out, "loadtest: "+format+"\n", args...)
}

// setup starts the services, the board, the tenants, the panels and the
// agents, and waits until every worker runs.
func (r *runner) setup(ctx context.Context) error {
	var err error
	r.tenants, err = plan(r.cfg.Workers, r.cfg.Browsers)
	if err != nil {
		return err
	}
	workers, browsers, agents := counts(r.tenants)
	r.printf("%d workers (%d in Chromium) in %d agent processes, 3 tenants in 2 cells, 2 panel replicas; data under %s", workers, browsers, agents, r.dir)

	pgLog, err := r.serviceLog("postgres", slog.LevelInfo)
	if err != nil {
		return err
	}
	if r.pg, err = embedded.StartPostgres(ctx, embedded.PostgresConfig{Dir: filepath.Join(r.dir, "postgres"), NoSync: true, Logger: pgLog}); err != nil {
		return err
	}
	r.pg.Supervise(r.supervision("postgres"))
	for i := range r.redis {
		if r.redis[i], err = r.startRedis(ctx, i); err != nil {
			return err
		}
	}
	owner, err := db.Open(ctx, r.pg.OwnerURL(), 4)
	if err != nil {
		return err
	}
	err = db.Migrate(ctx, owner, migrations.FS, embedded.AppRole, "loadtest", r.log)
	owner.Close()
	if err != nil {
		return err
	}
	if r.super, err = db.Open(ctx, r.pg.SuperURL(embedded.Database), 8); err != nil {
		return err
	}
	if r.app, err = db.Open(ctx, r.pg.AppURL(), 16); err != nil {
		return err
	}
	keyBytes := make([]byte, vault.KeySize)
	_, _ = rand.Read(keyBytes)
	r.key = hex.EncodeToString(keyBytes)
	v, err := vault.New(keyBytes)
	if err != nil {
		return fmt.Errorf("loadtest: %w", err)
	}
	r.fleet = fleet.NewStore(r.app, v)
	if r.eng, err = claim.NewEngine(claim.NewStore(r.app, nil), claim.Config{}); err != nil {
		return err
	}

	// The board, in this process: its oracle is the ground truth.
	if r.boardLog, err = r.serviceLog("board", slog.LevelInfo); err != nil {
		return err
	}
	// On a file store, so board_restart can stop it and start it again on
	// the same data (and address).
	bcfg := board.Defaults()
	bcfg.Listen, bcfg.Rate, bcfg.Seed = "127.0.0.1:0", 0, r.cfg.Seed
	bcfg.DataDir = filepath.Join(r.dir, "board")
	bcfg.Data = filepath.Join(bcfg.DataDir, "board.sqlite")
	bcfg.AdminToken, bcfg.IdempotencyKeys = randomHex(24), r.cfg.BoardIdempotency == "on"
	var pspec *spec.Spec
	if r.cfg.Platform != "" {
		if pspec, bcfg.Dialect, err = readPlatform(r.cfg.Platform); err != nil {
			return err
		}
	}
	ops := audit.Entry{Actor: "loadtest"}
	r.addSecret(bcfg.AdminToken, "board_admin_token", "")
	r.addSecret(r.key, "secret_key", "")
	if r.brd, err = board.Start(ctx, bcfg, r.boardLog); err != nil {
		return err
	}
	r.boardServing(r.brd, bcfg)
	bcfg.Listen = strings.TrimPrefix(r.brd.URL(), "http://")
	r.bcfg = bcfg
	if pspec != nil {
		if err := r.preflight(ctx, pspec); err != nil {
			return err
		}
		r.printf("platform %s (%s) checked against the %s board: signs in, reads the feed, proves the bookings look-up", pspec.Name, r.cfg.Platform, bcfg.Dialect)
		if bcfg.Dialect != board.DialectClassic {
			return fmt.Errorf("loadtest: --platform %s: %w", r.cfg.Platform, errAgentsBuiltIn)
		}
	}

	for ti, t := range r.tenants {
		var id string
		if err := r.super.QueryRow(ctx, `INSERT INTO tenants (slug, name) VALUES ($1, $2) RETURNING id::text`, t.Slug, t.Name).Scan(&id); err != nil {
			return fmt.Errorf("loadtest: create tenant: %w", err)
		}
		r.tenantIDs = append(r.tenantIDs, id)
		// Every load, but for the skewed agent's tenant's own loads
		// (agent_clock_skew), which only that tenant wants.
		f := claim.Filter{Name: "everything", Enabled: true}
		if ti != r.skewTenant() {
			f = claim.Filter{Name: "everything above the clock-skew loads", Enabled: true, MinRatePerMileCents: otherTenantsMinRate}
		}
		if _, err := r.eng.PutFilter(ctx, ops, id, f); err != nil {
			return err
		}
		// The tenant's setting states what the board does, or its agents
		// refuse to claim (docs/CLAIMS.md, "One booking identity per job").
		if err := r.eng.SetHonoursIdempotency(ctx, ops, id, claim.DefaultPlatform, bcfg.IdempotencyKeys); err != nil {
			return err
		}
		// Set in either mode: the run says which it measured, whatever the
		// column's default is.
		if err := r.eng.SetDispatchMode(ctx, ops, id, r.cfg.DispatchMode); err != nil {
			return err
		}
	}
	if err := cell.PutCell(ctx, r.app, cell.Def{Name: "b", RedisURL: r.redis[1].URL(0)}); err != nil {
		return err
	}
	for i, t := range r.tenants {
		if t.Cell != "default" {
			if err := cell.RouteTenant(ctx, r.app, r.tenantIDs[i], t.Cell); err != nil {
				return err
			}
		}
	}
	for ti, t := range r.tenants {
		for _, a := range t.Agents {
			pw := "pw-" + randomHex(12)
			acct, err := r.board().CreateAccount(ctx, board.AccountSpec{Username: a.Name, Password: pw, Client: t.Client})
			if err != nil {
				return err
			}
			r.addSecret(pw, "board_password", a.Name)
			r.addSecret(acct.TOTPSecret, "totp_secret", a.Name)
			accID, err := r.fleet.CreateAccount(ctx, r.tenantIDs[ti], fleet.AccountInput{Key: a.Name, BoardURL: r.board().URL(),
				Client: t.Client, Username: a.Name, Password: pw, TOTPSecret: acct.TOTPSecret, Workers: a.Workers}, ops)
			if err != nil {
				return err
			}
			agentID, tok, err := r.fleet.CreateAgent(ctx, r.tenantIDs[ti], accID, "agent-"+a.Name, ops)
			if err != nil {
				return err
			}
			r.addSecret(tok, "agent_token", a.Name)
			state := filepath.Join(r.dir, "agents", a.Name)
			if err := os.MkdirAll(state, 0o700); err != nil {
				return fmt.Errorf("loadtest: %w", err)
			}
			if err := os.WriteFile(filepath.Join(state, "token"), []byte(tok+"\n"), 0o600); err != nil {
				return fmt.Errorf("loadtest: %w", err)
			}
			r.agents = append(r.agents, &proc{name: "agent-" + a.Name, agent: a, agentID: agentID, replica: a.Replica})
		}
	}

	// Two panel replicas on one database; the second starts once the first
	// has migrated, so they never race on the schema.
	for i := range r.panels {
		if r.ports[i], err = freePort(); err != nil {
			return err
		}
		if r.mports[i], err = freePort(); err != nil {
			return err
		}
		p, err := r.startPanel(i)
		if err != nil {
			return err
		}
		r.panels[i] = p
		if err := p.out.waitMarks(ctx, 1, 2*time.Minute); err != nil {
			return fmt.Errorf("loadtest: panel replica %d did not become ready: %w", i+1, err)
		}
	}
	for _, p := range r.agents {
		// Every agent reaches its replica through its own relay, so one
		// agent's path can be cut alone.
		if p.relay, err = newRelay("127.0.0.1:" + strconv.Itoa(r.ports[p.replica])); err != nil {
			return fmt.Errorf("loadtest: relay: %w", err)
		}
		if err := r.startAgent(p); err != nil {
			return err
		}
		r.byAgentID[p.agentID] = p
	}
	limit := 3*time.Minute + time.Duration(workers)*time.Second
	start := time.Now()
	for {
		running, err := r.runningWorkers(ctx)
		if err == nil && running >= workers {
			break
		}
		if time.Since(start) > limit {
			return fmt.Errorf("loadtest: only %d of %d workers running after %s (see the agents' logs under %s)", running, workers, limit.Round(time.Second), r.logs)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	// Running is not warm: wait until every account has signed in on the
	// board (browser watchers last: Chromium starts, signs in, opens the
	// jobs view), so the first loads are not measured against a cold fleet.
	want := map[string]bool{}
	for _, p := range r.agents {
		want[p.agent.Name] = true
	}
	var after int64
	for len(want) > 0 {
		for _, e := range r.board().Events(after, 1000) {
			after = e.Seq
			if e.Type == board.EvLogin {
				delete(want, e.Account)
			}
		}
		if len(want) == 0 {
			break
		}
		if time.Since(start) > limit {
			return fmt.Errorf("loadtest: %d accounts never signed in on the board within %s (see the agents' logs under %s)", len(want), limit.Round(time.Second), r.logs)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	// The jobs view's first poll follows its load.
	time.Sleep(2 * time.Second)
	r.printf("every worker running and signed in after %s", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// startRedis starts cell i's Redis (a: the default cell, b) and supervises it.
func (r *runner) startRedis(ctx context.Context, i int) (*embedded.Redis, error) {
	name := string(rune('a' + i))
	// Debug: the embedded launcher forwards Redis's own lines (loglevel
	// warning) at debug, and they are what this file is for.
	lg, err := r.serviceLog("redis-"+name, slog.LevelDebug)
	if err != nil {
		return nil, err
	}
	rd, err := embedded.StartRedis(ctx, embedded.RedisConfig{Dir: filepath.Join(r.dir, "redis-"+name), Logger: lg})
	if err != nil {
		return nil, err
	}
	rd.Supervise(r.supervision("redis:" + name))
	return rd, nil
}

// serviceLog is the logger of a service this process runs (the board, the
// embedded Postgres and Redis): its own file logs/NAME.log, counted as its
// log volume; one per name for the whole run.
func (r *runner) serviceLog(name string, level slog.Level) (*slog.Logger, error) {
	r.svcMu.Lock()
	defer r.svcMu.Unlock()
	if lg := r.svcLogs[name]; lg != nil {
		return lg, nil
	}
	w, err := r.meter.open(r.logs, name)
	if err != nil {
		return nil, err
	}
	lg := logging.New(w, logging.Options{Level: level})
	r.svcLogs[name] = lg
	return lg, nil
}

// supervision restarts the run's own services when they die, as a panel
// restarts its embedded ones; the budget is the run's chaos, not a unit's:
// it kills them on purpose, once per cycle.
func (r *runner) supervision(service string) embedded.Supervision {
	return embedded.Supervision{Service: service, Log: r.log, StartLimitBurst: 1000, StartLimitInterval: time.Minute,
		Backoff: 500 * time.Millisecond, MaxBackoff: 2 * time.Second,
		OnRestart: func(s string) {
			r.mu.Lock()
			r.restarts[s]++
			r.mu.Unlock()
		},
		OnGiveUp: func(s string) { r.note("the run's %s spent its restart budget", s) },
	}
}

// boardServing writes the board's start line to its log, as the board
// role (board.Run) does: an in-process board logs nothing else unless
// something fails.
func (r *runner) boardServing(s *board.Server, cfg board.Config) {
	r.boardLog.Info("board: serving", "url", s.URL(), "data", cfg.Data, "rate", cfg.Rate, "idempotency_keys", cfg.IdempotencyKeys)
}

// board is the running board (board_restart replaces it).
func (r *runner) board() *board.Server {
	r.brdMu.RLock()
	defer r.brdMu.RUnlock()
	return r.brd
}

func (r *runner) addSecret(v, kind, owner string) {
	if v == "" {
		return
	}
	logging.RegisterSecret(v)
	r.secrets = append(r.secrets, secret{value: v, kind: kind, owner: owner})
}

func (r *runner) startPanel(i int) (*proc, error) {
	name := fmt.Sprintf("panel-%d", i+1)
	s, err := newSink(filepath.Join(r.logs, name+".log"), "panel ready", r.meter.counter(name))
	if err != nil {
		return nil, err
	}
	u := unit.Start(unit.Spec{
		Name: name, Path: r.bin,
		Args: r.panelArgs(i, name),
		Env: childEnv("FLEET_DATABASE_URL="+r.pg.OwnerURL(), "FLEET_DATABASE_APP_URL="+r.pg.AppURL(),
			"FLEET_REDIS_URL="+r.redis[0].URL(0), "FLEET_SECRET_KEY="+r.key),
		Output: s, RestartSec: time.Second, StartLimitInterval: time.Minute, StartLimitBurst: 1000,
		StopTimeout: 20 * time.Second,
	}, r.log, nil)
	return &proc{name: name, u: u, out: s, replica: i}, nil
}

func (r *runner) panelArgs(i int, name string) []string {
	args := []string{"--role=panel", "--listen=127.0.0.1:" + strconv.Itoa(r.ports[i]), "--data-dir=" + filepath.Join(r.dir, name),
		"--metrics-listen=127.0.0.1:" + strconv.Itoa(r.mports[i]), "--db-max-conns=48", "--shutdown-timeout=10s"}
	if r.cfg.BoardOutage > 0 {
		args = append(args, "--health-interval="+outageHealthInterval.String())
	}
	return args
}

func (r *runner) panelURL(i int) string { return "http://127.0.0.1:" + strconv.Itoa(r.ports[i]) }

// metricsURL is replica i's metrics listener.
func (r *runner) metricsURL(i int) string {
	return "http://127.0.0.1:" + strconv.Itoa(r.mports[i]) + "/metrics"
}

func (r *runner) startAgent(p *proc) error {
	s, err := newSink(filepath.Join(r.logs, p.name+".log"), "", r.meter.counter(p.name))
	if err != nil {
		return err
	}
	state := filepath.Join(r.dir, "agents", p.agent.Name)
	p.out = s
	env := childEnv("TMPDIR=" + r.scratch())
	if r.cfg.Chaos == "on" && p == r.gateAgent() {
		env = append(env, fmt.Sprintf("%s=%d", agent.StopAfterGateEnv, stopAfterGateBooking))
	}
	if r.cfg.Chaos == "on" && p == r.skewAgent() {
		env = append(env, agent.ClockSkewEnv+"="+clockSkew.String())
	}
	p.u = unit.Start(unit.Spec{
		Name: p.name, Path: r.bin,
		Args: []string{"--role=agent", "--panel=" + p.relay.URL(), "--token-file=" + filepath.Join(state, "token"),
			"--state-dir=" + state, "--browser-slots=" + strconv.Itoa(max(1, p.agent.Browsers))},
		// Chromium's user-data dirs go under the run's tmp, so anything an
		// agent killed with SIGKILL leaves behind is found and reaped.
		Env:    env,
		Output: s, RestartSec: time.Second, StartLimitInterval: time.Minute, StartLimitBurst: 1000,
		RestartPreventExitStatus: []int{2, 78}, StopTimeout: 20 * time.Second,
	}, r.log, nil)
	return nil
}

// runningWorkers counts the fleet's workers whose agents report them running.
func (r *runner) runningWorkers(ctx context.Context) (int, error) {
	n := 0
	for _, id := range r.tenantIDs {
		f, err := r.fleet.List(ctx, id)
		if err != nil {
			return n, err
		}
		for _, a := range f.Agents {
			if !a.Connected {
				continue
			}
			for _, w := range a.State.Workers {
				if w.State == wire.WorkerRunning {
					n++
				}
			}
		}
	}
	return n, nil
}

// measure publishes for the duration while the chaos schedule runs, then
// restores every switch and process.
func (r *runner) measure(ctx context.Context) error {
	mctx, stop := context.WithCancel(ctx)
	defer stop()
	sctx, sstop := context.WithCancel(context.WithoutCancel(ctx))
	r.scrapeStop = sstop
	r.scrapeWG.Add(1)
	go func() { defer r.scrapeWG.Done(); r.scrapeLoop(sctx) }()
	r.started = time.Now()
	if err := r.board().SetRate(r.cfg.Rate); err != nil {
		return err
	}
	cycleDone := make(chan struct{})
	var wg, chaosWG sync.WaitGroup
	cctx, cstop := context.WithCancel(mctx)
	defer cstop()
	if r.cfg.Chaos == "on" {
		chaosWG.Add(1)
		go func() { defer chaosWG.Done(); r.chaos(cctx, cycleDone) }()
	} else {
		close(cycleDone)
	}
	wg.Add(1)
	go func() { defer wg.Done(); r.progress(mctx) }()
	if r.cfg.Chaos == "on" {
		// Not bound to the measurement: the agent may stop itself until the
		// run ends, and must always be continued.
		gctx, gstop := context.WithCancel(context.WithoutCancel(ctx))
		r.gateStop = gstop
		r.gateWG.Add(1)
		go func() { defer r.gateWG.Done(); r.watchGateStops(gctx) }()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for r.sleep(mctx, time.Second) {
			n := countBrowsers(r.scratch())
			r.mu.Lock()
			r.maxBrowsers = max(r.maxBrowsers, n)
			r.mu.Unlock()
		}
	}()

	timer := time.NewTimer(r.cfg.Duration)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
	// The first chaos cycle always completes, so every kind gets its
	// chance; a slow machine runs a little longer rather than skip one.
	select {
	case <-cycleDone:
	case <-ctx.Done():
	case <-time.After(3 * time.Minute):
		r.note("the first chaos cycle did not complete within 3 minutes after the duration")
	}
	if r.cfg.BoardOutage > 0 && ctx.Err() == nil {
		// The outage runs alone: the schedule ends and every switch and
		// process is restored first; the board keeps publishing.
		cstop()
		chaosWG.Wait()
		r.bg.Wait()
		r.restoreAll(ctx)
		r.boardOutage(ctx)
	}
	_ = r.board().SetRate(0)
	r.measured = time.Since(r.started)
	stop()
	chaosWG.Wait()
	wg.Wait()
	r.bg.Wait()
	r.restoreAll(ctx)
	return ctx.Err()
}

func (r *runner) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.notes = append(r.notes, msg)
	r.mu.Unlock()
	r.log.Warn(msg)
}

// restoreAll turns every board switch off, continues stopped agents and
// makes sure both cells' Redis and both replicas run.
func (r *runner) restoreAll(ctx context.Context) {
	c := r.board().Chaos()
	c.ErrorRate, c.DropResponseRate, c.LateCommitRate, c.Hold, c.SessionStormEvery, c.CaptchaRate = 0, 0, 0, 0, 0, 0
	c.BookErrorRate = 0
	_ = r.board().SetChaos(c)
	r.mu.Lock()
	for p := range r.stopped {
		_ = p.u.Signal(syscall.SIGCONT)
		delete(r.stopped, p)
	}
	r.mu.Unlock()
	r.continuePostgres()
	r.redisMu.Lock()
	if r.redis[1] == nil {
		rd, err := r.startRedis(ctx, 1)
		if err != nil {
			r.note("cell b's Redis did not come back: %v", err)
		}
		r.redis[1] = rd
	}
	r.redisMu.Unlock()
}

// progress prints a line every cfg.Progress.
func (r *runner) progress(ctx context.Context) {
	t := time.NewTicker(r.cfg.Progress)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := r.board().Stats()
		states, err := r.claimStates(ctx)
		if err != nil {
			continue // the run is ending
		}
		r.mu.Lock()
		kinds := 0
		for _, k := range ChaosKinds {
			if r.hits[k] > 0 {
				kinds++
			}
		}
		r.mu.Unlock()
		running, err := r.runningWorkers(ctx)
		if err != nil {
			continue
		}
		chaos := "off"
		if r.cfg.Chaos == "on" {
			chaos = fmt.Sprintf("%d/%d kinds hit", kinds, len(ChaosKinds))
		}
		r.printf("%s/%s published %d, board bookings %d (duplicates %d), claims confirmed %d taken %d unknown %d open %d, workers running %d, chaos %s",
			time.Since(r.started).Round(time.Second), r.cfg.Duration, st.LoadsPublished, st.ConfirmedBookings, st.DuplicateConfirmations,
			states["CONFIRMED"], states["TAKEN"], states["UNKNOWN"], states["LEASED"]+states["ACTING"], running, chaos)
	}
}

// claimStates counts the current claims by state.
func (r *runner) claimStates(ctx context.Context) (map[string]int, error) {
	rows, err := r.super.Query(ctx, `SELECT state, count(*) FROM claims GROUP BY state`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		out[s] = n
	}
	return out, rows.Err()
}

// settle waits until no claim is LEASED, ACTING or UNKNOWN (twice in a
// row, a sweep apart), bounded by limit.
func (r *runner) settle(ctx context.Context, limit time.Duration) (time.Duration, bool) {
	start := time.Now()
	calm := 0
	for time.Since(start) < limit {
		st, err := r.claimStates(ctx)
		if err == nil && st["LEASED"]+st["ACTING"]+st["UNKNOWN"] == 0 {
			calm++
			if calm >= 2 {
				return time.Since(start), true
			}
		} else {
			calm = 0
		}
		select {
		case <-ctx.Done():
			return time.Since(start), false
		case <-time.After(2500 * time.Millisecond):
		}
	}
	return time.Since(start), false
}

// conclude settles, pauses the fleet, stops the processes and builds the
// report from the database and the board.
func (r *runner) conclude(ctx context.Context) (*Report, error) {
	r.printf("publishing stopped after %s; waiting up to %s for every claim to settle", r.measured.Round(time.Second), r.cfg.Settle)
	took, ok := r.settle(ctx, r.cfg.Settle)
	if !ok {
		r.note("claims still open after %s of settling", r.cfg.Settle)
	}
	// No new lease or action from here on: what the report compares is final.
	if err := r.eng.Store().SetPaused(ctx, audit.Entry{Actor: "loadtest"}, "", true); err != nil {
		r.note("pause failed: %v", err)
	}
	if ok {
		if _, ok2 := r.settle(ctx, 30*time.Second); !ok2 {
			r.note("claims opened after the settle and did not close")
		}
	}
	r.printf("settled after %s; stopping the fleet", took.Round(time.Second))
	rep, err := r.gather(ctx)
	if err != nil {
		return nil, err
	}
	rep.SettleSeconds = took.Seconds()
	rep.Settled = ok
	return rep, nil
}

// stopScrape ends the replicas' periodic scrape.
func (r *runner) stopScrape() {
	if r.scrapeStop != nil {
		r.scrapeStop()
		r.scrapeWG.Wait()
	}
}

// dispatchMode is the tenants' dispatch mode.
func (r *runner) dispatchMode() string {
	if r.cfg.DispatchMode == "" {
		return claim.DispatchAssign // the default of a new tenant (Validate fills it)
	}
	return r.cfg.DispatchMode
}

// teardown stops everything this run started, agents first.
func (r *runner) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	r.stopScrape()
	if r.gateStop != nil {
		r.gateStop()
		r.gateWG.Wait()
	}
	r.mu.Lock()
	for p := range r.stopped {
		_ = p.u.Signal(syscall.SIGCONT)
	}
	r.mu.Unlock()
	r.continuePostgres()
	var wg sync.WaitGroup
	for _, p := range r.agents {
		if p.u != nil {
			wg.Add(1)
			go func() { defer wg.Done(); p.u.Stop(ctx) }()
		}
	}
	wg.Wait()
	for _, p := range r.agents {
		if p.relay != nil {
			p.relay.close()
		}
	}
	for _, p := range r.panels {
		if p != nil {
			wg.Add(1)
			go func() { defer wg.Done(); p.u.Stop(ctx) }()
		}
	}
	wg.Wait()
	for _, p := range append(r.agents, r.panels[:]...) {
		if p != nil && p.out != nil {
			p.out.close()
		}
	}
	if r.brd != nil {
		_ = r.board().Close()
	}
	if r.super != nil {
		r.super.Close()
	}
	if r.app != nil {
		r.app.Close()
	}
	r.redisMu.Lock()
	for _, rd := range r.redis {
		rd.Stop()
	}
	r.redisMu.Unlock()
	r.pg.Stop()
}

var errNoCandidate = errors.New("loadtest: no candidate")
