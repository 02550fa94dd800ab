// Package bench is `fleetwright bench`: in one run on the user's own
// hardware it measures the physical floor of the claim path — the bare
// durable INSERT … ON CONFLICT of this Postgres and one loopback WebSocket
// round trip — and the whole claim path through a real panel (protocol-only
// watcher and actors over real WebSockets, the panel's Redis cell and
// Postgres), in every dispatch mode this build has, paced, in a burst and
// stepped up to saturation, and prints the ratios to that floor.
package bench

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fleetwright/fleetwright/app/config"
)

// Config configures a bench run.
type Config struct {
	// DatabaseURL (owner role) and DatabaseAppURL (application role) name a
	// Postgres database the bench may write to; empty starts a private
	// cluster under DataDir.
	DatabaseURL, DatabaseAppURL string
	// RedisURL is a Redis the bench's panel uses as its cell; empty starts
	// a private redis-server under DataDir.
	RedisURL string
	// DataDir holds the private services and the panel's log; empty uses a
	// temporary directory removed at the end.
	DataDir string
	// JSON is where the report is also written as JSON ("" for none).
	JSON string
	// Quick shortens every phase so the whole run takes well under a
	// minute (for tests and a first look); Duration still wins when given.
	Quick bool
	// Duration is the length of each timed phase: the bare inserts, the
	// paced run and each saturation step.
	Duration time.Duration
	// Clients is the bare-insert client count (one row per commit).
	Clients int
	// Actors is the number of protocol-only actor connections per mode.
	Actors int
	// Rate is the paced run's sightings per second, and the first
	// saturation step's.
	Rate float64
	// Burst is the number of jobs sighted at once in the burst phase.
	Burst int
	// MaxP99 is the detect→act_sent p99 past which the offered load stops
	// being stepped up.
	MaxP99 time.Duration
	// Modes lists the dispatch modes to measure (empty: every mode this
	// build has).
	Modes []string
	// CPUProfile is a directory for a CPU profile of the bench process per
	// mode over its saturation steps ("" for none).
	CPUProfile string

	// Set by Validate from Quick and Duration.
	valid      bool
	rttSamples int
	drainLimit time.Duration
	maxSteps   int
}

// Register declares the command's flags.
func (c *Config) Register(s *config.Set) {
	s.String(&c.DatabaseURL, "database-url", "FLEET_BENCH_DATABASE_URL", "",
		"Postgres URL of a role that owns a database set aside for benchmarks (migrations are applied; a tenant per mode is added); empty: a private cluster under --data-dir")
	s.String(&c.DatabaseAppURL, "database-app-url", "FLEET_BENCH_DATABASE_APP_URL", "",
		"Postgres URL of the application role of that database (required with --database-url)")
	s.String(&c.RedisURL, "redis-url", "FLEET_BENCH_REDIS_URL", "",
		"Redis URL the bench's panel uses as its cell (one no production panel uses); empty: a private redis-server under --data-dir")
	s.String(&c.DataDir, "data-dir", "FLEET_BENCH_DATA_DIR", "",
		"directory for the private services and the panel's log (empty: a temporary one, removed at the end)")
	s.String(&c.JSON, "json", "FLEET_BENCH_JSON", "", "also write the report as JSON to this file")
	s.Bool(&c.Quick, "quick", "FLEET_BENCH_QUICK", false,
		"short phases (1.5 s each, at most 4 saturation steps): the whole run in well under a minute")
	s.Duration(&c.Duration, "duration", "FLEET_BENCH_DURATION", 5*time.Second,
		"length of each timed phase: the bare inserts, the paced run, each saturation step (1s to 5m)")
	s.Int(&c.Clients, "clients", "FLEET_BENCH_CLIENTS", 8, "bare-insert clients, one row per commit (1 to 64)")
	s.Int(&c.Actors, "actors", "FLEET_BENCH_ACTORS", 72, "protocol-only actor connections per dispatch mode (1 to 500)")
	s.Float(&c.Rate, "rate", "FLEET_BENCH_RATE", 50, "paced sightings per second, and the first saturation step (1 to 5000)")
	s.Int(&c.Burst, "burst", "FLEET_BENCH_BURST", 1000, "jobs sighted at once in the burst phase (10 to 20000)")
	s.Duration(&c.MaxP99, "max-p99", "FLEET_BENCH_MAX_P99", time.Second,
		"saturation: the offered load is doubled until detect→act_sent p99 passes this (10ms to 30s)")
	s.String(&c.CPUProfile, "cpu-profile", "FLEET_BENCH_CPU_PROFILE", "",
		"write a CPU profile of the bench process (panel and agents; agents labelled part=agents) over each mode's saturation steps to DIR/<mode>.pprof")
	s.List(&c.Modes, "modes", "FLEET_BENCH_MODES", "dispatch modes to measure, comma-separated (default: every mode this build has)")
}

// Validate reports the first bad setting, in words that say what to do.
func (c *Config) Validate(given func(string) bool) error {
	if given == nil {
		given = func(string) bool { return false }
	}
	switch {
	case c.DatabaseURL != "" && c.DatabaseAppURL == "":
		return errors.New("bench: --database-url needs --database-app-url: the panel runs as an application role that is neither owner, superuser nor BYPASSRLS")
	case c.DatabaseURL == "" && c.DatabaseAppURL != "":
		return errors.New("bench: --database-app-url is only used with --database-url")
	case c.DatabaseURL != "" && !strings.HasPrefix(c.DatabaseURL, "postgres://") && !strings.HasPrefix(c.DatabaseURL, "postgresql://"):
		return errors.New("bench: --database-url must be a postgres:// URL")
	case c.DatabaseAppURL != "" && !strings.HasPrefix(c.DatabaseAppURL, "postgres://") && !strings.HasPrefix(c.DatabaseAppURL, "postgresql://"):
		return errors.New("bench: --database-app-url must be a postgres:// URL")
	case c.RedisURL != "" && !strings.HasPrefix(c.RedisURL, "redis://") && !strings.HasPrefix(c.RedisURL, "rediss://") && !strings.HasPrefix(c.RedisURL, "unix://"):
		return errors.New("bench: --redis-url must be a redis://, rediss:// or unix:// URL")
	case c.Duration < time.Second || c.Duration > 5*time.Minute:
		return fmt.Errorf("bench: --duration must be between 1s and 5m, got %s", c.Duration)
	case c.Clients < 1 || c.Clients > 64:
		return fmt.Errorf("bench: --clients must be between 1 and 64, got %d", c.Clients)
	case c.Actors < 1 || c.Actors > 500:
		return fmt.Errorf("bench: --actors must be between 1 and 500, got %d", c.Actors)
	case c.Rate < 1 || c.Rate > 5000:
		return fmt.Errorf("bench: --rate must be between 1 and 5000 sightings a second, got %v", c.Rate)
	case c.Burst < 10 || c.Burst > 20000:
		return fmt.Errorf("bench: --burst must be between 10 and 20000 jobs, got %d", c.Burst)
	case c.MaxP99 < 10*time.Millisecond || c.MaxP99 > 30*time.Second:
		return fmt.Errorf("bench: --max-p99 must be between 10ms and 30s, got %s", c.MaxP99)
	}
	seen := map[string]bool{}
	for _, m := range c.Modes {
		if !hasMode(m) {
			return fmt.Errorf("bench: --modes: this build has no dispatch mode %q (it has: %s)", m, strings.Join(ModeNames(), ", "))
		}
		if seen[m] {
			return fmt.Errorf("bench: --modes names %q twice", m)
		}
		seen[m] = true
	}
	if len(c.Modes) == 0 {
		c.Modes = ModeNames()
	}
	c.rttSamples, c.drainLimit, c.maxSteps = 2000, time.Minute, 8
	if c.Quick {
		if !given("duration") {
			c.Duration = 1500 * time.Millisecond
		}
		c.rttSamples, c.drainLimit, c.maxSteps = 300, 30*time.Second, 4
	}
	c.valid = true
	return nil
}
