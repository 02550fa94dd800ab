package doc_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// root is the repository's root: the directory above this package that
// holds go.mod.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "doc: no go.mod above the test's directory")
		dir = parent
	}
}

// userDocs are the docs a user reads: README.md and docs/*.md. The dated
// runs under docs/reports are history and are not checked.
func userDocs(t *testing.T, top string) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(top, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, docs, "doc: no docs/*.md found under %s", top)
	return append([]string{filepath.Join(top, "README.md")}, docs...)
}

var (
	codeSpan = regexp.MustCompile("`([^`\n]+)`")
	link     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// A doc named in prose ("see docs/CRAWL.md") counts as cited too.
	bareDoc = regexp.MustCompile(`(?:^|[\s(])((?:docs/)[A-Za-z0-9_./-]+\.md)\b`)
	lineRef = regexp.MustCompile(`:[0-9]+(-[0-9]+)?$`)
	// `modules/notify.Message` names an identifier of a package: the
	// package's directory is the path.
	identifier = regexp.MustCompile(`\.[A-Z][A-Za-z0-9_.]*$`)
)

// repoRoots are the top-level names a path cited in backticks must start
// with to count as a path into the repository (a backticked `logs/` or
// `bin/fleetwright` names something a run creates, not the tree).
var repoRoots = []string{"app/", "modules/", "views/", "static/", "migrations/", "docs/", "deploy/", "examples/"}

var repoFiles = map[string]bool{
	"main.go": true, "go.mod": true, "go.sum": true, "Makefile": true, "Dockerfile": true, "README.md": true,
}

// repoPath reports whether a backticked span names a path in the tree, and
// the path to look for.
func repoPath(span string) (string, bool) {
	span = strings.TrimSpace(span)
	if strings.ContainsAny(span, " <>{}*$…|=,;\"'") || strings.Contains(span, "://") {
		return "", false
	}
	span = strings.TrimSuffix(span, "/...")
	span = lineRef.ReplaceAllString(span, "")
	span = identifier.ReplaceAllString(span, "")
	if repoFiles[span] {
		return span, true
	}
	for _, r := range repoRoots {
		if strings.HasPrefix(span, r) {
			return span, true
		}
	}
	return "", false
}

// ignored are the root-anchored entries of .gitignore ("/deploy/secrets/"):
// places a run or an operator creates, which a doc may name but the tree
// never holds.
func ignored(t *testing.T, top string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(top, ".gitignore"))
	require.NoError(t, err)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(l), "/"); ok && p != "" {
			out = append(out, p)
		}
	}
	return out
}

// TestCitedPathsExist: every repository path that README.md or docs/*.md
// names in backticks, in a relative link, or as a bare docs/*.md exists. A
// package or file moved without its docs fails here with every stale
// citation listed (doc, line, path), not only the first.
func TestCitedPathsExist(t *testing.T) {
	top := root(t)
	skip := ignored(t, top)
	var missing []string
	checked := 0
	for _, doc := range userDocs(t, top) {
		rel, err := filepath.Rel(top, doc)
		require.NoError(t, err)
		f, err := os.Open(doc)
		require.NoError(t, err)
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		n := 0
		fenced := false
		for sc.Scan() {
			n++
			line := sc.Text()
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced
				continue
			}
			if fenced {
				continue // commands and sample output, not citations
			}
			check := func(path, base string) {
				if r, err := filepath.Rel(top, filepath.Join(base, path)); err == nil {
					for _, p := range skip {
						if r == strings.TrimSuffix(p, "/") || strings.HasPrefix(r, p) {
							return
						}
					}
				}
				checked++
				if _, err := os.Stat(filepath.Join(base, filepath.FromSlash(path))); err != nil {
					missing = append(missing, rel+":"+strconv.Itoa(n)+": "+path)
				}
			}
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "#") {
					continue
				}
				target, _, _ = strings.Cut(target, "#")
				check(target, filepath.Dir(doc))
			}
			for _, m := range codeSpan.FindAllStringSubmatch(line, -1) {
				if p, ok := repoPath(m[1]); ok {
					check(p, top)
				}
			}
			for _, m := range bareDoc.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
				check(m[1], top)
			}
		}
		require.NoError(t, sc.Err())
		require.NoError(t, f.Close())
	}
	require.Greater(t, checked, 200, "the docs cite far more paths than this: the scan itself is broken")
	require.Empty(t, missing, "paths cited in the docs that do not exist (move the citation with the file)")
}

// TestModuleMapNamesEveryModule: README's module map has a line for every
// directory under modules/ ("- `name` — …"), so a new module is documented
// when it lands, and names no module that is gone.
func TestModuleMapNamesEveryModule(t *testing.T) {
	top := root(t)
	readme, err := os.ReadFile(filepath.Join(top, "README.md"))
	require.NoError(t, err)
	entry := regexp.MustCompile("(?m)^- `([a-z0-9]+)` — ")
	listed := map[string]bool{}
	for _, m := range entry.FindAllStringSubmatch(string(readme), -1) {
		listed[m[1]] = true
	}
	dirs, err := os.ReadDir(filepath.Join(top, "modules"))
	require.NoError(t, err)
	var absent []string
	present := map[string]bool{}
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		present[d.Name()] = true
		if !listed[d.Name()] {
			absent = append(absent, d.Name())
		}
	}
	require.Empty(t, absent, "modules missing from README's module map (one line each: - `name` — what it is)")
	var gone []string
	for name := range listed {
		if !present[name] {
			gone = append(gone, name)
		}
	}
	require.Empty(t, gone, "README's module map names modules that do not exist")
}

// TestUserDocsNameNoIssues: the docs describe what the code does today, so
// they cite no issue numbers ("issue 11's rules", "issues 11–16"); the
// dated runs under docs/reports may.
func TestUserDocsNameNoIssues(t *testing.T) {
	top := root(t)
	issue := regexp.MustCompile(`(?i)\bissues? #?[0-9]+`)
	var found []string
	for _, doc := range userDocs(t, top) {
		b, err := os.ReadFile(doc)
		require.NoError(t, err)
		rel, err := filepath.Rel(top, doc)
		require.NoError(t, err)
		for i, line := range strings.Split(string(b), "\n") {
			if m := issue.FindString(line); m != "" {
				found = append(found, rel+":"+strconv.Itoa(i+1)+": "+m)
			}
		}
	}
	require.Empty(t, found, "issue numbers in the user docs: say what the code does instead")
}
