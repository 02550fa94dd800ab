// Package wire is the panel–agent protocol: the one leaf package both roles
// import. It defines the JSON messages, the window of protocol versions the
// binary speaks, the encoder and the size-limited decoder, and the clock
// offset estimator the panel runs over ping/pong.
//
// Rules (see docs/PROTOCOL.md):
//   - Messages are append-only: add a field or a message type in a new
//     protocol version; never change or remove what a released version means.
//   - Every message type of every supported version has a golden fixture under
//     testdata/vN/, and testdata/SHA256SUMS pins the fixtures of released
//     versions, so a change without a version bump fails a test.
//   - Secrets travel as Secret, which never prints.
package wire

import (
	"errors"
	"fmt"
	"slices"
)

// Protocol versions. A released version is frozen: its messages, fields and
// fixtures never change.
const (
	// V1 is the first protocol: hello/welcome/reject, the panel's commands,
	// state reports, events, command results, ping/pong and protocol errors.
	V1 = 1
	// V2 adds to the state report the agent's memory (RSS, bytes) and each
	// worker's oldest pending task age; nothing else changed.
	V2 = 2
	// V3 adds the claim engine's messages: detected, offer, lease_request,
	// lease_result, act_request, act_result, outcome, outcome_ack, lookup and
	// lookup_result.
	V3 = 3
	// V4 adds claim safety (attempt outcomes, apply/transient/definitive
	// answers, booking keys, paged look-ups), security (credential delivery,
	// the agent's installation key), the crawler's page tasks, the assistant's
	// reports and tasks, panel limits and assignment dispatch (lease_grant,
	// gate_check, gate_result). New fields on messages that shipped earlier
	// carry the struct tag `since:"4"` so older versions never see them (see
	// sinceFields). Released: its fixtures are frozen.
	V4 = 4
	// V5 (in development, not released) adds the board's clock reading on
	// detected, the origins the credentials were sealed for on welcome
	// and rotate_credentials, and the account's platform spec on its
	// configuration. New fields on earlier messages carry `since:"5"`.
	V5 = 5

	// MinSupported is the oldest version this binary still speaks.
	MinSupported = V1
	// Current is the newest version this binary speaks.
	Current = V5
	// LatestReleased is the newest version whose fixtures are frozen. A
	// version under development (LatestReleased < v <= Current) may still
	// change; its fixtures are regenerated with -update.
	LatestReleased = V4
)

// Supported reports whether this binary speaks version v.
func Supported(v int) bool { return v >= MinSupported && v <= Current }

// IncompatibleError says that the agent's version window and the panel's do
// not overlap. It carries both ranges so a reject can name them.
type IncompatibleError struct {
	AgentVersion, AgentMin int
	PanelMin, PanelMax     int
}

func (e *IncompatibleError) Error() string {
	return fmt.Sprintf("wire: incompatible protocol versions: agent speaks %d..%d, panel speaks %d..%d",
		e.AgentMin, e.AgentVersion, e.PanelMin, e.PanelMax)
}

// ErrBadVersionRange is returned for a hello whose own range is empty or
// non-positive.
var ErrBadVersionRange = errors.New("wire: hello has an invalid version range")

// Negotiate picks the highest version both sides speak, given the agent's
// newest (agentVersion) and oldest (agentMin) versions and this binary's
// window (MinSupported..Current). When the windows do not overlap it returns
// an *IncompatibleError carrying the panel's range.
func Negotiate(agentVersion, agentMin int) (int, error) {
	return negotiate(agentVersion, agentMin, MinSupported, Current)
}

func negotiate(agentVersion, agentMin, panelMin, panelMax int) (int, error) {
	if agentMin < 1 || agentVersion < agentMin {
		return 0, ErrBadVersionRange
	}
	v := min(agentVersion, panelMax)
	if v < max(agentMin, panelMin) {
		return 0, &IncompatibleError{AgentVersion: agentVersion, AgentMin: agentMin, PanelMin: panelMin, PanelMax: panelMax}
	}
	return v, nil
}

// Type names a message. Type values are part of the protocol: never rename
// or reuse one.
type Type string

// Message types, in the order they were added (append-only).
const (
	// Version 1.
	TypeHello             Type = "hello"              // agent → panel, first message
	TypeWelcome           Type = "welcome"            // panel → agent
	TypeReject            Type = "reject"             // panel → agent, then close
	TypeConfigure         Type = "configure"          // panel → agent command
	TypePause             Type = "pause"              // panel → agent command
	TypeResume            Type = "resume"             // panel → agent command
	TypeRestartWorker     Type = "restart_worker"     // panel → agent command
	TypeRetire            Type = "retire"             // panel → agent command
	TypeRotateCredentials Type = "rotate_credentials" // panel → agent command
	TypePing              Type = "ping"               // panel → agent command, answered by pong
	TypePong              Type = "pong"               // agent → panel
	TypeState             Type = "state"              // agent → panel
	TypeEvent             Type = "event"              // agent → panel
	TypeCommandResult     Type = "command_result"     // agent → panel
	TypeError             Type = "error"              // either way, then close

	// Version 3: the claim engine.
	TypeDetected     Type = "detected"      // agent → panel: a watcher saw jobs
	TypeOffer        Type = "offer"         // panel → agent: a queued job its actors may race for
	TypeLeaseRequest Type = "lease_request" // agent → panel
	TypeLeaseResult  Type = "lease_result"  // panel → agent
	TypeActRequest   Type = "act_request"   // agent → panel: the fenced LEASED → ACTING
	TypeActResult    Type = "act_result"    // panel → agent
	TypeOutcome      Type = "outcome"       // agent → panel
	TypeOutcomeAck   Type = "outcome_ack"   // panel → agent
	TypeLookup       Type = "lookup"        // panel → agent: the reconciler's look-up of bookings
	TypeLookupResult Type = "lookup_result" // agent → panel

	// Version 4: the crawler (crawl.go).
	TypePageTask   Type = "page_task"   // panel → agent: fetch and extract one page
	TypePageResult Type = "page_result" // agent → panel
)

// typesV3 adds the claim engine's messages to version 2's.
var typesV3 = append(append([]Type(nil), typesV1...),
	TypeDetected, TypeOffer, TypeLeaseRequest, TypeLeaseResult, TypeActRequest,
	TypeActResult, TypeOutcome, TypeOutcomeAck, TypeLookup, TypeLookupResult)

// typesV4 adds version 4's messages to version 3's. Append only.
var typesV4 = append(append([]Type(nil), typesV3...),
	TypePageTask, TypePageResult, TypeAssistantReport,
	TypeLeaseGrant, TypeGateCheck, TypeGateResult, TypeAssistantTask)

// typesV5 adds version 5's messages to version 4's. Append only.
var typesV5 = slices.Clone(typesV4)

// typesV1 are the message types of version 1.
var typesV1 = []Type{
	TypeHello, TypeWelcome, TypeReject, TypeConfigure, TypePause, TypeResume,
	TypeRestartWorker, TypeRetire, TypeRotateCredentials, TypePing, TypePong,
	TypeState, TypeEvent, TypeCommandResult, TypeError,
}

// versionTypes lists the message types of each version. A new version copies
// the previous list and appends.
var versionTypes = map[int][]Type{
	V1: typesV1,
	V2: typesV1, // v2 changed fields only
	V3: typesV3,
	V4: typesV4,
	V5: typesV5,
}

// Types returns the message types of version v (nil if unsupported).
func Types(v int) []Type { return slices.Clone(versionTypes[v]) }

// InVersion reports whether message type t exists in version v.
func InVersion(t Type, v int) bool { return slices.Contains(versionTypes[v], t) }

// newMessage returns a pointer to the zero value of t's body, or nil.
func newMessage(t Type) Message {
	switch t {
	case TypeHello:
		return &Hello{}
	case TypeWelcome:
		return &Welcome{}
	case TypeReject:
		return &Reject{}
	case TypeConfigure:
		return &Configure{}
	case TypePause:
		return &Pause{}
	case TypeResume:
		return &Resume{}
	case TypeRestartWorker:
		return &RestartWorker{}
	case TypeRetire:
		return &Retire{}
	case TypeRotateCredentials:
		return &RotateCredentials{}
	case TypePing:
		return &Ping{}
	case TypePong:
		return &Pong{}
	case TypeState:
		return &State{}
	case TypeEvent:
		return &Event{}
	case TypeCommandResult:
		return &CommandResult{}
	case TypeError:
		return &Error{}
	case TypeDetected:
		return &Detected{}
	case TypeOffer:
		return &Offer{}
	case TypeLeaseRequest:
		return &LeaseRequest{}
	case TypeLeaseResult:
		return &LeaseResult{}
	case TypeActRequest:
		return &ActRequest{}
	case TypeActResult:
		return &ActResult{}
	case TypeOutcome:
		return &Outcome{}
	case TypeOutcomeAck:
		return &OutcomeAck{}
	case TypeLookup:
		return &Lookup{}
	case TypeLookupResult:
		return &LookupResult{}
	case TypePageTask:
		return &PageTask{}
	case TypePageResult:
		return &PageResult{}
	case TypeAssistantReport:
		return &AssistantReport{}
	case TypeLeaseGrant:
		return &LeaseGrant{}
	case TypeGateCheck:
		return &GateCheck{}
	case TypeGateResult:
		return &GateResult{}
	case TypeAssistantTask:
		return &AssistantTaskStart{}
	}
	return nil
}
