package wire

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

type sinceProbe struct {
	Old string `json:"old"`
	New string `json:"new,omitempty" since:"4"`
}

func (sinceProbe) MessageType() Type { return TypeError }

func TestForVersionDropsNewerFields(t *testing.T) {
	m := sinceProbe{Old: "a", New: "b"}
	require.Equal(t, sinceProbe{Old: "a"}, ForVersion(m, V3))
	require.Equal(t, m, ForVersion(m, V4))
}

// TestSinceFieldsAreOmitEmpty: a field zeroed for an older peer must vanish
// from its encoding, or the older version's fixtures would change.
func TestSinceFieldsAreOmitEmpty(t *testing.T) {
	for v := MinSupported; v <= Current; v++ {
		for typ, m := range allSamples(v) {
			rt := reflect.TypeOf(m)
			for i := range rt.NumField() {
				f := rt.Field(i)
				if _, ok := f.Tag.Lookup("since"); ok {
					require.True(t, strings.Contains(f.Tag.Get("json"), "omitempty"),
						"%s.%s has a since tag but is not omitempty", typ, f.Name)
				}
			}
		}
	}
}
