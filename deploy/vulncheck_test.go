package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// VulnDB is the Go vulnerability database the suite checks against: the
// golang.org/x/vulndb module, whose data/osv folder holds every report in
// OSV form, fetched through the Go module proxy (the only way this
// machine reaches it). Moving to a newer database is this one line; its
// pseudo-version carries the database's date.
const VulnDB = "golang.org/x/vulndb@v0.0.0-20261105234957-e22db6528018"

// vulnFinding is the part of govulncheck's JSON stream the check reads.
type vulnFinding struct {
	Finding *struct {
		OSV          string `json:"osv"`
		FixedVersion string `json:"fixed_version"`
		Trace        []struct {
			Module   string `json:"module"`
			Version  string `json:"version"`
			Package  string `json:"package"`
			Function string `json:"function"`
			Receiver string `json:"receiver"`
		} `json:"trace"`
	} `json:"finding"`
}

// TestNoCalledVulnerability runs govulncheck (go.mod's tool) over the whole
// module against VulnDB. A vulnerable function of a required module that
// our code calls fails it, naming the report, the symbol and the version
// that fixes it. The standard library's findings are listed with the Go
// release that fixes them but do not fail: the toolchain is the owner's
// choice (go.mod), and moving to that release is what clears them.
func TestNoCalledVulnerability(t *testing.T) {
	dir := vulnDBDir(t)
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	cmd := exec.Command("go", "tool", "govulncheck", "-C", root, "-db", "file://"+filepath.Join(dir, "data", "osv"), "-format", "json", "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "govulncheck did not run: %s", stderr.String())
	called, stdlib := readFindings(t, out)
	t.Logf("vulnerability database %s (%s), %s", VulnDB, vulnDBDate(VulnDB), runtime.Version())
	for _, s := range stdlib {
		t.Logf("standard library: %s (moving the toolchain to that release clears it)", s)
	}
	require.Empty(t, called, "our code calls vulnerable functions of required modules: upgrade each to its fixed version (go get MODULE@VERSION)")
}

// readFindings splits govulncheck's called findings (a trace down to a
// function) into required modules' and the standard library's, one line
// per report: its id, the module and version, the version that fixes it
// and the functions of it our code calls.
func readFindings(t *testing.T, out []byte) (called, stdlib []string) {
	t.Helper()
	type report struct {
		module, version, fixed string
		syms                   map[string]bool
	}
	reports := map[string]*report{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var m vulnFinding
		require.NoError(t, dec.Decode(&m), "govulncheck's JSON stream")
		f := m.Finding
		if f == nil || len(f.Trace) == 0 || f.Trace[0].Function == "" {
			continue // imported or required, not called
		}
		fr := f.Trace[0]
		sym := fr.Function
		if fr.Receiver != "" {
			sym = strings.TrimPrefix(fr.Receiver, "*") + "." + sym
		}
		r := reports[f.OSV]
		if r == nil {
			r = &report{module: fr.Module, version: fr.Version, fixed: f.FixedVersion, syms: map[string]bool{}}
			reports[f.OSV] = r
		}
		r.syms[fr.Package+"."+sym] = true
	}
	for id, r := range reports {
		syms := make([]string, 0, len(r.syms))
		for s := range r.syms {
			syms = append(syms, s)
		}
		sort.Strings(syms)
		line := fmt.Sprintf("%s: %s %s, fixed in %s; called: %s", id, r.module, r.version, orNone(r.fixed), strings.Join(syms, ", "))
		if r.module == "stdlib" || r.module == "toolchain" {
			stdlib = append(stdlib, line)
		} else {
			called = append(called, line)
		}
	}
	sort.Strings(called)
	sort.Strings(stdlib)
	return called, stdlib
}

func orNone(v string) string {
	if v == "" {
		return "no release yet"
	}
	return v
}

// vulnDBDir downloads VulnDB through the module proxy (or finds it in the
// module cache) and returns its folder.
func vulnDBDir(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", VulnDB)
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	_ = json.Unmarshal(out, &info)
	require.NoError(t, err, "go mod download %s: %s (the Go module proxy must be reachable)", VulnDB, info.Error)
	require.NotEmpty(t, info.Dir)
	return info.Dir
}

// vulnDBDate reads the date out of a pseudo-version
// (v0.0.0-20261105234957-e22db6528018 → 2026-11-05 23:49:57 UTC).
func vulnDBDate(mod string) string {
	_, v, _ := strings.Cut(mod, "@")
	parts := strings.Split(v, "-")
	if len(parts) < 3 {
		return "date unknown"
	}
	at, err := time.Parse("20060102150405", parts[len(parts)-2])
	if err != nil {
		return "date unknown"
	}
	return at.UTC().Format("2006-01-02 15:04:05 UTC")
}

// TestVulnCheckFailsOnACalledVulnerability: the check above would catch a
// called vulnerable function of a required module. A module of the test's
// own requires golang.org/x/text v0.3.5 and calls language.Parse
// (GO-2021-0113, fixed in v0.3.7); readFindings reports it as called.
func TestVulnCheckFailsOnACalledVulnerability(t *testing.T) {
	dir := vulnDBDir(t)
	mod := t.TempDir()
	write := func(name, body string) {
		require.NoError(t, os.WriteFile(filepath.Join(mod, name), []byte(body), 0o644))
	}
	write("go.mod", "module example.test/vulnerable\n\ngo 1.26\n\nrequire golang.org/x/text v0.3.5\n")
	write("main.go", "package main\n\nimport \"golang.org/x/text/language\"\n\nfunc main() { _, _ = language.Parse(\"en\") }\n")
	tidy := exec.Command("go", "mod", "tidy")
	tidy.Dir = mod
	if out, err := tidy.CombinedOutput(); err != nil {
		t.Fatalf("go mod tidy: %v: %s", err, out)
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	// govulncheck is our module's tool; it scans the other module by -C.
	cmd := exec.Command("go", "tool", "govulncheck", "-C", mod, "-db", "file://"+filepath.Join(dir, "data", "osv"), "-format", "json", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "govulncheck did not run: %s", stderr.String())
	called, _ := readFindings(t, out)
	require.NotEmpty(t, called)
	require.Len(t, called, 1, "%v", called)
	require.True(t, strings.HasPrefix(called[0], "GO-2021-0113: golang.org/x/text v0.3.5, fixed in v0.3.7; called: "), called[0])
	require.Contains(t, called[0], "golang.org/x/text/language.Parse")
}
