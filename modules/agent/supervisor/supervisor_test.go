package supervisor

import (
	"context"
	"errors"
	"fmt"
	"github.com/fleetwright/fleetwright/app/testenv"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/modules/wire"
)

func TestMain(m *testing.M) { testenv.MainNoLeaks(m) }

// scripted is a worker whose every run waits for the test to tell it how to
// end: an error, nil, or a panic.
type scripted struct {
	runs    chan struct{}
	results chan func() error
}

func newScripted() *scripted {
	return &scripted{runs: make(chan struct{}, 100), results: make(chan func() error)}
}

func (w *scripted) run(ctx context.Context, _ *Handle) error {
	w.runs <- struct{}{}
	select {
	case f := <-w.results:
		return f()
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *scripted) waitRun(t *testing.T) {
	t.Helper()
	select {
	case <-w.runs:
	case <-time.After(5 * time.Second):
		t.Fatal("worker did not (re)start")
	}
}

func (w *scripted) noRun(t *testing.T) {
	t.Helper()
	select {
	case <-w.runs:
		t.Fatal("worker was restarted")
	case <-time.After(50 * time.Millisecond):
	}
}

func fail() error { return errors.New("board: connection reset") }

type bundle struct {
	clk    *clock.Fake
	sup    *Supervisor
	logs   *syncBuffer
	mu     sync.Mutex
	needed []State
}

type syncBuffer = testenv.SyncBuffer

func setup(t *testing.T) *bundle {
	b := &bundle{clk: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), logs: &syncBuffer{}}
	b.sup = New(b.clk, slog.New(slog.NewTextHandler(b.logs, nil)), Options{
		RestartDelay: -1,
		OnNeedsPerson: func(s State) {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.needed = append(b.needed, s)
		},
	})
	return b
}

func (b *bundle) state(t *testing.T, name string) State {
	t.Helper()
	for _, s := range b.sup.States() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no worker %s", name)
	return State{}
}

func (b *bundle) eventually(t *testing.T, name, want string) {
	t.Helper()
	require.Eventually(t, func() bool { return b.state(t, name).State == want }, 5*time.Second, time.Millisecond)
}

func TestFiveRestartsInsideTheWindowThenStopOnTheSixth(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); b.sup.Wait() }()
	w := newScripted()
	require.NoError(t, b.sup.Start(ctx, Worker{Name: "actor-1", Kind: "actor", Run: w.run}))

	w.waitRun(t)
	for i := 1; i <= 5; i++ {
		w.results <- fail
		w.waitRun(t) // restarted
		require.Equal(t, i, b.state(t, "actor-1").Restarts)
		b.clk.Advance(59 * time.Second) // five restarts span 4 × 59 s < 300 s
	}
	// The sixth failure, 295 s after the first restart.
	w.results <- fail
	b.eventually(t, "actor-1", StateNeedsPerson)
	w.noRun(t)
	st := b.state(t, "actor-1")
	require.Equal(t, 5, st.Restarts)
	require.Equal(t, "board: connection reset", st.LastError)
	b.mu.Lock()
	require.Len(t, b.needed, 1)
	require.Equal(t, "actor-1", b.needed[0].Name)
	b.mu.Unlock()
	require.Contains(t, b.logs.String(), "restart budget")

	// A person restarts it: it runs again with a fresh budget.
	require.NoError(t, b.sup.Restart(ctx, "actor-1"))
	w.waitRun(t)
	require.Equal(t, StateRunning, b.state(t, "actor-1").State)
	require.Equal(t, 0, b.state(t, "actor-1").Restarts)
}

func TestFailuresSpacedBeyondTheWindowKeepRestarting(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); b.sup.Wait() }()
	w := newScripted()
	require.NoError(t, b.sup.Start(ctx, Worker{Name: "watcher-1", Run: w.run}))
	w.waitRun(t)
	// Every 61 s: any 300 s window holds at most five restarts.
	for i := 1; i <= 20; i++ {
		w.results <- fail
		w.waitRun(t)
		b.clk.Advance(61 * time.Second)
	}
	require.Equal(t, 20, b.state(t, "watcher-1").Restarts)
	require.Equal(t, StateRunning, b.state(t, "watcher-1").State)
	b.mu.Lock()
	require.Empty(t, b.needed)
	b.mu.Unlock()
}

// The window's edge: a restart exactly 300 s old no longer counts, one 299 s
// old still does.
func TestWindowEdge(t *testing.T) {
	for _, c := range []struct {
		lastGap time.Duration
		stops   bool
	}{{lastGap: 299 * time.Second, stops: true}, {lastGap: 300 * time.Second, stops: false}} {
		b := setup(t)
		ctx, cancel := context.WithCancel(context.Background())
		w := newScripted()
		require.NoError(t, b.sup.Start(ctx, Worker{Name: "w", Run: w.run}))
		w.waitRun(t)
		start := b.clk.Now()
		for range 5 {
			w.results <- fail
			w.waitRun(t)
		}
		b.clk.Advance(c.lastGap - b.clk.Since(start))
		w.results <- fail
		if c.stops {
			b.eventually(t, "w", StateNeedsPerson)
			w.noRun(t)
		} else {
			w.waitRun(t)
			require.Equal(t, 6, b.state(t, "w").Restarts)
		}
		cancel()
		b.sup.Wait()
	}
}

func TestNilMeansDone(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); b.sup.Wait() }()
	w := newScripted()
	require.NoError(t, b.sup.Start(ctx, Worker{Name: "once", Run: w.run}))
	w.waitRun(t)
	w.results <- func() error { return nil }
	b.eventually(t, "once", StateDone)
	w.noRun(t)
	require.Equal(t, 0, b.state(t, "once").Restarts)
}

func TestPanicIsRecoveredLoggedAndRestarted(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); b.sup.Wait() }()
	w := newScripted()
	require.NoError(t, b.sup.Start(ctx, Worker{Name: "p", Run: w.run}))
	w.waitRun(t)
	secret := wire.NewSecret("hunter2-totp-JBSWY3DP")
	w.results <- func() error { panic(secret) }
	w.waitRun(t)
	st := b.state(t, "p")
	require.Equal(t, 1, st.Restarts)
	require.Contains(t, st.LastError, "panicked")
	logs := b.logs.String()
	require.Contains(t, logs, "worker panicked")
	require.Contains(t, logs, "supervisor_test.go", "the stack is logged")
	require.Contains(t, logs, wire.Redacted)
	require.NotContains(t, logs, "hunter2")
}

func TestCancelStopsWithoutRestart(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	w := newScripted()
	require.NoError(t, b.sup.Start(ctx, Worker{Name: "c", Run: w.run}))
	w.waitRun(t)
	require.ErrorIs(t, b.sup.Start(ctx, Worker{Name: "c", Run: w.run}), ErrExists)
	cancel()
	b.sup.Wait()
	require.Equal(t, StateStopped, b.state(t, "c").State)
	require.Equal(t, 0, b.state(t, "c").Restarts)
}

// The default restart delay waits on the injected clock.
func TestRestartDelayUsesTheClock(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	sup := New(clk, slog.New(slog.DiscardHandler), Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); sup.Wait() }()
	w := newScripted()
	require.NoError(t, sup.Start(ctx, Worker{Name: "d", Run: w.run}))
	w.waitRun(t)
	w.results <- fail
	require.True(t, clk.BlockUntil(1, 5*time.Second))
	w.noRun(t)
	require.Equal(t, []time.Duration{DefaultRestartDelay}, clk.Sleeps())
	clk.Advance(DefaultRestartDelay)
	w.waitRun(t)
}

func TestHandleReportsProgress(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); b.sup.Wait() }()
	at := b.clk.Now()
	ready := make(chan struct{})
	require.NoError(t, b.sup.Start(ctx, Worker{Name: "h", Kind: "actor", Run: func(ctx context.Context, h *Handle) error {
		h.Completed(wire.Operation{ID: "op1", JobKey: "load-1", Outcome: "confirmed", FinishedAt: at})
		h.OldestTask(at.Add(-time.Minute))
		close(ready)
		<-ctx.Done()
		return ctx.Err()
	}}))
	<-ready
	st := b.state(t, "h")
	require.Equal(t, "op1", st.LastOperation.ID)
	require.Equal(t, at.Add(-time.Minute), st.OldestTask)
	require.NoError(t, b.sup.Remove("h"))
	require.Empty(t, b.sup.States())
}

// A worker whose configuration cannot work (ErrNeedsPerson) stops as
// needs-person at once, spending no restart; a start replaces it.
func TestNeedsPersonStopsAtOnce(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); b.sup.Wait() }()
	w := newScripted()
	require.NoError(t, b.sup.Start(ctx, Worker{Name: "actor-1", Kind: "actor", Run: w.run}))
	w.waitRun(t)
	w.results <- func() error { return fmt.Errorf("agent: the spec does not parse: %w", ErrNeedsPerson) }
	b.eventually(t, "actor-1", StateNeedsPerson)
	w.noRun(t)
	st := b.state(t, "actor-1")
	require.Equal(t, 0, st.Restarts)
	require.Contains(t, st.LastError, "the spec does not parse")
	b.mu.Lock()
	require.Empty(t, b.needed, "the worker told the panel why itself")
	b.mu.Unlock()

	require.NoError(t, b.sup.Start(ctx, Worker{Name: "actor-1", Kind: "actor", Run: w.run}))
	w.waitRun(t)
	b.eventually(t, "actor-1", StateRunning)
}
