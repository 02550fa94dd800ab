// Package outagetest holds the long board outage test of `fleetwright
// loadtest --board-outage` (docs/LOADTEST.md, "The board outage"). It is a
// package of its own so `go test ./...` runs it beside the other packages
// rather than after the reduced load test of modules/loadtest: it waits
// on a real clock for minutes (the board's API fails for 3 of them), and
// the claim engine's lease and grace rules are decided by the database's
// clock, which no injected clock can move.
package outagetest
