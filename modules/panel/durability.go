package panel

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/durability"
)

// startDurability starts the durability check of a replicated cluster
// (--database-replication=sync) on a pool of its own and makes the claim
// store ask it before every lease and act statement.
func (p *Panel) startDurability(ctx context.Context, appURL string) (err error) {
	if p.durPool, err = db.Open(ctx, appURL, 2); err != nil {
		return err
	}
	p.Durability = durability.New(p.durPool, durability.Config{Clock: clock.Real{}, Interval: p.cfg.HealthInterval,
		Log: p.log.With("component", "durability"), Registerer: p.Reg})
	if err := p.Durability.Start(ctx); err != nil {
		return fmt.Errorf("panel: %w", err)
	}
	if st := p.Durability.Status(); !st.Promised {
		p.log.Error("the panel starts with claims held: the database cannot promise durability", "reason", st.Reason)
	}
	p.Claims.Store().SetDurabilityGate(p.Durability.Gate)
	return nil
}

// commitModeKey marks, on a pooled connection, the synchronous_commit the
// panel last set on it.
const commitModeKey = "fleet.synchronous_commit"

// commitModeHook makes the pool's connections commit locally while claims
// are held, and durably again once they are not: with no synchronous
// standby every commit would otherwise wait (strict synchronous mode), and
// the console, the sightings' records and River's own bookkeeping with it.
// Claim statements never rely on it: each sets its own synchronous_commit
// (modules/claim, durability). A connection is changed only when the mode
// changed, so the hook costs nothing while nothing is held.
func (p *Panel) commitModeHook(cfg *pgxpool.Config) {
	cfg.PrepareConn = func(ctx context.Context, c *pgx.Conn) (bool, error) {
		want := "on"
		if p.Durability != nil && p.Durability.Held() {
			want = "local"
		}
		data := c.PgConn().CustomData()
		if data[commitModeKey] == want {
			return true, nil
		}
		if _, err := c.Exec(ctx, "SET synchronous_commit = "+want); err != nil {
			return false, err
		}
		data[commitModeKey] = want
		return true, nil
	}
}
