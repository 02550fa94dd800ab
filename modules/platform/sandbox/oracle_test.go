package sandbox_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The hand-written adapter is a test oracle: no role, and no package a
// role builds, imports it — every adapter a role uses is the engine's.
func TestOnlyTestsImportTheOracle(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	const imp = `"github.com/fleetwright/fleetwright/modules/platform/sandbox"`
	var found []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.Contains(string(src), imp) {
			found = append(found, p)
		}
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, found, "only tests import the hand-written sandbox adapter")
}
