package spec_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
)

// TestValidateCommand runs `fleetwright crawl validate` on the examples
// (exit 0) and on a bad file (exit 1, each field's path and line).
func TestValidateCommand(t *testing.T) {
	bin := testenv.Binary(t)
	examples, _ := filepath.Glob("../../../examples/crawl/*.yaml")
	out, err := exec.Command(bin, append([]string{"crawl", "validate"}, examples...)...).CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), `ok: job "catalogue-http"`)

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("version: 1\nname: x\nstart: {urls: [https://a.example/]}\nallowed_domains: [a.example]\nrender: chrome\nextract: {fields: {u: {css: a}}}\nitem_key: [id]\n"), 0o600))
	out, err = exec.Command(bin, "crawl", "validate", bad).CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 1, ee.ExitCode())
	require.Contains(t, string(out), bad+" line 5: render: \"chrome\": use http or browser")
	require.Contains(t, string(out), bad+" line 7: item_key[0]: \"id\" is not one of extract.fields (u)")

	out, err = exec.Command(bin, "crawl", "validate").CombinedOutput()
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 2, ee.ExitCode(), string(out))
}
