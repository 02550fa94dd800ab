// Package testenv gives tests real services: each test gets its own Postgres
// database (created from a migrated template and dropped afterwards) and its
// own Redis database, served by the same embedded launchers the panel uses,
// started once per test binary. Set FLEET_TEST_DATABASE_URL (a superuser URL)
// or FLEET_TEST_REDIS_URL to use servers that are already running instead.
// Nothing here skips a test: a service that cannot start fails it.
package testenv

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/migrations"
)

const redisDatabases = 512

var (
	baseDir     string
	baseDirOnce sync.Once

	pgOnce    sync.Once
	pgErr     error
	pgServer  *embedded.Postgres
	superURL  func(db string) string
	roleURL   func(role, db string) string
	template  string
	dbCounter atomic.Int64
	redisOnce sync.Once
	redisErr  error
	redisSrv  *embedded.Redis
	redisURL  func(db int) string
	redisNext atomic.Int64
	binOnce   sync.Once
	binPath   string
	binErr    error
)

// Main runs the package's tests, fails the binary if a known secret reached
// any captured log (see Secret), and then stops whatever services they
// started.
// Use it from TestMain: func TestMain(m *testing.M) { testenv.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	if !checkSecrets() && code == 0 {
		code = 1
	}
	Shutdown()
	os.Exit(code)
}

// Shutdown stops the services this binary started and removes their files.
func Shutdown() {
	if pgServer != nil && template != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if c, err := pgx.Connect(ctx, superURL("postgres")); err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+template)
			c.Close(ctx)
		}
		cancel()
	}
	pgServer.Stop()
	redisSrv.Stop()
	if baseDir != "" {
		_ = os.RemoveAll(baseDir)
	}
}

// Dir returns a directory shared by this test binary's services, reachable by
// the postgres system user (t.TempDir is private to root).
func Dir(t testing.TB) string {
	baseDirOnce.Do(func() {
		d, err := os.MkdirTemp("", "fleettest-")
		if err == nil {
			err = os.Chmod(d, 0o755)
		}
		if err != nil {
			panic(fmt.Sprintf("testenv: %v", err))
		}
		baseDir = d
	})
	return baseDir
}

// SharedTempDir is t.TempDir for a directory another system user must reach
// below: a new directory under Dir that others may enter but not list
// (0711, root's), whose parents every user may enter, removed when the test
// ends. Chromium runs as an unprivileged user when the tests run as root
// (app/browser), and a persistent profile under a t.TempDir is out of its
// reach: t.TempDir's parent is private to root.
func SharedTempDir(t testing.TB) string {
	d, err := os.MkdirTemp(Dir(t), "t-")
	if err == nil {
		err = os.Chmod(d, 0o711)
	}
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

func startPostgres(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if ext := os.Getenv("FLEET_TEST_DATABASE_URL"); ext != "" {
		pgErr = useExternalPostgres(ctx, ext)
	} else {
		pgServer, pgErr = embedded.StartPostgres(ctx, embedded.PostgresConfig{
			Dir: filepath.Join(Dir(t), "postgres"), NoSync: true,
		})
		if pgErr == nil {
			superURL = pgServer.SuperURL
			roleURL = pgServer.URLFor
		}
	}
	if pgErr != nil {
		return
	}
	template = fmt.Sprintf("fleet_template_%d", os.Getpid())
	pgErr = createDatabase(ctx, template)
	if pgErr != nil {
		return
	}
	pool, err := db.Open(ctx, roleURL(embedded.OwnerRole, template), 4)
	if err != nil {
		pgErr = err
		return
	}
	defer pool.Close()
	pgErr = db.Migrate(ctx, pool, migrations.FS, embedded.AppRole, "testenv", slog.New(slog.DiscardHandler))
}

// useExternalPostgres prepares the owner and application roles on a server
// reached with a superuser URL. Their passwords are fixed test values:
// concurrent test binaries set the same ones, so they never race.
func useExternalPostgres(ctx context.Context, ext string) error {
	c, err := pgx.Connect(ctx, ext)
	if err != nil {
		return fmt.Errorf("testenv: FLEET_TEST_DATABASE_URL: %w", err)
	}
	defer c.Close(ctx)
	for _, r := range []struct{ name, attrs string }{
		{embedded.OwnerRole, "LOGIN NOSUPERUSER NOBYPASSRLS CREATEDB"},
		{embedded.AppRole, "LOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT"},
	} {
		_, err := c.Exec(ctx, fmt.Sprintf(`DO $$ BEGIN
			IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '%[1]s') THEN
				CREATE ROLE %[1]s %[2]s PASSWORD 'fleet-test-%[1]s';
			END IF; END $$`, r.name, r.attrs))
		if err != nil && !strings.Contains(err.Error(), "already exists") {
			return fmt.Errorf("testenv: create role %s: %w", r.name, err)
		}
	}
	u, err := url.Parse(ext)
	if err != nil {
		return fmt.Errorf("testenv: FLEET_TEST_DATABASE_URL: %w", err)
	}
	superURL = func(db string) string { v := *u; v.Path = "/" + db; return v.String() }
	roleURL = func(role, db string) string {
		v := *u
		v.Path = "/" + db
		v.User = url.UserPassword(role, "fleet-test-"+role)
		if role != embedded.OwnerRole && role != embedded.AppRole {
			v.User = u.User
		}
		return v.String()
	}
	return nil
}

func createDatabase(ctx context.Context, name string) error {
	c, err := pgx.Connect(ctx, superURL("postgres"))
	if err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name+" OWNER "+embedded.OwnerRole); err != nil {
		return fmt.Errorf("testenv: create database %s: %w", name, err)
	}
	return embedded.PrepareDatabase(ctx, superURL(name), embedded.OwnerRole, embedded.AppRole)
}

// Database is one test's private, migrated database.
type Database struct {
	Name string
	// OwnerURL connects as the owner (the role that runs migrations).
	OwnerURL string
	// AppURL connects as the application role, under row-level security.
	AppURL string
	// SuperURL connects as a superuser, for tests that tamper behind the app's back.
	SuperURL string
	// Owner and App are pools for the two roles, closed after the test.
	Owner, App *pgxpool.Pool
}

// DB returns a fresh migrated database for t, dropped when t ends.
func DB(t testing.TB) *Database {
	t.Helper()
	return newDB(t, "")
}

// EmptyDB returns a fresh database with no migrations applied, for tests of
// the migrator itself.
func EmptyDB(t testing.TB) *Database {
	t.Helper()
	return newDB(t, "template0")
}

// newDB copies from, or the migrated template when from is empty.
func newDB(t testing.TB, from string) *Database {
	t.Helper()
	pgOnce.Do(func() { startPostgres(t) })
	if pgErr != nil {
		t.Fatalf("testenv: postgres: %v", pgErr)
	}
	if from == "" {
		from = template
	}
	ctx := context.Background()
	name := fmt.Sprintf("t_%d_%d", os.Getpid(), dbCounter.Add(1))
	c, err := pgx.Connect(ctx, superURL("postgres"))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	_, err = c.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+from+" OWNER "+embedded.OwnerRole)
	c.Close(ctx)
	if err != nil {
		t.Fatalf("testenv: create database: %v", err)
	}
	if err := embedded.PrepareDatabase(ctx, superURL(name), embedded.OwnerRole, embedded.AppRole); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	d := &Database{Name: name, OwnerURL: roleURL(embedded.OwnerRole, name),
		AppURL: roleURL(embedded.AppRole, name), SuperURL: superURL(name)}
	if d.Owner, err = db.Open(ctx, d.OwnerURL, 8); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if d.App, err = db.Open(ctx, d.AppURL, 32); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		d.Owner.Close()
		d.App.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, superURL("postgres")); err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(ctx)
		}
	})
	return d
}

// PostgresServer returns the embedded cluster this binary started (nil with an
// external server), for tests that need its log directory or pid.
func PostgresServer(t testing.TB) *embedded.Postgres {
	pgOnce.Do(func() { startPostgres(t) })
	if pgErr != nil {
		t.Fatalf("testenv: postgres: %v", pgErr)
	}
	return pgServer
}

// RedisURL returns the URL of a Redis database of t's own, flushed when t ends.
func RedisURL(t testing.TB) string {
	t.Helper()
	redisOnce.Do(func() {
		if ext := os.Getenv("FLEET_TEST_REDIS_URL"); ext != "" {
			u, err := url.Parse(ext)
			if err != nil {
				redisErr = fmt.Errorf("testenv: FLEET_TEST_REDIS_URL: %w", err)
				return
			}
			redisURL = func(db int) string {
				v := *u
				q := v.Query()
				q.Set("db", fmt.Sprint(db%16))
				v.RawQuery = q.Encode()
				return v.String()
			}
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		redisSrv, redisErr = embedded.StartRedis(ctx, embedded.RedisConfig{
			Dir: filepath.Join(Dir(t), "redis"), Databases: redisDatabases,
		})
		if redisErr == nil {
			redisURL = redisSrv.URL
		}
	})
	if redisErr != nil {
		t.Fatalf("testenv: redis: %v", redisErr)
	}
	n := int(redisNext.Add(1))
	if os.Getenv("FLEET_TEST_REDIS_URL") == "" && n >= redisDatabases {
		t.Fatalf("testenv: more than %d Redis databases requested by one test binary", redisDatabases-1)
	}
	u := redisURL(n)
	t.Cleanup(func() {
		opts, err := redis.ParseURL(u)
		if err != nil {
			return
		}
		c := redis.NewClient(opts)
		_ = c.FlushDB(context.Background()).Err()
		_ = c.Close()
	})
	return u
}

// Redis returns a client for a Redis database of t's own.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(RedisURL(t))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Binary returns the path of the fleetwright binary for end-to-end tests:
// FLEET_TEST_BIN when `make test` built it once, otherwise one build per test
// binary (without -race: the end-to-end tests exercise the product, not the
// race detector, and a race build is several times slower to start).
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("FLEET_TEST_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("testenv: FLEET_TEST_BIN=%s: %v (run `make build` or unset it)", p, err)
		}
		return p
	}
	binOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
		binPath = filepath.Join(Dir(t), "fleetwright")
		cmd := exec.Command("go", "build", "-o", binPath, ".")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("testenv: go build: %v: %s", err, out)
		}
	})
	if binErr != nil {
		t.Fatalf("%v", binErr)
	}
	return binPath
}

// MainNoLeaks is Main for a package that also checks that no goroutine
// outlived its tests (goleak, with opts): the secret scan runs there too.
func MainNoLeaks(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	if !checkSecrets() && code == 0 {
		code = 1
	}
	Shutdown()
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
