package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwright/fleetwright/app/logging"
)

// RedisConfig configures StartRedis.
type RedisConfig struct {
	// Dir holds the socket, the append-only file and the password.
	Dir string
	// Databases is the number of logical databases (Redis's default is 16;
	// the test helper hands one to each test).
	Databases int
	Logger    *slog.Logger
}

// Redis is a running private redis-server.
type Redis struct {
	cfg      RedisConfig
	socket   string
	password string
	cmd      *exec.Cmd
	exited   chan struct{}
	waitErr  error
	log      *slog.Logger
}

// StartRedis starts redis-server on a Unix socket with an append-only file
// under Dir, after stopping one a killed panel left behind. The caller must
// hold the data directory's Lock.
func StartRedis(ctx context.Context, cfg RedisConfig) (*Redis, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Databases <= 0 {
		cfg.Databases = 16
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if d := os.Getenv("FLEET_REDIS_BIN"); d != "" {
			bin = d
		} else {
			return nil, errors.New("embedded: redis-server not found in PATH: install the Debian package redis-server (apt-get install redis-server), set FLEET_REDIS_BIN to its path, or set FLEET_REDIS_URL to use an existing server")
		}
	}
	abs, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	cfg.Dir = abs
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded: create %s: %w", cfg.Dir, err)
	}
	r := &Redis{cfg: cfg, log: cfg.Logger.With("component", "redis")}
	pwFile := filepath.Join(cfg.Dir, "password")
	if b, err := os.ReadFile(pwFile); err == nil && len(b) > 0 {
		r.password = string(b)
	} else {
		r.password = randomSecret()
		if err := writeFileAtomic(pwFile, []byte(r.password), 0o600); err != nil {
			return nil, err
		}
	}
	logging.RegisterSecret(r.password)
	sockDir := shortSocketDir(cfg.Dir, "redis.sock")
	if err := os.MkdirAll(sockDir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	r.socket = filepath.Join(sockDir, "redis.sock")
	pidFile := filepath.Join(cfg.Dir, "redis.pid")
	if pid := readPidFile(pidFile); pid > 0 && processIs(pid, "redis-server") {
		r.log.Warn("stopping the redis-server a previous panel left running", "pid", pid)
		_ = stopOrphan(pid, syscall.SIGTERM, 15*time.Second)
	}
	_ = os.Remove(r.socket)

	// The password is given on stdin-less config lines rather than argv, so
	// it never shows in `ps`.
	conf := filepath.Join(cfg.Dir, "redis.conf")
	confText := fmt.Sprintf(`port 0
unixsocket %s
unixsocketperm 700
dir %s
appendonly yes
appendfsync everysec
save ""
daemonize no
pidfile %s
logfile ""
loglevel warning
protected-mode yes
databases %d
requirepass %s
`, r.socket, cfg.Dir, pidFile, cfg.Databases, r.password)
	if err := writeFileAtomic(conf, []byte(confText), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, conf)
	cmd.Dir = cfg.Dir
	// Redis prints a banner and host tuning advice at start: debug level.
	out := &lineLogger{log: r.log, level: slog.LevelDebug}
	cmd.Stdout, cmd.Stderr = out, out
	if err := start(cmd, syscall.SIGTERM); err != nil {
		return nil, fmt.Errorf("embedded: start redis-server: %w", err)
	}
	r.cmd = cmd
	r.exited = make(chan struct{})
	go func() { r.waitErr = cmd.Wait(); close(r.exited) }()
	if err := r.waitReady(ctx, 30*time.Second); err != nil {
		r.Stop()
		return nil, err
	}
	r.log.Info("embedded redis ready", "socket", r.socket, "pid", cmd.Process.Pid)
	return r, nil
}

func (r *Redis) waitReady(ctx context.Context, limit time.Duration) error {
	opts, _ := redis.ParseURL(r.URL(0))
	c := redis.NewClient(opts)
	defer c.Close()
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-r.exited:
			return fmt.Errorf("embedded: redis-server exited during start: %v", r.waitErr)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if last = c.Ping(ctx).Err(); last == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("embedded: redis-server did not answer within %s: %v", limit, last)
}

// URL returns a go-redis URL for database index db.
func (r *Redis) URL(db int) string {
	u := url.URL{Scheme: "unix", User: url.UserPassword("", r.password), Path: r.socket}
	u.RawQuery = fmt.Sprintf("db=%d", db)
	return u.String()
}

// Pid returns redis-server's pid.
func (r *Redis) Pid() int { return r.cmd.Process.Pid }

// Stop shuts redis-server down (SIGTERM flushes the append-only file).
func (r *Redis) Stop() {
	if r == nil || r.cmd == nil || r.cmd.Process == nil {
		return
	}
	select {
	case <-r.exited:
		return
	default:
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	waitExit(r.cmd, r.exited, 15*time.Second)
	r.log.Info("embedded redis stopped")
}
