// Package claim is the claim engine: exactly one lease per job in Postgres,
// fencing tokens, the fenced start of an action, outcome reports, UNKNOWN and
// its reconciliation. Only the panel runs these statements, on behalf of the
// authenticated agents.
package claim

// State is where a claim stands. DETECTED and QUEUED happen before a claim
// row exists (in the watcher and the cell's Redis); a row starts at LEASED.
type State string

// The claim states (ARCHITECTURE.md §3).
const (
	Detected  State = "DETECTED"
	Queued    State = "QUEUED"
	Leased    State = "LEASED"
	Acting    State = "ACTING"
	Confirmed State = "CONFIRMED"
	Taken     State = "TAKEN"
	NotSent   State = "NOT_SENT"
	Unknown   State = "UNKNOWN"
	Released  State = "RELEASED"
)

// GivenUp is the outcome of a job released after an UNKNOWN where booking it
// again is not safe (the platform does not honour idempotency keys): the
// claim rests RELEASED and is never leased again. Only late evidence of a
// booking moves it (to CONFIRMED).
const GivenUp = "GIVEN_UP"

// Transitions lists every legal move of a claim row. The database enforces
// the same table in claim_transition_check() (migrations/0101_grant.sql);
// a test checks that the two agree pair by pair. NOT_SENT is an outcome, not
// a resting state: it leaves the claim RELEASED at once. LEASED → CONFIRMED
// and RELEASED → CONFIRMED are late evidence: an earlier attempt's booking
// applied to the job's claim, always with a fresh token (FreshToken).
// RELEASED → ACTING is a re-grant in assign mode (a fresh token too); an
// expired LEASED re-granted is LEASED → ACTING with a new token.
var Transitions = map[State][]State{
	Leased:   {Leased, Acting, Released, Confirmed},
	Released: {Leased, Acting, Confirmed},
	Acting:   {Confirmed, Taken, Released, Unknown},
	Unknown:  {Confirmed, Released},
}

// FreshToken reports whether a move must take a new fencing token: a
// re-lease, and late evidence taking the job from a lease that never acted
// (so that holder's act statement fails) or from a release.
func FreshToken(from, to State) bool {
	return (from == Leased && to == Leased) || ((from == Leased || from == Released) && to == Confirmed) ||
		(from == Released && to == Acting)
}

// Initial are the states a claim row may start in: LEASED (a lease), or
// ACTING (a grant in assign mode, written with its start and deadline).
var Initial = []State{Leased, Acting}

// LegalWith is Legal for a row whose last outcome is outcome: a release
// given up after an UNKNOWN is never leased or granted again.
func LegalWith(from, to State, outcome string) bool {
	if from == Released && (to == Leased || to == Acting) && outcome == GivenUp {
		return false
	}
	return Legal(from, to)
}

// Stored are the states a claim row can hold.
var Stored = []State{Leased, Acting, Confirmed, Taken, Unknown, Released}

// Legal reports whether a row may move from one state to another.
func Legal(from, to State) bool {
	for _, s := range Transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Final reports whether no transition leaves s.
func (s State) Final() bool { return len(Transitions[s]) == 0 }

// Stored reports whether a claim row can hold s.
func (s State) Stored() bool {
	for _, x := range Stored {
		if x == s {
			return true
		}
	}
	return false
}
