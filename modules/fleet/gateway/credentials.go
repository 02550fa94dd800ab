package gateway

import (
	"context"

	"github.com/fleetwright/fleetwright/modules/wire"
)

// protect decides how the account's credentials reach this connection:
// sealed to the agent's pinned installation key, or withheld with the reason
// (logged here and shown as an event on the fleet page); withhold, when set,
// is a reason already known (credentials sealed for another board). They
// never travel in the clear, whatever the protocol version.
func (c *conn) protect(ctx context.Context, creds wire.Credentials, withhold string) (*wire.SealedCredentials, string) {
	reason := withhold
	switch {
	case reason != "":
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
		wire.WithheldOtherBoard:  "credentials withheld: they were sealed for another board than the account's row names now; nothing is sent to the new board until an admin enters the account's credentials for it (Board and client)",
	}[reason]
	c.g.log.Warn(msg, "agent", c.agent.ID, "tenant", c.agent.Tenant, "reason", reason, "remote", c.remote, "protocol", c.version)
	if err := c.g.store.AddEvent(ctx, c.agent, wire.Event{Level: wire.LevelWarn, Kind: "credentials_withheld",
		Message: msg, At: c.g.cfg.Clock.Now(), Fields: map[string]string{"reason": reason, "remote": c.remote}}); err != nil && ctx.Err() == nil {
		c.g.log.Warn("save agent event", "agent", c.agent.ID, "err", err)
	}
	return nil, reason
}
