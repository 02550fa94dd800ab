package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSBOMIsGeneratedFromTheModuleGraph runs what `make sbom` runs: the
// CycloneDX generator kept in go.mod's tool block, on this module.
func TestSBOMIsGeneratedFromTheModuleGraph(t *testing.T) {
	out := filepath.Join(t.TempDir(), "sbom.cdx.json")
	cmd := exec.Command("go", "tool", "cyclonedx-gomod", "mod", "-json", "-output", out, ".")
	cmd.Dir = ".."
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	raw, err := os.ReadFile(out)
	require.NoError(t, err)
	var bom struct {
		BOMFormat   string `json:"bomFormat"`
		SpecVersion string `json:"specVersion"`
		Metadata    struct {
			Component struct {
				Name string `json:"name"`
			} `json:"component"`
		} `json:"metadata"`
		Components []struct {
			Name    string `json:"name"`
			Version string `json:"version"`
			PURL    string `json:"purl"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(raw, &bom))
	require.Equal(t, "CycloneDX", bom.BOMFormat)
	require.Equal(t, "github.com/fleetwright/fleetwright", bom.Metadata.Component.Name)
	names := map[string]string{}
	for _, c := range bom.Components {
		names[c.Name] = c.PURL
	}
	for _, dep := range []string{"github.com/jackc/pgx/v5", "github.com/riverqueue/river", "github.com/go-rod/rod", "github.com/a-h/templ"} {
		require.Contains(t, names, dep, "the SBOM lists %s", dep)
		require.Contains(t, names[dep], "pkg:golang/"+dep+"@v", "with a package URL and version")
	}
}
