package logging_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/logging"
)

func TestExactRepeatsOfWarningsAreHeldBackAndCounted(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	log := slog.New(logging.Repeats(slog.NewTextHandler(&buf, nil), 10*time.Second, func() time.Time { return now }))
	cell := log.With("cell", "default")
	for range 100 {
		cell.Warn("redis unreachable", "err", "connection refused")
	}
	cell.Warn("redis unreachable", "err", "timeout")                             // other attributes: written
	log.With("cell", "b").Warn("redis unreachable", "err", "connection refused") // other With: written
	for range 3 {
		log.Info("panel ready") // info is never held back
	}
	now = now.Add(11 * time.Second)
	cell.Warn("redis unreachable", "err", "connection refused")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 7, buf.String())
	require.NotContains(t, lines[0], "repeated")
	require.Contains(t, lines[6], "repeated=99", "the next line after the window says how many were held back")
	require.Contains(t, lines[6], "cell=default")
}
