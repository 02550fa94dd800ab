// Package supervisor runs the agent's background workers.
//
// The rule, with its reason: a worker is restarted only when it fails by
// itself — it returns an error or panics (the panic is recovered and logged
// with its stack). Nothing outside the worker judges its liveness: an earlier
// outside watchdog judged by a coarse proxy signal and killed healthy agents.
// A worker that returns nil is done. The budget is hard: 5 restarts within
// any 300 s window; the sixth failure inside the window stops the worker for
// good and reports it as needing a person, instead of spinning forever.
//
// The platform listener and the reconnect loop are deliberately not run here:
// both have recovery of their own, and a second supervisor would race it.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// The restart budget.
const (
	// Budget is how many restarts a worker gets within Window.
	Budget = 5
	// Window is the sliding window the budget counts over.
	Window = 300 * time.Second
	// DefaultRestartDelay keeps a worker that fails at once from spinning
	// through its budget in microseconds.
	DefaultRestartDelay = time.Second
)

// Worker states (the wire's names, so a state report can carry them as is).
const (
	StateRunning     = wire.WorkerRunning
	StateRestarting  = wire.WorkerRestarting
	StateDone        = wire.WorkerDone
	StateStopped     = wire.WorkerStopped
	StateNeedsPerson = wire.WorkerNeedsPerson
)

// Worker is one background task of the agent.
type Worker struct {
	Name string
	Kind string
	// Run does the work until ctx ends. Returning nil means done for good;
	// an error (or a panic) asks for a restart within the budget, and an
	// error wrapping ErrNeedsPerson stops it until a person restarts it.
	Run func(ctx context.Context, h *Handle) error
}

// ErrNeedsPerson, wrapped in a worker's error, says no restart can help
// (its configuration cannot work): the worker stops as needs-person at
// once, its error the last error, without spending its budget. The worker
// has told the panel why itself.
var ErrNeedsPerson = errors.New("supervisor: the worker cannot run until a person changes its configuration")

// Handle lets a running worker report progress for the state report.
type Handle struct {
	mu         sync.Mutex
	lastOp     *wire.Operation
	oldestTask time.Time
}

// Completed records the last operation the worker completed.
func (h *Handle) Completed(op wire.Operation) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastOp = &op
}

// OldestTask records when the oldest task waiting for the worker arrived
// (zero: none waiting).
func (h *Handle) OldestTask(at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.oldestTask = at
}

// State is a worker as the state report shows it.
type State struct {
	Name     string
	Kind     string
	State    string
	Restarts int
	// LastOperation is the last operation the worker completed, if any.
	LastOperation *wire.Operation
	// OldestTask is when the oldest waiting task arrived (zero: none).
	OldestTask time.Time
	// LastError is the last failure (errors never carry secrets).
	LastError string
}

// PanicError is the failure a recovered panic becomes.
type PanicError struct {
	Value string
}

func (e *PanicError) Error() string { return "supervisor: worker panicked: " + e.Value }

// Options tune a Supervisor.
type Options struct {
	// RestartDelay is the pause before a restart (negative: none; zero:
	// DefaultRestartDelay).
	RestartDelay time.Duration
	// OnNeedsPerson is called once when a worker exhausts its budget.
	OnNeedsPerson func(State)
	// OnChange is called after every state change (for a prompt report).
	OnChange func()
}

// Supervisor runs workers under the restart budget. Its zero value is not
// usable; use New.
type Supervisor struct {
	clk  clock.Clock
	log  *slog.Logger
	opts Options

	mu      sync.Mutex
	workers map[string]*entry
	wg      sync.WaitGroup
}

type entry struct {
	w        Worker
	state    string
	restarts int
	recent   []time.Time // restart times inside the window
	lastErr  string
	handle   *Handle
	cancel   context.CancelFunc
	done     chan struct{}
}

// New returns a Supervisor on clk.
func New(clk clock.Clock, log *slog.Logger, opts Options) *Supervisor {
	if opts.RestartDelay == 0 {
		opts.RestartDelay = DefaultRestartDelay
	}
	return &Supervisor{clk: clk, log: log, opts: opts, workers: map[string]*entry{}}
}

// ErrExists is returned when a worker of that name is already running.
var ErrExists = errors.New("supervisor: a worker with that name is running")

// ErrNoWorker is returned for an unknown worker name.
var ErrNoWorker = errors.New("supervisor: no such worker")

// Start runs w until ctx ends. A finished (done, stopped or needs-person)
// worker of the same name is replaced, with a fresh budget.
func (s *Supervisor) Start(ctx context.Context, w Worker) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.workers[w.Name]; ok && !finished(old.state) {
		return fmt.Errorf("%w: %s", ErrExists, w.Name)
	}
	s.startLocked(ctx, w)
	return nil
}

func finished(state string) bool {
	return state == StateDone || state == StateStopped || state == StateNeedsPerson
}

func (s *Supervisor) startLocked(ctx context.Context, w Worker) {
	wctx, cancel := context.WithCancel(ctx)
	e := &entry{w: w, state: StateRunning, handle: &Handle{}, cancel: cancel, done: make(chan struct{})}
	s.workers[w.Name] = e
	s.wg.Add(1)
	go s.loop(wctx, e)
}

// Stop ends a worker (its state becomes stopped) and waits for it.
func (s *Supervisor) Stop(name string) error {
	s.mu.Lock()
	e, ok := s.workers[name]
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s", ErrNoWorker, name)
	}
	e.cancel()
	<-e.done
	return nil
}

// Remove stops a worker and forgets it.
func (s *Supervisor) Remove(name string) error {
	if err := s.Stop(name); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.workers, name)
	s.mu.Unlock()
	s.changed()
	return nil
}

// Restart is a person's restart: it stops the worker if it runs and starts
// it again with a fresh budget (this is how a needs-person worker comes back).
func (s *Supervisor) Restart(ctx context.Context, name string) error {
	s.mu.Lock()
	e, ok := s.workers[name]
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s", ErrNoWorker, name)
	}
	e.cancel()
	<-e.done
	s.mu.Lock()
	if cur := s.workers[name]; cur == e {
		s.startLocked(ctx, e.w)
	}
	s.mu.Unlock()
	s.changed()
	return nil
}

// States returns every worker's state, sorted by name.
func (s *Supervisor) States() []State {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]State, 0, len(s.workers))
	for _, e := range s.workers {
		e.handle.mu.Lock()
		st := State{Name: e.w.Name, Kind: e.w.Kind, State: e.state, Restarts: e.restarts,
			OldestTask: e.handle.oldestTask, LastError: e.lastErr}
		if e.handle.lastOp != nil {
			op := *e.handle.lastOp
			st.LastOperation = &op
		}
		e.handle.mu.Unlock()
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Names returns the names of the known workers.
func (s *Supervisor) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.workers))
	for n := range s.workers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Wait blocks until every worker goroutine has ended.
func (s *Supervisor) Wait() { s.wg.Wait() }

func (s *Supervisor) set(e *entry, state string) {
	s.mu.Lock()
	e.state = state
	s.mu.Unlock()
	s.changed()
}

func (s *Supervisor) changed() {
	if s.opts.OnChange != nil {
		s.opts.OnChange()
	}
}

func (s *Supervisor) loop(ctx context.Context, e *entry) {
	defer s.wg.Done()
	defer close(e.done)
	for {
		err := s.runOnce(ctx, e)
		if ctx.Err() != nil {
			s.set(e, StateStopped)
			return
		}
		if err == nil {
			s.log.Info("supervisor: worker finished", "worker", e.w.Name)
			s.set(e, StateDone)
			return
		}
		if errors.Is(err, ErrNeedsPerson) {
			s.mu.Lock()
			e.lastErr = err.Error()
			e.state = StateNeedsPerson
			s.mu.Unlock()
			s.log.Error("supervisor: worker cannot run as configured; stopped until a person fixes it", "worker", e.w.Name, "err", err)
			s.changed()
			return
		}
		now := s.clk.Now()
		s.mu.Lock()
		e.lastErr = err.Error()
		kept := e.recent[:0]
		for _, t := range e.recent {
			if now.Sub(t) < Window {
				kept = append(kept, t)
			}
		}
		e.recent = kept
		if len(e.recent) >= Budget {
			e.state = StateNeedsPerson
			st := State{Name: e.w.Name, Kind: e.w.Kind, State: e.state, Restarts: e.restarts, LastError: e.lastErr}
			s.mu.Unlock()
			s.log.Error("supervisor: worker failed again after its restart budget; stopped until a person restarts it",
				"worker", e.w.Name, "restarts_in_window", Budget, "window", Window, "err", err)
			s.changed()
			if s.opts.OnNeedsPerson != nil {
				s.opts.OnNeedsPerson(st)
			}
			return
		}
		e.recent = append(e.recent, now)
		e.restarts++
		e.state = StateRestarting
		n := len(e.recent)
		s.mu.Unlock()
		s.changed()
		s.log.Warn("supervisor: worker failed; restarting", "worker", e.w.Name, "err", err,
			"restarts_in_window", n, "budget", Budget)
		if s.opts.RestartDelay > 0 {
			select {
			case <-s.clk.After(s.opts.RestartDelay):
			case <-ctx.Done():
				s.set(e, StateStopped)
				return
			}
		}
		s.set(e, StateRunning)
	}
}

// runOnce runs the worker once, turning a panic into a *PanicError after
// logging it with its stack.
func (s *Supervisor) runOnce(ctx context.Context, e *entry) (err error) {
	defer func() {
		if r := recover(); r != nil {
			// %v of a wire.Secret prints [REDACTED]; the stack holds
			// addresses, not values.
			v := fmt.Sprintf("%v", r)
			s.log.Error("supervisor: worker panicked", "worker", e.w.Name, "panic", v, "stack", string(debug.Stack()))
			err = &PanicError{Value: v}
		}
	}()
	return e.w.Run(ctx, e.handle)
}
