package crawl

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestProxyHealth: failures in a row bench a proxy for a cooldown that
// doubles with each bench in a row; after the cooldown it is on probation
// (one success restores it, one failure benches it again, longer); enough
// benches in a row remove it for good; a success clears the score.
func TestProxyHealth(t *testing.T) {
	pool := Pool{BenchAfter: 3, RemoveAfter: 3, Cooldown: 10 * time.Second}
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	h := Health{State: ProxyActive}
	h = h.After(false, now, pool)
	h = h.After(false, now, pool)
	require.Equal(t, ProxyActive, h.State, "two failures are not yet a bench")
	require.Equal(t, 1.5, h.Score)
	h = h.After(true, now, pool)
	require.Equal(t, 0, h.Failures, "a success ends the run of failures")
	for range 3 {
		h = h.After(false, now, pool)
	}
	require.Equal(t, ProxyBenched, h.State)
	require.Equal(t, now.Add(10*time.Second), *h.BenchedUntil)
	require.False(t, h.Eligible(now.Add(9*time.Second)))
	require.True(t, h.Eligible(now.Add(10*time.Second)), "retried after the cooldown")

	// Probation: one failure benches it again for twice as long.
	later := now.Add(10 * time.Second)
	h = h.After(false, later, pool)
	require.Equal(t, ProxyBenched, h.State)
	require.Equal(t, 2, h.Benches)
	require.Equal(t, later.Add(20*time.Second), *h.BenchedUntil)

	// A success on probation restores it.
	ok := h.After(true, later.Add(20*time.Second), pool)
	require.Equal(t, ProxyActive, ok.State)
	require.Zero(t, ok.Benches)
	require.Nil(t, ok.BenchedUntil)

	// A third bench in a row removes it; nothing brings it back but a person.
	gone := h.After(false, later.Add(20*time.Second), pool)
	require.Equal(t, ProxyRemoved, gone.State)
	require.False(t, gone.Eligible(later.Add(time.Hour)))
	require.Equal(t, gone, gone.After(true, later.Add(time.Hour), pool))

	// The cooldown is capped.
	big := Health{State: ProxyActive, Benches: 30}.After(false, now, Pool{BenchAfter: 1, RemoveAfter: 100, Cooldown: time.Minute})
	require.Equal(t, now.Add(maxCooldown), *big.BenchedUntil)
}

// TestProxyRotation: sticky keeps an account on one proxy and moves only
// the accounts of a benched proxy; round robin cycles the healthy ones;
// on failure stays on one until it fails, then takes the next in order.
func TestProxyRotation(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	future := now.Add(time.Minute)
	pool := Pool{Rotation: RotateSticky, Proxies: []Proxy{
		{ID: "p1", Health: Health{State: ProxyActive}},
		{ID: "p2", Health: Health{State: ProxyActive}},
		{ID: "p3", Health: Health{State: ProxyActive}},
	}}
	agents := []string{"a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "a10"}
	first := map[string]string{}
	used := map[string]bool{}
	for _, a := range agents {
		first[a] = pool.pick(a, now, 0, "").ID
		used[first[a]] = true
		for rr := range 5 {
			require.Equal(t, first[a], pool.pick(a, now, rr, "").ID, "sticky per account")
		}
	}
	require.Len(t, used, 3, "ten accounts spread over the three proxies")
	pool.Proxies[1].Health = Health{State: ProxyBenched, BenchedUntil: &future}
	for _, a := range agents {
		got := pool.pick(a, now, 0, "").ID
		require.NotEqual(t, "p2", got)
		if first[a] != "p2" {
			require.Equal(t, first[a], got, "a bench moves only the benched proxy's accounts")
		}
	}
	require.Nil(t, Pool{Proxies: []Proxy{{ID: "x", Health: Health{State: ProxyRemoved}}}}.pick("a1", now, 0, ""))

	pool.Rotation = RotateRoundRobin
	var seq []string
	for rr := range 4 {
		seq = append(seq, pool.pick("a1", now, rr, "").ID)
	}
	require.Equal(t, []string{"p1", "p3", "p1", "p3"}, seq, "round robin over the healthy proxies")

	pool.Rotation = RotateOnFailure
	pool.Proxies[1].Health = Health{State: ProxyActive}
	require.Equal(t, "p1", pool.pick("a1", now, 0, "").ID)
	require.Equal(t, "p2", pool.pick("a9", now, 7, "p2").ID, "stays on the current one")
	pool.Proxies[1].Health = Health{State: ProxyBenched, BenchedUntil: &future}
	require.Equal(t, "p3", pool.pick("a1", now, 0, "p2").ID, "the next in order once the current one is out")
	pool.Proxies[2].Health = Health{State: ProxyRemoved}
	require.Equal(t, "p1", pool.pick("a1", now, 0, "p3").ID, "wraps around")
	require.Equal(t, future, pool.nextUsable())
}
