package views

import (
	"time"

	"github.com/fleetwright/fleetwright/app/page"
)

// Duration is a duration in words a person reads at a glance: "45 s",
// "7 min", "2 h 5 min", "3 d 4 h" (never Go's "15m0s"); see page.Duration.
func Duration(d time.Duration) string { return page.Duration(d) }

// Stamp is an absolute time with its zone, as every page writes one:
// "2026-12-02 14:05:09 UTC".
func Stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }
