package logging

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

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

func TestShortValuesAreNotRegistered(t *testing.T) {
	RegisterSecret("a", "ab")
	require.Equal(t, "a b ab", Scrub("a b ab"))
}

func TestLongestSecretReplacedWhole(t *testing.T) {
	RegisterSecret("abcdefgh", "abcdefgh-longer")
	require.Equal(t, "x "+Redacted+" y", Scrub("x abcdefgh-longer y"))
}
