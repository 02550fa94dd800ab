package wire

import (
	"reflect"
	"strconv"
)

// ForVersion returns m with every top-level field that a newer version added
// zeroed, so that version v's peer sees only what v has. A field added in
// version N after its message first shipped carries the tag `since:"N"` and
// must be omitempty in JSON, so a zeroed field leaves no trace in the
// encoding. Nested types that gain fields need their own forVersion (see
// State, and Config below for welcome and configure).
func ForVersion(m Message, v int) Message {
	m = topForVersion(m, v)
	switch x := m.(type) {
	case Welcome:
		x.Config = x.Config.forVersion(v)
		return x
	case Configure:
		x.Config = x.Config.forVersion(v)
		return x
	}
	return m
}

// forVersion drops the configuration's nested fields a version does not
// have: the account's platform spec is v5's.
func (c Config) forVersion(v int) Config {
	if v < V5 {
		c.Account.Platform = nil
	}
	return c
}

func topForVersion(m Message, v int) Message {
	rv := reflect.ValueOf(m)
	if rv.Kind() != reflect.Struct {
		return m
	}
	idx := sinceFields(rv.Type(), v)
	if len(idx) == 0 {
		return m
	}
	cp := reflect.New(rv.Type()).Elem()
	cp.Set(rv)
	for _, i := range idx {
		f := cp.Field(i)
		f.Set(reflect.Zero(f.Type()))
	}
	return cp.Interface().(Message)
}

// sinceFields lists the indexes of t's fields whose since tag is above v.
func sinceFields(t reflect.Type, v int) []int {
	var out []int
	for i := range t.NumField() {
		tag, ok := t.Field(i).Tag.Lookup("since")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(tag)
		if err != nil || n > v {
			out = append(out, i)
		}
	}
	return out
}
