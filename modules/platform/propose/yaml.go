package propose

import (
	"strconv"

	"go.yaml.in/yaml/v3"
)

// ymap builds one YAML mapping, key by key, each with an optional comment.
type ymap struct{ n *yaml.Node }

func newMap() ymap { return ymap{&yaml.Node{Kind: yaml.MappingNode}} }

// flowMap is a mapping written on one line ({a: b}).
func flowMap() ymap { return ymap{&yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}} }

func scalar(v any) *yaml.Node {
	switch v := v.(type) {
	case *yaml.Node:
		return v
	case ymap:
		return v.n
	case string:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v}
	case int:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(v)}
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}
	case []int:
		s := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, i := range v {
			s.Content = append(s.Content, scalar(i))
		}
		return s
	case []string:
		s := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, i := range v {
			s.Content = append(s.Content, scalar(i))
		}
		return s
	}
	panic("propose: yaml: unsupported value")
}

// set adds key: v; a comment is written at the end of the key's line
// ("# guess: …").
func (m ymap) set(key string, v any, comment string) ymap {
	k := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}
	val := scalar(v)
	if comment != "" {
		if val.Kind == yaml.ScalarNode || val.Style == yaml.FlowStyle {
			val.LineComment = "# " + comment
		} else {
			k.LineComment = "# " + comment
		}
	}
	m.n.Content = append(m.n.Content, k, val)
	return m
}

// head sets the comment written on the lines above the last key.
func (m ymap) head(comment string) ymap {
	if len(m.n.Content) >= 2 {
		m.n.Content[len(m.n.Content)-2].HeadComment = comment
	}
	return m
}

func (m ymap) empty() bool { return len(m.n.Content) == 0 }

// seq is a block sequence.
func seq(items ...any) *yaml.Node {
	s := &yaml.Node{Kind: yaml.SequenceNode}
	for _, it := range items {
		s.Content = append(s.Content, scalar(it))
	}
	return s
}
