// Package spec is the platform schema: a job platform (a load board)
// described as versioned data an admin can write, check and keep, read by
// the spec-driven adapter (platform/engine). Parse reads a YAML (or JSON)
// file, fills the defaults and validates every field, naming each error's
// field path and line. docs/ADAPTERS.md is the reference of the format.
//
// Expressions are kept libraries, not a language of our own: JSON paths are
// gjson's syntax (github.com/tidwall/gjson), HTML selectors are CSS
// (cascadia), regular expressions are Go's, and templates are text/template
// over a fixed set of variables that validation checks.
package spec

import "time"

// Version is the one schema version this build reads.
const Version = 1

// Spec is one platform.
type Spec struct {
	// Version of the schema (1).
	Version int `yaml:"version"`
	// Name is the platform's name in worker settings ("sandbox").
	Name string `yaml:"name"`
	// Origins are the origins (scheme://host[:port]) the account's
	// credentials may be sent to besides the account's own base URL. A
	// sign-in request or redirect to any other origin is refused.
	Origins []string `yaml:"origins"`
	// Limits are the platform's own limits: defaults for a tenant's.
	Limits Limits `yaml:"limits"`
	// SignIn is the sign-in over HTTP.
	SignIn SignIn `yaml:"sign_in"`
	// Session says how the signed-in session is carried and checked.
	Session Session `yaml:"session"`
	// Feed is the jobs feed.
	Feed Feed `yaml:"feed"`
	// Booking is the booking request and how its answer is read.
	Booking Booking `yaml:"booking"`
	// Bookings is the look-up of the client's bookings.
	Bookings Bookings `yaml:"bookings"`
	// Idempotency says whether the platform honours idempotency keys.
	Idempotency Idempotency `yaml:"idempotency"`
	// Browser is the platform in a real page (nil: over HTTP only).
	Browser *Browser `yaml:"browser"`
}

// Limits are the platform's own limits.
type Limits struct {
	// PollInterval is how often the feed may be read (default 1s).
	PollInterval Duration `yaml:"poll_interval"`
	// RequestsPerHour per account (0: the platform states none).
	RequestsPerHour int `yaml:"requests_per_hour"`
}

// Duration is a time.Duration written as Go writes one ("1s", "10m").
type Duration struct {
	D   time.Duration
	Raw string
}

// Request is an HTTP request template. Every string is a text/template over
// the variables of where it is used (docs/ADAPTERS.md lists them).
type Request struct {
	// Method (default GET).
	Method string `yaml:"method"`
	// URL is absolute, or relative to the account's base URL.
	URL string `yaml:"url"`
	// Query parameters added to the URL.
	Query map[string]string `yaml:"query"`
	// Headers set on the request (after the traits' headers).
	Headers map[string]string `yaml:"headers"`
	// Form is a form body (application/x-www-form-urlencoded).
	Form map[string]string `yaml:"form"`
	// JSON is a JSON body template (application/json).
	JSON string `yaml:"json"`
	// Body is a raw body template with ContentType.
	Body        string `yaml:"body"`
	ContentType string `yaml:"content_type"`
}

// Extractor reads one value from a response: at most one of JSON, HTML,
// Header or Cookie, and Regexp alone (on the body) or after one of them
// (on its value).
type Extractor struct {
	// JSON is a gjson path into the body.
	JSON string `yaml:"json"`
	// HTML is a CSS selector into the body; the first match's text, or
	// its Attr.
	HTML string `yaml:"html"`
	Attr string `yaml:"attr"`
	// Header is a response header's name.
	Header string `yaml:"header"`
	// Cookie is the name of a cookie the response set.
	Cookie string `yaml:"cookie"`
	// Regexp is matched against the body, or against the value of the
	// source it follows: the first group, or the whole match when it has
	// none.
	Regexp string `yaml:"regexp"`
	// Optional: an empty value is not an error.
	Optional bool `yaml:"optional"`
}

// Match tests one value: exactly one of Equals, Contains, Matches or
// Exists. Equals and Contains are templates.
type Match struct {
	Equals   *string `yaml:"equals"`
	Contains string  `yaml:"contains"`
	Matches  string  `yaml:"matches"`
	Exists   *bool   `yaml:"exists"`
}

// JSONMatch tests the value at a gjson path of the body.
type JSONMatch struct {
	Path  string `yaml:"path"`
	Match `yaml:",inline"`
}

// HeaderMatch tests a response header.
type HeaderMatch struct {
	Name  string `yaml:"name"`
	Match `yaml:",inline"`
}

// HTMLMatch tests the first element a CSS selector finds (its text, or
// Attr).
type HTMLMatch struct {
	Selector string `yaml:"selector"`
	Attr     string `yaml:"attr"`
	Match    `yaml:",inline"`
}

// Cond is a condition on a response: every test it names must hold.
type Cond struct {
	// Status is one of these HTTP statuses.
	Status []int `yaml:"status"`
	// URLPath is the final URL's path (after followed redirects).
	URLPath string `yaml:"url_path"`
	// Header, JSON and HTML test the answer.
	Header *HeaderMatch `yaml:"header"`
	JSON   *JSONMatch   `yaml:"json"`
	HTML   *HTMLMatch   `yaml:"html"`
	// Body tests the raw body.
	Body *Match `yaml:"body"`
}

// SignIn is sign-in over HTTP: steps run in order, each able to extract
// values (vars) for the later steps and the session.
type SignIn struct {
	Steps []Step `yaml:"steps"`
}

// Step is one sign-in request.
type Step struct {
	// Name names the step in errors.
	Name    string  `yaml:"name"`
	Request Request `yaml:"request"`
	// OneTimeCode: the step submits the account's one-time code
	// ({{.code}}); when CodeReused matches, the next step's code is
	// waited for and the step sent again (at most twice).
	OneTimeCode bool  `yaml:"one_time_code"`
	CodeReused  *Cond `yaml:"code_reused"`
	// FollowRedirects (default true): a form's 303 is followed, within
	// the credential origins only.
	FollowRedirects *bool `yaml:"follow_redirects"`
	// Fail rules are tried in order before Success.
	Fail []FailRule `yaml:"fail"`
	// Success must match for the step to count.
	Success Cond `yaml:"success"`
	// Extract names values read from the answer ({{.vars.NAME}} later).
	Extract map[string]Extractor `yaml:"extract"`
}

// FailRule maps an answer to a sign-in error.
type FailRule struct {
	When Cond `yaml:"when"`
	// Error is credentials, code_refused, captcha or unavailable.
	Error string `yaml:"error"`
}

// Session says how the signed-in session is carried.
type Session struct {
	// Carry is cookies (default) or header.
	Carry string `yaml:"carry"`
	// Header is set on every request after sign-in when Carry is header
	// (e.g. Authorization: Bearer {{.vars.token}}).
	Header *HeaderTemplate `yaml:"header"`
	// Check is a cheap signed-in request (keeps the session warm; may
	// extract values such as a CSRF token).
	Check *Check `yaml:"check"`
	// Refresh, when set, is sent by Check once Every has passed since the
	// sign-in or the last refresh; its extracts replace the vars.
	Refresh *Refresh `yaml:"refresh"`
	// SignedOut: any of these conditions on an answer means the session
	// ended (statuses, and body conditions for errors inside a 200).
	SignedOut []Cond `yaml:"signed_out"`
}

// HeaderTemplate is one header with a template value.
type HeaderTemplate struct {
	Name  string `yaml:"name"`
	Value string `yaml:"value"`
}

// Check is the session check.
type Check struct {
	Request Request `yaml:"request"`
	// Success must match (default: a 2xx status).
	Success *Cond                `yaml:"success"`
	Extract map[string]Extractor `yaml:"extract"`
}

// Refresh renews the session's tokens.
type Refresh struct {
	Every   Duration             `yaml:"every"`
	Request Request              `yaml:"request"`
	Success *Cond                `yaml:"success"`
	Extract map[string]Extractor `yaml:"extract"`
}

// Paging kinds.
const (
	PageCursor = "cursor" // the next cursor at a JSON path of the answer
	PageAfter  = "after"  // the next "after" is the last item's value
	PageNumber = "page"   // a page number
	PageLink   = "link"   // the next page's URL (Link header or a JSON path)
	PageOffset = "offset" // the count of items read so far ({{.offset}})
)

// Orders of a listing.
const (
	OldestFirst = "oldest_first"
	NewestFirst = "newest_first"
)

// Paging says how a listing continues.
type Paging struct {
	// Kind is cursor, after, page, link or offset.
	Kind string `yaml:"kind"`
	// Start is the first cursor or after value ("" by default), the
	// first page number (default 1), or the first offset (default 0).
	Start string `yaml:"start"`
	// Next is the gjson path of the next cursor (cursor), or of the next
	// page's URL (link; empty: the Link header's rel="next").
	Next string `yaml:"next"`
	// Value is the gjson path, within an item, of the value the next
	// request starts after (after).
	Value string `yaml:"value"`
	// More is the gjson path of a boolean "another page follows".
	More string `yaml:"more"`
	// Pages is the gjson path of the page count (page).
	Pages string `yaml:"pages"`
	// Size is the page size asked for: a page with fewer items ends the
	// listing, and one with more proves nothing. Offset paging needs it.
	Size int `yaml:"size"`
	// MaxPages is how many pages one feed poll reads (default 1).
	MaxPages int `yaml:"max_pages"`
}

// Time formats.
const (
	TimeRFC3339 = "rfc3339"
	TimeEpochS  = "epoch_s"
	TimeEpochMS = "epoch_ms"
	TimeLayout  = "layout"
)

// Field maps one value of an item.
type Field struct {
	// Path is the gjson path within the item; Paths with Join joins the
	// non-empty values of several (e.g. city and state).
	Path  string   `yaml:"path"`
	Paths []string `yaml:"paths"`
	Join  string   `yaml:"join"`
	// Time is the format of a time: rfc3339 (default), epoch_s,
	// epoch_ms, or layout (a Go layout, with Zone, ZonePath or
	// ZoneInValue for a wall-clock time).
	Time     string `yaml:"time"`
	Layout   string `yaml:"layout"`
	Zone     string `yaml:"zone"`
	ZonePath string `yaml:"zone_path"`
	// ZoneInValue: the value ends with its zone's name after the last
	// space ("2026-12-02 07:50 America/Chicago"); Layout reads the rest.
	ZoneInValue bool `yaml:"zone_in_value"`
	// Unit of a weight (lb, kg, t), a distance (mi, km) or a rate (usd,
	// cents, usd_per_mile, cents_per_mile, usd_per_km, cents_per_km).
	Unit string `yaml:"unit"`
	// Required: an item without the value is a changed answer shape.
	Required bool `yaml:"required"`
}

// Feed is the jobs feed.
type Feed struct {
	Request Request `yaml:"request"`
	Paging  Paging  `yaml:"paging"`
	// Items is the gjson path of the array of jobs.
	Items  string    `yaml:"items"`
	Fields JobFields `yaml:"fields"`
}

// JobFields map a job's fields.
type JobFields struct {
	Key         *Field `yaml:"key"`
	PublishedAt *Field `yaml:"published_at"`
	ExpiresAt   *Field `yaml:"expires_at"`
	Origin      *Field `yaml:"origin"`
	Destination *Field `yaml:"destination"`
	Equipment   *Field `yaml:"equipment"`
	Weight      *Field `yaml:"weight"`
	Distance    *Field `yaml:"distance"`
	Rate        *Field `yaml:"rate"`
	PickupStart *Field `yaml:"pickup_start"`
	PickupEnd   *Field `yaml:"pickup_end"`
}

// Booking results a rule may name.
const (
	ResultConfirmed = "confirmed"
	ResultTaken     = "taken"
	ResultExpired   = "expired"
	ResultNotFound  = "not_found"
	ResultCaptcha   = "captcha"
	ResultSignedOut = "signed_out"
	ResultUnknown   = "unknown"
)

// Booking is the booking request and its result rules.
type Booking struct {
	Request Request `yaml:"request"`
	// IdempotencyHeader carries the booking key ({{.booking_key}} is also
	// available to the request's templates).
	IdempotencyHeader string `yaml:"idempotency_header"`
	// FollowRedirects: a 301, 302 or 303 answer is followed with a GET
	// (within the platform's origins) and the rules read the page it
	// leads to, such as a confirmation page. A 307 or 308 is never
	// followed: it would send the booking again.
	FollowRedirects bool `yaml:"follow_redirects"`
	// Results are tried in order; an answer no rule matches is UNKNOWN.
	Results []ResultRule `yaml:"results"`
}

// ResultRule maps an answer to a result.
type ResultRule struct {
	When   Cond   `yaml:"when"`
	Result string `yaml:"result"`
	// BookingID reads the booking id (confirmed: required, and an answer
	// without it is UNKNOWN): from the JSON body, the HTML, a header such
	// as Location with a regexp, …
	BookingID *Extractor `yaml:"booking_id"`
}

// Bookings is the look-up of the client's bookings, one page a call.
type Bookings struct {
	Request Request `yaml:"request"`
	Paging  Paging  `yaml:"paging"`
	// Order is oldest_first (default) or newest_first; with OrderBy the
	// items must be strictly in that order or the page proves nothing.
	Order   string `yaml:"order"`
	OrderBy string `yaml:"order_by"`
	// Items is the gjson path of the array of bookings.
	Items  string        `yaml:"items"`
	Fields BookingFields `yaml:"fields"`
	// Client and AsOf are gjson paths of the page.
	Client string `yaml:"client"`
	AsOf   *Field `yaml:"as_of"`
	// EveryPage must hold on each page, or it proves nothing.
	EveryPage []Cond `yaml:"every_page"`
	// Complete is what proves the walk whole on its last page, beside the
	// paging's own end.
	Complete Completion `yaml:"complete"`
}

// BookingFields map one booking.
type BookingFields struct {
	Key       *Field `yaml:"key"`
	BookingID *Field `yaml:"booking_id"`
	BookedAt  *Field `yaml:"booked_at"`
	Account   *Field `yaml:"account"`
}

// Completion proves a walk of the bookings whole.
type Completion struct {
	// Total is the gjson path of the total count: the walk is whole when
	// the items it saw add up to it.
	Total string `yaml:"total"`
	// When must hold on the last page (e.g. a complete flag).
	When *Cond `yaml:"when"`
}

// Idempotency says whether the platform honours idempotency keys: stated
// (Honoured) or read from an endpoint (Read).
type Idempotency struct {
	Honoured *bool     `yaml:"honoured"`
	Read     *KeysRead `yaml:"read"`
}

// KeysRead reads the platform's own statement.
type KeysRead struct {
	Request Request `yaml:"request"`
	// Path is the gjson path of the boolean.
	Path string `yaml:"path"`
	// Cache is how long the answer is trusted (default 30s).
	Cache Duration `yaml:"cache"`
}
