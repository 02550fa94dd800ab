package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// CPUUse says where the machine's CPU went while a mode was saturated: the
// bench process (the panel and the protocol-only agents share it), the
// private Postgres (postmaster and every backend) and the private Redis,
// each in cores (CPU seconds per wall second), and how many database
// commits one job cost. It is what tells which part limits saturation.
type CPUUse struct {
	WindowS float64 `json:"window_s"`
	// Jobs reached act_sent inside the window.
	Jobs int `json:"jobs"`
	// Cores used on average over the window; Postgres and Redis are 0 with
	// given services (their processes are not this bench's to read).
	BenchProcess float64 `json:"cores_bench_process"`
	Postgres     float64 `json:"cores_postgres"`
	Redis        float64 `json:"cores_redis"`
	// Idle is what was left of the machine's CPUs (other processes included).
	Idle float64 `json:"cores_idle"`
	// CommitsPerJob divides the writing transactions of the whole cluster
	// in the window (transaction ids given out: durable commits, and the
	// rare rollback of a writer) by Jobs; read-only statements such as the
	// gate's check commit nothing to disk and are not counted.
	CommitsPerJob float64 `json:"commits_per_job"`
}

// cpuSample is the CPU time each part used up to a moment.
type cpuSample struct {
	at                    time.Time
	self, postgres, redis time.Duration
	commits               int64
}

// clockTick is Linux's USER_HZ: /proc reports CPU times in 1/100 s on every
// architecture Go builds for (the kernel's own HZ is not exposed there).
const clockTick = 10 * time.Millisecond

// procStat returns a process's parent pid and its CPU time; with children
// it adds the CPU time of its children already reaped (a backend that
// ended inside the window is counted there).
func procStat(pid int, children bool) (ppid int, cpu time.Duration, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, false
	}
	// The command name may hold spaces and parentheses: fields start after
	// the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): ppid is field 4, utime..cstime fields 14–17.
	if len(f) < 15 {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	var ticks int64
	last := 12
	if children {
		last = 14
	}
	for _, v := range f[11 : last+1] {
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return ppid, time.Duration(ticks) * clockTick, true
}

// treeCPU is the CPU time of a process and of its live children (a
// postmaster and its backends).
func treeCPU(root int) time.Duration {
	if root <= 0 {
		return 0
	}
	_, total, ok := procStat(root, true)
	if !ok {
		return 0
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return total
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == root {
			continue
		}
		if ppid, cpu, ok := procStat(pid, false); ok && ppid == root {
			total += cpu
		}
	}
	return total
}

// cpuMeter samples the parts of a run.
type cpuMeter struct {
	pgPid, redisPid int
	db              *pgxpool.Pool
	// statements is nil with a given database.
	statements *statementTracker
}

func (m cpuMeter) sample(ctx context.Context) cpuSample {
	s := cpuSample{at: time.Now(), postgres: treeCPU(m.pgPid), redis: treeCPU(m.redisPid)}
	_, s.self, _ = procStat(os.Getpid(), false)
	if m.db != nil {
		// The next transaction id, read without taking one: the ids given
		// out between two samples are the writing transactions (each a
		// durable commit, or a rollback) — read at once, unlike
		// pg_stat_database, whose counts reach it up to a second late.
		_ = m.db.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&s.commits)
	}
	return s
}

func (m cpuMeter) use(a, b cpuSample, cpus, jobs int) *CPUUse {
	w := b.at.Sub(a.at).Seconds()
	if w <= 0 {
		return nil
	}
	r2 := func(v float64) float64 { return math.Round(v*100) / 100 }
	u := &CPUUse{WindowS: r2(w), Jobs: jobs,
		BenchProcess: r2((b.self - a.self).Seconds() / w),
		Postgres:     r2((b.postgres - a.postgres).Seconds() / w),
		Redis:        r2((b.redis - a.redis).Seconds() / w)}
	u.Idle = r2(max(0, float64(cpus)-u.BenchProcess-u.Postgres-u.Redis))
	if jobs > 0 && b.commits >= a.commits {
		u.CommitsPerJob = r2(float64(b.commits-a.commits) / float64(jobs))
	}
	return u
}

// startProfile starts a CPU profile of the bench process into
// dir/<mode>.pprof (dir "" profiles nothing); the returned stop ends it.
func startProfile(dir, mode string) (stop func() error, err error) {
	if dir == "" {
		return func() error { return nil }, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: --cpu-profile: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, mode+".pprof"))
	if err != nil {
		return nil, fmt.Errorf("bench: --cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: --cpu-profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// agentLabels marks the protocol-only agents' goroutines, so a profile
// separates them from the panel's (go tool pprof -tagfocus part=agents,
// or -tagignore part=agents for the panel alone).
func agentLabels(ctx context.Context) context.Context {
	return pprof.WithLabels(ctx, pprof.Labels("part", "agents"))
}
