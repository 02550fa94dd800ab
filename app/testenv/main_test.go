package testenv

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEveryTestMainRunsTheSecretScan: a package that has its own TestMain
// (for goleak, say) still runs the end-of-suite secret scan, through Main
// or MainNoLeaks — the packages where platform passwords, TOTP seeds and
// cookies live (the agent, the board, the supervisor, the browser) used to
// opt out that way.
func TestEveryTestMainRunsTheSecretScan(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	mainRe := regexp.MustCompile(`(?s)func TestMain\(m \*testing\.M\) \{(.*?)\n\}|func TestMain\(m \*testing\.M\) \{([^\n]*)\}`)
	var checked, missing []string
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		m := mainRe.FindStringSubmatch(string(b))
		if m == nil {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		checked = append(checked, rel)
		body := m[1] + m[2]
		if !strings.Contains(body, "testenv.Main(m)") && !strings.Contains(body, "testenv.MainNoLeaks(m") &&
			!(strings.HasPrefix(rel, "app/testenv/") && strings.Contains(body, "Main(m)")) {
			missing = append(missing, rel)
		}
		return nil
	}))
	require.GreaterOrEqual(t, len(checked), 20, "the walk found the repository's TestMains")
	require.Empty(t, missing, "these TestMains skip the secret scan: use testenv.Main or testenv.MainNoLeaks")
}
