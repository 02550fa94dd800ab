package testenv

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/logging"
)

// dropCaptures forgets the captures made after n (the probes below leak on
// purpose; the binary's own check must not fail for them).
func dropCaptures(n int) {
	captureMu.Lock()
	captured = captured[:n]
	captureMu.Unlock()
}

func TestKnownSecretsInCapturedLogsAreFound(t *testing.T) {
	const secret = "probe-secret-Zq8mWx3vKp-41"
	Secret(t, secret)
	captureMu.Lock()
	before := len(captured)
	captureMu.Unlock()
	defer dropCaptures(before)

	// Through the helper's logger: redacted, so no leak.
	Logger(t).Info("probe", "value", "carried "+secret+" along")
	require.Empty(t, leaks())
	captureMu.Lock()
	require.Contains(t, captured[len(captured)-1].text.String(), "[REDACTED]")
	captureMu.Unlock()

	// A process that prints it: found, and the report does not repeat it.
	t.Run("child", func(t *testing.T) {
		p := Start(t, "/bin/echo", []string{"token " + secret})
		p.Wait(10 * time.Second)
	})
	l := leaks()
	require.Len(t, l, 1)
	require.Contains(t, l[0], "TestKnownSecretsInCapturedLogsAreFound/child")
	require.NotContains(t, strings.Join(l, "\n"), secret)

	// A secret the code under test registered itself (a token it issued)
	// is known too.
	dropCaptures(before)
	issued := "fwa_issued-Zq8mWx3vKp-0042"
	logging.RegisterSecret(issued)
	captureFor("probe").add("agent started with " + issued)
	require.Len(t, leaks(), 1)
	dropCaptures(before)
	require.Empty(t, leaks())

	// Values too short or regular to track are refused.
	require.Panics(t, func() { Secret(nilT{t}, "short") })
}

// nilT turns Fatalf into a panic, to test a refusal.
type nilT struct{ testing.TB }

func (nilT) Fatalf(format string, args ...any) { panic(format) }
func (nilT) Helper()                           {}
