package gateway

import (
	"context"

	"github.com/fleetwright/fleetwright/modules/wire"
)

// protect decides how the account's credentials reach this connection:
// sealed to the agent's pinned installation key, or withheld with the reason
// (logged here and shown as an event on the fleet page). They never travel
// in the clear, whatever the protocol version.
func (c *conn) protect(ctx context.Context, creds wire.Credentials) (*wire.SealedCredentials, string) {
	reason := ""
	switch {
	case !c.secure:
		reason = wire.WithheldCleartext
	case c.helloKey == "":
		reason = wire.WithheldNoKey
	case c.pinnedKey != c.helloKey:
		reason = wire.WithheldKeyMismatch
	}
	if reason == "" {
		box, err := wire.SealCredentials(c.pinnedKey, c.agent.ID, creds)
		if err == nil {
			return box, ""
		}
		c.g.log.Error("seal credentials", "agent", c.agent.ID, "err", err)
		reason = wire.WithheldNoKey
	}
	msg := map[string]string{
		wire.WithheldCleartext:   "credentials withheld: the agent connected without TLS (" + c.transport + "); give it an https:// or wss:// --panel, and list the TLS proxy in --trusted-proxies",
		wire.WithheldNoKey:       "credentials withheld: the agent sent no installation key (protocol v4 or later needed)",
		wire.WithheldKeyMismatch: "credentials withheld: the agent presented another installation key than the one pinned at its first welcome; if its state dir was lost on purpose, an admin accepts the new installation (New token → new installation)",
	}[reason]
	c.g.log.Warn(msg, "agent", c.agent.ID, "tenant", c.agent.Tenant, "reason", reason, "remote", c.remote, "protocol", c.version)
	if err := c.g.store.AddEvent(ctx, c.agent, wire.Event{Level: wire.LevelWarn, Kind: "credentials_withheld",
		Message: msg, At: c.g.cfg.Clock.Now(), Fields: map[string]string{"reason": reason, "remote": c.remote}}); err != nil && ctx.Err() == nil {
		c.g.log.Warn("save agent event", "agent", c.agent.ID, "err", err)
	}
	return nil, reason
}
