package spec

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"text/template"
	"text/template/parse"
)

// Funcs are the functions a template may call: json writes a value as a
// JSON literal (for JSON bodies), query escapes one for a URL's query,
// path escapes one for a segment of a URL's path, css quotes one as a CSS
// string (for a selector).
var Funcs = template.FuncMap{
	"css": CSSString,
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	"query": url.QueryEscape,
	"path":  url.PathEscape,
}

// CSSString quotes s as a CSS string literal: a selector built from a value
// (a job's key) matches that value, whatever characters it has.
func CSSString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\%x ", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// Template compiles one template of a spec. A missing variable is an
// error when it runs, never an empty string.
func Template(name, text string) (*template.Template, error) {
	t, err := template.New(name).Funcs(Funcs).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("spec: template %s: %w", name, err)
	}
	return t, nil
}

// Variables of the templates (docs/ADAPTERS.md says where each exists).
const (
	VarBase       = "base"
	VarUsername   = "username"
	VarPassword   = "password"
	VarCode       = "code"
	VarVars       = "vars"
	VarCursor     = "cursor"
	VarPage       = "page"
	VarOffset     = "offset"
	VarKey        = "key"
	VarBookingKey = "booking_key"
)

// scope is what the templates of one place may use.
type scope struct {
	vars  []string // top-level variables
	named []string // the names under .vars defined so far
}

func (s scope) with(v ...string) scope {
	return scope{vars: append(slices.Clone(s.vars), v...), named: s.named}
}

// refs returns the top-level variables a template uses, and an error for
// one that does not exist in sc or a construct a spec does not need.
func refs(text string, sc scope) ([]string, error) {
	t, err := Template("t", text)
	if err != nil {
		return nil, fmt.Errorf("not a valid template: %s", strings.TrimPrefix(err.Error(), "spec: template t: template: t:"))
	}
	var used []string
	var bad error
	var walk func(n parse.Node)
	walk = func(n parse.Node) {
		if n == nil || bad != nil {
			return
		}
		switch n := n.(type) {
		case *parse.ListNode:
			if n == nil {
				return
			}
			for _, c := range n.Nodes {
				walk(c)
			}
		case *parse.ActionNode:
			walk(n.Pipe)
		case *parse.IfNode:
			walk(n.Pipe)
			walk(n.List)
			walk(n.ElseList)
		case *parse.PipeNode:
			if n == nil {
				return
			}
			if len(n.Decl) > 0 {
				bad = fmt.Errorf("variables ($x :=) are not needed in a spec; use the variables %s", strings.Join(sc.vars, ", "))
				return
			}
			for _, c := range n.Cmds {
				walk(c)
			}
		case *parse.CommandNode:
			for _, a := range n.Args {
				walk(a)
			}
		case *parse.FieldNode:
			bad = check(n.Ident, sc, &used)
		case *parse.ChainNode:
			bad = fmt.Errorf("write a variable as {{.name}}")
		case *parse.VariableNode:
			if len(n.Ident) > 1 && n.Ident[0] == "$" {
				bad = check(n.Ident[1:], sc, &used)
				return
			}
			bad = fmt.Errorf("unknown variable %s", n.Ident[0])
		case *parse.TextNode, *parse.IdentifierNode, *parse.StringNode, *parse.NumberNode,
			*parse.BoolNode, *parse.NilNode, *parse.DotNode:
		default:
			bad = fmt.Errorf("%q: only {{.variable}}, {{if}}…{{end}} and the functions json, query and css are allowed in a spec", n.String())
		}
	}
	walk(t.Tree.Root)
	return used, bad
}

func check(ident []string, sc scope, used *[]string) error {
	name := ident[0]
	if !slices.Contains(sc.vars, name) {
		return fmt.Errorf("template variable .%s does not exist here; this template may use %s", name, list(sc.vars))
	}
	*used = append(*used, name)
	if name == VarVars {
		if len(ident) != 2 {
			return fmt.Errorf("write an extracted value as {{.vars.NAME}}")
		}
		if !slices.Contains(sc.named, ident[1]) {
			if len(sc.named) == 0 {
				return fmt.Errorf("template variable .vars.%s does not exist: no earlier step extracts a value", ident[1])
			}
			return fmt.Errorf("template variable .vars.%s does not exist: the earlier steps extract %s", ident[1], list(sc.named))
		}
		return nil
	}
	if len(ident) > 1 {
		return fmt.Errorf(".%s has no field %s", name, ident[1])
	}
	return nil
}

func list(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "." + n
	}
	return strings.Join(out, ", ")
}
