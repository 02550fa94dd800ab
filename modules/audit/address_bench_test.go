package audit_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/factory"
)

// BenchmarkAppend is one audited change's cost to its transaction: one
// entry appended in its own tenant-scoped transaction, without a client
// address and with one (the keyed hash in the chained row plus the clear
// row beside it; the month's key is held in memory after the first).
// Figures in docs/BENCHMARKS.md.
func BenchmarkAppend(b *testing.B) {
	for _, bc := range []struct {
		name, ip string
	}{{"no_address", ""}, {"with_address", "203.0.113.7"}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			d := testenv.DB(b)
			v, err := vault.New(make([]byte, vault.KeySize))
			if err != nil {
				b.Fatal(err)
			}
			ctx = audit.WithAddressKeys(ctx, audit.NewAddressKeys(d.App, v, nil))
			tenant := factory.Tenant(b, d, "bench", "Bench")
			e := audit.Entry{Actor: "op@example.com", Action: "claim.pause", Target: "tenant", Detail: map[string]any{"paused": true}, IP: bc.ip}
			for b.Loop() {
				if err := db.InTenant(ctx, d.App, tenant, func(tx pgx.Tx) error { return audit.Append(ctx, tx, e) }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
