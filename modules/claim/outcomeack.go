package claim

import "github.com/fleetwright/fleetwright/modules/wire"

// Disposition classifies an outcome's acknowledgement for the agent's
// outbox (wire.OutcomeAck.Disposition): recorded → applied; refused for
// good or already reflected by the claim (stale token, not the holder, no
// claim, wrong state) → definitive; anything else — the statement failed
// (Postgres unavailable, a replica going away) — is transient, and the agent
// keeps the report and sends it again.
func Disposition(ack wire.OutcomeAck) wire.OutcomeAck {
	switch {
	case ack.OK && ack.Reason == "":
		ack.Disposition = wire.AckApplied
	case ack.OK, ack.Reason != "" && ack.Reason != wire.ReasonInternal:
		ack.Disposition = wire.AckDefinitive
	default:
		ack.Disposition = wire.AckTransient
	}
	return ack
}
