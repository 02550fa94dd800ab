package wire

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"log/slog"
)

// Redacted is what a Secret shows everywhere except on the wire.
const Redacted = "[REDACTED]"

// Secret holds a token, password or TOTP secret.
//
// Every way a value can reach a log, an error string or a page shows
// Redacted: String, GoString, every fmt verb, slog's LogValue, MarshalText and
// also MarshalJSON. The last one matters: slog's JSON handler and any
// json.Marshal of a struct that happens to contain a Secret would otherwise
// print it. Only this package's Encode puts the real value on the wire, through
// explicit wire forms of the few messages that carry secrets (hello,
// welcome, rotate_credentials), so the reveal is visible in one place.
//
// The value sits behind a pointer so that even a struct printed with %+v that
// holds a Secret in an unexported field (where fmt cannot call methods) shows
// an address, not the value.
type Secret struct {
	p *string
}

// NewSecret wraps s.
func NewSecret(s string) Secret {
	if s == "" {
		return Secret{}
	}
	return Secret{p: &s}
}

// Reveal returns the value. Call it only where the value is used (a login
// form, an Authorization header, the wire encoder), never to print it.
func (s Secret) Reveal() string {
	if s.p == nil {
		return ""
	}
	return *s.p
}

// IsZero reports whether the secret is empty.
func (s Secret) IsZero() bool { return s.p == nil || *s.p == "" }

// Equal compares two secrets in constant time.
func (s Secret) Equal(o Secret) bool {
	return subtle.ConstantTimeCompare([]byte(s.Reveal()), []byte(o.Reveal())) == 1
}

// String returns Redacted.
func (s Secret) String() string { return Redacted }

// GoString returns Redacted, for %#v.
func (s Secret) GoString() string { return Redacted }

// Format writes Redacted for every verb, so %x or %q cannot reveal it either.
func (s Secret) Format(f fmt.State, verb rune) {
	if verb == 'q' {
		fmt.Fprintf(f, "%q", Redacted)
		return
	}
	_, _ = f.Write([]byte(Redacted))
}

// LogValue makes slog print Redacted.
func (s Secret) LogValue() slog.Value { return slog.StringValue(Redacted) }

// MarshalText returns Redacted (used by slog's text handler, map keys and
// other text encoders).
func (s Secret) MarshalText() ([]byte, error) { return []byte(Redacted), nil }

// MarshalJSON returns "[REDACTED]"; the wire encoder reveals secrets on its own.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(Redacted) }

// UnmarshalJSON reads the real value from the wire.
func (s *Secret) UnmarshalJSON(data []byte) error {
	var v string
	if err := json.Unmarshal(data, &v); err != nil {
		return fmt.Errorf("wire: secret must be a JSON string")
	}
	*s = NewSecret(v)
	return nil
}
