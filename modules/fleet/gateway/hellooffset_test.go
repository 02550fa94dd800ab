package gateway

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Before the first ping is answered, the hello's clock gives the offset:
// an agent three minutes slow, whose hello arrived 40 ms after the upgrade,
// is read as three minutes slow within ±20 ms — not as a correct clock.
func TestHelloGivesTheOffsetBeforeTheFirstPing(t *testing.T) {
	accepted := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	received := accepted.Add(40 * time.Millisecond)
	stamped := accepted.Add(25 * time.Millisecond) // panel time when the agent stamped it
	est := helloOffset(stamped.Add(-3*time.Minute), accepted, received)
	require.Equal(t, 20*time.Millisecond, est.ErrorBound)
	require.InDelta(t, float64(-3*time.Minute), float64(est.Offset), float64(est.ErrorBound))
	require.True(t, est.ToPanel(stamped.Add(-3*time.Minute)).Sub(stamped).Abs() <= est.ErrorBound)
	require.Equal(t, received, est.MeasuredAt)
	require.Zero(t, helloOffset(time.Time{}, accepted, received), "a hello without a clock tells nothing")
}
