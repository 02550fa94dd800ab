package crawl_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/crawl"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// TestBudgetFleetWide: two budgets (two panel replicas) over one Redis
// share a domain's slots; Retry-After blocks the domain for every agent;
// concurrency slots are fleet-wide; AutoThrottle moves the delay with the
// response times.
func TestBudgetFleetWide(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	clk := clock.NewFake(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	of := func(context.Context, string) (*redis.Client, error) { return rdb, nil }
	a, b := crawl.NewBudget(of, clk), crawl.NewBudget(of, clk)
	gap := 100 * time.Millisecond
	var waits []time.Duration
	for i := range 6 {
		bud := a
		if i%2 == 1 {
			bud = b
		}
		w, err := reserve(bud, "t1", "shop.example", "agent-"+string(rune('a'+i%2)), gap)
		require.NoError(t, err)
		waits = append(waits, w)
	}
	require.Equal(t, []time.Duration{0, 100, 200, 300, 400, 500}, msList(waits), "one schedule of slots across replicas and agents")

	// Retry-After: no slot before the block ends, whoever asks.
	clk.Advance(time.Second)
	until := clk.Now().Add(5 * time.Second)
	a.Block(ctx, "t1", "shop.example", until)
	w, err := reserve(b, "t1", "shop.example", "agent-b", gap)
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, w)
	require.True(t, b.BlockedUntil(ctx, "t1", "shop.example", "agent-b").Equal(until.Truncate(time.Millisecond)))
	a.Block(ctx, "t1", "shop.example", until.Add(-time.Second)) // a shorter block never shortens it
	require.True(t, a.BlockedUntil(ctx, "t1", "shop.example", "x").Equal(until.Truncate(time.Millisecond)))

	// Concurrency slots are shared by both replicas.
	require.True(t, a.Acquire(ctx, "t1", "c.example", "r1", 2, time.Minute))
	require.True(t, b.Acquire(ctx, "t1", "c.example", "r2", 2, time.Minute))
	require.False(t, a.Acquire(ctx, "t1", "c.example", "r3", 2, time.Minute))
	b.Release(ctx, "t1", "c.example", "r1")
	require.True(t, a.Acquire(ctx, "t1", "c.example", "r3", 2, time.Minute))
	// A lease held by a dead replica expires.
	clk.Advance(2 * time.Minute)
	require.True(t, a.Acquire(ctx, "t1", "c.example", "r4", 2, time.Minute))

	// AutoThrottle: slow answers lengthen the delay, fast ones bring it
	// back towards the job's delay, never below it.
	d := a.Throttle(ctx, "t1", "slow.example", 2*time.Second, 1, 100*time.Millisecond)
	require.Equal(t, 2*time.Second, d)
	d = a.Throttle(ctx, "t1", "slow.example", 10*time.Millisecond, 1, 100*time.Millisecond)
	require.Equal(t, 1005*time.Millisecond, d, "half way from 2 s towards 10 ms")
	for range 10 {
		d = b.Throttle(ctx, "t1", "slow.example", 10*time.Millisecond, 1, 100*time.Millisecond)
	}
	require.Equal(t, 100*time.Millisecond, d)
}

// reserve books a slot with Step where the concurrency limit never
// binds (each call its own slot), so only the schedule in time answers.
func reserve(b *crawl.Budget, tenant, domain, agent string, gap time.Duration) (time.Duration, error) {
	w, ok, err := b.Step(context.Background(), tenant, domain, agent, "run", wire.NewID(), gap, 1_000_000, time.Hour)
	if err == nil && !ok {
		err = errors.New("no concurrency slot")
	}
	return w, err
}

func msList(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d / time.Millisecond
	}
	return out
}

// TestBudgetKeepsSubMillisecondGaps: a domain's schedule adds up the drawn
// gaps exactly; whole milliseconds would truncate each jittered gap and
// run the domain faster than its rate (5 % at a 10 ms delay).
func TestBudgetKeepsSubMillisecondGaps(t *testing.T) {
	rdb := testenv.Redis(t)
	clk := clock.NewFake(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	b := crawl.NewBudget(func(context.Context, string) (*redis.Client, error) { return rdb, nil }, clk)
	var last time.Duration
	for range 100 {
		w, err := reserve(b, "t1", "fine.example", "agent-a", 1500*time.Microsecond)
		require.NoError(t, err)
		last = w
	}
	require.Equal(t, 99*1500*time.Microsecond, last, "100 slots 1.5 ms apart end 148.5 ms later")
}

// TestBudgetWithoutRedis: while the cell's Redis is down each agent gets
// the domain's rate divided by the agents last known to crawl it, or
// nothing when that was never known.
func TestBudgetWithoutRedis(t *testing.T) {
	rdb := testenv.Redis(t)
	clk := clock.NewFake(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	down := false
	of := func(context.Context, string) (*redis.Client, error) {
		if down {
			return nil, errors.New("redis down")
		}
		return rdb, nil
	}
	bud := crawl.NewBudget(of, clk)
	gap := 100 * time.Millisecond
	_, err := reserve(bud, "t1", "d.example", "a1", gap)
	require.NoError(t, err)
	_, err = reserve(bud, "t1", "d.example", "a2", gap)
	require.NoError(t, err)
	down = true
	_, err = reserve(bud, "t1", "unknown.example", "a1", gap)
	require.ErrorIs(t, err, crawl.ErrNoBudget)
	var waits []time.Duration
	for range 3 {
		w, err := reserve(bud, "t1", "d.example", "a1", gap)
		require.NoError(t, err)
		waits = append(waits, w)
	}
	require.Equal(t, []time.Duration{0, 200, 400}, msList(waits), "two agents known: each gets half the rate")
}

func TestBackoffFullJitter(t *testing.T) {
	for attempt := range 8 {
		ceiling := min(100*time.Millisecond<<attempt, 2*time.Second)
		var top time.Duration
		for range 200 {
			d := crawl.Backoff(attempt, 100*time.Millisecond, 2*time.Second)
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.Less(t, d, ceiling)
			top = max(top, d)
		}
		require.Greater(t, top, ceiling/2, "draws spread over [0, ceiling)")
	}
	for range 100 {
		g := crawl.Gap(time.Second, 0.5)
		require.GreaterOrEqual(t, g, 500*time.Millisecond)
		require.LessOrEqual(t, g, 1500*time.Millisecond)
	}
}

// TestBudgetStep: one round trip takes a domain's concurrency slot and
// books its next slot in time (after a Retry-After block too); with every
// concurrency slot held it books nothing; runs sharing the domain take
// turns (a run that asked first gets the next free slot, not the run
// whose own request just ended); a waiter that stopped asking leaves the
// queue; and it counts as one command at Redis.
func TestBudgetStep(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	var cmds int
	rdb.AddHook(countHook{&cmds})
	clk := clock.NewFake(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	b := crawl.NewBudget(func(context.Context, string) (*redis.Client, error) { return rdb, nil }, clk)
	gap := 100 * time.Millisecond
	step := func(run, id string) (time.Duration, bool) {
		t.Helper()
		w, ok, err := b.Step(ctx, "t1", "step.example", "agent-a", run, id, gap, 2, time.Minute)
		require.NoError(t, err)
		return w, ok
	}
	w, ok := step("run-a", "a1")
	require.True(t, ok)
	require.Zero(t, w)
	cmds = 0
	w, ok = step("run-a", "a2")
	require.True(t, ok)
	require.Equal(t, gap, w, "the next slot is a gap later")
	require.Equal(t, 1, cmds, "a page's politeness is one round trip")

	// Both concurrency slots held by run A: run B waits its turn.
	_, ok = step("run-b", "b1")
	require.False(t, ok)
	// A's request ends; A asks again at once, but it is B's turn.
	b.Release(ctx, "t1", "step.example", "a1")
	_, ok = step("run-a", "a3")
	require.False(t, ok, "a run that waited first gets the free slot")
	w, ok = step("run-b", "b1")
	require.True(t, ok)
	require.Equal(t, 2*gap, w)
	_, ok = step("run-a", "a3")
	require.False(t, ok, "both slots held again")

	// A Retry-After block: the slot booked is after it.
	b.Release(ctx, "t1", "step.example", "a2")
	until := clk.Now().Add(3 * time.Second)
	b.Block(ctx, "t1", "step.example", until)
	require.Equal(t, until, b.SeenBlock("step.example"))
	w, ok = step("run-a", "a3")
	require.True(t, ok)
	require.Equal(t, 3*time.Second, w)

	// A waiter that stopped asking (its run ended) leaves the queue.
	b.Release(ctx, "t1", "step.example", "a3")
	b.Release(ctx, "t1", "step.example", "b1")
	require.True(t, must(step("run-c", "c1")))
	require.True(t, must(step("run-c", "c2")))
	require.False(t, must(step("run-d", "d1"))) // d waits, then goes away
	b.Release(ctx, "t1", "step.example", "c1")
	require.False(t, must(step("run-c", "c3")), "d's turn")
	clk.Advance(3 * time.Second)
	require.True(t, must(step("run-c", "c3")), "d stopped asking: its turn passed")
}

func must(_ time.Duration, ok bool) bool { return ok }

// countHook counts the commands sent to Redis (a script run is one).
type countHook struct{ n *int }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		*h.n++
		return next(ctx, cmd)
	}
}
func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		*h.n += len(cmds)
		return next(ctx, cmds)
	}
}
