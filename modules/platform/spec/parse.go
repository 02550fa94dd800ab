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
	"time"

	"go.yaml.in/yaml/v3"
)

// FieldError is one problem in a platform file: where (field path, line)
// and what.
type FieldError struct {
	Path string
	Line int
	Msg  string
}

func (e FieldError) String() string {
	path := e.Path
	if path == "" {
		path = "(document)"
	}
	return path + ": " + e.Msg
}

// Errors is every problem Parse found, in file order. Each line of its
// Error() reads `file:line: field.path: what is wrong`.
type Errors struct {
	File string
	List []FieldError
}

func (e *Errors) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "spec: %s: %d error", e.File, len(e.List))
	if len(e.List) != 1 {
		b.WriteString("s")
	}
	for _, fe := range e.List {
		b.WriteString("\n")
		b.WriteString(e.Line(fe))
	}
	return b.String()
}

// Line renders one error as `file:line: field.path: what is wrong`.
func (e *Errors) Line(fe FieldError) string {
	return fmt.Sprintf("%s:%d: %s", e.File, fe.Line, fe.String())
}

// UnmarshalYAML reads a Go duration ("500ms", "1m").
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	// A *yaml.TypeError is collected with the others (any other error
	// would end the decoding).
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: a duration such as 1s or 10m, not a %s", n.Line, kindName(n.Kind))}}
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %q is not a duration (write e.g. 500ms, 1s, 10m)", n.Line, n.Value)}}
	}
	d.D, d.Raw = v, n.Value
	return nil
}

// MarshalYAML writes the duration as it was read.
func (d Duration) MarshalYAML() (any, error) {
	if d.Raw != "" {
		return d.Raw, nil
	}
	return d.D.String(), nil
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	}
	return "value"
}

type locator struct {
	at     map[string]int
	byLine map[int][]string
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
			l.set(p, k.Line)
			l.walk(v, p)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			l.set(p, c.Line)
			l.walk(c, p)
		}
	}
}

func (l *locator) set(p string, line int) {
	l.at[p] = line
	l.byLine[line] = append(l.byLine[line], p)
}

// find returns the line of path, or of its nearest ancestor in the file (a
// missing field is reported where its parent is).
func (l *locator) find(path string) int {
	for p := path; ; {
		if line, ok := l.at[p]; ok {
			return line
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			return 1
		}
		p = p[:i]
	}
}

var (
	yamlLine = regexp.MustCompile(`^line (\d+): (.*)$`)
	notFound = regexp.MustCompile(`^field (\S+) not found in type`)
)

// Parse reads a platform file (YAML, or JSON which YAML includes), fills
// the defaults and validates it. On any problem it returns an *Errors that
// lists every one with its field path and line.
func Parse(file string, src []byte) (*Spec, error) {
	errs := &Errors{File: file}
	var root yaml.Node
	if err := yaml.Unmarshal(src, &root); err != nil {
		errs.List = append(errs.List, syntaxError(err))
		return nil, errs
	}
	if len(root.Content) == 0 {
		errs.List = append(errs.List, FieldError{Line: 1, Msg: fmt.Sprintf("the file is empty; a platform starts with `version: %d` (see docs/ADAPTERS.md)", Version)})
		return nil, errs
	}
	if root.Content[0].Kind != yaml.MappingNode {
		errs.List = append(errs.List, FieldError{Line: root.Content[0].Line, Msg: "a platform is a mapping of fields (version, name, sign_in, feed, …)"})
		return nil, errs
	}
	loc := &locator{at: map[string]int{}, byLine: map[int][]string{}}
	loc.walk(&root, "")

	// The version is checked first: a file of another version is not
	// read against this version's fields.
	var head struct {
		Version any `yaml:"version"`
	}
	_ = root.Decode(&head)
	switch v := head.Version.(type) {
	case nil:
		errs.List = append(errs.List, FieldError{Path: "version", Line: 1, Msg: fmt.Sprintf("missing; write `version: %d` as the first line", Version)})
		return nil, errs
	case int:
		if v != Version {
			errs.List = append(errs.List, FieldError{Path: "version", Line: loc.find("version"),
				Msg: fmt.Sprintf("version %d is not supported; this build reads version %d", v, Version)})
			return nil, errs
		}
	default:
		errs.List = append(errs.List, FieldError{Path: "version", Line: loc.find("version"),
			Msg: fmt.Sprintf("%v is not a version; write `version: %d`", v, Version)})
		return nil, errs
	}

	var s Spec
	dec := yaml.NewDecoder(bytes.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			errs.List = append(errs.List, syntaxError(err))
			return nil, errs
		}
		for _, msg := range te.Errors {
			errs.List = append(errs.List, typeError(loc, msg))
		}
	}
	if len(errs.List) == 0 {
		v := &validator{loc: loc}
		v.spec(&s)
		errs.List = append(errs.List, v.errs...)
	}
	if len(errs.List) > 0 {
		sort.SliceStable(errs.List, func(a, b int) bool { return errs.List[a].Line < errs.List[b].Line })
		return nil, errs
	}
	return &s, nil
}

func syntaxError(err error) FieldError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		return FieldError{Line: n, Msg: "not valid YAML or JSON: " + m[2]}
	}
	return FieldError{Line: 1, Msg: "not valid YAML or JSON: " + msg}
}

func typeError(loc *locator, msg string) FieldError {
	m := yamlLine.FindStringSubmatch(msg)
	if m == nil {
		return FieldError{Line: 1, Msg: msg}
	}
	n, _ := strconv.Atoi(m[1])
	fe := FieldError{Line: n, Msg: m[2]}
	paths := loc.byLine[n]
	if nf := notFound.FindStringSubmatch(m[2]); nf != nil {
		fe.Msg = fmt.Sprintf("unknown field %q (docs/ADAPTERS.md lists the fields)", nf[1])
		for _, p := range paths {
			if p == nf[1] || strings.HasSuffix(p, "."+nf[1]) {
				fe.Path = p
			}
		}
		return fe
	}
	if len(paths) > 0 {
		fe.Path = paths[len(paths)-1]
	}
	if i := strings.Index(fe.Msg, "cannot unmarshal"); i >= 0 {
		fe.Msg = "wrong type:" + fe.Msg[i+len("cannot unmarshal"):]
	}
	r := strings.NewReplacer("!!str", "text", "!!seq", "a list", "!!map", "a mapping", "!!int", "a number",
		"!!bool", "true/false", "!!float", "a number")
	fe.Msg = r.Replace(fe.Msg)
	return fe
}
