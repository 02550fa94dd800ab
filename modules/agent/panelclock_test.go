package agent

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
)

// An agent whose wall clock is minutes off still computes the panel's time
// from the pings: the smallest (t1 − t0) of the recent ones.
func TestPanelClockCorrectsASkewedAgentClock(t *testing.T) {
	t.Setenv(ClockSkewEnv, "-3m")
	real := clock.NewFake(time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC))
	agentClock := skewed{Clock: real, by: clockSkew()}
	require.Equal(t, real.Now().Add(-3*time.Minute), agentClock.Now())

	pc := &panelClock{Clock: agentClock}
	require.Equal(t, agentClock.Now(), pc.Now(), "before any ping: the agent's own clock")
	// Two pings sent by the panel (real time), received 40 ms and 5 ms later.
	pc.add(real.Now().Add(-40*time.Millisecond), agentClock.Now())
	pc.add(real.Now().Add(-5*time.Millisecond), agentClock.Now())
	require.Equal(t, -3*time.Minute+5*time.Millisecond, pc.offset(), "the tightest sample")
	require.Equal(t, real.Now().Add(-5*time.Millisecond), pc.Now(), "within the one-way delay of the panel's time")
	for i := 0; i < panelClockWindow; i++ {
		pc.add(real.Now().Add(-20*time.Millisecond), agentClock.Now())
	}
	require.Equal(t, -3*time.Minute+20*time.Millisecond, pc.offset(), "old samples leave the window")

	t.Setenv(ClockSkewEnv, "soon")
	require.Zero(t, clockSkew(), "a malformed setting is no skew")
}
