package gateway

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/modules/fleet"
)

// Listen keeps a dedicated connection LISTENing for command wake-ups from any
// replica and nudges the local connection of the named agent. NOTIFY is only
// the wake-up: when the LISTEN connection drops, notifications sent meanwhile
// are lost, so after reconnecting every local connection re-reads its
// pending commands (and each also polls on its own every PollEvery).
// It runs until ctx ends; it is not supervised (it recovers by itself).
func (g *Gateway) Listen(ctx context.Context, url string) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := g.listenOnce(ctx, url)
		if ctx.Err() != nil {
			return
		}
		g.log.Warn("command notifications lost; reconnecting", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (g *Gateway) listenOnce(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+fleet.NotifyChannel); err != nil {
		return err
	}
	// Anything sent while we were not listening is picked up now.
	g.WakeAll()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if !g.relayNotified(ctx, n.Payload) {
			g.Wake(n.Payload)
		}
	}
}
