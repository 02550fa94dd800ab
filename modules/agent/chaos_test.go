package agent

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStopAfterGateStopsOnceOnTheNthOpenedGate(t *testing.T) {
	t.Setenv(StopAfterGateEnv, "2")
	g := newGateStopper(slog.New(slog.DiscardHandler))
	require.NotNil(t, g)
	stops := 0
	g.stop = func() { stops++ }
	open := func() error { return nil }
	shut := func() error { return errDeadline }

	// A refused gate is no opened gate.
	require.ErrorIs(t, g.wrap(shut)(), errDeadline)
	first := g.wrap(open)
	require.NoError(t, first())
	require.NoError(t, first(), "a booking asking twice counts once")
	require.Zero(t, stops)
	second := g.wrap(open)
	require.NoError(t, second())
	require.Equal(t, 1, stops, "stopped right after the second booking's gate opened")
	require.NoError(t, g.wrap(open)())
	require.Equal(t, 1, stops, "once")

	t.Setenv(StopAfterGateEnv, "")
	var none *gateStopper = newGateStopper(slog.New(slog.DiscardHandler))
	require.Nil(t, none)
	require.True(t, errors.Is(none.wrap(shut)(), errDeadline), "without the setting the gate is the gate")
}
