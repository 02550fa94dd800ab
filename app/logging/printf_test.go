package logging

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// go-redis's own logger prints an unstructured line per failed dial on
// stderr; through Printf it is a structured, redacted record, and a
// dependency that stays down does not flood the log.
func TestGoRedisLogsThroughTheRedactingLogger(t *testing.T) {
	const secret = "redis-password-not-for-logs"
	RegisterSecret(secret)
	mu := &syncBuffer{}
	now := time.Unix(0, 0)
	pf := &Printf{Log: New(mu, Options{Format: "json", Level: slog.LevelDebug}).With("component", "go-redis"),
		Level: slog.LevelWarn, Every: 10 * time.Second, Now: func() time.Time { return now }}
	redis.SetLogger(pf)
	sock := filepath.Join(t.TempDir(), "nobody-listens.sock")
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, Password: secret, MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	for i := 0; i < 3; i++ {
		require.Error(t, c.Ping(context.Background()).Err())
	}
	pf.Printf(context.Background(), "auth %s rejected", secret)
	now = now.Add(11 * time.Second)
	require.Error(t, c.Ping(context.Background()).Err())

	out := mu.String()
	require.NotContains(t, out, secret)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Contains(t, lines[0], `"level":"WARN"`)
	require.Contains(t, lines[0], `"component":"go-redis"`)
	require.Contains(t, lines[0], "failed to dial")
	require.Contains(t, lines[0], sock)
	require.Contains(t, lines[1], Redacted)
	require.Contains(t, lines[2], "failed to dial")
	require.Contains(t, lines[2], `"suppressed_since_last":2`, "the two repeats within the window are counted, not written")
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
