package agent

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// rssFileKiB reads this process's file-backed resident memory.
func rssFileKiB(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no RssFile")
	return 0
}

// TestReleaseStartupPagesShrinksTheResidentSet: after start-up, the
// executable's read-only pages are handed back (the resident file-backed
// memory falls) and the process goes on working, its code mapped back on
// demand.
func TestReleaseStartupPagesShrinksTheResidentSet(t *testing.T) {
	before := rssFileKiB(t)
	n, err := releaseStartupPages()
	require.NoError(t, err)
	require.Positive(t, n, "the executable's read-only mappings were advised")
	after := rssFileKiB(t)
	require.Less(t, after, before, "file-backed resident memory fell (before %d KiB, after %d KiB)", before, after)
	// Code and read-only data come back on use.
	s := strings.Repeat("fleet", 1000)
	require.Equal(t, 5000, len(strings.ToUpper(s)))
	_, err = releaseStartupPages()
	require.NoError(t, err, "a second call is harmless")
}
