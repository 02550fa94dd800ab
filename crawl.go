package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/fleetwright/fleetwright/modules/crawl/spec"
)

// runCrawl is `fleetwright crawl SUBCOMMAND`.
func runCrawl(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stdout, "Usage: fleetwright crawl validate FILE…")
		fmt.Fprintln(stdout, "  validate  check crawl job files against the schema (docs/CRAWL.md); every error names its field path and line; exit 1 on any")
		return 0
	}
	switch args[0] {
	case "validate":
		return crawlValidate(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "fleetwright: unknown command \"crawl %s\"; crawl takes: validate (see fleetwright crawl --help)\n", args[0])
	return 2
}

func crawlValidate(files []string, stdout, stderr io.Writer) int {
	if len(files) == 0 {
		fmt.Fprintln(stderr, "fleetwright crawl validate: give one or more job files (see docs/CRAWL.md)")
		return 2
	}
	code := 0
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintf(stderr, "fleetwright crawl validate: %v\n", err)
			code = 1
			continue
		}
		j, err := spec.Parse(f, src, spec.Options{})
		var errs *spec.Errors
		if errors.As(err, &errs) {
			fmt.Fprintf(stderr, "%s: %d error(s)\n", f, len(errs.List))
			for _, fe := range errs.List {
				fmt.Fprintf(stderr, "  %s %s\n", f, fe.String())
			}
			code = 1
			continue
		}
		fmt.Fprintf(stdout, "%s: ok: job %q, render %s, %d start URL(s), %d field(s), item key %v\n",
			f, j.Name, j.Render, len(j.StartURLs()), len(j.Extract.Fields), []string(j.ItemKey))
	}
	return code
}
