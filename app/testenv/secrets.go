package testenv

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/fleetwright/fleetwright/app/logging"
)

// Every secret a test binary knows — each value registered with the logging
// registry in this process (session and agent tokens, platform credentials,
// database passwords…) and each value a test hands to Secret — is checked,
// when the binary's tests end (Main), against everything captured from the
// logs: every line written through Logger and the output of every process
// started with Start. One found is a leak: Main fails the binary and names
// the test and the kind of value, never the value.
var (
	known = logging.NewRegistry(logging.RegistryOptions{Max: 1 << 20})

	captureMu sync.Mutex
	captured  []*capture
)

type capture struct {
	from string // the test, or the process
	text strings.Builder
}

func init() {
	logging.Default().OnRegister(func(v string) { known.Register(0, v) })
}

// Secret declares values a test knows to be secret (a password it chose, a
// token it was shown): they are redacted from its logs and must not appear
// in any captured output.
func Secret(t testing.TB, values ...string) {
	t.Helper()
	logging.RegisterSecret(values...)
	for _, v := range values {
		if !logging.Worthy(v) {
			t.Fatalf("testenv: Secret: a value of %d bytes is too short or too regular to be tracked as a secret", len(v))
		}
		known.Register(0, v)
	}
}

// captureFor returns a sink for the output attributed to from.
func captureFor(from string) *capture {
	c := &capture{from: from}
	captureMu.Lock()
	captured = append(captured, c)
	captureMu.Unlock()
	return c
}

func (c *capture) add(s string) {
	captureMu.Lock()
	c.text.WriteString(s)
	captureMu.Unlock()
}

// leaks returns a line per capture holding a known secret, naming where
// it was and how long the value is, never the value itself.
func leaks() []string {
	captureMu.Lock()
	defer captureMu.Unlock()
	var out []string
	for _, c := range captured {
		s := c.text.String()
		if known.Scrub(s) != s {
			out = append(out, fmt.Sprintf("a known secret appears in the captured output of %s", c.from))
		}
	}
	return out
}

// checkSecrets prints the leaks and reports whether there were none.
func checkSecrets() bool {
	l := leaks()
	for _, line := range l {
		fmt.Fprintln(os.Stderr, "testenv: "+line)
	}
	return len(l) == 0
}

// Logger returns a logger that writes through t.Log, through the same
// redacting handler the binary uses, and into the capture that Main checks
// for known secrets.
func Logger(t testing.TB) *slog.Logger {
	c := captureFor(t.Name())
	return slog.New(logging.Wrap(slog.NewTextHandler(tWriter{t: t, c: c}, &slog.HandlerOptions{Level: slog.LevelDebug})))
}

type tWriter struct {
	t testing.TB
	c *capture
}

func (w tWriter) Write(b []byte) (int, error) {
	w.c.add(string(b))
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
