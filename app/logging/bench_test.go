package logging

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
)

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// registryOf returns a registry holding n random session-token-like secrets
// (43 characters each, like the console's session tokens).
func registryOf(b *testing.B, n int) (*Registry, []string) {
	b.Helper()
	r := NewRegistry(RegistryOptions{Max: n})
	secrets := make([]string, n)
	for i := range secrets {
		secrets[i] = randomToken()
	}
	r.Register(0, secrets...)
	if r.Len() != n {
		b.Fatalf("registry holds %d, want %d", r.Len(), n)
	}
	return r, secrets
}

// BenchmarkLogLine100kSecrets is the cost of one typical console log line
// (message, six attributes, one an error) through the redacting handler with
// 100,000 registered secrets, the JSON handler writing to io.Discard.
func BenchmarkLogLine100kSecrets(b *testing.B) {
	for _, n := range []int{0, 1_000, 100_000} {
		b.Run(fmt.Sprintf("secrets=%d", n), func(b *testing.B) {
			r, _ := registryOf(b, max(n, 1))
			if n == 0 {
				r = NewRegistry(RegistryOptions{})
			}
			h := slog.NewJSONHandler(io.Discard, nil)
			log := slog.New(&Handler{inner: h, reg: r})
			err := errors.New("account: session: context deadline exceeded while reading from 10.1.2.3:5432")
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				log.Info("sign-in", "action", "signin.failed", "email", "ops@fleet.test", "ip", "203.0.113.7",
					"reason", "wrong password", "step", "password", "err", err)
			}
		})
	}
}

// BenchmarkScrubAttr100kSecrets is the cost of scrubbing one attribute of
// 100 bytes with 100,000 registered secrets, one of them present.
func BenchmarkScrubAttr100kSecrets(b *testing.B) {
	r, secrets := registryOf(b, 100_000)
	text := "request from 203.0.113.7 carried " + secrets[77_777] + " in its cookie header, ok"
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if r.Scrub(text) == text {
			b.Fatal("not redacted")
		}
	}
}

// BenchmarkRegister100kSecrets is the cost of registering one more secret
// into a registry holding 100,000 (at its cap, so one is evicted each time).
func BenchmarkRegister100kSecrets(b *testing.B) {
	r, _ := registryOf(b, 100_000)
	fresh := make([]string, 4096)
	for i := range fresh {
		fresh[i] = randomToken()
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		r.Register(0, fresh[i%len(fresh)])
		i++
	}
}

// BenchmarkBuild100kSecrets is the cost of building the automaton of
// 100,000 secrets (what a merge of the registry costs).
func BenchmarkBuild100kSecrets(b *testing.B) {
	secrets := make([]string, 100_000)
	for i := range secrets {
		secrets[i] = randomToken()
	}
	b.ReportAllocs()
	for b.Loop() {
		buildMatcher(secrets)
	}
}
