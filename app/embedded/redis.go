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
	bin      string
	conf     string
	pidFile  string
	socket   string
	password string
	proc     child
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
	r.pidFile = filepath.Join(cfg.Dir, "redis.pid")
	if pid := readPidFile(r.pidFile); pid > 0 && processIs(pid, "redis-server") {
		r.log.Warn("stopping the redis-server a previous panel left running", "pid", pid)
		_ = stopOrphan(pid, syscall.SIGTERM, 15*time.Second)
	}

	// The password is given on stdin-less config lines rather than argv, so
	// it never shows in `ps`.
	r.conf = filepath.Join(cfg.Dir, "redis.conf")
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
`, r.socket, cfg.Dir, r.pidFile, cfg.Databases, r.password)
	if err := writeFileAtomic(r.conf, []byte(confText), 0o600); err != nil {
		return nil, err
	}
	r.bin = bin
	if err := r.launch(ctx); err != nil {
		return nil, err
	}
	r.log.Info("embedded redis ready", "socket", r.socket, "pid", r.Pid())
	return r, nil
}

// launch starts redis-server on the prepared configuration and waits until
// it answers; on failure nothing is left running.
func (r *Redis) launch(ctx context.Context) error {
	_ = os.Remove(r.socket)
	cmd := exec.Command(r.bin, r.conf)
	cmd.Dir = r.cfg.Dir
	// Redis prints a banner and host tuning advice at start: debug level.
	out := &lineLogger{log: r.log, level: slog.LevelDebug}
	cmd.Stdout, cmd.Stderr = out, out
	if err := start(cmd, syscall.SIGTERM); err != nil {
		return fmt.Errorf("embedded: start redis-server: %w", err)
	}
	r.proc.started(cmd)
	if err := r.waitReady(ctx, 30*time.Second); err != nil {
		r.proc.terminate(syscall.SIGTERM, 5*time.Second)
		return err
	}
	return nil
}

// reap implements service: a dead redis-server leaves nothing running.
func (r *Redis) reap(context.Context) {}

// Supervise restarts redis-server whenever it dies, until Stop (see
// Supervision). Clients on its URL reconnect by themselves: the socket,
// the password and the append-only file stay the same.
func (r *Redis) Supervise(s Supervision) { r.proc.supervise(r, s) }

// State is the supervised state (StateRunning, …; "" when not supervised).
func (r *Redis) State() string { return r.proc.state() }

func (r *Redis) waitReady(ctx context.Context, limit time.Duration) error {
	opts, _ := redis.ParseURL(r.URL(0))
	c := redis.NewClient(opts)
	defer c.Close()
	deadline := time.Now().Add(limit)
	var last error
	_, exited, _ := r.proc.current()
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			_, _, waitErr := r.proc.current()
			return fmt.Errorf("embedded: redis-server exited during start: %v", waitErr)
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

// Pid returns the current redis-server's pid (0 when none was started).
func (r *Redis) Pid() int { return r.proc.pid() }

// Stop ends supervision and shuts redis-server down (SIGTERM flushes the
// append-only file).
func (r *Redis) Stop() {
	if r == nil {
		return
	}
	r.proc.halt()
	if r.proc.terminate(syscall.SIGTERM, 15*time.Second) {
		r.log.Info("embedded redis stopped")
	}
}

// AttachRedis returns the URL of database db of the redis-server another
// process (a running panel) started under dir, for a second replica or a
// tool on the same host; it does not check that the server runs.
func AttachRedis(dir string, db int) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("embedded: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(abs, "password"))
	if err != nil {
		return "", fmt.Errorf("embedded: no redis under %s: %w", abs, err)
	}
	logging.RegisterSecret(string(b))
	r := &Redis{password: string(b), socket: filepath.Join(shortSocketDir(abs, "redis.sock"), "redis.sock")}
	return r.URL(db), nil
}
