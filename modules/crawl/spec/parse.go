package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// FieldError is one problem in a job file: where (field path, line and
// column) and what.
type FieldError struct {
	Path   string
	Line   int
	Column int
	Msg    string
}

func (e FieldError) String() string {
	path := e.Path
	if path == "" {
		path = "(document)"
	}
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s: %s", e.Line, path, e.Msg)
	}
	return fmt.Sprintf("%s: %s", path, e.Msg)
}

// Errors is every problem Parse found, in file order.
type Errors struct {
	File string
	List []FieldError
}

func (e *Errors) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "crawl: %s: %d error", e.File, len(e.List))
	if len(e.List) != 1 {
		b.WriteString("s")
	}
	for _, fe := range e.List {
		b.WriteString("\n  ")
		b.WriteString(e.File)
		b.WriteString(" ")
		b.WriteString(fe.String())
	}
	return b.String()
}

// Options are checks the spec package cannot make alone.
type Options struct {
	// CheckCron validates a cron expression in a time zone (the
	// scheduler's parser); nil checks the field count only.
	CheckCron func(expr, tz string) error
}

type pos struct{ line, col int }

// locator maps field paths to their place in the file.
type locator struct {
	at     map[string]pos
	byLine map[int][]string
	order  []string
}

func (l *locator) walk(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			l.walk(c, path)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			l.set(p, k.Line, k.Column)
			l.walk(v, p)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			l.set(p, c.Line, c.Column)
			l.walk(c, p)
		}
	}
}

func (l *locator) set(p string, line, col int) {
	if _, ok := l.at[p]; !ok {
		l.order = append(l.order, p)
	}
	l.at[p] = pos{line, col}
	l.byLine[line] = append(l.byLine[line], p)
}

// find returns the place of path, or of its nearest ancestor present in
// the file (a missing field is reported where its parent is).
func (l *locator) find(path string) pos {
	for p := path; ; {
		if at, ok := l.at[p]; ok {
			return at
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			return pos{1, 1}
		}
		p = p[:i]
	}
}

var yamlLine = regexp.MustCompile(`^line (\d+): (.*)$`)
var notFound = regexp.MustCompile(`^field (\S+) not found in type`)

// Parse reads a job file (YAML, or JSON which YAML includes), fills the
// defaults and validates it. On any problem it returns an *Errors listing
// every one with its field path and line.
func Parse(file string, src []byte, o Options) (*Job, error) {
	errs := &Errors{File: file}
	var root yaml.Node
	if err := yaml.Unmarshal(src, &root); err != nil {
		errs.List = append(errs.List, syntaxError(err))
		return nil, errs
	}
	if len(root.Content) == 0 {
		errs.List = append(errs.List, FieldError{Line: 1, Msg: "the file is empty; a crawl job starts with `version: 1` (see docs/CRAWL.md)"})
		return nil, errs
	}
	if root.Content[0].Kind != yaml.MappingNode {
		errs.List = append(errs.List, FieldError{Line: root.Content[0].Line, Msg: "a crawl job is a mapping of fields (version, name, start, …)"})
		return nil, errs
	}
	loc := &locator{at: map[string]pos{}, byLine: map[int][]string{}}
	loc.walk(&root, "")

	var j Job
	dec := yaml.NewDecoder(bytes.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&j); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			errs.List = append(errs.List, syntaxError(err))
			return nil, errs
		}
		for _, msg := range te.Errors {
			errs.List = append(errs.List, typeError(loc, msg))
		}
	}
	for _, p := range loc.order {
		if name, ok := strings.CutPrefix(p, "extract.fields."); ok && !strings.ContainsAny(name, ".[") {
			j.Extract.Order = append(j.Extract.Order, name)
		}
	}
	v := &validator{loc: loc, opts: o}
	if len(errs.List) == 0 {
		v.job(&j)
	}
	errs.List = append(errs.List, v.errs...)
	if len(errs.List) > 0 {
		sort.SliceStable(errs.List, func(a, b int) bool { return errs.List[a].Line < errs.List[b].Line })
		return nil, errs
	}
	return &j, nil
}

func syntaxError(err error) FieldError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		return FieldError{Line: n, Msg: "not valid YAML or JSON: " + m[2]}
	}
	return FieldError{Msg: "not valid YAML or JSON: " + msg}
}

func typeError(loc *locator, msg string) FieldError {
	m := yamlLine.FindStringSubmatch(msg)
	if m == nil {
		return FieldError{Msg: msg}
	}
	n, _ := strconv.Atoi(m[1])
	fe := FieldError{Line: n, Msg: m[2]}
	paths := loc.byLine[n]
	if nf := notFound.FindStringSubmatch(m[2]); nf != nil {
		fe.Msg = fmt.Sprintf("unknown field %q (see docs/CRAWL.md for the fields)", nf[1])
		for _, p := range paths {
			if p == nf[1] || strings.HasSuffix(p, "."+nf[1]) {
				fe.Path = p
			}
		}
	} else if len(paths) > 0 {
		fe.Path = paths[len(paths)-1]
		fe.Msg = strings.Replace(fe.Msg, "cannot unmarshal", "wrong type:", 1)
		fe.Msg = strings.ReplaceAll(fe.Msg, "!!str", "text")
		fe.Msg = strings.ReplaceAll(fe.Msg, "!!seq", "a list")
		fe.Msg = strings.ReplaceAll(fe.Msg, "!!map", "a mapping")
		fe.Msg = strings.ReplaceAll(fe.Msg, "!!int", "a number")
		fe.Msg = strings.ReplaceAll(fe.Msg, "!!bool", "true/false")
	}
	if at, ok := loc.at[fe.Path]; ok {
		fe.Column = at.col
	}
	return fe
}

// Marshal writes a job back as YAML (the canonical form a version stores).
func Marshal(j *Job) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(j); err != nil {
		return nil, fmt.Errorf("crawl: marshal job: %w", err)
	}
	return b.Bytes(), nil
}
