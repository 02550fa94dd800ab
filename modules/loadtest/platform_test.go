package loadtest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/board/boardtest"
)

func examplePlatform(name string) string {
	return filepath.Join("..", "..", "examples", "platforms", name)
}

// --platform names the dialect the run's board speaks; anything else is
// refused before the run starts, naming what is wrong.
func TestPlatformFlagPicksTheBoardDialect(t *testing.T) {
	for file, want := range map[string]string{"sandbox.yaml": board.DialectClassic, "haulbridge.yaml": board.DialectHTML} {
		s, d, err := readPlatform(examplePlatform(file))
		require.NoError(t, err, file)
		require.Equal(t, want, d, file)
		require.NotEmpty(t, s.Name)
	}
	_, _, err := readPlatform(filepath.Join(t.TempDir(), "none.yaml"))
	require.ErrorContains(t, err, "--platform")
	src, err := os.ReadFile(examplePlatform("haulbridge.yaml"))
	require.NoError(t, err)
	renamed := filepath.Join(t.TempDir(), "renamed.yaml")
	require.NoError(t, os.WriteFile(renamed, []byte(strings.Replace(string(src), "name: haulbridge", "name: elsewhere", 1)), 0o600))
	_, _, err = readPlatform(renamed)
	require.ErrorContains(t, err, `platform "elsewhere"`)
	c := Config{Workers: 6, Duration: time.Minute, Rate: 1, Chaos: "off", Browsers: 3, Settle: time.Minute, Platform: renamed}
	require.ErrorContains(t, c.Validate(), "sandbox's dialects only")
}

// The preflight signs in through the spec on a board of its dialect, reads
// the feed and proves the look-up; a spec on the other dialect's board
// fails, naming the step.
func TestPreflightChecksTheSpecAgainstTheBoard(t *testing.T) {
	for _, file := range []string{"sandbox.yaml", "haulbridge.yaml"} {
		t.Run(file, func(t *testing.T) {
			s, d, err := readPlatform(examplePlatform(file))
			require.NoError(t, err)
			r := &runner{}
			r.brd = boardtest.Start(t, func(c *board.Config) { c.Dialect = d })
			r.bcfg = board.Defaults()
			r.bcfg.Dialect = d
			require.NoError(t, r.preflight(context.Background(), s))
			require.Len(t, r.secrets, 2, "the probe's password and code secret join the scan")

			wrong := board.DialectHTML
			if d == wrong {
				wrong = board.DialectClassic
			}
			r = &runner{}
			r.brd = boardtest.Start(t, func(c *board.Config) { c.Dialect = wrong })
			r.bcfg = board.Defaults()
			r.bcfg.Dialect = wrong
			err = r.preflight(context.Background(), s)
			require.ErrorContains(t, err, "does not sign in on the "+wrong+" board")
		})
	}
}
