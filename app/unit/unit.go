// Package unit supervises child processes the way systemd supervises a
// service unit: restart on failure after RestartSec, give up after
// StartLimitBurst starts within StartLimitInterval, never restart on an exit
// status listed in RestartPreventExitStatus, stop with SIGTERM then SIGKILL.
// The demo runs its agents with it, using the limits of deploy/systemd.
//
// Children are started from one OS thread locked for the life of the
// process, with a parent-death signal: Pdeathsig fires when the *thread* that
// forked the child exits, so starting from an arbitrary goroutine would kill
// children whenever the Go runtime retired that thread, while a dedicated
// locked thread ends only with the process — a SIGKILLed parent still takes
// its children down.
package unit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/fleetwright/fleetwright/app/clock"
)

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	spawnOnce sync.Once
	spawnCh   chan spawnReq
)

// SpawnerFunction names the goroutine that lives as long as the process (for
// goroutine-leak checks in tests: goleak.IgnoreTopFunction(unit.SpawnerFunction)).
const SpawnerFunction = "github.com/fleetwright/fleetwright/app/unit.spawner"

// spawner starts every child from one OS thread that it never unlocks.
func spawner() {
	runtime.LockOSThread()
	for r := range spawnCh {
		r.done <- r.cmd.Start()
	}
}

// StartProcess starts cmd in its own process group with deathSig delivered
// when this process dies.
func StartProcess(cmd *exec.Cmd, deathSig syscall.Signal) error {
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnReq)
		go spawner()
	})
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = deathSig
	cmd.SysProcAttr.Setpgid = true
	done := make(chan error, 1)
	spawnCh <- spawnReq{cmd: cmd, done: done}
	return <-done
}

// Spec describes a unit.
type Spec struct {
	Name string
	Path string
	Args []string
	Env  []string
	Dir  string
	// Output receives the child's stdout and stderr.
	Output io.Writer
	// RestartSec is the pause before a restart (systemd's RestartSec=).
	RestartSec time.Duration
	// StartLimitInterval and StartLimitBurst: more than Burst starts within
	// Interval and the unit fails for good (StartLimitIntervalSec=, StartLimitBurst=).
	StartLimitInterval time.Duration
	StartLimitBurst    int
	// RestartPreventExitStatus are exit statuses that end the unit for good.
	RestartPreventExitStatus []int
	// StopTimeout is how long SIGTERM is given before SIGKILL.
	StopTimeout time.Duration
}

// States of a unit.
const (
	Running  = "running"
	Waiting  = "waiting"  // between a failure and its restart
	Exited   = "exited"   // exited 0, or stopped
	Failed   = "failed"   // start limit hit
	Finished = "finished" // exited with a RestartPreventExitStatus
)

// Unit is a supervised child process.
type Unit struct {
	spec  Spec
	log   *slog.Logger
	clk   clock.Clock
	mu    sync.Mutex
	state string
	pid   int
	code  int
	// starts are the recent start times, for the start limit.
	starts   []time.Time
	restarts int
	cmd      *exec.Cmd
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// Start launches the unit and supervises it until Stop or a final state.
func Start(spec Spec, log *slog.Logger, clk clock.Clock) *Unit {
	if clk == nil {
		clk = clock.Real{}
	}
	if spec.StopTimeout <= 0 {
		spec.StopTimeout = 10 * time.Second
	}
	if spec.StartLimitBurst <= 0 {
		spec.StartLimitBurst = 5
	}
	if spec.StartLimitInterval <= 0 {
		spec.StartLimitInterval = 300 * time.Second
	}
	u := &Unit{spec: spec, log: log.With("unit", spec.Name), clk: clk, stop: make(chan struct{}), done: make(chan struct{})}
	go u.run()
	return u
}

func (u *Unit) set(state string) {
	u.mu.Lock()
	u.state = state
	u.mu.Unlock()
}

// Status returns the unit's state, restarts so far, current pid (0 when not
// running) and last exit code.
func (u *Unit) Status() (state string, restarts, pid, code int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.state, u.restarts, u.pid, u.code
}

// Done is closed when the unit reached a final state or was stopped.
func (u *Unit) Done() <-chan struct{} { return u.done }

func (u *Unit) run() {
	defer close(u.done)
	for {
		now := u.clk.Now()
		kept := u.starts[:0]
		for _, s := range u.starts {
			if now.Sub(s) < u.spec.StartLimitInterval {
				kept = append(kept, s)
			}
		}
		u.starts = append(kept, now)
		if len(u.starts) > u.spec.StartLimitBurst {
			u.log.Error("start limit hit: the unit failed for good", "burst", u.spec.StartLimitBurst, "interval", u.spec.StartLimitInterval)
			u.set(Failed)
			return
		}
		code, err := u.runOnce()
		u.mu.Lock()
		u.pid, u.code = 0, code
		u.mu.Unlock()
		select {
		case <-u.stop:
			u.set(Exited)
			return
		default:
		}
		switch {
		case err != nil:
			u.log.Error("start failed", "err", err)
		case code == 0:
			u.set(Exited)
			return
		case slices.Contains(u.spec.RestartPreventExitStatus, code):
			u.log.Warn("exited with a status that prevents restart", "status", code)
			u.set(Finished)
			return
		}
		u.log.Warn("failed; restarting", "status", code, "in", u.spec.RestartSec)
		u.set(Waiting)
		select {
		case <-u.stop:
			u.set(Exited)
			return
		case <-u.clk.After(u.spec.RestartSec):
		}
		u.mu.Lock()
		u.restarts++
		u.mu.Unlock()
	}
}

func (u *Unit) runOnce() (int, error) {
	cmd := exec.Command(u.spec.Path, u.spec.Args...)
	cmd.Env, cmd.Dir = u.spec.Env, u.spec.Dir
	cmd.Stdout, cmd.Stderr = u.spec.Output, u.spec.Output
	if err := StartProcess(cmd, syscall.SIGTERM); err != nil {
		return -1, fmt.Errorf("unit: start %s: %w", u.spec.Name, err)
	}
	u.mu.Lock()
	u.cmd, u.pid, u.state = cmd, cmd.Process.Pid, Running
	u.mu.Unlock()
	err := cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return exit.ExitCode(), nil
	}
	if err != nil {
		return -1, err
	}
	return 0, nil
}

// Signal sends sig to the running process, if any (tests use it to play a
// crash or a hang).
func (u *Unit) Signal(sig syscall.Signal) error {
	u.mu.Lock()
	pid := u.pid
	u.mu.Unlock()
	if pid == 0 {
		return errors.New("unit: not running")
	}
	return syscall.Kill(pid, sig)
}

// Stop ends the unit: SIGTERM to its process group, SIGKILL after
// StopTimeout; it returns when the unit is done.
func (u *Unit) Stop(ctx context.Context) {
	u.stopOnce.Do(func() { close(u.stop) })
	// A process just started may run (and be seen) before its pid is
	// recorded: wait for the pid, or for the unit to end without one (in
	// its restart wait it ends at once on stop).
	var pid int
	for {
		u.mu.Lock()
		pid = u.pid
		u.mu.Unlock()
		if pid != 0 {
			break
		}
		select {
		case <-u.done:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	{
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		select {
		case <-u.done:
			return
		case <-time.After(u.spec.StopTimeout):
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		case <-ctx.Done():
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	<-u.done
}

// ParentPID reads a process's parent pid from /proc (0 when it is gone).
func ParentPID(pid int) int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// "pid (comm) state ppid …": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(string(f[1]))
	return n
}
