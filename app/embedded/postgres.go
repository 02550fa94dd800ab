package embedded

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/logging"
)

// Role names the embedded cluster creates. The owner runs migrations and owns
// every table; the application role is neither owner, superuser nor
// BYPASSRLS, so row-level security applies to everything the panel does.
const (
	SuperRole = "fleet_super"
	OwnerRole = "fleet_owner"
	AppRole   = "fleet_app"
	Database  = "fleetwright"
	pgPort    = 5432
)

// PostgresConfig configures StartPostgres.
type PostgresConfig struct {
	// Dir holds the cluster (Dir/data), its credentials and its log.
	Dir string
	// MaxConnections sizes the cluster for the fleet (at least 200).
	MaxConnections int
	// NoSync skips initdb's fsync; for throwaway test clusters only.
	NoSync bool
	// TrackStatements loads pg_stat_statements and times PL/pgSQL
	// functions (the triggers), so a benchmark can say which statements and
	// triggers the database's time goes to (fleetwright bench).
	TrackStatements bool
	Logger          *slog.Logger
}

// Postgres is a running private cluster.
type Postgres struct {
	cfg    PostgresConfig
	socket string
	creds  pgCredentials
	bin    string
	args   []string
	who    runAs
	data   string
	proc   child
	log    *slog.Logger
	// archive is where the cluster archives its WAL (Dir empty: nowhere).
	archive WALArchive
	// readyWithin bounds the wait for connections (0: a minute); onLine,
	// when set, sees every line the postmaster writes (a recovery's FATAL).
	readyWithin time.Duration
	onLine      func(string)
}

type pgCredentials struct {
	Super string `json:"super"`
	Owner string `json:"owner"`
	App   string `json:"app"`
}

// StartPostgres initialises the cluster on first run, stops a postmaster a
// killed panel left behind, starts postgres as a child and waits until it
// accepts connections. The caller must hold the data directory's Lock.
func StartPostgres(ctx context.Context, cfg PostgresConfig) (*Postgres, error) {
	if cfg.MaxConnections < 200 {
		cfg.MaxConnections = 300
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	initdb, err := findPGBinary("initdb")
	if err != nil {
		return nil, err
	}
	postgresBin, err := findPGBinary("postgres")
	if err != nil {
		return nil, err
	}
	who, err := databaseUser()
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	cfg.Dir = abs
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded: create %s: %w", cfg.Dir, err)
	}
	// The database user must reach its directories even when the data dir was
	// created by root with a tight umask.
	if err := os.Chmod(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	if err := checkReachable(filepath.Join(cfg.Dir, "data"), who); err != nil {
		return nil, err
	}
	p := &Postgres{cfg: cfg, log: cfg.Logger.With("component", "postgres")}
	creds, err := loadOrCreateCredentials(filepath.Join(cfg.Dir, "credentials.json"))
	if err != nil {
		return nil, err
	}
	p.creds = creds
	logging.RegisterSecret(creds.Super, creds.Owner, creds.App)

	data := filepath.Join(cfg.Dir, "data")
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := p.initdb(ctx, initdb, data, who); err != nil {
			return nil, err
		}
	}
	p.socket = shortSocketDir(filepath.Join(cfg.Dir, "run"), fmt.Sprintf(".s.PGSQL.%d", pgPort))
	if err := os.MkdirAll(p.socket, 0o700); err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	if who.cred != nil {
		if err := os.Chown(p.socket, int(who.uid), int(who.gid)); err != nil {
			return nil, fmt.Errorf("embedded: %w", err)
		}
	}
	p.bin, p.who, p.data = postgresBin, who, data
	p.args = []string{"-D", data,
		"-c", "listen_addresses=",
		"-c", "unix_socket_directories=" + p.socket,
		"-c", "unix_socket_permissions=0700",
		"-c", "port=" + strconv.Itoa(pgPort),
		"-c", "max_connections=" + strconv.Itoa(cfg.MaxConnections),
		// Claims must survive a crash: a lease lost in a crash could be
		// granted twice.
		"-c", "synchronous_commit=on",
		"-c", "fsync=on",
		// The cluster's own log is bounded (seven daily files, overwritten
		// weekly) and terse: statement errors go to the panel's redacted log,
		// so key values of failed statements never pile up here.
		"-c", "logging_collector=on",
		"-c", "log_directory=log",
		"-c", "log_filename=postgresql-%a.log",
		"-c", "log_truncate_on_rotation=on",
		"-c", "log_rotation_age=1d",
		"-c", "log_rotation_size=0",
		"-c", "log_min_messages=log",
		"-c", "log_min_error_statement=panic",
		"-c", "log_error_verbosity=terse",
		"-c", "log_statement=none",
		"-c", "log_parameter_max_length=0",
		"-c", "log_parameter_max_length_on_error=0",
		"-c", "log_checkpoints=off",
		"-c", "log_connections=off",
		"-c", "log_disconnections=off",
	}
	archive, err := readWALArchive(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if archive.Dir != "" {
		p.args = append(p.args, archiveArgs(archive)...)
		p.archive = archive
	}
	if cfg.TrackStatements {
		p.args = append(p.args, "-c", "shared_preload_libraries=pg_stat_statements", "-c", "track_functions=pl")
	}
	if err := p.launch(ctx); err != nil {
		return nil, err
	}
	if err := p.bootstrap(ctx); err != nil {
		p.Stop()
		return nil, err
	}
	p.log.Info("embedded postgres ready", "socket", p.socket, "pid", p.Pid(), "wal_archive", p.archive.Dir)
	return p, nil
}

// launch starts the postmaster on the prepared arguments (after stopping a
// postmaster a killed panel left behind) and waits until it accepts
// connections; on failure nothing is left running.
func (p *Postgres) launch(ctx context.Context) error {
	p.adoptOrphan(p.data)
	cmd := exec.Command(p.bin, p.args...)
	cmd.Dir = p.cfg.Dir
	cmd.Env = []string{"LANG=C.UTF-8", "LC_ALL=C.UTF-8"}
	out := &lineLogger{log: p.log, keep: p.onLine}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.who.cred}
	// SIGINT is Postgres's fast shutdown: clean, without waiting for clients.
	if err := start(cmd, syscall.SIGINT); err != nil {
		return fmt.Errorf("embedded: start postgres: %w", err)
	}
	p.proc.started(cmd)
	limit := p.readyWithin
	if limit == 0 {
		limit = 60 * time.Second
	}
	if err := p.waitReady(ctx, limit); err != nil {
		p.proc.terminate(syscall.SIGINT, 30*time.Second)
		return err
	}
	return nil
}

// reap implements service: a postmaster that died (SIGKILL, OOM) leaves its
// backends, checkpointer and logger behind for a moment, and a new one
// refuses to start while they hold the old shared memory. They notice the
// postmaster's death and exit on their own; what is still there after a
// few seconds (a stopped process) is killed: the directory's lock is ours,
// so nobody else owns them.
func (p *Postgres) reap(ctx context.Context) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if len(p.Processes()) == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, pid := range p.Processes() {
		p.log.Warn("killing a process the dead postmaster left behind", "pid", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end) && len(p.Processes()) > 0; {
		time.Sleep(50 * time.Millisecond)
	}
}

// Processes lists every process of the cluster, the postmaster and each of
// its children (backends, checkpointer, logger, …): those whose working
// directory is the cluster's data directory, where Postgres changes to at
// start. The load test's chaos stops and kills them all.
func (p *Postgres) Processes() []int {
	return processesIn(p.data)
}

// Supervise restarts the cluster whenever its postmaster dies, until Stop
// (see Supervision). The pools reconnect by themselves: the socket and the
// credentials stay the same, and crash recovery keeps every committed claim.
func (p *Postgres) Supervise(s Supervision) { p.proc.supervise(p, s) }

// State is the supervised state (StateRunning, …; "" when not supervised).
func (p *Postgres) State() string { return p.proc.state() }

func loadOrCreateCredentials(path string) (pgCredentials, error) {
	var c pgCredentials
	b, err := os.ReadFile(path)
	if err == nil {
		if err := json.Unmarshal(b, &c); err != nil || c.Super == "" || c.Owner == "" || c.App == "" {
			return c, fmt.Errorf("embedded: %s is damaged; restore it from a backup (the cluster's role passwords are in it)", path)
		}
		return c, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return c, fmt.Errorf("embedded: read %s: %w", path, err)
	}
	c = pgCredentials{Super: randomSecret(), Owner: randomSecret(), App: randomSecret()}
	b, _ = json.Marshal(c)
	if err := writeFileAtomic(path, b, 0o600); err != nil {
		return c, err
	}
	return c, nil
}

func randomSecret() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func writeFileAtomic(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("embedded: write %s: %w", path, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("embedded: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("embedded: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("embedded: write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("embedded: write %s: %w", path, err)
	}
	return nil
}

func (p *Postgres) initdb(ctx context.Context, initdb, data string, who runAs) error {
	// initdb wants an empty directory it owns; the password file must be
	// readable by the database user and is removed right after.
	tmp, err := os.MkdirTemp(p.cfg.Dir, "initdb-")
	if err != nil {
		return fmt.Errorf("embedded: %w", err)
	}
	defer os.RemoveAll(tmp)
	pw := filepath.Join(tmp, "pw")
	if err := os.WriteFile(pw, []byte(p.creds.Super+"\n"), 0o600); err != nil {
		return fmt.Errorf("embedded: %w", err)
	}
	_ = os.RemoveAll(data)
	if err := os.MkdirAll(data, 0o700); err != nil {
		return fmt.Errorf("embedded: %w", err)
	}
	if who.cred != nil {
		for _, path := range []string{tmp, pw, data} {
			if err := os.Chown(path, int(who.uid), int(who.gid)); err != nil {
				return fmt.Errorf("embedded: %w", err)
			}
		}
	}
	args := []string{"-D", data, "-U", SuperRole, "--pwfile=" + pw,
		"--auth-local=scram-sha-256", "--auth-host=reject",
		"-E", "UTF8", "--locale=C.UTF-8", "--no-instructions"}
	if p.cfg.NoSync {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, initdb, args...)
	cmd.Env = []string{"LANG=C.UTF-8", "LC_ALL=C.UTF-8", "PATH=" + os.Getenv("PATH")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: who.cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		_ = os.RemoveAll(data)
		return fmt.Errorf("embedded: initdb failed: %v: %s", err, lastLines(string(out), 5))
	}
	p.log.Info("embedded postgres initialised", "dir", data, "user", who.name)
	return nil
}

// adoptOrphan stops a postmaster that a killed panel left running on this
// data directory (we hold the directory's lock, so nobody else owns it), and
// removes lock files whose pid now belongs to an unrelated process.
func (p *Postgres) adoptOrphan(data string) {
	pidFile := filepath.Join(data, "postmaster.pid")
	pid := readPidFile(pidFile)
	if pid == 0 {
		return
	}
	if processIs(pid, "postgres") {
		p.log.Warn("stopping the postgres a previous panel left running", "pid", pid)
		_ = stopOrphan(pid, syscall.SIGINT, 30*time.Second)
		return
	}
	_ = os.Remove(pidFile)
	_ = os.Remove(filepath.Join(p.socket, fmt.Sprintf(".s.PGSQL.%d.lock", pgPort)))
}

func (p *Postgres) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last error
	_, exited, _ := p.proc.current()
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			_, _, waitErr := p.proc.current()
			return fmt.Errorf("embedded: postgres exited during start (%v); its log is under %s", waitErr, filepath.Join(p.cfg.Dir, "data", "log"))
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		c, err := pgx.Connect(ctx, p.url(SuperRole, p.creds.Super, "postgres"))
		if err == nil {
			c.Close(ctx)
			return nil
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("embedded: postgres did not accept connections within %s: %v", limit, last)
}

// bootstrap creates the owner and application roles and the database, and
// keeps the roles' attributes right on every start.
func (p *Postgres) bootstrap(ctx context.Context) error {
	c, err := pgx.Connect(ctx, p.url(SuperRole, p.creds.Super, "postgres"))
	if err != nil {
		return fmt.Errorf("embedded: connect: %w", err)
	}
	defer c.Close(ctx)
	for _, r := range []struct{ name, pw, attrs string }{
		{OwnerRole, p.creds.Owner, "LOGIN NOSUPERUSER NOCREATEROLE NOBYPASSRLS CREATEDB"},
		{AppRole, p.creds.App, "LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB NOBYPASSRLS NOINHERIT"},
	} {
		var exists bool
		if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", r.name).Scan(&exists); err != nil {
			return fmt.Errorf("embedded: check role: %w", err)
		}
		verb := "ALTER"
		if !exists {
			verb = "CREATE"
		}
		// Passwords are hex, so quoting them inline is safe.
		if _, err := c.Exec(ctx, fmt.Sprintf("%s ROLE %s %s PASSWORD '%s'", verb, r.name, r.attrs, r.pw)); err != nil {
			return fmt.Errorf("embedded: %s role %s: %w", strings.ToLower(verb), r.name, err)
		}
	}
	var exists bool
	if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", Database).Scan(&exists); err != nil {
		return fmt.Errorf("embedded: check database: %w", err)
	}
	if !exists {
		if _, err := c.Exec(ctx, "CREATE DATABASE "+Database+" OWNER "+OwnerRole); err != nil {
			return fmt.Errorf("embedded: create database: %w", err)
		}
	}
	return PrepareDatabase(ctx, p.url(SuperRole, p.creds.Super, Database), OwnerRole, AppRole)
}

// PrepareDatabase, run as a superuser in the target database, hands the
// public schema to the owner and lets the application role use it, and
// nothing more: table privileges come from the migrations.
func PrepareDatabase(ctx context.Context, superURL, owner, app string) error {
	c, err := pgx.Connect(ctx, superURL)
	if err != nil {
		return fmt.Errorf("embedded: connect: %w", err)
	}
	defer c.Close(ctx)
	id := pgx.Identifier{owner}.Sanitize()
	appID := pgx.Identifier{app}.Sanitize()
	var dbName string
	if err := c.QueryRow(ctx, "SELECT current_database()").Scan(&dbName); err != nil {
		return fmt.Errorf("embedded: %w", err)
	}
	for _, q := range []string{
		"ALTER SCHEMA public OWNER TO " + id,
		"REVOKE ALL ON DATABASE " + pgx.Identifier{dbName}.Sanitize() + " FROM PUBLIC",
		"GRANT CONNECT, TEMPORARY ON DATABASE " + pgx.Identifier{dbName}.Sanitize() + " TO " + appID,
		"REVOKE CREATE ON SCHEMA public FROM PUBLIC",
		"GRANT USAGE ON SCHEMA public TO " + appID,
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			return fmt.Errorf("embedded: prepare database: %w", err)
		}
	}
	return nil
}

func (p *Postgres) url(user, pw, db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(user, pw), Path: "/" + db}
	q := url.Values{}
	q.Set("host", p.socket)
	q.Set("port", strconv.Itoa(pgPort))
	u.RawQuery = q.Encode()
	return u.String()
}

// OwnerURL connects as the owner role to the panel's database (migrations).
func (p *Postgres) OwnerURL() string { return p.url(OwnerRole, p.creds.Owner, Database) }

// AppURL connects as the application role to the panel's database.
func (p *Postgres) AppURL() string { return p.url(AppRole, p.creds.App, Database) }

// SuperURL connects as the cluster's superuser to database db (tests and
// one-off maintenance only; the panel never runs as it).
func (p *Postgres) SuperURL(db string) string { return p.url(SuperRole, p.creds.Super, db) }

// URLFor returns a URL for role (OwnerRole or AppRole) in database db.
func (p *Postgres) URLFor(role, db string) string {
	switch role {
	case OwnerRole:
		return p.url(OwnerRole, p.creds.Owner, db)
	case AppRole:
		return p.url(AppRole, p.creds.App, db)
	}
	return p.url(SuperRole, p.creds.Super, db)
}

// WALArchive is where the cluster archives its WAL (Dir empty: nowhere).
func (p *Postgres) WALArchive() WALArchive { return p.archive }

// Pid returns the current postmaster's pid (0 when none was started).
func (p *Postgres) Pid() int { return p.proc.pid() }

// LogDir is where the cluster writes its own log.
func (p *Postgres) LogDir() string { return filepath.Join(p.cfg.Dir, "data", "log") }

// Stop shuts the cluster down (fast shutdown), waiting up to 30 s.
func (p *Postgres) Stop() {
	if p == nil {
		return
	}
	p.proc.halt()
	if p.proc.terminate(syscall.SIGINT, 30*time.Second) {
		p.log.Info("embedded postgres stopped")
	}
}

// lineLogger forwards a child's output to slog line by line.
type lineLogger struct {
	log   *slog.Logger
	level slog.Level
	buf   []byte
	keep  func(string)
}

func (l *lineLogger) Write(b []byte) (int, error) {
	l.buf = append(l.buf, b...)
	for {
		i := strings.IndexByte(string(l.buf), '\n')
		if i < 0 {
			break
		}
		line := strings.TrimSpace(string(l.buf[:i]))
		l.buf = l.buf[i+1:]
		if line != "" {
			l.log.Log(context.Background(), l.level, line)
			if l.keep != nil {
				l.keep(line)
			}
		}
	}
	if len(l.buf) > 64<<10 {
		l.buf = l.buf[:0]
	}
	return len(b), nil
}

var _ io.Writer = (*lineLogger)(nil)

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
