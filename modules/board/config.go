package board

import (
	"time"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/config"
)

// EnvAdminToken holds the sandbox admin token when --admin-token-file is not given.
const EnvAdminToken = "FLEET_BOARD_ADMIN_TOKEN"

// Dialects of the board.
const (
	DialectClassic = "classic"
	DialectHTML    = "html"
)

// Config is everything the board role reads. Listen and DataDir are shared
// with the panel and declared by main; Register declares the rest.
type Config struct {
	// Listen is the address to serve on (shared --listen).
	Listen string
	// DataDir is the shared --data-dir; when Data is empty the board keeps
	// its SQLite file there, and a generated admin token too.
	DataDir string

	// Dialect is the board's face: classic (JSON API, the default) or html
	// (server-rendered forms, JSON:API feed; see docs/BOARD.md). Both share
	// the store, the rules, the oracle and the chaos switches.
	Dialect string

	// Data is "memory" or the path of a SQLite file.
	Data string
	// Rate is the Poisson publishing rate in loads per second (0: off).
	Rate float64
	// Seed makes the publisher's arrivals and loads repeatable.
	Seed int
	// LoadTTL is how long a load stays bookable after it is published.
	LoadTTL time.Duration
	// SessionTTL is how long a signed-in session lasts.
	SessionTTL time.Duration
	// PollInterval is how often the loads page fetches the JSON feed.
	PollInterval time.Duration
	// IdempotencyKeys makes the book endpoint honour Idempotency-Key.
	IdempotencyKeys bool
	// AdminTokenFile holds the sandbox admin token; AdminToken (or the
	// FLEET_BOARD_ADMIN_TOKEN variable) is used when it is empty.
	AdminTokenFile string
	AdminToken     string
	// SeedAccounts is a JSON file of accounts created at start (demo).
	SeedAccounts string

	// Chaos is the initial set of chaos switches (changeable at run time).
	Chaos Chaos

	// Clock is the time source; nil means the wall clock.
	Clock clock.Clock

	// Catalog is the crawler's sandbox catalogue, started by Run (the
	// board role) when CatalogHosts is not empty; see modules/board/catalog.
	CatalogHosts      string
	CatalogPort       int
	CatalogItems      int
	CatalogRate       float64
	CatalogBurst      int
	CatalogCrawlDelay float64
}

// Defaults returns a Config with every flag's default, for tests and
// in-process boards.
func Defaults() Config {
	return Config{
		Listen:       "127.0.0.1:8090",
		Dialect:      DialectClassic,
		Data:         "memory",
		Rate:         0.5,
		Seed:         1,
		LoadTTL:      10 * time.Minute,
		SessionTTL:   30 * time.Minute,
		PollInterval: 250 * time.Millisecond,
		Chaos:        Chaos{LateCommitDelay: Duration(5 * time.Second), Layout: LayoutV1},
	}
}

// Register declares the board-only flags. --listen and --data-dir are shared
// with the panel and declared by main.
func (c *Config) Register(s *config.Set) {
	role := config.Roles("board")
	s.Enum(&c.Dialect, "dialect", "FLEET_BOARD_DIALECT", DialectClassic, []string{DialectClassic, DialectHTML}, "the board's dialect: classic (JSON API) or html (server-rendered forms and a JSON:API feed)", role)
	s.String(&c.Data, "data", "FLEET_BOARD_DATA", "", `board state: "memory" or a SQLite file path (empty: <data-dir>/board.sqlite, or memory without --data-dir)`, role)
	s.Float(&c.Rate, "rate", "FLEET_BOARD_RATE", 0.5, "loads published per second (Poisson arrivals; 0 turns the publisher off)", role)
	s.Int(&c.Seed, "seed", "FLEET_BOARD_SEED", 1, "seed of the publisher and the chaos dice, for repeatable runs", role)
	s.Duration(&c.LoadTTL, "load-ttl", "FLEET_BOARD_LOAD_TTL", 10*time.Minute, "how long a load stays bookable after it is published", role)
	s.Duration(&c.SessionTTL, "session-ttl", "FLEET_BOARD_SESSION_TTL", 30*time.Minute, "how long a board session lasts", role)
	s.Duration(&c.PollInterval, "poll-interval", "FLEET_BOARD_POLL_INTERVAL", 250*time.Millisecond, "how often the loads page polls the JSON feed", role)
	s.Bool(&c.IdempotencyKeys, "idempotency-keys", "FLEET_BOARD_IDEMPOTENCY_KEYS", false, "honour the Idempotency-Key header on bookings", role)
	s.String(&c.AdminTokenFile, "admin-token-file", "FLEET_BOARD_ADMIN_TOKEN_FILE", "", "file holding the sandbox admin bearer token (else "+EnvAdminToken+")", role)
	s.String(&c.SeedAccounts, "seed-accounts", "FLEET_BOARD_SEED_ACCOUNTS", "", "JSON file of board accounts to create at start", role)

	s.String(&c.Chaos.Latency, "chaos-latency", "FLEET_BOARD_CHAOS_LATENCY", "", `added latency: "20ms", "uniform:5ms-50ms", "normal:40ms,10ms", "exp:30ms"`, role)
	s.Float(&c.Chaos.ErrorRate, "chaos-5xx-rate", "FLEET_BOARD_CHAOS_5XX_RATE", 0, "fraction of board requests answered 503 without effect", role)
	s.Float(&c.Chaos.DropResponseRate, "chaos-drop-response-rate", "FLEET_BOARD_CHAOS_DROP_RESPONSE_RATE", 0, "fraction of bookings committed whose response is dropped", role)
	s.Float(&c.Chaos.DropReusedResponseRate, "chaos-drop-reused-response-rate", "FLEET_BOARD_CHAOS_DROP_REUSED_RESPONSE_RATE", 0, "fraction of bookings that arrive on a reused connection, commit, and have their response dropped", role)
	s.Float(&c.Chaos.LateCommitRate, "chaos-late-commit-rate", "FLEET_BOARD_CHAOS_LATE_COMMIT_RATE", 0, "fraction of bookings answered 504 at once and committed later", role)
	s.Duration((*time.Duration)(&c.Chaos.LateCommitDelay), "chaos-late-commit-delay", "FLEET_BOARD_CHAOS_LATE_COMMIT_DELAY", 5*time.Second, "delay before a late commit lands", role)
	s.Duration((*time.Duration)(&c.Chaos.Hold), "chaos-hold", "FLEET_BOARD_CHAOS_HOLD", 0, "keep every booking request open this long before handling it", role)
	s.Duration((*time.Duration)(&c.Chaos.SessionStormEvery), "chaos-session-storm-every", "FLEET_BOARD_CHAOS_SESSION_STORM_EVERY", 0, "expire every session at this interval (0: never)", role)
	s.Float(&c.Chaos.CaptchaRate, "chaos-captcha-rate", "FLEET_BOARD_CHAOS_CAPTCHA_RATE", 0, "fraction of bookings answered with a captcha interstitial", role)
	s.String(&c.CatalogHosts, "catalog-hosts", "FLEET_BOARD_CATALOG_HOSTS", "127.0.0.11,127.0.0.12,127.0.0.13", "loopback addresses the crawl catalogue serves on, one host each (empty: no catalogue)", role)
	s.Int(&c.CatalogPort, "catalog-port", "FLEET_BOARD_CATALOG_PORT", 8091, "the crawl catalogue's port on every host (0: one free port for all; the demo's catalogue too)", config.Roles("board", "demo"))
	s.Int(&c.CatalogItems, "catalog-items", "FLEET_BOARD_CATALOG_ITEMS", 300, "products per catalogue host", role)
	s.Float(&c.CatalogRate, "catalog-rate", "FLEET_BOARD_CATALOG_RATE", 20, "catalogue requests per second per client and host before it answers 429 with Retry-After", role)
	s.Int(&c.CatalogBurst, "catalog-burst", "FLEET_BOARD_CATALOG_BURST", 20, "the catalogue's rate-limit burst", role)
	s.Float(&c.CatalogCrawlDelay, "catalog-crawl-delay", "FLEET_BOARD_CATALOG_CRAWL_DELAY", 0.1, "Crawl-delay in the catalogue's robots.txt, seconds (0: none)", role)
	s.Enum(&c.Chaos.Layout, "chaos-layout", "FLEET_BOARD_CHAOS_LAYOUT", LayoutV1, []string{LayoutV1, LayoutV2}, "layout of the loads page", role)
}
