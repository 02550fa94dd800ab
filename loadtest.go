package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/modules/loadtest"
)

// runLoadtest is `fleetwright loadtest`: exit 0 when the fleet held its
// promise, 1 when the report shows a failure, 2 for bad flags.
func runLoadtest(args []string, stdout, stderr io.Writer) int {
	var cfg loadtest.Config
	s := config.New("fleetwright loadtest")
	cfg.Register(s)
	rest, err := s.Parse(args, os.Getenv)
	if errors.Is(err, config.ErrHelp) {
		fmt.Fprintf(stdout, "Usage: fleetwright loadtest [flags]\n\nRuns the whole fleet on this machine under a chaos schedule and reports against the board's ground truth.\n\nFlags:\n")
		s.PrintDefaults(stdout)
		return 0
	}
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("unexpected argument %q", rest[0])
	}
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		return refuseFlags(stderr, "loadtest", err)
	}
	ctx, stop := signalContext()
	defer stop()
	rep, err := loadtest.Run(ctx, cfg, stdout, stderr)
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
	if rep.Failed {
		return 1
	}
	return 0
}
