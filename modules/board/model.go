package board

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Place is one end of a lane.
type Place struct {
	City  string `json:"city"`
	State string `json:"state"`
}

// Load is one posting on the board, exactly as the JSON feed carries it.
type Load struct {
	ID          string    `json:"id"`
	Seq         int64     `json:"seq"`
	Origin      Place     `json:"origin"`
	Destination Place     `json:"destination"`
	Equipment   string    `json:"equipment"`
	WeightLb    int       `json:"weight_lb"`
	RateUSD     int       `json:"rate_usd"`
	Miles       int       `json:"miles"`
	PickupStart time.Time `json:"pickup_start"`
	PickupEnd   time.Time `json:"pickup_end"`
	PublishedAt time.Time `json:"published_at"`
	ExpiresAt   time.Time `json:"expires_at"`
}

// LoadSpec overrides fields of a generated load when publishing by API.
type LoadSpec struct {
	Origin      *Place `json:"origin,omitempty"`
	Destination *Place `json:"destination,omitempty"`
	Equipment   string `json:"equipment,omitempty"`
	WeightLb    int    `json:"weight_lb,omitempty"`
	RateUSD     int    `json:"rate_usd,omitempty"`
}

// Booking is one accepted booking: the board's ground truth of who holds what.
type Booking struct {
	ID             int64     `json:"id"`
	LoadID         string    `json:"load_id"`
	Client         string    `json:"client"`
	Account        string    `json:"account"`
	BookedAt       time.Time `json:"booked_at"`
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	// Source is "http" (the book endpoint), "late_commit" or "injected"
	// (the sandbox admin API).
	Source string `json:"source"`
}

// Event is one entry of the append-only event log.
type Event struct {
	Seq       int64     `json:"seq"`
	At        time.Time `json:"at"`
	Type      string    `json:"type"`
	LoadID    string    `json:"load_id,omitempty"`
	Client    string    `json:"client,omitempty"`
	Account   string    `json:"account,omitempty"`
	BookingID int64     `json:"booking_id,omitempty"`
	Detail    string    `json:"detail,omitempty"`
}

// Event types.
const (
	EvLoadPublished    = "load_published"
	EvLoadExpired      = "load_expired"
	EvBookingRequest   = "booking_request"
	EvBookingConfirmed = "booking_confirmed"
	EvBookingTaken     = "booking_taken"
	EvBookingRefused   = "booking_refused"
	EvBookingInjected  = "booking_injected"
	EvIdempotentReplay = "idempotent_replay"
	EvResponseDropped  = "response_dropped"
	EvLateCommit       = "late_commit_scheduled"
	EvServerError      = "server_error_injected"
	EvCaptchaShown     = "captcha_shown"
	EvCaptchaSolved    = "captcha_solved"
	EvLogin            = "login"
	EvLoginFailed      = "login_failed"
	EvTOTPRefused      = "totp_refused"
	EvSessionStorm     = "session_storm"
	EvAccountCreated   = "account_created"
	EvChaosChanged     = "chaos_changed"
)

// ClientStats are the oracle's figures for one client.
type ClientStats struct {
	BookingRequests        int64 `json:"booking_requests"`
	ConfirmedBookings      int64 `json:"confirmed_bookings"`
	DuplicateConfirmations int64 `json:"duplicate_confirmations"`
	TakenAnswers           int64 `json:"taken_answers"`
}

// Stats is the oracle's answer.
type Stats struct {
	AsOf                   time.Time               `json:"as_of"`
	LoadsPublished         int64                   `json:"loads_published"`
	LoadsLive              int                     `json:"loads_live"`
	BookingRequests        int64                   `json:"booking_requests"`
	ConfirmedBookings      int64                   `json:"confirmed_bookings"`
	DuplicateConfirmations int64                   `json:"duplicate_confirmations"`
	TakenAnswers           int64                   `json:"taken_answers"`
	Events                 int64                   `json:"events"`
	Clients                map[string]*ClientStats `json:"clients"`
	Chaos                  Chaos                   `json:"chaos"`
	IdempotencyKeys        bool                    `json:"idempotency_keys"`
	PublishRate            float64                 `json:"publish_rate"`
	// Dialect is the face the board serves (classic or html).
	Dialect string `json:"dialect,omitempty"`
}

var cities = []Place{
	{"Dallas", "TX"}, {"Houston", "TX"}, {"Atlanta", "GA"}, {"Chicago", "IL"}, {"Memphis", "TN"},
	{"Nashville", "TN"}, {"Denver", "CO"}, {"Phoenix", "AZ"}, {"Los Angeles", "CA"}, {"Fresno", "CA"},
	{"Portland", "OR"}, {"Seattle", "WA"}, {"Kansas City", "MO"}, {"St. Louis", "MO"}, {"Columbus", "OH"},
	{"Indianapolis", "IN"}, {"Charlotte", "NC"}, {"Jacksonville", "FL"}, {"Miami", "FL"}, {"Laredo", "TX"},
	{"Salt Lake City", "UT"}, {"Omaha", "NE"}, {"Newark", "NJ"}, {"Harrisburg", "PA"},
}

var equipment = []string{"Dry Van", "Reefer", "Flatbed", "Step Deck", "Power Only", "Hotshot"}

// generate draws a load's content from r. The id and times are set by the caller.
func generate(r *rand.Rand) Load {
	o := cities[r.IntN(len(cities))]
	d := cities[r.IntN(len(cities))]
	for d == o {
		d = cities[r.IntN(len(cities))]
	}
	miles := 150 + r.IntN(2200)
	perMile := 1.6 + r.Float64()*1.8
	return Load{
		Origin:      o,
		Destination: d,
		Equipment:   equipment[r.IntN(len(equipment))],
		WeightLb:    (5 + r.IntN(40)) * 1000,
		Miles:       miles,
		RateUSD:     int(float64(miles)*perMile/25) * 25,
	}
}

func loadID(seq int64) string { return fmt.Sprintf("LD-%06d", seq) }

func (s LoadSpec) apply(l *Load) {
	if s.Origin != nil {
		l.Origin = *s.Origin
	}
	if s.Destination != nil {
		l.Destination = *s.Destination
	}
	if s.Equipment != "" {
		l.Equipment = s.Equipment
	}
	if s.WeightLb > 0 {
		l.WeightLb = s.WeightLb
	}
	if s.RateUSD > 0 {
		l.RateUSD = s.RateUSD
	}
}
