package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/modules/panel"
)

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Run performs a whole bench run. Progress lines go to progress; the
// panel's own log goes to DataDir/bench.log (and its warnings to errOut).
func Run(ctx context.Context, cfg Config, progress, errOut io.Writer) (*Report, error) {
	if !cfg.valid {
		if err := cfg.Validate(nil); err != nil {
			return nil, err
		}
	}
	started := time.Now()
	say := func(format string, args ...any) { fmt.Fprintf(progress, "bench: "+format+"\n", args...) }
	dir, removeDir := cfg.DataDir, false
	var err error
	if dir == "" {
		if dir, err = os.MkdirTemp("", "fleet-bench-"); err != nil {
			return nil, fmt.Errorf("bench: data dir: %w", err)
		}
		removeDir = true
	} else if dir, err = filepath.Abs(dir); err != nil {
		return nil, fmt.Errorf("bench: data dir: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: data dir: %w", err)
	}
	// The postgres system user must reach the private cluster under it.
	_ = os.Chmod(dir, 0o755)
	lock, err := embedded.LockDataDir(dir, "fleetwright bench")
	if err != nil {
		return nil, err
	}
	defer func() {
		lock.Release()
		if removeDir {
			_ = os.RemoveAll(dir)
		}
	}()
	logFile, err := os.OpenFile(filepath.Join(dir, "bench.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer logFile.Close()
	log := logging.New(io.MultiWriter(logFile, levelFilter{w: errOut}), logging.Options{Level: slog.LevelInfo})
	redis.SetLogger(&logging.Printf{Log: log.With("component", "go-redis"), Level: slog.LevelWarn, Every: 10 * time.Second})

	rep := &Report{CPUs: runtime.NumCPU(), Services: "given", Quick: cfg.Quick, PhaseS: cfg.Duration.Seconds(),
		BareInsertClients: cfg.Clients, Actors: cfg.Actors, PacedRate: cfg.Rate, BurstJobs: cfg.Burst,
		MaxP99MS: ms(cfg.MaxP99), Modes: map[string]*ModeReport{}, ModesAbsent: absentModes}
	ownerURL, appURL, redisURL := cfg.DatabaseURL, cfg.DatabaseAppURL, cfg.RedisURL
	var meter cpuMeter
	if ownerURL == "" || redisURL == "" {
		rep.Services = "private"
	}
	if ownerURL == "" {
		say("starting a private Postgres under %s", dir)
		pg, err := embedded.StartPostgres(ctx, embedded.PostgresConfig{Dir: filepath.Join(dir, "postgres"), NoSync: true,
			TrackStatements: true, Logger: log})
		if err != nil {
			return nil, err
		}
		defer pg.Stop()
		meter.pgPid = pg.Pid()
		super, err := db.Open(ctx, pg.SuperURL(embedded.Database), 1)
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		defer super.Close()
		if _, err := super.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
			return nil, fmt.Errorf("bench: pg_stat_statements: %w", err)
		}
		meter.statements = &statementTracker{super: super}
		ownerURL, appURL = pg.OwnerURL(), pg.AppURL()
	}
	if redisURL == "" {
		say("starting a private Redis under %s", dir)
		rd, err := embedded.StartRedis(ctx, embedded.RedisConfig{Dir: filepath.Join(dir, "redis"), Logger: log})
		if err != nil {
			return nil, err
		}
		defer rd.Stop()
		meter.redisPid = rd.Pid()
		redisURL = rd.URL(0)
	}
	owner, err := db.Open(ctx, ownerURL, 4)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer owner.Close()
	if err := owner.QueryRow(ctx, `SHOW server_version`).Scan(&rep.Postgres); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	rep.Postgres = strings.Fields(rep.Postgres)[0]
	meter.db = owner

	// (a) The bare durable insert, before anything else runs.
	say("(a) bare INSERT … ON CONFLICT, %d clients, one row per commit, %s", cfg.Clients, cfg.Duration)
	perS, lat, err := bareInsert(ctx, ownerURL, cfg.Clients, cfg.Duration)
	if err != nil {
		return nil, err
	}
	rep.BareInsertPerS = math.Round(perS)
	p := pcts(lat)
	rep.BareInsertP50, rep.BareInsertP99 = p.P50, p.P99

	// (b) One loopback WebSocket round trip.
	say("(b) loopback WebSocket round trip, %d samples", cfg.rttSamples)
	rtt, err := wsRoundTrip(ctx, cfg.rttSamples)
	if err != nil {
		return nil, err
	}
	p = pcts(rtt)
	rep.WSRTTP50, rep.WSRTTP99 = p.P50, p.P99
	rep.FloorMS = math.Round((rep.BareInsertP50+rep.WSRTTP50)*1000) / 1000
	rep.FloorP99MS = math.Round((rep.BareInsertP99+rep.WSRTTP99)*1000) / 1000

	// (c) The claim path through a real panel.
	say("(c) starting a panel")
	pan, err := panel.Start(ctx, panel.Config{Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "panel"), DatabaseURL: ownerURL,
		DatabaseAppURL: appURL, RedisURL: redisURL, DBMaxConns: 64, PGMaxConnections: 300, ShutdownTimeout: 10 * time.Second,
		SessionIdle: time.Hour, SessionMax: time.Hour, AuditSealInterval: time.Minute, HealthInterval: time.Minute,
		AuditVerifyCron: "0 0 1 1 *", Version: "bench"}, log.With("component", "panel"))
	if err != nil {
		return nil, err
	}
	go func() { _ = pan.Serve() }()
	defer pan.Stop()
	if info, err := pan.Redis.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				rep.Redis = v
			}
		}
	}
	var current atomic.Pointer[ClaimPath]
	pan.Gateway.OnPanelIn(func(tenant, key string, d time.Duration) {
		if cp := current.Load(); cp != nil {
			cp.PanelIn(tenant, key, d)
		}
	})
	url := "ws://" + pan.Addr() + "/agent/ws"
	run := randomHex(4)
	for _, name := range cfg.Modes {
		m := modeNamed(name)
		say("mode %s: enrolling a tenant with a watcher and %d actors", name, cfg.Actors)
		tenant, tokens, err := Enrol(ctx, pan, owner, "bench-"+name+"-"+run, cfg.Actors)
		if err != nil {
			return nil, err
		}
		if m.set != nil {
			if err := m.set(ctx, pan, tenant); err != nil {
				return nil, fmt.Errorf("bench: switch the tenant to dispatch mode %s: %w", name, err)
			}
		}
		// The agents' goroutines carry a profile label, so a --cpu-profile
		// separates them from the panel's.
		var mr *ModeReport
		pprof.Do(ctx, pprof.Labels("part", "agents"), func(ctx context.Context) {
			var cp *ClaimPath
			if cp, err = Connect(ctx, url, tokens); err != nil {
				return
			}
			current.Store(cp)
			mr, err = measureMode(ctx, cfg, cp, say, meter, name)
			current.Store(nil)
			cp.Close()
		})
		if err != nil {
			return nil, err
		}
		mr.About = m.about
		if rep.BareInsertPerS > 0 {
			mr.RatioToBare = math.Round(mr.SaturatedLeasesPerS/rep.BareInsertPerS*10000) / 10000
		}
		rep.Modes[name] = mr
		rep.ModeOrder = append(rep.ModeOrder, name)
	}
	rep.WallS = math.Round(time.Since(started).Seconds())
	return rep, nil
}

// measureMode runs one mode's phases on connected agents: a warm-up, the
// paced run, the burst, then the saturation steps (last, so their backlog
// disturbs nothing measured after them).
func measureMode(ctx context.Context, cfg Config, cp *ClaimPath, say func(string, ...any), meter cpuMeter, name string) (*ModeReport, error) {
	mr := &ModeReport{}
	// Warm-up, not measured: the connections' first pings and command
	// polls, the filter cache, the prepared statements; one second at the
	// paced rate.
	time.Sleep(time.Second)
	warm := max(10, int(cfg.Rate))
	if err := cp.Paced(ctx, "warm", warm, cfg.Rate); err != nil {
		return nil, err
	}
	if n := cp.Wait(ctx, "warm", 30*time.Second); n > 0 {
		return nil, fmt.Errorf("bench: %d of %d warm-up jobs never reached act_sent in 30 s: the panel's claim path is not working (see bench.log under --data-dir)", n, warm)
	}

	jobs := max(1, int(cfg.Rate*cfg.Duration.Seconds()))
	say("  paced: %d jobs at %.0f/s", jobs, cfg.Rate)
	if err := cp.Paced(ctx, "paced", jobs, cfg.Rate); err != nil {
		return nil, err
	}
	cp.Wait(ctx, "paced", cfg.drainLimit)
	mr.Paced = Summarise(cp.Jobs("paced"), time.Now())
	settle(ctx, cfg, cp, "paced", mr.Paced)
	mr.DetectActSent, mr.DetectLeased, mr.PanelIn = mr.Paced.DetectActSent, mr.Paced.DetectLeased, mr.Paced.PanelIn

	say("  burst: %d jobs at once", cfg.Burst)
	if err := cp.Burst(ctx, "burst", cfg.Burst); err != nil {
		return nil, err
	}
	cp.Wait(ctx, "burst", cfg.drainLimit)
	mr.Burst = Summarise(cp.Jobs("burst"), time.Now())
	settle(ctx, cfg, cp, "burst", mr.Burst)
	mr.Burst1000MaxMS = mr.Burst.MaxActSentMS

	// Where the CPU goes while saturated: sampled over each step (sighting
	// to the last act_sent), profiled over all of them with --cpu-profile.
	stopProfile, err := startProfile(cfg.CPUProfile, name)
	if err != nil {
		return nil, err
	}
	rate, last := cfg.Rate, ""
	for i := range cfg.maxSteps {
		before := meter.sample(ctx)
		meter.statements.reset(ctx)
		prefix := fmt.Sprintf("step%d", i)
		last = prefix
		n := max(1, int(rate*cfg.Duration.Seconds()))
		if err := cp.Paced(ctx, prefix, n, rate); err != nil {
			return nil, err
		}
		cp.Wait(ctx, prefix, cfg.drainLimit)
		st := Step{OfferedPerS: rate, Phase: Summarise(cp.Jobs(prefix), time.Now())}
		mr.Steps = append(mr.Steps, st)
		if st.LeasesPerS > mr.SaturatedLeasesPerS {
			// The CPU figures are the step that set the saturated rate's.
			mr.SaturatedLeasesPerS = st.LeasesPerS
			mr.SaturationCPU = meter.use(before, meter.sample(ctx), runtime.NumCPU(), st.Jobs-st.Unfinished)
			if mr.SaturationStatements, err = meter.statements.top(ctx, 10, st.Jobs-st.Unfinished); err != nil {
				return nil, err
			}
			if mr.SaturationFunctions, err = meter.statements.functions(ctx, 8, st.Jobs-st.Unfinished); err != nil {
				return nil, err
			}
		}
		say("  step %d: offered %.0f/s, %.1f leases/s, detect→act_sent p99 %.1f ms, %d unfinished", i+1, rate, st.LeasesPerS, st.DetectActSent.P99, st.Unfinished)
		if st.DetectActSent.P99 > ms(cfg.MaxP99) || st.Unfinished > 0 {
			break
		}
		rate *= 2
	}
	// The last step's backlog drains before the next mode is measured.
	cp.Wait(ctx, last, cfg.drainLimit)
	if err := stopProfile(); err != nil {
		return nil, fmt.Errorf("bench: --cpu-profile: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return mr, nil
}

// settle waits (unmeasured, at most another drain limit) for a phase's
// unfinished jobs, so the next phase does not start behind its backlog.
func settle(ctx context.Context, cfg Config, cp *ClaimPath, prefix string, ph Phase) {
	if ph.Unfinished > 0 {
		cp.Wait(ctx, prefix, cfg.drainLimit)
	}
}

// levelFilter passes only errors of the text log to w (the panel's other
// lines stay in bench.log).
type levelFilter struct{ w io.Writer }

func (f levelFilter) Write(b []byte) (int, error) {
	s := string(b)
	if strings.Contains(s, "level=ERROR") {
		return f.w.Write(b)
	}
	return len(b), nil
}
