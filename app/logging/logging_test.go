package logging

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type creds struct {
	User     string
	Password string
	Note     string
}

func TestRegisteredSecretNeverReachesOutput(t *testing.T) {
	const secret = "hunter2-very-secret-value"
	RegisterSecret(secret)
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		log := New(&buf, Options{Format: format, Level: slog.LevelDebug})

		log.Info("message with " + secret)
		log.Info("plain", "value", "prefix "+secret+" suffix")
		log.Error("failed", "err", fmt.Errorf("dial: %w", errors.New("auth "+secret+" rejected")))
		log.Info("nested", slog.Group("outer", slog.Group("inner", slog.String("v", secret))))
		log.With("carried", secret).Info("with attrs")
		log.WithGroup("g").Info("in group", "x", secret)
		log.Info("struct", "c", creds{User: "u", Note: "n " + secret})
		log.Info("bytes", "b", []byte(secret))
		func() {
			defer func() {
				if r := recover(); r != nil {
					log.Error("recovered panic", "panic", r, "stack", fmt.Sprint(r))
				}
			}()
			panic(fmt.Errorf("worker blew up holding %s", secret))
		}()

		out := buf.String()
		require.NotContains(t, out, secret, format)
		require.NotContains(t, out, "hunter2", format)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 9)
		for _, l := range lines {
			require.Contains(t, l, Redacted, format)
		}
	}
}

func TestSensitiveKeysLoseTheirValue(t *testing.T) {
	var buf bytes.Buffer
	log := New(&buf, Options{Format: "text"})
	log.Info("login", "password", "pw-123456", "otp_code", "654321", "Cookie", "sid=abc",
		"authorization", "Bearer xyz", "agent_token", "tok", "user", "alice")
	log.Info("struct", "c", creds{User: "bob", Password: "pw-in-struct"})
	out := buf.String()
	for _, v := range []string{"pw-123456", "654321", "sid=abc", "Bearer xyz", "tok ", "pw-in-struct"} {
		require.NotContains(t, out, v)
	}
	require.Contains(t, out, "user=alice")
	require.Contains(t, out, "bob")
}

func TestShortOrLowEntropyValuesAreNotRegistered(t *testing.T) {
	// The values of the probe: sent as cookies, they used to blank
	// out addresses and emails in every later log line.
	for _, v := range []string{"a", "ab", "127.0.0.1", "review.test", "10.20.30.40",
		"aaaaaaaaaaaaaaaaaaaaaaaa", "121212121212121212121212", "0000000000000001", "192.168.100.200"} {
		RegisterSecret(v)
		require.False(t, Default().Contains(v), v)
		require.Equal(t, "x "+v+" y", Scrub("x "+v+" y"))
	}
	for _, v := range []string{"Quiet-Harbour-Lantern-42", "kq3JxW9vTz2mB7nP4sLf8hYd", "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"} {
		require.True(t, Worthy(v), v)
	}
}

func TestLongestSecretReplacedWhole(t *testing.T) {
	RegisterSecret("abcdefgh-ijkl-mnop", "abcdefgh-ijkl-mnop-longer")
	require.Equal(t, "x "+Redacted+" y", Scrub("x abcdefgh-ijkl-mnop-longer y"))
	require.Equal(t, "x "+Redacted+"-long y", Scrub("x abcdefgh-ijkl-mnop-long y"))
}

func TestOverlappingSecretsLeaveNothingOfEither(t *testing.T) {
	r := NewRegistry(RegistryOptions{})
	a, b := "first-secret-Xq7Zk2", "Zk2-second-secret-Pw9"
	require.Equal(t, 2, r.Register(0, a, b))
	// They overlap in "Zk2": replacing one then looking for the other
	// would leave a tail of the second in the line.
	require.Equal(t, "<"+Redacted+">", r.Scrub("<first-secret-Xq7Zk2-second-secret-Pw9>"))
	require.Equal(t, Redacted+" "+Redacted, r.Scrub(a+" "+b))
}

func TestRegistryIsBoundedAndSecretsExpire(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	r := NewRegistry(RegistryOptions{Max: 100, Now: func() time.Time { return now }})
	secret := func(i int) string { return fmt.Sprintf("tok-%08d-Zq8mWx3vKp", i) }
	for i := range 1000 {
		r.Register(0, secret(i))
		require.LessOrEqual(t, r.Len(), 100)
	}
	require.False(t, r.Contains(secret(0)), "the least recently registered is evicted")
	require.Equal(t, Redacted, r.Scrub(secret(999)))
	require.Equal(t, secret(0), r.Scrub(secret(0)))
	// Registering again refreshes: the refreshed one survives the next wave.
	r.Register(0, secret(900))
	for i := 1000; i < 1099; i++ {
		r.Register(0, secret(i))
	}
	require.True(t, r.Contains(secret(900)))
	require.False(t, r.Contains(secret(901)))

	s := NewRegistry(RegistryOptions{Now: func() time.Time { return now }})
	s.Register(time.Hour, "session-token-Zq8mWx3vKp-1")
	s.Register(0, "database-password-Zq8mWx3vKp")
	require.Equal(t, Redacted+" "+Redacted, s.Scrub("session-token-Zq8mWx3vKp-1 database-password-Zq8mWx3vKp"))
	now = now.Add(time.Hour)
	require.Equal(t, "session-token-Zq8mWx3vKp-1 "+Redacted, s.Scrub("session-token-Zq8mWx3vKp-1 database-password-Zq8mWx3vKp"))
	// Expired secrets are dropped, not only ignored, once the registry moves on.
	for i := range 200 {
		s.Register(0, secret(i))
	}
	require.Equal(t, 201, s.Len())
}

// naiveScrub is the reference: every occurrence of every secret, unioned.
func naiveScrub(s string, secrets []string) string {
	cover := make([]bool, len(s))
	for _, sec := range secrets {
		for i := 0; i+len(sec) <= len(s); i++ {
			if s[i:i+len(sec)] == sec {
				for j := i; j < i+len(sec); j++ {
					cover[j] = true
				}
			}
		}
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if !cover[i] {
			b.WriteByte(s[i])
			i++
			continue
		}
		for i < len(s) && cover[i] {
			i++
		}
		b.WriteString(Redacted)
	}
	return b.String()
}

func TestMatcherAgreesWithTheNaiveScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	// A small alphabet makes shared prefixes, overlaps and failure links
	// frequent; the registry's minimum entropy needs a few symbols.
	const alphabet = "abcdefghijklmnop"
	word := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	r := NewRegistry(RegistryOptions{})
	var secrets []string
	for round := range 40 {
		// Secrets sharing long prefixes with earlier ones, and fresh ones.
		for range 25 {
			v := word(12 + rng.IntN(20))
			if len(secrets) > 0 && rng.IntN(3) == 0 {
				p := secrets[rng.IntN(len(secrets))]
				v = p[:12+rng.IntN(len(p)-11)] + word(rng.IntN(6))
			}
			if r.Register(0, v) == 1 {
				secrets = append(secrets, v)
			}
		}
		for range 20 {
			// Text built from pieces of secrets and noise.
			var b strings.Builder
			for range 6 {
				if rng.IntN(2) == 0 {
					p := secrets[rng.IntN(len(secrets))]
					lo := rng.IntN(len(p) / 2)
					b.WriteString(p[lo:])
				} else {
					b.WriteString(word(rng.IntN(8)))
				}
			}
			text := b.String()
			require.Equal(t, naiveScrub(text, secrets), r.Scrub(text), "round %d text %q", round, text)
		}
	}
}
