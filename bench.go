package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/modules/bench"
)

// runBench is `fleetwright bench`: exit 0 with the report, 1 when the run
// itself failed (a service that would not start), 2 for bad flags.
func runBench(args []string, stdout, stderr io.Writer) int {
	var cfg bench.Config
	s := config.New("fleetwright bench")
	cfg.Register(s)
	rest, err := s.Parse(args, os.Getenv)
	if errors.Is(err, config.ErrHelp) {
		fmt.Fprintf(stdout, "Usage: fleetwright bench [flags]\n\nMeasures, in one run on this machine, the floor of the claim path (bare durable INSERT … ON CONFLICT\nof this Postgres, one loopback WebSocket round trip) and the whole claim path through a real panel with\nprotocol-only agents, in every dispatch mode this build has; prints leases/s, the ratio to the bare\ninserts and detect→act_sent next to the floor (docs/BENCHMARKS.md).\n\nFlags:\n")
		s.PrintDefaults(stdout)
		return 0
	}
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("unexpected argument %q", rest[0])
	}
	if err == nil {
		err = cfg.Validate(s.Given)
	}
	if err != nil {
		// Validate's errors already name the command; the parser's do not.
		msg := strings.TrimPrefix(err.Error(), "bench: ")
		fmt.Fprintf(stderr, "fleetwright: bench: %s (see fleetwright bench --help)\n", msg)
		return 2
	}
	ctx, stop := signalContext()
	defer stop()
	rep, err := bench.Run(ctx, cfg, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "fleetwright: %s\n", logging.Scrub(err.Error()))
		return 1
	}
	rep.WriteText(stdout)
	if cfg.JSON != "" {
		if err := rep.WriteJSON(cfg.JSON); err != nil {
			fmt.Fprintf(stderr, "fleetwright: %s\n", err)
			return 1
		}
	}
	return 0
}
