package wire

import (
	"errors"
	"time"
)

// Assignment dispatch (version 4; docs/CLAIMS.md, "Dispatch modes"). In a
// tenant's assign mode the panel chooses one warm actor per job and grants
// it the job in the commit that records the job: the claim is written
// ACTING at once, so the actor needs no lease request and no act request.
// Just before the booking request leaves, the actor's gate asks the panel
// for a read-only fenced check (gate_check): one round trip, no commit.
// A panel sends these only to agents that negotiated version 4.

// Message types of assignment dispatch (v4).
const (
	TypeLeaseGrant Type = "lease_grant" // panel → agent: a job granted to one actor, already ACTING
	TypeGateCheck  Type = "gate_check"  // agent → panel: the fenced read-only check before the request leaves
	TypeGateResult Type = "gate_result" // panel → agent
)

// LeaseGrant gives one actor a job. The claim is ACTING with Token from the
// moment it was granted: the actor journals OperationID, runs its gate
// (local deadline, then GateCheck) and books, or reports NOT_SENT when it
// cannot act in time. A grant is never taken back by the panel: with no
// outcome by the action's deadline it becomes UNKNOWN.
type LeaseGrant struct {
	GrantID string `json:"grant_id"`
	// Worker is the actor the grant is for, inside this agent.
	Worker      string `json:"worker"`
	Job         Job    `json:"job"`
	Token       int64  `json:"token"`
	OperationID string `json:"operation_id"`
	// BookingKey is the job's booking identity: send it as the
	// Idempotency-Key. KeysHonoured is the tenant's setting (LeaseResult).
	BookingKey   string `json:"booking_key,omitempty"`
	KeysHonoured bool   `json:"keys_honoured,omitempty"`
	// GrantedAt is when the database granted it and SendBy the last moment
	// the request may leave (both the database's clock). The agent converts
	// SendBy to its own clock with the panel's measurement of its offset
	// (ClockOffsetMillis, agent minus panel) minus the measurement's error
	// bound (ClockErrorMillis), and answers NOT_SENT once that has passed.
	GrantedAt time.Time `json:"granted_at"`
	SendBy    time.Time `json:"send_by"`
	// SendWithinMillis is SendBy − GrantedAt as the database computed it.
	SendWithinMillis  int64 `json:"send_within_ms"`
	ClockOffsetMillis int64 `json:"clock_offset_ms"`
	ClockErrorMillis  int64 `json:"clock_error_ms"`
	// HardTimeoutMillis bounds the action once the request left.
	HardTimeoutMillis int64 `json:"hard_timeout_ms"`
	// SeenAt and QueuedAt are the panel's record of the first two stages.
	SeenAt   time.Time `json:"seen_at"`
	QueuedAt time.Time `json:"queued_at"`
	Cell     string    `json:"cell,omitempty"`
}

// Deadline is SendBy on the agent's clock, conservatively: the panel's
// measured offset of the agent's clock applied, minus its error bound and
// margin. Every error in the measurement only makes it earlier.
func (g LeaseGrant) Deadline(margin time.Duration) time.Time {
	return g.SendBy.Add(time.Duration(g.ClockOffsetMillis-g.ClockErrorMillis)*time.Millisecond - margin)
}

// GateCheck asks the panel, just before the booking request leaves, whether
// the grant still stands: token, holder, state ACTING, both pause switches
// and the send-by time, by the database clock. Read-only: no commit.
type GateCheck struct {
	RequestID string `json:"request_id"`
	Worker    string `json:"worker"`
	Key       string `json:"key"`
	Token     int64  `json:"token"`
}

// GateResult answers a gate check. Send only on OK; a refusal's Reason is
// one of the Reason* constants (stale_token, not_holder, wrong_state,
// paused, expired).
type GateResult struct {
	RequestID string `json:"request_id"`
	Key       string `json:"key"`
	OK        bool   `json:"ok"`
	Reason    string `json:"reason,omitempty"`
}

// MessageType implements Message.
func (LeaseGrant) MessageType() Type { return TypeLeaseGrant }

// MessageType implements Message.
func (GateCheck) MessageType() Type { return TypeGateCheck }

// MessageType implements Message.
func (GateResult) MessageType() Type { return TypeGateResult }

// validateGrant checks assignment dispatch's required fields.
func validateGrant(m Message) error {
	switch x := m.(type) {
	case LeaseGrant:
		if x.GrantID == "" || x.Worker == "" || x.Job.Key == "" || x.Token <= 0 || x.OperationID == "" || x.SendBy.IsZero() {
			return errors.New("lease_grant needs grant_id, worker, job.key, token, operation_id and send_by")
		}
	case GateCheck:
		if x.RequestID == "" || x.Worker == "" || x.Key == "" || x.Token <= 0 {
			return errors.New("gate_check needs request_id, worker, key and token")
		}
	case GateResult:
		if x.RequestID == "" || x.Key == "" {
			return errors.New("gate_result needs request_id and key")
		}
	}
	return nil
}
