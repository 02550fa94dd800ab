// Package panel is the control-plane role: it starts (or connects to)
// Postgres and Redis, applies migrations, runs River and serves the console,
// health, readiness and metrics, and stops all of it in order.
package panel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/egress"
	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/app/loop"
	"github.com/fleetwright/fleetwright/app/server"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/migrations"
	"github.com/fleetwright/fleetwright/modules/account"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/cell"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/crawl"
	"github.com/fleetwright/fleetwright/modules/durability"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/fleet/gateway"
	"github.com/fleetwright/fleetwright/modules/health"
	"github.com/fleetwright/fleetwright/modules/limit"
	"github.com/fleetwright/fleetwright/modules/notify"
	"github.com/fleetwright/fleetwright/modules/retention"
	"github.com/fleetwright/fleetwright/modules/schedule"
)

// Config is the panel's configuration.
type Config struct {
	Listen  string
	DataDir string
	Version string
	// DatabaseURL is the owner role's URL (it runs migrations). Empty starts
	// the embedded cluster under DataDir.
	DatabaseURL string
	// DatabaseAppURL is the application role's URL, used for everything else.
	DatabaseAppURL string
	RedisURL       string
	// RedisSentinels and RedisMaster name the default cell's Redis as a
	// master watched by Sentinels (instead of RedisURL).
	RedisSentinels []string
	RedisMaster    string
	// DatabaseReplication is "none" (one Postgres, the default) or "sync":
	// the cluster must promise that every commit is on a synchronous standby
	// too, checked at start and on every health interval; while it does not,
	// new leases and actions stop (docs/DEPLOY.md, "High availability").
	DatabaseReplication string
	// RedisPasswordFile holds the password of --redis-url's server (a
	// compose or systemd secret), so it is in no URL, environment or
	// process listing.
	RedisPasswordFile string
	DBMaxConns        int
	PGMaxConnections  int
	// WALArchive, for the embedded cluster, is the directory its WAL is
	// archived into (point-in-time recovery); WALArchiveTimeout bounds how
	// long a segment stays unarchived.
	WALArchive        string
	WALArchiveTimeout time.Duration
	ShutdownTimeout   time.Duration
	// Drain is how long a stopping panel keeps serving with /readyz failing,
	// so its load balancer moves traffic away before the listener closes.
	Drain time.Duration
	// SessionIdle and SessionMax are the console's session timeouts.
	SessionIdle time.Duration
	SessionMax  time.Duration
	// AuditSealInterval is how often the audit chains are sealed and anchored.
	AuditSealInterval time.Duration
	// AuditVerifyCron is when the panel verifies the audit log itself (UTC).
	AuditVerifyCron string
	// RetentionCron is when the panel prunes data past retention (UTC).
	RetentionCron string
	// HealthInterval is how often the health sweep runs; HungAfter holds
	// the per-kind hang thresholds ("watcher=2m,actor=5m,*=10m").
	HealthInterval time.Duration
	HungAfter      string
	// Notification channels: the mail server, what webhooks may reach
	// although special-purpose, and the console's public URL for links.
	SMTPAddr, SMTPFrom, SMTPUsername string
	NotifyAllow, NotifyPorts         []string
	ConsoleURL                       string
	// SecretKeyFile holds the key that seals platform credentials at rest;
	// empty means DataDir/secret.key (created on first start). The
	// FLEET_SECRET_KEY variable, when set, wins over any file.
	SecretKeyFile string
	// TrustedProxies lists the proxies (addresses or CIDR prefixes, comma
	// separated) whose forwarded client address and scheme are believed.
	// Behind Caddy, the agent gateway hands out credentials only when Caddy
	// says the agent's own leg was https.
	TrustedProxies string
	// MetricsListen is the address /metrics is served on, apart from the
	// console (the figures name tenants, agents and model spend); empty
	// serves no metrics listener. Off loopback it needs MetricsTokenFile.
	MetricsListen string
	// MetricsTokenFile holds a bearer token every /metrics request must
	// carry; with it /metrics is also served on the console's address.
	MetricsTokenFile string
	// Ready, when set, receives the bound address once the panel serves.
	Ready func(addr string)
}

// Register declares the panel's own flags (--listen and --data-dir are shared
// by several roles and declared by main).
func (c *Config) Register(s *config.Set) {
	panel := config.Roles("panel")
	s.String(&c.DatabaseURL, "database-url", "FLEET_DATABASE_URL", "",
		"Postgres URL of the role that owns the schema and runs migrations; empty runs an embedded cluster under --data-dir", panel)
	s.String(&c.DatabaseAppURL, "database-app-url", "FLEET_DATABASE_APP_URL", "",
		"Postgres URL of the application role (neither owner, superuser nor BYPASSRLS); required with --database-url", panel)
	s.String(&c.RedisURL, "redis-url", "FLEET_REDIS_URL", "",
		"Redis URL of the default cell; empty runs an embedded redis-server under --data-dir", panel)
	s.List(&c.RedisSentinels, "redis-sentinels", "FLEET_REDIS_SENTINELS",
		"the default cell's Redis Sentinels (host:port, comma-separated), with --redis-master; instead of --redis-url", panel)
	s.String(&c.RedisMaster, "redis-master", "FLEET_REDIS_MASTER", "",
		"the master name the --redis-sentinels watch (their `sentinel monitor` name)", panel)
	s.Enum(&c.DatabaseReplication, "database-replication", "FLEET_DATABASE_REPLICATION", "none", []string{"none", "sync"},
		"none: one Postgres; sync: a cluster (Patroni in synchronous_mode) that must keep a synchronous standby — without one, new leases and actions stop and a critical alarm is raised", panel)
	s.String(&c.RedisPasswordFile, "redis-password-file", "FLEET_REDIS_PASSWORD_FILE", "",
		"file holding the password of --redis-url's server (a compose or systemd secret); it then stays out of URLs and the environment", panel)
	s.Int(&c.DBMaxConns, "db-max-conns", "FLEET_DB_MAX_CONNS", 64,
		"size of the panel's Postgres pool (pgx's own default is 4 on two cores, far too small for claims)", panel)
	s.Int(&c.PGMaxConnections, "pg-max-connections", "FLEET_PG_MAX_CONNECTIONS", 300,
		"max_connections of the embedded cluster (at least 200)", panel)
	s.String(&c.WALArchive, "wal-archive", "FLEET_WAL_ARCHIVE", "",
		"archive the embedded cluster's WAL into this directory, for point-in-time recovery (fleetwright restore --wal-archive --until); empty: no archive", panel)
	s.Duration(&c.WALArchiveTimeout, "wal-archive-timeout", "FLEET_WAL_ARCHIVE_TIMEOUT", embedded.DefaultArchiveTimeout,
		"with --wal-archive, the longest a WAL segment stays unarchived (archive_timeout): what a recovery can lose at most", panel)
	s.Duration(&c.ShutdownTimeout, "shutdown-timeout", "FLEET_SHUTDOWN_TIMEOUT", 30*time.Second,
		"how long a graceful stop may take before connections are cut", panel)
	s.Duration(&c.Drain, "drain", "FLEET_DRAIN", 5*time.Second,
		"on SIGTERM, how long the panel keeps serving with /readyz failing before it closes (longer than the load balancer's health interval)", panel)
	s.Duration(&c.SessionIdle, "session-idle", "FLEET_SESSION_IDLE", 30*time.Minute,
		"a console session unused this long ends", panel)
	s.Duration(&c.SessionMax, "session-max", "FLEET_SESSION_MAX", 12*time.Hour,
		"a console session ends this long after sign-in, used or not", panel)
	s.Duration(&c.AuditSealInterval, "audit-seal-interval", "FLEET_AUDIT_SEAL_INTERVAL", 10*time.Second,
		"how often new audit entries are sealed into their hash chains and the heads anchored under --data-dir/audit", panel)
	s.String(&c.TrustedProxies, "trusted-proxies", "FLEET_TRUSTED_PROXIES", "",
		"comma-separated addresses or CIDR prefixes of reverse proxies whose X-Real-IP, X-Forwarded-For and X-Forwarded-Proto are believed (e.g. 127.0.0.1,::1 behind Caddy on this host); empty: none", panel)
	s.String(&c.AuditVerifyCron, "audit-verify-cron", "FLEET_AUDIT_VERIFY_CRON", "*/10 * * * *",
		"when the panel verifies the audit log itself (cron, UTC); the result is the overview's \"audit clean\" figure", panel)
	s.String(&c.RetentionCron, "retention-cron", "FLEET_RETENTION_CRON", "40 3 * * *",
		"when the panel deletes data past each tenant's retention (cron, UTC; docs/OPERATIONS.md, Retention)", panel)
	s.Duration(&c.HealthInterval, "health-interval", "FLEET_HEALTH_INTERVAL", 15*time.Second,
		"how often the leader looks for hung and crash-looping workers, stuck queues and failing cells", panel)
	s.String(&c.HungAfter, "hung-after", "FLEET_HUNG_AFTER", "",
		"hang thresholds per worker kind over the defaults (watcher=2m, actor=5m, http_actor=5m, crawler=10m, assistant=15m, *=10m), like watcher=3m,*=15m", panel)
	s.String(&c.SMTPAddr, "smtp-addr", "FLEET_SMTP_ADDR", "",
		"mail server (host:port) for e-mail notification channels; its password only in FLEET_SMTP_PASSWORD", panel)
	s.String(&c.SMTPFrom, "smtp-from", "FLEET_SMTP_FROM", "fleetwright@localhost", "sender address of alarm e-mails", panel)
	s.String(&c.SMTPUsername, "smtp-username", "FLEET_SMTP_USERNAME", "", "user for the mail server (PLAIN auth; empty: none)", panel)
	s.List(&c.NotifyAllow, "notify-allow", "FLEET_NOTIFY_ALLOW",
		"admit this CIDR range or address for webhook channels although it is special-purpose (an internal alert receiver); repeatable or comma-separated", panel)
	s.List(&c.NotifyPorts, "notify-ports", "FLEET_NOTIFY_PORTS", "ports webhook channels may reach (default 80,443)", panel)
	s.String(&c.ConsoleURL, "console-url", "FLEET_CONSOLE_URL", "",
		"the console's public URL (https://panel.example.com), used to make links in notifications absolute", panel)
	s.String(&c.MetricsListen, "metrics-listen", "FLEET_METRICS_LISTEN", DefaultMetricsListen,
		"address the Prometheus metrics are served on (/metrics only), apart from the console; off loopback it needs --metrics-token-file; empty: no metrics listener", config.Roles("panel", "demo"))
	s.String(&c.MetricsTokenFile, "metrics-token-file", "FLEET_METRICS_TOKEN_FILE", "",
		"file holding a bearer token (16+ characters) every /metrics request must carry (Authorization: Bearer …); with it /metrics is also served on --listen", config.Roles("panel", "demo"))
	s.String(&c.SecretKeyFile, "secret-key-file", "FLEET_SECRET_KEY_FILE", "",
		"file with the 32-byte key sealing platform credentials (empty: <data-dir>/secret.key, created on first start; FLEET_SECRET_KEY wins)", panel)
}

// Validate checks the combination of settings before anything starts.
func (c *Config) Validate() error {
	if c.DatabaseURL != "" && c.DatabaseAppURL == "" {
		return errors.New("panel: --database-url needs --database-app-url (FLEET_DATABASE_APP_URL): the panel runs as an application role that is neither owner, superuser nor BYPASSRLS")
	}
	if c.DatabaseURL == "" && c.DatabaseAppURL != "" {
		return errors.New("panel: --database-app-url is only used with --database-url (FLEET_DATABASE_URL)")
	}
	if (len(c.RedisSentinels) > 0) != (c.RedisMaster != "") {
		return errors.New("panel: --redis-sentinels (FLEET_REDIS_SENTINELS) and --redis-master (FLEET_REDIS_MASTER) go together: the Sentinels' addresses and the master name they watch")
	}
	if len(c.RedisSentinels) > 0 && c.RedisURL != "" {
		return errors.New("panel: give the default cell's Redis either as --redis-url or as --redis-sentinels with --redis-master, not both")
	}
	if c.WALArchive != "" && c.DatabaseURL != "" {
		return errors.New("panel: --wal-archive archives the embedded cluster's WAL; with --database-url archive the external cluster with its own tools (docs/DEPLOY.md, \"Point-in-time recovery\")")
	}
	if c.WALArchive != "" && (c.WALArchiveTimeout < time.Second || c.WALArchiveTimeout > 24*time.Hour) {
		return fmt.Errorf("panel: --wal-archive-timeout must be between 1s and 24h, got %s", c.WALArchiveTimeout)
	}
	if c.DatabaseReplication == "sync" && c.DatabaseURL == "" {
		return errors.New("panel: --database-replication=sync needs --database-url: the embedded Postgres is one node (leave it at none)")
	}
	if c.Drain < 0 {
		return fmt.Errorf("panel: --drain must not be negative, got %s", c.Drain)
	}
	if c.PGMaxConnections < 200 {
		return fmt.Errorf("panel: --pg-max-connections must be at least 200, got %d", c.PGMaxConnections)
	}
	if c.SessionIdle < time.Minute || c.SessionMax < c.SessionIdle {
		return fmt.Errorf("panel: --session-idle must be at least 1m and --session-max at least --session-idle (got %s and %s)", c.SessionIdle, c.SessionMax)
	}
	if c.AuditSealInterval < time.Second {
		return fmt.Errorf("panel: --audit-seal-interval must be at least 1s, got %s", c.AuditSealInterval)
	}
	if _, err := server.ParseTrustedProxies(c.TrustedProxies); err != nil {
		return fmt.Errorf("panel: --trusted-proxies (FLEET_TRUSTED_PROXIES): %w", err)
	}
	if c.AuditVerifyCron == "" {
		c.AuditVerifyCron = "*/10 * * * *"
	}
	if _, err := schedule.ParseCron(c.AuditVerifyCron, "UTC"); err != nil {
		return fmt.Errorf("panel: --audit-verify-cron: %w", err)
	}
	if c.RetentionCron == "" {
		c.RetentionCron = "40 3 * * *"
	}
	if _, err := schedule.ParseCron(c.RetentionCron, "UTC"); err != nil {
		return fmt.Errorf("panel: --retention-cron: %w", err)
	}
	if c.HealthInterval == 0 {
		c.HealthInterval = 15 * time.Second
	}
	if c.HealthInterval < time.Second {
		return fmt.Errorf("panel: --health-interval must be at least 1s, got %s", c.HealthInterval)
	}
	if _, err := health.ParseHungAfter(c.HungAfter); err != nil {
		return fmt.Errorf("panel: --hung-after: %w", err)
	}
	if c.MetricsListen != "" {
		host, _, err := net.SplitHostPort(c.MetricsListen)
		if err != nil {
			return fmt.Errorf("panel: --metrics-listen (FLEET_METRICS_LISTEN) %q: host:port, like %s", c.MetricsListen, DefaultMetricsListen)
		}
		if !loopbackHost(host) && c.MetricsTokenFile == "" {
			return fmt.Errorf("panel: --metrics-listen %s is not a loopback address: the metrics name tenants, agents and spend, so set --metrics-token-file (FLEET_METRICS_TOKEN_FILE) too, or listen on 127.0.0.1", c.MetricsListen)
		}
	}
	if c.DBMaxConns < 4 {
		return fmt.Errorf("panel: --db-max-conns must be at least 4, got %d", c.DBMaxConns)
	}
	return nil
}

// DefaultMetricsListen is where a panel serves /metrics unless told
// otherwise: loopback, for a scraper on the same host (or an SSH tunnel).
const DefaultMetricsListen = "127.0.0.1:9464"

// loopbackHost reports whether a listen host is loopback only.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// metricsToken reads --metrics-token-file.
func metricsToken(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("panel: --metrics-token-file (FLEET_METRICS_TOKEN_FILE): %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("panel: --metrics-token-file (FLEET_METRICS_TOKEN_FILE): %s must hold one token of at least 16 characters without spaces (e.g. openssl rand -hex 32)", file)
	}
	logging.RegisterSecret(tok)
	return tok, nil
}

// Panel is a running panel.
type Panel struct {
	cfg    Config
	log    *slog.Logger
	lock   *embedded.Lock
	pg     *embedded.Postgres
	rds    *embedded.Redis
	DB     *pgxpool.Pool
	Redis  *redis.Client
	River  *river.Client[pgx.Tx]
	Health *server.Health
	Reg    *prometheus.Registry
	Router chi.Router
	// ReplicaID names this process among the panel replicas sharing the database.
	ReplicaID string
	// InstallationID identifies this installation (its database) to agents.
	InstallationID string
	Fleet          *fleet.Store
	Gateway        *gateway.Gateway
	// Claims is the claim engine; the gateway attaches its Offerer and
	// Lookuper (Claims.SetOfferer, Claims.SetLookuper).
	Claims *claim.Engine
	// Cells runs the claim engine's cells (Redis dedupe, streams, offers).
	Cells *cell.Manager
	// Schedules runs recurring work; modules register their kinds on it
	// (Schedules.Register) before or after Start.
	Schedules *schedule.Scheduler
	// Crawl is the crawler's jobs and runs; CrawlRunner executes runs.
	Crawl       *crawl.Service
	CrawlRunner *crawl.Runner
	// Durability is the cluster's durability check (nil unless
	// --database-replication=sync); durPool is its own small pool.
	Durability *durability.Watcher
	durPool    *pgxpool.Pool
	srv        *server.Server
	// embedded counts the supervised embedded services' restarts.
	embedded *embedded.Metrics
	// supervised names the embedded services this panel supervises.
	supervised []string
	metrics    *server.Server
	// The panel's own long-running loops (River and the cells have
	// their own Start and Stop): LISTEN for commands routed here, the
	// warm-actor publication, and this replica's heartbeat.
	listen, warm, heartbeat, depWatch *loop.Loop

	// Built by one start phase for the next ones.
	appURL, redisURL string
	vault            *vault.Vault
	addrKeys         *audit.AddressKeys
	trusted          []netip.Prefix
	notifier         *notify.Notifier
}

// Run starts the panel and serves until ctx ends, then shuts down in order:
// HTTP drains, River stops, pools close, the embedded services stop.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	p, err := Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- p.Serve() }()
	if cfg.Ready != nil {
		cfg.Ready(p.srv.Addr())
	}
	select {
	case <-ctx.Done():
		log.Info("panel stopping")
		p.drain(errc)
	case err = <-errc:
	}
	p.Stop()
	return err
}

// drain fails /readyz and keeps serving for the drain period, so the load
// balancer (Caddy's health checks, or its retries) sends new requests to
// another replica while those already sent here are answered. Stop then
// closes the listener and tells the agents to go (they reconnect, through
// the load balancer, to another replica, keeping their outcomes in their
// outbox until one acknowledges them).
func (p *Panel) drain(errc <-chan error) {
	if p.cfg.Drain <= 0 {
		return
	}
	p.Health.Drain()
	p.log.Info("panel draining: /readyz fails while it keeps serving", "drain", p.cfg.Drain)
	t := time.NewTimer(p.cfg.Drain)
	defer t.Stop()
	select {
	case <-t.C:
	case <-errc:
	}
}

// Start brings every part up; on failure it stops what it started.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Panel, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Panel{cfg: cfg, log: log, ReplicaID: newReplicaID()}
	if err := p.start(ctx); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// start brings the panel up in four phases, each on what the one before
// built: storage (the data dir, Postgres and Redis, the secret key), jobs
// (the claim engine, River and its workers, the cells), the agent gateway
// (and what it dispatches: claims and crawl pages) and HTTP.
func (p *Panel) start(ctx context.Context) error {
	if err := p.startStorage(ctx); err != nil {
		return err
	}
	if err := p.startJobs(ctx); err != nil {
		return err
	}
	if err := p.startGateway(ctx); err != nil {
		return err
	}
	return p.startHTTP(ctx)
}

// startStorage locks the data dir, starts the embedded Postgres and Redis
// where no URL names them, migrates, opens the pools and checks the
// application role, and loads the secret key and what it seals.
func (p *Panel) startStorage(ctx context.Context) (err error) {
	cfg, log := p.cfg, p.log
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("panel: create data dir: %w", err)
	}
	if p.lock, err = embedded.LockDataDir(cfg.DataDir, "a fleetwright panel"); err != nil {
		return err
	}
	p.Reg = prometheus.NewRegistry()
	p.Reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	p.embedded = embedded.NewMetrics(p.Reg)
	ownerURL, appURL := cfg.DatabaseURL, cfg.DatabaseAppURL
	if ownerURL == "" {
		pgDir := filepath.Join(cfg.DataDir, "postgres")
		prev, err := embedded.SetWALArchive(pgDir, embedded.WALArchive{Dir: cfg.WALArchive, Timeout: cfg.WALArchiveTimeout})
		if err != nil {
			return fmt.Errorf("panel: --wal-archive: %w", err)
		}
		if prev.Dir != "" && cfg.WALArchive == "" {
			log.Warn("WAL archiving is off: the panel was started without --wal-archive; a point-in-time recovery cannot reach past this start", "was", prev.Dir)
		}
		p.pg, err = embedded.StartPostgres(ctx, embedded.PostgresConfig{
			Dir: filepath.Join(cfg.DataDir, "postgres"), MaxConnections: cfg.PGMaxConnections, Logger: log,
		})
		if err != nil {
			return err
		}
		p.pg.Supervise(p.Supervision("postgres"))
		ownerURL, appURL = p.pg.OwnerURL(), p.pg.AppURL()
	}
	p.appURL = appURL
	redisURL := cfg.RedisURL
	if len(cfg.RedisSentinels) > 0 {
		if redisURL, err = cell.SentinelURL(cfg.RedisMaster, cfg.RedisSentinels); err != nil {
			return fmt.Errorf("panel: --redis-sentinels: %w", err)
		}
	}
	if redisURL != "" && cfg.RedisPasswordFile != "" {
		if redisURL, err = withRedisPassword(redisURL, cfg.RedisPasswordFile); err != nil {
			return err
		}
	}
	if redisURL == "" {
		p.rds, err = embedded.StartRedis(ctx, embedded.RedisConfig{Dir: filepath.Join(cfg.DataDir, "redis"), Logger: log})
		if err != nil {
			return err
		}
		p.rds.Supervise(p.Supervision("redis:" + cell.DefaultCell))
		redisURL = p.rds.URL(0)
	}
	p.redisURL = redisURL
	if err := migrate(ctx, ownerURL, appURL, cfg.Version, log); err != nil {
		return err
	}
	var tune []func(*pgxpool.Config)
	if cfg.DatabaseReplication == "sync" {
		tune = append(tune, p.commitModeHook)
	}
	if p.DB, err = db.Open(ctx, appURL, int32(cfg.DBMaxConns), tune...); err != nil {
		return err
	}
	if err := db.CheckAppRole(ctx, p.DB); err != nil {
		return err
	}
	if err := db.CheckRowSecurity(ctx, p.DB); err != nil {
		return err
	}
	for _, svc := range p.supervised {
		p.resolveEmbedded(svc)
	}
	if p.Redis, err = cell.OpenRedis(redisURL, cell.Tuning{}); err != nil {
		return fmt.Errorf("panel: the default cell's Redis (FLEET_REDIS_URL or FLEET_REDIS_SENTINELS): %w", err)
	}
	// A master name no Sentinel knows is a configuration error: the panel
	// says so rather than start a cell that can never claim.
	if err := cell.CheckSentinels(ctx, redisURL); errors.Is(err, cell.ErrUnknownMaster) {
		return fmt.Errorf("panel: %w", err)
	} else if err != nil {
		log.Warn("the default cell's Sentinels do not answer yet; the cell is failing until they do", "err", err)
	}

	p.Health = server.NewHealth(p.Reg)
	server.RegisterBuildInfo(p.Reg, cfg.Version)
	p.Health.Add(server.Check{Name: "postgres", Critical: true, Probe: func(ctx context.Context) error { return p.DB.Ping(ctx) }})
	p.Health.Add(server.DiskCheck(cfg.DataDir))
	// A cell's Redis is reported, never fatal to readiness: a failing cell
	// must not take the whole panel out of its load balancer.
	p.Health.Add(server.Check{Name: "redis:default", Probe: func(ctx context.Context) error { return p.Redis.Ping(ctx).Err() }})

	if err := p.DB.QueryRow(ctx, "SELECT id::text FROM installation").Scan(&p.InstallationID); err != nil {
		return fmt.Errorf("panel: read installation id: %w", err)
	}
	keyFile := cfg.SecretKeyFile
	if keyFile == "" {
		keyFile = filepath.Join(cfg.DataDir, "secret.key")
	}
	// The key ring follows the key file and secret.key.next: a rotation
	// reaches this replica without a restart (app/vault, ring.go).
	if p.vault, err = vault.LoadRing(os.Getenv("FLEET_SECRET_KEY"), keyFile, cfg.SecretKeyFile == ""); err != nil {
		return fmt.Errorf("panel: %w", err)
	}
	// Operators' TOTP seeds stored in clear by an older version are sealed
	// now that the key is at hand.
	if n, err := account.SealStoredSeeds(ctx, p.DB, p.vault); err != nil {
		return fmt.Errorf("panel: %w", err)
	} else if n > 0 {
		log.Info("sealed operators' TOTP seeds stored in clear", "count", n)
	}
	// Client addresses in audit entries are hashed with monthly keys
	// sealed with the same key (modules/audit, address.go); the retention
	// run and every request get them.
	p.addrKeys = audit.NewAddressKeys(p.DB, p.vault, clock.Real{})
	if err := p.addrKeys.Ensure(ctx); err != nil {
		return fmt.Errorf("panel: %w", err)
	}
	if p.trusted, err = server.ParseTrustedProxies(cfg.TrustedProxies); err != nil {
		return fmt.Errorf("panel: --trusted-proxies (FLEET_TRUSTED_PROXIES): %w", err)
	}
	return nil
}

// startJobs builds the claim engine and the durable background work on
// River (schedules, the health sweep, notifications, sealing, retention,
// crawl runs), starts River, then the cells.
func (p *Panel) startJobs(ctx context.Context) (err error) {
	cfg, log := p.cfg, p.log
	// The claim engine: its store needs the River client (UNKNOWN and its
	// reconcile job commit together) and River needs its workers, so the
	// client is attached once it exists.
	if p.Claims, err = claim.NewEngine(claim.NewStore(p.DB, nil), claim.Config{Log: log, Registerer: p.Reg}); err != nil {
		return err
	}
	if cfg.DatabaseReplication == "sync" {
		if err := p.startDurability(ctx, p.appURL); err != nil {
			return err
		}
	}
	p.Reg.MustRegister(alarm.Collector(p.DB, log.With("component", "alarm")), server.DiskCollector(cfg.DataDir))
	limit.Metrics(p.Reg)
	crawl.Metrics(p.Reg)
	p.Schedules = schedule.New(p.DB, schedule.Config{Clock: clock.Real{}, Log: log.With("component", "schedule"),
		Owner: p.ReplicaID, Registerer: p.Reg})
	hungAfter, _ := health.ParseHungAfter(cfg.HungAfter)
	engine := p.Claims
	sweeper := health.New(p.DB, health.Config{Clock: clock.Real{}, Log: log.With("component", "health"), HungAfter: hungAfter,
		Cells: func() []cell.Status {
			if cm := engine.Cells(); cm != nil {
				return cm.Status()
			}
			return nil
		}})
	p.Reg.MustRegister(health.Collector(p.DB, log.With("component", "health")))
	workers := river.NewWorkers()
	p.Schedules.AddWorkers(workers)
	sweeper.AddWorkers(workers)
	if p.notifier, err = newNotifier(cfg, p.DB, p.vault, log); err != nil {
		return err
	}
	p.notifier.AddWorkers(workers)
	river.AddWorker(workers, &pruneReplicasWorker{db: p.DB})
	river.AddWorker(workers, &sealAuditWorker{db: p.DB, anchor: audit.NewAnchor(audit.AnchorFile(cfg.DataDir), log.With("component", "audit")), clock: clock.Real{}})
	river.AddWorker(workers, &pruneAuthWorker{db: p.DB, clock: clock.Real{}})
	p.Claims.AddWorkers(workers)
	// Crawl runs: the runner's dispatcher (the gateway) and its budget's
	// Redis (the cells) are attached once they exist.
	p.CrawlRunner = &crawl.Runner{Clock: clock.Real{}, Log: log.With("component", "crawl"), Solvers: crawl.BuiltinSolvers}
	crawl.AddWorkers(workers, p.CrawlRunner)
	queues := map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 20}}
	maps.Copy(queues, crawl.Queues())
	maps.Copy(queues, claim.Queues())
	maps.Copy(queues, schedule.Queues())
	p.River, err = river.NewClient(riverpgxv5.New(p.DB), &river.Config{
		// The replica's id names it in River's leader table, so an operator
		// (and the load test's panel_freeze) can tell which replica leads.
		ID:      p.ReplicaID,
		Logger:  logging.AtLeast(log.With("component", "river"), slog.LevelWarn),
		Queues:  queues,
		Workers: workers,
		// A job a killed replica was running is retried after this, not
		// after River's default hour (an UNKNOWN would wait that long).
		RescueStuckJobsAfter: claim.RescueStuckJobsAfter,
		// Periodic jobs run on the elected leader only, so replicas never
		// overlap; a missed run simply happens at the next start (catch-up
		// policy: run once, not once per missed interval).
		PeriodicJobs: append([]*river.PeriodicJob{
			river.NewPeriodicJob(river.PeriodicInterval(time.Hour),
				func() (river.JobArgs, *river.InsertOpts) { return pruneReplicasArgs{}, nil },
				&river.PeriodicJobOpts{RunOnStart: true}),
			river.NewPeriodicJob(river.PeriodicInterval(cfg.AuditSealInterval),
				func() (river.JobArgs, *river.InsertOpts) { return sealAuditArgs{}, nil },
				&river.PeriodicJobOpts{RunOnStart: true}),
			river.NewPeriodicJob(river.PeriodicInterval(time.Hour),
				func() (river.JobArgs, *river.InsertOpts) { return pruneAuthArgs{}, nil },
				&river.PeriodicJobOpts{RunOnStart: true}),
		}, slices.Concat(p.Claims.PeriodicJobs(), p.Schedules.PeriodicJobs(), sweeper.PeriodicJobs(cfg.HealthInterval),
			p.notifier.PeriodicJobs(10*time.Second))...),
	})
	if err != nil {
		return fmt.Errorf("panel: river: %w", err)
	}
	p.Claims.Store().SetEnqueuer(p.River)
	p.Schedules.SetEnqueuer(p.River)
	if err := p.Schedules.Register(auditVerifyKind(p.DB, audit.AnchorFile(cfg.DataDir))); err != nil {
		return err
	}
	if _, err := p.Schedules.Ensure(ctx, schedule.System, auditVerifySpec(cfg.AuditVerifyCron)); err != nil {
		return fmt.Errorf("panel: %w", err)
	}
	pruner := &retention.Pruner{DB: p.DB, Anchor: audit.NewAnchor(audit.AnchorFile(cfg.DataDir), log.With("component", "audit")),
		Keys: p.addrKeys, Clock: clock.Real{}, Log: log.With("component", "retention")}
	if err := p.Schedules.Register(pruner.Kind()); err != nil {
		return err
	}
	if _, err := p.Schedules.Ensure(ctx, schedule.System, retention.Spec(cfg.RetentionCron)); err != nil {
		return fmt.Errorf("panel: %w", err)
	}
	// A pause switch reaches the agents as a configure command.
	p.Claims.Store().SetAgentNotifier(fleet.PauseNotifier{})
	if err := p.River.Start(ctx); err != nil {
		return fmt.Errorf("panel: start river: %w", err)
	}
	p.Cells = cell.New(p.DB, p.Claims.CellConfig(cell.Config{DefaultRedisURL: p.redisURL, Consumer: p.ReplicaID,
		Log: log, Registerer: p.Reg}))
	if err := p.Cells.Start(ctx); err != nil {
		return err
	}
	p.Claims.SetCells(p.Cells)
	return nil
}

// startGateway builds the agent gateway and what dispatches through it
// (claim offers, look-ups and grants; crawl page tasks), then its two
// long-running loops: LISTEN for commands other replicas route here, and
// the warm-actor publication of assign mode.
func (p *Panel) startGateway(ctx context.Context) error {
	log := p.log
	p.Fleet = fleet.NewStore(p.DB, p.vault)
	p.Gateway = gateway.New(p.Fleet, p.Claims, gateway.Config{
		ReplicaID: p.ReplicaID, InstallationID: p.InstallationID, Registerer: p.Reg, TrustedProxies: p.trusted}, log)
	p.Claims.SetOfferer(p.Gateway)
	p.Claims.SetLookuper(p.Gateway)
	p.Claims.SetAssign(p.Gateway, p.Gateway)
	p.Crawl = crawl.NewService(p.DB, p.River, p.Schedules)
	p.Crawl.Store.SetVault(p.vault)
	if err := p.Crawl.RegisterSchedule(); err != nil {
		return fmt.Errorf("panel: %w", err)
	}
	p.CrawlRunner.Store, p.CrawlRunner.Disp, p.CrawlRunner.Egress = p.Crawl.Store, p.Gateway, p.Crawl.Store.Egress
	p.CrawlRunner.Budget = crawl.NewBudget(p.Cells.RedisOf, clock.Real{})
	p.CrawlRunner.OnFinish = (&crawl.Rules{Store: p.Crawl.Store, Log: log.With("component", "crawl"), Egress: p.Crawl.Store.Egress}).OnFinish
	p.CrawlRunner.Ready()
	// The gateway's connections append audit entries (an installation
	// key pinned) with the agent's address: hashed with the panel's keys.
	bgCtx := audit.WithAddressKeys(ctx, p.addrKeys)
	// The LISTEN loop recovers on its own; it is not supervised.
	p.listen = loop.New(func(ctx context.Context) { p.Gateway.Listen(ctx, p.appURL) })
	if err := p.listen.Start(bgCtx); err != nil {
		return fmt.Errorf("panel: %w", err)
	}
	// Assign mode: this replica's warm actors, published every second.
	p.warm = loop.New(p.Claims.RunWarm)
	if err := p.warm.Start(bgCtx); err != nil {
		return fmt.Errorf("panel: %w", err)
	}
	// fleet_dependency_up follows the dependencies between scrapes,
	// not only when someone asks /readyz.
	p.depWatch = loop.New(func(ctx context.Context) { p.Health.Watch(ctx, 10*time.Second, 2*time.Second) })
	if err := p.depWatch.Start(bgCtx); err != nil {
		return fmt.Errorf("panel: %w", err)
	}
	return nil
}

// startHTTP binds the console, the agent endpoint, health and metrics, and
// starts this replica's heartbeat.
func (p *Panel) startHTTP(ctx context.Context) (err error) {
	cfg, log := p.cfg, p.log
	mtok, err := metricsToken(cfg.MetricsTokenFile)
	if err != nil {
		return err
	}
	h := NewHTTP(HTTPDeps{DB: p.DB, Health: p.Health, Reg: p.Reg, MetricsToken: mtok, Log: log, Version: cfg.Version, Clock: clock.Real{},
		Session: account.Config{SessionIdle: cfg.SessionIdle, SessionMax: cfg.SessionMax}, AgentGateway: p.Gateway, Fleet: p.Fleet,
		Claims: p.Claims, Crawl: p.Crawl, Schedules: p.Schedules, TrustedProxies: p.trusted, Vault: p.vault, Notifier: p.notifier})
	p.Router = h.Router

	if p.srv, err = server.Listen(cfg.Listen, h.Handler, log); err != nil {
		return err
	}
	if cfg.MetricsListen != "" {
		if p.metrics, err = server.Listen(cfg.MetricsListen, server.MetricsOnly(p.Reg, mtok), log); err != nil {
			return fmt.Errorf("panel: --metrics-listen (FLEET_METRICS_LISTEN): %w", err)
		}
		go func() {
			if err := p.metrics.Serve(); err != nil {
				log.Error("metrics listener failed", "err", err)
			}
		}()
		log.Info("metrics ready", "metrics", "http://"+p.metrics.Addr()+"/metrics", "bearer_required", mtok != "")
	}
	addr := p.srv.Addr()
	p.heartbeat = loop.New(func(ctx context.Context) { heartbeat(ctx, p.DB, p.ReplicaID, addr, cfg.Version, p.vault.KeyIDs, log) })
	if err := p.heartbeat.Start(ctx); err != nil {
		return fmt.Errorf("panel: %w", err)
	}
	log.Info("panel ready", "console", "http://"+p.srv.Addr()+"/", "data_dir", cfg.DataDir)
	return nil
}

// withRedisPassword puts the password read from file into a Redis URL
// (in memory only).
func withRedisPassword(raw, file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("panel: --redis-password-file (FLEET_REDIS_PASSWORD_FILE): %w", err)
	}
	pw := strings.TrimSpace(string(b))
	if pw == "" {
		return "", fmt.Errorf("panel: --redis-password-file (FLEET_REDIS_PASSWORD_FILE): %s is empty", file)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
		return "", errors.New("panel: malformed Redis URL (check FLEET_REDIS_URL)")
	}
	logging.RegisterSecret(pw)
	u.User = url.UserPassword(u.User.Username(), pw)
	return u.String(), nil
}

func migrate(ctx context.Context, ownerURL, appURL, release string, log *slog.Logger) error {
	appCfg, err := pgx.ParseConfig(appURL)
	if err != nil {
		return errors.New("panel: malformed application database URL (check FLEET_DATABASE_APP_URL)")
	}
	owner, err := db.Open(ctx, ownerURL, 2)
	if err != nil {
		return err
	}
	defer owner.Close()
	return db.Migrate(ctx, owner, migrations.FS, appCfg.User, release, log)
}

// Supervision is how the panel supervises an embedded service it runs (its
// Postgres, its Redis; the demo's second cell's Redis): restarted with a
// unit's budget, counted in fleet_embedded_restarts_total{service}, and a
// spent budget logged as an alarm and shown as fleet_embedded_failed.
func (p *Panel) Supervision(service string) embedded.Supervision {
	p.supervised = append(p.supervised, service)
	if p.DB != nil {
		// Supervised from now on, so running: an alarm of an earlier run is over.
		p.resolveEmbedded(service)
	}
	return embedded.Supervision{Service: service, Metrics: p.embedded, Log: p.log.With("component", "embedded"),
		OnGiveUp: func(service string) {
			// A spent Postgres cannot record its own alarm: the error log
			// and fleet_embedded_failed carry it then.
			if p.DB == nil {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := alarm.Raise(ctx, p.DB, alarm.Alarm{Kind: embeddedFailedAlarm, Key: service, Severity: alarm.Critical,
				Summary: "the embedded " + service + " keeps dying and was not started again",
				Detail:  "It died more than 5 times within 300 s, so the panel stopped restarting it (fleet_embedded_failed). Its own log and the panel's say why; fix the cause, then restart the panel."})
			if err != nil {
				p.log.Error("the embedded service's alarm could not be recorded", "service", service, "err", err)
			}
		}}
}

func (p *Panel) resolveEmbedded(service string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := alarm.Resolve(ctx, p.DB, alarm.System, embeddedFailedAlarm, service, "panel start"); err != nil {
		p.log.Warn("could not resolve the embedded service's alarm", "service", service, "err", err)
	}
}

// embeddedFailedAlarm is the alarm of an embedded service whose restart
// budget is spent; a panel start resolves it (the service runs again).
const embeddedFailedAlarm = "embedded.failed"

// Serve serves HTTP until Stop (Start only binds the listener).
func (p *Panel) Serve() error { return p.srv.Serve() }

// Addr is the address the console is served on.
func (p *Panel) Addr() string { return p.srv.Addr() }

// MetricsAddr is the address of the metrics listener ("" without one).
func (p *Panel) MetricsAddr() string {
	if p.metrics == nil {
		return ""
	}
	return p.metrics.Addr()
}

// Stop shuts everything down within the configured timeout.
func (p *Panel) Stop() {
	timeout := p.cfg.ShutdownTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if p.srv != nil {
		if err := p.srv.Shutdown(ctx); err != nil {
			p.log.Warn("http shutdown cut connections", "err", err)
		}
	}
	if p.metrics != nil {
		_ = p.metrics.Shutdown(ctx)
	}
	if p.Gateway != nil {
		// WebSockets are hijacked connections: Shutdown does not wait for them.
		p.Gateway.CloseAll()
	}
	// Each is a no-op when start failed before it.
	p.heartbeat.Stop()
	p.listen.Stop()
	p.warm.Stop()
	p.depWatch.Stop()
	if p.Cells != nil {
		p.Cells.Stop()
	}
	if p.River != nil {
		if err := p.River.Stop(ctx); err != nil && !errors.Is(err, context.Canceled) {
			p.log.Warn("river stop", "err", err)
		}
	}
	if p.Durability != nil {
		p.Durability.Stop()
	}
	if p.durPool != nil {
		p.durPool.Close()
	}
	if p.Redis != nil {
		_ = p.Redis.Close()
	}
	if p.DB != nil {
		p.DB.Close()
	}
	p.rds.Stop()
	p.pg.Stop()
	p.lock.Release()
	p.log.Info("panel stopped")
}

// newNotifier builds the alarm notifier: webhooks go through the egress
// guard (only public addresses, plus --notify-allow), e-mail through
// --smtp-addr.
func newNotifier(cfg Config, pool *pgxpool.Pool, v *vault.Vault, log *slog.Logger) (*notify.Notifier, error) {
	allow, err := egress.ParseAllow(cfg.NotifyAllow)
	if err != nil {
		return nil, fmt.Errorf("panel: --notify-allow: %w", err)
	}
	var ports []int
	for _, p := range cfg.NotifyPorts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("panel: --notify-ports: %q is not a port", p)
		}
		ports = append(ports, n)
	}
	g, err := egress.New(egress.Config{Policy: egress.Policy{Allow: allow, Ports: ports}, Logger: log.With("component", "notify")})
	if err != nil {
		return nil, fmt.Errorf("panel: %w", err)
	}
	return notify.New(pool, v, notify.Config{Clock: clock.Real{}, Log: log.With("component", "notify"),
		HTTP: g.Client(egress.ClientOptions{Timeout: 20 * time.Second, MaxRedirects: -1}), ConsoleURL: cfg.ConsoleURL,
		SMTP: notify.SMTP{Addr: cfg.SMTPAddr, From: cfg.SMTPFrom, Username: cfg.SMTPUsername, Password: os.Getenv("FLEET_SMTP_PASSWORD")}}), nil
}
