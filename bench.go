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
		return refuseFlags(stderr, "bench", err)
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

// refuseFlags prints a refused flag or argument of command cmd once (a
// Validate error already names the command, the parser's does not) and
// returns the exit status for wrong input.
func refuseFlags(stderr io.Writer, cmd string, err error) int {
	msg := strings.TrimPrefix(err.Error(), cmd+": ")
	fmt.Fprintf(stderr, "fleetwright: %s: %s (see fleetwright %s --help)\n", cmd, msg, cmd)
	return 2
}
