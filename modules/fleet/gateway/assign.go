package gateway

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Assignment dispatch on the gateway's side (docs/CLAIMS.md, "Dispatch
// modes"): the gateway knows which actors it can reach now, and hands a
// grant published for this replica to the connection holding its actor.

// grantOut is a grant sent on a connection, counted as its actor's load
// until its outcome arrives or its action's deadline has passed.
type grantOut struct {
	worker string
	until  time.Time
}

// noteState keeps the agent's last state report: which actors run and
// whether the agent is paused.
func (c *conn) noteState(s wire.State) {
	c.mu.Lock()
	c.workers = slices.Clone(s.Workers)
	c.agentPaused = s.Paused
	c.mu.Unlock()
}

// grantSettled forgets a grant whose outcome arrived.
func (c *conn) grantSettled(token int64) {
	c.mu.Lock()
	delete(c.grants, token)
	c.mu.Unlock()
}

// WarmActors lists, per tenant, the actors this replica can reach now: on a
// connection speaking protocol v4 whose round trip was measured, of an
// agent not paused (by the panel or by its own report), running (not
// restarting, stopped or needing a person). Busy counts the grants its
// connection holds without an outcome, plus one while the worker reports a
// task in hand. It implements claim.WarmSource.
func (g *Gateway) WarmActors() map[string][]claim.WarmActor {
	now := g.cfg.Clock.Now()
	out := map[string][]claim.WarmActor{}
	for _, c := range g.local() {
		if !wire.InVersion(wire.TypeLeaseGrant, c.version) || c.agent.Paused {
			continue
		}
		est := c.Offset()
		if est.RoundTrip <= 0 {
			continue
		}
		c.mu.Lock()
		if c.agentPaused {
			c.mu.Unlock()
			continue
		}
		busy := map[string]int{}
		for tok, o := range c.grants {
			if now.After(o.until) {
				delete(c.grants, tok)
				continue
			}
			busy[o.worker]++
		}
		for _, w := range c.workers {
			if w.State != wire.WorkerRunning || !slices.Contains(claim.ActorKinds, w.Kind) {
				continue
			}
			b := busy[w.Name]
			if w.OldestTaskAgeMillis != nil && *w.OldestTaskAgeMillis > 0 {
				b++
			}
			out[c.agent.Tenant] = append(out[c.agent.Tenant], claim.WarmActor{Agent: c.agent.ID, Conn: c.id, Worker: w.Name,
				Kind: w.Kind, Account: c.agent.AccountID, Busy: b, RTTMicros: est.RoundTrip.Microseconds()})
		}
		c.mu.Unlock()
	}
	return out
}

// Grant sends a grant to the actor's connection on this replica, with the
// panel's measurement of that agent's clock (offset and error bound) so the
// agent can convert the send-by time to its own clock conservatively. It
// returns claim.ErrNotDelivered when nothing was written: the connection is
// not here any more (the agent reconnected elsewhere or left) or does not
// speak v4. It implements claim.Granter.
func (g *Gateway) Grant(ctx context.Context, tenant string, a claim.WarmActor, lg wire.LeaseGrant) error {
	g.mu.Lock()
	c := g.conns[a.Agent]
	g.mu.Unlock()
	if c == nil || c.id != a.Conn || c.agent.Tenant != tenant || !wire.InVersion(wire.TypeLeaseGrant, c.version) {
		return claim.ErrNotDelivered
	}
	est := c.Offset()
	lg.ClockOffsetMillis, lg.ClockErrorMillis = est.Offset.Milliseconds(), est.ErrorBound.Milliseconds()
	if est.ErrorBound%time.Millisecond != 0 {
		lg.ClockErrorMillis++ // rounded up: the bound only makes the deadline earlier
	}
	until := lg.SendBy.Add(time.Duration(lg.HardTimeoutMillis) * time.Millisecond)
	c.mu.Lock()
	if c.grants == nil {
		c.grants = map[int64]grantOut{}
	}
	c.grants[lg.Token] = grantOut{worker: lg.Worker, until: until}
	c.mu.Unlock()
	g.panelIn.sending(tenant, lg.Job.Key)
	if err := c.send(ctx, lg); err != nil {
		return fmt.Errorf("fleet: grant %s to %s/%s: %w", lg.Job.Key, a.Agent, a.Worker, err)
	}
	return nil
}
