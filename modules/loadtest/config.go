// Package loadtest is `fleetwright loadtest`: the whole fleet on one machine
// (its own Postgres and two Redis cells, the sandbox board in-process, two
// panel replicas and agent processes of this binary) run for a set time
// under a seeded chaos schedule, then judged against the board's ground
// truth: duplicate, lost, phantom and unsettled claims, secrets in any
// output or file, every chaos kind's hits, and the latency of every stage.
package loadtest

import (
	"errors"
	"fmt"
	"time"

	"github.com/fleetwright/fleetwright/app/config"
)

// Config configures a load test run.
type Config struct {
	// Workers is the number of claim workers in the fleet (--workers):
	// three browser watchers (one per tenant), up to three browser actors,
	// every other worker an HTTP actor.
	Workers int
	// Duration is how long the board publishes (--duration); the first
	// chaos cycle always completes (the publisher runs on until it has).
	Duration time.Duration
	// Rate is the board's publishing rate in loads per second (--rate).
	Rate float64
	// Chaos is "on" (the seeded schedule) or "off" (a clean baseline).
	Chaos string
	// JSON is where the report is written as JSON ("" for none).
	JSON string
	// DataDir holds the run's services, agents and logs; empty uses a
	// temporary directory removed at the end (a given one is kept).
	DataDir string
	// Seed drives the chaos schedule's choices and the board's dice.
	Seed int
	// Browsers caps the Chromium instances (watchers + browser actors).
	Browsers int
	// Settle bounds the wait for the reconciler after publishing stops.
	Settle time.Duration
	// Binary is the fleetwright executable the panels and agents run
	// (default: this process's own).
	Binary string
	// Progress is how often a progress line is printed.
	Progress time.Duration
	// BoardIdempotency is "on" (the board honours Idempotency-Key on
	// bookings) or "off" (it does not, as many real platforms do not).
	BoardIdempotency string
	// DispatchMode is the tenants' claim dispatch mode: race or assign
	// (docs/CLAIMS.md, "Dispatch modes"). Empty: assign, the default of a
	// new tenant.
	DispatchMode string
	// BoardOutage is how long the board's API fails in the outage phase
	// after the measured duration (0: no outage phase).
	BoardOutage time.Duration
	// Platform is a platform spec file (examples/platforms) describing
	// one of the sandbox board's dialects: the run's board speaks that
	// dialect and the spec is checked against it before the fleet starts
	// ("": the classic dialect).
	Platform string
}

// Register declares the command's flags.
func (c *Config) Register(s *config.Set) {
	s.Int(&c.Workers, "workers", "FLEET_LOADTEST_WORKERS", 72, "claim workers in the fleet (3 browser watchers, up to 3 browser actors, the rest HTTP actors)")
	s.Duration(&c.Duration, "duration", "FLEET_LOADTEST_DURATION", 5*time.Minute, "how long the board publishes loads")
	s.Float(&c.Rate, "rate", "FLEET_LOADTEST_RATE", 2, "loads the board publishes per second (Poisson)")
	s.Enum(&c.Chaos, "chaos", "FLEET_LOADTEST_CHAOS", "on", []string{"on", "off"}, "run the seeded chaos schedule (off: a clean baseline)")
	s.String(&c.JSON, "json", "FLEET_LOADTEST_JSON", "", "also write the report as JSON to this file")
	s.String(&c.DataDir, "data-dir", "FLEET_LOADTEST_DATA_DIR", "", "directory for the run's Postgres, Redis, agents and logs (empty: a temporary one, removed at the end)")
	s.Int(&c.Seed, "seed", "FLEET_LOADTEST_SEED", 1, "seed of the chaos schedule and the board's dice")
	s.Int(&c.Browsers, "browsers", "FLEET_LOADTEST_BROWSERS", 6, "most Chromium instances at once (3 watchers + browser actors; at least 3)")
	s.Duration(&c.Settle, "settle", "FLEET_LOADTEST_SETTLE", 4*time.Minute, "longest wait for the reconciler to settle every claim after publishing stops")
	s.Duration(&c.Progress, "progress", "FLEET_LOADTEST_PROGRESS", 10*time.Second, "how often a progress line is printed")
	s.Enum(&c.BoardIdempotency, "board-idempotency", "FLEET_LOADTEST_BOARD_IDEMPOTENCY", "on", []string{"on", "off"},
		"whether the run's board honours Idempotency-Key on bookings (off: a platform that books a replayed request again)")
	s.Enum(&c.DispatchMode, "dispatch-mode", "FLEET_LOADTEST_DISPATCH_MODE", "assign", []string{"race", "assign"},
		"the tenants' claim dispatch mode: race (every warm actor asks for each job) or assign (the panel grants each job to one actor)")
	s.String(&c.Platform, "platform", "FLEET_LOADTEST_PLATFORM", "",
		"platform spec file of the board's dialect (examples/platforms/sandbox.yaml: classic, haulbridge.yaml: html); the run's board speaks it and the spec must sign in, read the feed and prove the bookings look-up on it")
	s.Duration(&c.BoardOutage, "board-outage", "FLEET_LOADTEST_BOARD_OUTAGE", 0,
		"after the duration, the board's API fails this long (bookings 503, then every request 503, then connections refused) and the run judges that nothing of it was lost (0: no outage)")
}

// Validate reports the first bad setting.
func (c *Config) Validate() error {
	if c.BoardIdempotency == "" {
		c.BoardIdempotency = "on"
	}
	if c.DispatchMode == "" {
		c.DispatchMode = "assign"
	}
	switch {
	case c.Workers < 6:
		return fmt.Errorf("loadtest: --workers must be at least 6 (three tenants, each a watcher and an actor), got %d", c.Workers)
	case c.Workers > 500:
		return fmt.Errorf("loadtest: --workers must be at most 500 on one machine, got %d", c.Workers)
	case c.Duration < 10*time.Second || c.Duration > 2*time.Hour:
		return fmt.Errorf("loadtest: --duration must be between 10s and 2h, got %s", c.Duration)
	case c.Rate <= 0 || c.Rate > 50:
		return fmt.Errorf("loadtest: --rate must be above 0 and at most 50 loads a second, got %v", c.Rate)
	case c.Browsers < 3 || c.Browsers > 12:
		return fmt.Errorf("loadtest: --browsers must be between 3 and 12, got %d", c.Browsers)
	case c.Settle < 10*time.Second:
		return fmt.Errorf("loadtest: --settle must be at least 10s, got %s", c.Settle)
	case c.Chaos != "on" && c.Chaos != "off":
		return errors.New("loadtest: --chaos must be on or off")
	case c.BoardIdempotency != "on" && c.BoardIdempotency != "off":
		return fmt.Errorf("loadtest: --board-idempotency must be on or off, got %q", c.BoardIdempotency)
	case c.DispatchMode != "race" && c.DispatchMode != "assign":
		return fmt.Errorf("loadtest: --dispatch-mode must be race or assign, got %q", c.DispatchMode)
	case c.BoardOutage != 0 && (c.BoardOutage < 30*time.Second || c.BoardOutage > time.Hour):
		return fmt.Errorf("loadtest: --board-outage must be 0 (none) or between 30s and 1h, got %s", c.BoardOutage)
	}
	if c.Platform != "" {
		if _, _, err := readPlatform(c.Platform); err != nil {
			return err
		}
	}
	if c.Progress <= 0 {
		c.Progress = 10 * time.Second
	}
	return nil
}
