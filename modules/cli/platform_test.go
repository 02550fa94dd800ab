package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var platformExample = filepath.Join("..", "..", "examples", "platforms", "sandbox.yaml")

// TestPlatformValidate: a good spec is ok (exit 0); a bad one prints each
// error as path:line: field.path: what is wrong (exit 1) while the good
// files are still checked; a file that cannot be read is named.
func TestPlatformValidate(t *testing.T) {
	r := run(t, "", "platform", "validate", platformExample)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, platformExample+`: ok: platform "sandbox" (version 1): 2 sign-in step(s), feed paged by cursor, 6 booking rule(s), bookings paged by after, idempotency keys read from GET /api/platform`)
	require.Empty(t, r.stderr)

	src, err := os.ReadFile(platformExample)
	require.NoError(t, err)
	text := string(src)
	for _, e := range [][2]string{
		{"  poll_interval: 1s\n", "  poll_interval: 1s\n  poll_every: 2s\n"},
		{`"{{.vars.csrf}}"`, `"{{.vars.xsrf}}"`},
		{"next: next_after", "next: next_after..x"},
	} {
		require.Contains(t, text, e[0])
		text = strings.Replace(text, e[0], e[1], 1)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte(text), 0o600))
	lineOf := func(marker string) string {
		i := strings.Index(text, marker)
		require.GreaterOrEqual(t, i, 0)
		return bad + ":" + itoa(strings.Count(text[:i], "\n")+1) + ": "
	}
	r = run(t, "", "platform", "validate", platformExample, bad, filepath.Join(t.TempDir(), "none.yaml"))
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stdout, `ok: platform "sandbox"`, "the good file is still checked")
	// Unknown fields are reported first, alone: the decoder stops there.
	require.Contains(t, r.stderr, lineOf("poll_every")+`limits.poll_every: unknown field "poll_every"`)
	require.Contains(t, r.stderr, bad+": 1 error(s)")
	require.Contains(t, r.stderr, "none.yaml: no such file")

	text = strings.Replace(text, "  poll_every: 2s\n", "", 1)
	require.NoError(t, os.WriteFile(bad, []byte(text), 0o600))
	r = run(t, "", "platform", "validate", bad)
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, lineOf("{{.vars.xsrf}}")+"booking.request.headers.X-CSRF-Token: template variable .vars.xsrf does not exist: the earlier steps extract .csrf")
	require.Contains(t, r.stderr, lineOf("next_after..x")+`feed.paging.next: "next_after..x" can never match: an empty component`)
	require.Contains(t, r.stderr, bad+": 2 error(s)")
	require.Empty(t, r.stdout)

	version := filepath.Join(t.TempDir(), "v2.yaml")
	require.NoError(t, os.WriteFile(version, []byte("# a newer format\nversion: 2\nname: x\n"), 0o600))
	r = run(t, "", "platform", "validate", version)
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, version+":2: version: version 2 is not supported; this build reads version 1")
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
