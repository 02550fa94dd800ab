package wire

import (
	"errors"
	"time"
)

// Job is a job on the platform as a watcher read it from the platform's own
// JSON: the facts a tenant's filters decide on.
type Job struct {
	// Key is the platform's id of the job (a load id): the claim key.
	Key         string    `json:"key"`
	PublishedAt time.Time `json:"published_at"`
	ExpiresAt   time.Time `json:"expires_at,omitempty"`
	Origin      string    `json:"origin,omitempty"`
	Destination string    `json:"destination,omitempty"`
	Equipment   string    `json:"equipment,omitempty"`
	WeightLbs   int       `json:"weight_lbs,omitempty"`
	Miles       int       `json:"miles,omitempty"`
	// RateCents is the offered rate in cents.
	RateCents   int64     `json:"rate_cents,omitempty"`
	PickupStart time.Time `json:"pickup_start,omitempty"`
	PickupEnd   time.Time `json:"pickup_end,omitempty"`
}

// Sighting is one job a watcher saw, with the agent's clock when it saw it.
type Sighting struct {
	Job    Job       `json:"job"`
	SeenAt time.Time `json:"seen_at"`
}

// Detected reports jobs a watcher saw (DETECTED). Watchers batch what one
// response of the platform held.
type Detected struct {
	Worker    string     `json:"worker"`
	Sightings []Sighting `json:"sightings"`
	// BoardClock is the watcher's latest reading of the platform's clock
	// against the agent's (v5), so the panel can put the platform's
	// published_at on its own clock and say how sure it is. Absent when the
	// platform's answers carry no time the adapter reads.
	BoardClock *BoardClock `json:"board_clock,omitempty" since:"5"`
}

// BoardClock is the platform's clock minus the agent's, measured NTP-style
// from one feed request: the agent's clock when it was sent and when its
// answer arrived, the platform's server time inside the answer. The true
// offset is within OffsetMicros ± ErrorMicros (half the round trip).
type BoardClock struct {
	OffsetMicros int64 `json:"offset_us"`
	ErrorMicros  int64 `json:"error_us"`
	// MeasuredAt is the agent's clock when the chosen reading's answer
	// arrived.
	MeasuredAt time.Time `json:"measured_at"`
}

// Offset is the platform's clock minus the agent's.
func (b BoardClock) Offset() time.Duration { return time.Duration(b.OffsetMicros) * time.Microsecond }

// ErrorBound is the reading's uncertainty.
func (b BoardClock) ErrorBound() time.Duration {
	return time.Duration(b.ErrorMicros) * time.Microsecond
}

// Offer tells an agent that a job matching its tenant's filters is queued:
// its actors may race for the lease. Offers are not persisted: a lost offer
// costs a chance, never a duplicate.
type Offer struct {
	OfferID string `json:"offer_id"`
	Job     Job    `json:"job"`
	// SeenAt (corrected to the panel's clock) and QueuedAt are the panel's
	// record of the first two stages, for the latency report.
	SeenAt   time.Time `json:"seen_at"`
	QueuedAt time.Time `json:"queued_at"`
	Cell     string    `json:"cell"`
	// KeysHonoured is the tenant's setting "the platform honours
	// idempotency keys" (v4): an adapter that can read the platform's own
	// status skips an offer it would have to refuse (see LeaseResult).
	KeysHonoured bool `json:"keys_honoured,omitempty" since:"4"`
}

// LeaseRequest asks for the lease of a job for one of the agent's actors.
type LeaseRequest struct {
	RequestID string `json:"request_id"`
	Worker    string `json:"worker"`
	Key       string `json:"key"`
	OfferID   string `json:"offer_id,omitempty"`
}

// Refusal reasons in results (append-only).
const (
	ReasonHeld       = "held"        // another worker holds or settled the job
	ReasonPaused     = "paused"      // the fleet or the tenant is paused
	ReasonFiltered   = "filtered"    // the tenant's filters refuse the job
	ReasonCapReached = "cap_reached" // the tenant's daily booking cap is reached
	ReasonReview     = "review"      // waiting for an operator's approval
	ReasonStaleToken = "stale_token" // the token is no longer the claim's
	ReasonNotHolder  = "not_holder"  // another worker holds the claim
	ReasonExpired    = "expired"     // the lease ended by the database clock
	ReasonWrongState = "wrong_state" // the claim is not in the state required
	ReasonUnknownJob = "unknown_job" // no offer or claim for that key
	ReasonInternal   = "internal"    // the panel failed; treat as not granted
)

// LeaseResult answers a lease request. Only a granted result carries a token.
type LeaseResult struct {
	RequestID string `json:"request_id"`
	Key       string `json:"key"`
	Granted   bool   `json:"granted"`
	Token     int64  `json:"token,omitempty"`
	// OperationID names the attempt: journal it before acting, send it as
	// the idempotency key where the platform takes one.
	OperationID string `json:"operation_id,omitempty"`
	// RemainingMillis is the lease time left as the database computed it.
	// The actor's deadline is its monotonic send time of the request plus
	// this, minus a safety margin.
	RemainingMillis int64 `json:"remaining_ms,omitempty"`
	// HardTimeoutMillis bounds the action once started; past it the panel
	// treats the claim as UNKNOWN.
	HardTimeoutMillis int64  `json:"hard_timeout_ms,omitempty"`
	Reason            string `json:"reason,omitempty"`
	// BookingKey (v4) is the job's booking identity, the same on every lease
	// of the job: send it as the Idempotency-Key (OperationID stays the
	// attempt's name in the journal). A v3 peer sends OperationID instead.
	BookingKey string `json:"booking_key,omitempty" since:"4"`
	// KeysHonoured (v4) is the tenant's setting that its platform honours
	// idempotency keys. An adapter that can read the platform's own status
	// refuses to act when the two disagree.
	KeysHonoured bool `json:"keys_honoured,omitempty" since:"4"`
}

// ActRequest asks for the fenced LEASED → ACTING transition.
type ActRequest struct {
	RequestID string `json:"request_id"`
	Worker    string `json:"worker"`
	Key       string `json:"key"`
	Token     int64  `json:"token"`
}

// ActResult answers an act request. Act only on OK.
type ActResult struct {
	RequestID   string `json:"request_id"`
	Key         string `json:"key"`
	OK          bool   `json:"ok"`
	OperationID string `json:"operation_id,omitempty"`
	Reason      string `json:"reason,omitempty"`
}

// Outcome results (append-only).
const (
	ResultConfirmed = "CONFIRMED"
	ResultTaken     = "TAKEN"
	ResultNotSent   = "NOT_SENT"
	ResultUnknown   = "UNKNOWN"
)

// Outcome reports how an action ended. UNKNOWN is anything after which the
// platform may have committed (timeout, 5xx, lost connection, crash).
type Outcome struct {
	RequestID   string     `json:"request_id"`
	Worker      string     `json:"worker"`
	Key         string     `json:"key"`
	Token       int64      `json:"token"`
	OperationID string     `json:"operation_id"`
	Result      string     `json:"result"`
	SentAt      *time.Time `json:"sent_at,omitempty"`
	ConfirmedAt *time.Time `json:"confirmed_at,omitempty"`
	Detail      string     `json:"detail,omitempty"`
	// FromJournal marks an in-flight action found in the journal after a
	// restart (always UNKNOWN).
	FromJournal bool `json:"from_journal,omitempty"`
}

// OutcomeAck acknowledges an outcome; the agent keeps the journal entry
// until it arrives.
type OutcomeAck struct {
	RequestID string `json:"request_id"`
	OK        bool   `json:"ok"`
	Reason    string `json:"reason,omitempty"`
	// Disposition (v4) says what the agent does with its queued report:
	// AckApplied and AckDefinitive drop it, AckTransient keeps it and sends
	// it again with backoff. A v3 agent is never sent a transient answer:
	// the panel withholds the acknowledgement, and the agent sends the
	// report again on its next connection.
	Disposition string `json:"disposition,omitempty" since:"4"`
}

// Outcome acknowledgement dispositions (append-only).
const (
	AckApplied    = "applied"    // the report was recorded
	AckDefinitive = "definitive" // refused for good, or the claim already moved on: nothing to retry
	AckTransient  = "transient"  // the panel could not record it now (database unavailable, replica going away): retry
)

// Lookup asks an agent to look up its client's bookings on the platform, for
// the reconciler. The panel holds no platform credentials of its own.
type Lookup struct {
	RequestID string `json:"request_id"`
	// Keys limits the answer to these jobs (empty: every booking since Since).
	Keys  []string  `json:"keys,omitempty"`
	Since time.Time `json:"since,omitempty"`
	// Cursor continues a paged look-up: the Next of the previous answer
	// (empty: from the start). Version 4; a v3 agent answers in one message.
	Cursor string `json:"cursor,omitempty" since:"4"`
}

// Booking is one booking of the client on the platform.
type Booking struct {
	Key       string    `json:"key"`
	BookingID string    `json:"booking_id"`
	BookedAt  time.Time `json:"booked_at"`
	// Account is the platform account that made it.
	Account string `json:"account,omitempty"`
}

// LookupResult answers a lookup. Complete is true only when the platform's
// answer proved itself complete (signed in, every page): an incomplete or
// failed look-up must never release a claim.
type LookupResult struct {
	RequestID string    `json:"request_id"`
	Complete  bool      `json:"complete"`
	Bookings  []Booking `json:"bookings"`
	Error     string    `json:"error,omitempty"`
	// Next is set when the list continues: ask again with Cursor = Next.
	// Complete then says this part is proven (every platform page between
	// the cursor and Next read while signed in); the whole list is proven
	// once every part was and the last has no Next. Version 4: a v4 agent
	// keeps each answer under MaxMessageBytes this way.
	Next string `json:"next,omitempty" since:"4"`
	// Client is the platform client the answering session is signed in as,
	// as the platform itself said (version 4). The panel accepts a look-up
	// only from an account of the claim's own client.
	Client string `json:"client,omitempty" since:"4"`
}

// MessageType implements Message.
func (Detected) MessageType() Type { return TypeDetected }

// MessageType implements Message.
func (Offer) MessageType() Type { return TypeOffer }

// MessageType implements Message.
func (LeaseRequest) MessageType() Type { return TypeLeaseRequest }

// MessageType implements Message.
func (LeaseResult) MessageType() Type { return TypeLeaseResult }

// MessageType implements Message.
func (ActRequest) MessageType() Type { return TypeActRequest }

// MessageType implements Message.
func (ActResult) MessageType() Type { return TypeActResult }

// MessageType implements Message.
func (Outcome) MessageType() Type { return TypeOutcome }

// MessageType implements Message.
func (OutcomeAck) MessageType() Type { return TypeOutcomeAck }

// MessageType implements Message.
func (Lookup) MessageType() Type { return TypeLookup }

// MessageType implements Message.
func (LookupResult) MessageType() Type { return TypeLookupResult }

// validateClaim checks the claim messages' required fields.
func validateClaim(m Message) error {
	switch x := m.(type) {
	case Detected:
		if x.Worker == "" || len(x.Sightings) == 0 {
			return errors.New("detected needs a worker and sightings")
		}
		for _, s := range x.Sightings {
			if s.Job.Key == "" {
				return errors.New("detected has a sighting without a job key")
			}
		}
	case Offer:
		if x.OfferID == "" || x.Job.Key == "" {
			return errors.New("offer needs offer_id and job.key")
		}
	case LeaseRequest:
		if x.RequestID == "" || x.Worker == "" || x.Key == "" {
			return errors.New("lease_request needs request_id, worker and key")
		}
	case LeaseResult:
		if x.RequestID == "" || x.Key == "" || (x.Granted && (x.Token <= 0 || x.OperationID == "")) {
			return errors.New("lease_result needs request_id and key, and a token and operation_id when granted")
		}
	case ActRequest:
		if x.RequestID == "" || x.Worker == "" || x.Key == "" || x.Token <= 0 {
			return errors.New("act_request needs request_id, worker, key and token")
		}
	case ActResult:
		if x.RequestID == "" || x.Key == "" {
			return errors.New("act_result needs request_id and key")
		}
	case Outcome:
		if x.RequestID == "" || x.Worker == "" || x.Key == "" || x.Token <= 0 {
			return errors.New("outcome needs request_id, worker, key and token")
		}
		switch x.Result {
		case ResultConfirmed, ResultTaken, ResultNotSent, ResultUnknown:
		default:
			return errors.New("outcome has an unknown result")
		}
	case OutcomeAck:
		if x.RequestID == "" {
			return errors.New("outcome_ack needs request_id")
		}
	case Lookup:
		if x.RequestID == "" {
			return errors.New("lookup needs request_id")
		}
	case LookupResult:
		if x.RequestID == "" {
			return errors.New("lookup_result needs request_id")
		}
	}
	return nil
}
