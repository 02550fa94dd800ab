package wire

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to the decoder: it must never panic, must
// classify every failure, and whatever it accepts must encode again.
func FuzzDecode(f *testing.F) {
	paths, _ := filepath.Glob("testdata/v*/*.json")
	for _, p := range paths {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(`{"type":"hello","id":"x","time":"2026-01-01T00:00:00Z","body":{"version":1,"min_version":1}}`))
	f.Add([]byte(`{"type":"state","id":"x","time":"2026-01-01T00:00:00Z","body":{"workers":[{"name":"w"}],"memory_rss_bytes":-1}}`))
	f.Add([]byte(`{"type":"nope"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := Decode(data)
		if err != nil {
			if ErrorFor(err).Code == "" {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if fr.Message == nil || fr.Message.MessageType() != fr.Type {
			t.Fatalf("decoded %q into %T", fr.Type, fr.Message)
		}
		if _, err := Encode(Current, fr); err != nil && len(data) < MaxMessageBytes/2 {
			t.Fatalf("accepted message does not encode again: %v", err)
		}
	})
}
