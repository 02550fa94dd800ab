package link

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestAuthPauseSchedule(t *testing.T) {
	want := []time.Duration{3, 6, 12, 24, 48, 96, 192, 384, 768}
	for i, w := range want {
		for _, j := range []float64{0, 0.5, 0.999} {
			require.Equal(t, w*time.Second, AuthPause(i+1, j), "n=%d: no jitter in the fast phase", i+1)
		}
	}
	require.Equal(t, 10, firstSlow)
	for _, gen := range []func() float64{func() float64 { return 0 }, func() float64 { return 0.9999999 }, rand.Float64} {
		prev := AuthPause(9, 0)
		for n := 10; n < RetireAfter; n++ {
			p := AuthPause(n, gen())
			require.GreaterOrEqual(t, p, AuthSlowFrom, "n=%d", n)
			require.Less(t, p, AuthSlowTo, "n=%d", n)
			require.GreaterOrEqual(t, p, prev, "n=%d: pauses never decrease", n)
			prev = p
		}
	}
	require.Equal(t, 15*time.Minute, AuthPause(10, 0))
	require.Equal(t, 24*time.Minute, AuthPause(19, 0))
}

func TestNetBackoff(t *testing.T) {
	require.Equal(t, 500*time.Millisecond, NetBackoff(1, 0))
	require.Equal(t, time.Second, NetBackoff(1, 1))
	require.Equal(t, 4*time.Second, NetBackoff(3, 1))
	require.Equal(t, NetBackoffMax, NetBackoff(50, 1))
	require.Equal(t, NetBackoffMax/2, NetBackoff(50, 0))
}

// The retirement rule: only the installation that welcomed this end counts
// (a never-welcomed end counts any), other answers and drops neither count
// nor reset, a welcome resets, and the RetireAfter-th in a row retires.
func TestRetryCountsOnlyTheWelcomingInstallation(t *testing.T) {
	fixed := func() float64 { return 0.5 }
	fresh := Retry{Jitter: fixed}
	v := fresh.UnknownToken("inst_x")
	require.Equal(t, Verdict{Counted: true, Pause: AuthFirstPause}, v, "never welcomed: any answer counts")

	r := Retry{Jitter: fixed, Installation: "inst_a", Unknown: 2}
	v = r.UnknownToken("inst_b")
	require.False(t, v.Counted)
	require.Equal(t, NetBackoff(1, 0.5), v.Pause, "another installation: the network backoff")
	require.Equal(t, NetBackoff(2, 0.5), r.Failed(), "a drop continues the same backoff")
	require.Equal(t, 2, r.Unknown, "neither counts nor resets")
	v = r.UnknownToken("inst_a")
	require.Equal(t, Verdict{Counted: true, Pause: AuthPause(3, 0.5)}, v, "counted from where the state left it")

	r.Welcomed("inst_c")
	require.Equal(t, 0, r.Unknown)
	require.Equal(t, "inst_c", r.Installation)
	require.Equal(t, NetBackoff(1, 0.5), r.Failed(), "a welcome restarts the network backoff")
	for n := 1; n < RetireAfter; n++ {
		v = r.UnknownToken("inst_c")
		require.Equal(t, Verdict{Counted: true, Pause: AuthPause(n, 0.5)}, v, "answer %d", n)
	}
	v = r.UnknownToken("inst_c")
	require.Equal(t, Verdict{Counted: true, Retire: true}, v, "the twentieth in a row retires")
	require.Equal(t, RetireAfter, r.Unknown)
}
