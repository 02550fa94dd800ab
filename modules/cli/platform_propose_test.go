package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPlatformProposeBadInput: each wrong input is one line that names
// what is wrong and what to do, with the exit status the other platform
// commands use (1: the input is wrong; 2: the command line is), and no
// draft is written.
func TestPlatformProposeBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		f := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(f, []byte(text), 0o600))
		return f
	}
	noJobs := `{"log":{"version":"1.2","entries":[
	 {"startedDateTime":"2026-12-02T08:00:00Z","request":{"method":"GET","url":"https://board.example/login","headers":[]},
	  "response":{"status":200,"headers":[],"content":{"mimeType":"text/html","text":"<form><input name=password></form>"}}},
	 {"startedDateTime":"2026-12-02T08:00:01Z","request":{"method":"GET","url":"https://board.example/api/me","headers":[]},
	  "response":{"status":200,"headers":[],"content":{"mimeType":"application/json","text":"{\"user\":\"x\",\"roles\":[{\"name\":\"dispatcher\"}]}"}}}]}}`
	out := filepath.Join(dir, "draft.yaml")
	for _, c := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"no --har", nil, 2, []string{"--har is required", "Save all as HAR with content"}},
		{"missing file", []string{"--har", filepath.Join(dir, "none.har")}, 1, []string{"none.har: no such file", "Save all as HAR with content"}},
		{"not JSON", []string{"--har", write("text.har", "GET /loads HTTP/1.1\n")}, 1, []string{"text.har: not JSON", "Save all as HAR with content"}},
		{"not a HAR", []string{"--har", write("other.json", `{"loads":[{"id":"LD-1"}]}`)}, 1, []string{"other.json: not a HAR file", `no "log" object`, "Save all as HAR with content"}},
		{"no entries", []string{"--har", write("empty.har", `{"log":{"version":"1.2","entries":[]}}`)}, 1, []string{"empty.har: not a HAR file", "holds no requests"}},
		{"no job list", []string{"--har", write("nojobs.har", noJobs)}, 1, []string{"nojobs.har: no job list in the session", "stay on the board"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := run(t, "", append([]string{"platform", "propose", "--out", out}, c.args...)...)
			require.Equal(t, c.code, r.code, r)
			require.Empty(t, r.stdout)
			require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %s", r.stderr)
			require.True(t, strings.HasPrefix(r.stderr, "fleetwright platform propose: "), r.stderr)
			for _, w := range c.want {
				require.Contains(t, r.stderr, w)
			}
			require.NoFileExists(t, out)
		})
	}
}
