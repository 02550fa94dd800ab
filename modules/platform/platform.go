// Package platform is the seam between a worker and a job platform (a load
// board): what a watcher, an actor and the reconciler need from a platform,
// independent of which platform it is. A platform is one Adapter; the
// sandbox board's is in platform/sandbox. docs/ADAPTERS.md says what a new
// adapter must implement and which guarantees each method owes the claim
// engine.
package platform

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/go-rod/rod"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/modules/traits"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Errors an adapter returns (wrapped) so workers can react without knowing
// the platform. None of them ever carries a secret.
var (
	// ErrSignedOut: the session is missing or expired; log in again.
	ErrSignedOut = errors.New("platform: signed out")
	// ErrCaptcha: the platform shows a captcha; a person must complete it.
	// Nothing in Fleetwright tries to solve one.
	ErrCaptcha = errors.New("platform: captcha: a person must complete the verification")
	// ErrCredentials: the username or password was refused.
	ErrCredentials = errors.New("platform: credentials refused")
	// ErrCodeRefused: the one-time code was refused as invalid (not reused).
	ErrCodeRefused = errors.New("platform: one-time code refused")
	// ErrCodeReused: the code's time step was already used by this account;
	// the next step's code is needed (RFC 6238 §5.2).
	ErrCodeReused = errors.New("platform: one-time code already used; waiting for the next step")
	// ErrNotSent: the local deadline refused the request before any byte of
	// it left the worker. Only this error proves NOT_SENT.
	ErrNotSent = errors.New("platform: not sent: the local deadline passed before the request left")
	// ErrUnavailable: the platform answered with a server error or could not
	// be reached (for reads; a booking's failure is an UNKNOWN result).
	ErrUnavailable = errors.New("platform: unavailable")
)

// Credentials are the account's credentials as the panel sent them.
type Credentials = wire.Credentials

// ShortErr is an error's text cut to 200 bytes, for a BookResult's Detail
// (it travels to the panel and into the claim's history).
func ShortErr(err error) string {
	m := err.Error()
	if len(m) > 200 {
		m = m[:200]
	}
	return m
}

// BookResult is how one booking attempt ended, in the claim engine's terms.
type BookResult struct {
	// Result is wire.ResultConfirmed, ResultTaken, ResultNotSent or
	// ResultUnknown. Anything after which the platform may have committed
	// (timeout, 5xx, lost connection, an answer the adapter cannot read) is
	// UNKNOWN: the reconciler settles it; it is never retried blind.
	Result string
	// SentAt is when the request left the worker (zero for NOT_SENT).
	SentAt time.Time
	// ConfirmedAt is when the answer confirming the booking arrived.
	ConfirmedAt time.Time
	// BookingID is the platform's booking id (CONFIRMED).
	BookingID string
	// Captcha is set when the platform answered with a captcha: the worker
	// must stop and ask for a person.
	Captcha bool
	// SignedOut is set when the platform answered that the session expired.
	SignedOut bool
	// Detail is a short, secret-free explanation for the console.
	Detail string
}

// Bookings is one page of the client's bookings as the platform listed
// them, from a cursor ("" for the start).
type Bookings struct {
	// Complete is true only when the platform proved this page whole
	// (signed in, well formed, nothing missing between the cursor and
	// Next, or the end of the list when Next is empty). An incomplete
	// answer must never release a claim.
	Complete bool
	AsOf     time.Time
	Bookings []wire.Booking
	// Next is the cursor of the following page ("": this page ends the
	// list). Cursors are the adapter's own and valid for any account of
	// the same client.
	Next string
	// Client is the platform client the session is signed in as, as the
	// platform said ("" if it does not say).
	Client string
}

// Filter keeps the bookings of keys (all when empty) booked at or after
// since (all when zero).
func (b Bookings) Filter(keys []string, since time.Time) []wire.Booking {
	want := map[string]bool{}
	for _, k := range keys {
		want[k] = true
	}
	out := []wire.Booking{}
	for _, bk := range b.Bookings {
		if len(want) > 0 && !want[bk.Key] {
			continue
		}
		if !since.IsZero() && bk.BookedAt.Before(since) {
			continue
		}
		out = append(out, bk)
	}
	return out
}

// Gate is called at the last possible moment before a booking request
// leaves: right before its bytes are written (HTTP), or when the browser's
// request is intercepted (CDP Fetch.requestPaused). An error refuses the
// request: nothing is sent and the result is NOT_SENT.
type Gate func() error

// SessionOptions configure an HTTP session.
type SessionOptions struct {
	// Traits give the user agent, Accept-Language and the header order.
	Traits traits.Traits
	// Timeout bounds each request (a booking's hard timeout is its
	// context's deadline).
	Timeout time.Duration
	// Clock stamps the times a booking reports (sent, confirmed): the
	// agent's clock, whose offset to the panel's its pings measure (nil:
	// the wall clock).
	Clock clock.Clock
	// Admit, when set, is called for every request the session sends, right
	// before it is written (after a booking's Gate): the agent's request
	// budget counts it, or refuses it with an error (nothing is sent).
	// An adapter passes it to its Transport.
	Admit func(*http.Request) error
	// Dial, when set, opens every connection the session makes: the
	// agent's egress guard, which admits the board's origin only, so a
	// redirect or a link elsewhere is never dialled. An adapter passes it
	// to its Transport. nil: a plain dial.
	Dial DialFunc
}

// DialFunc opens a connection to host:port (net.Dialer.DialContext's shape).
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Guarded is implemented by an adapter that sends requests of its own,
// outside any session (like Metered): SetDial gives it the dial every such
// request uses (SessionOptions.Dial).
type Guarded interface {
	SetDial(dial DialFunc)
}

// Session is one account's signed-in session over plain HTTP.
type Session interface {
	// Login signs in with password and a one-time code from codes (which
	// waits for the next step when the platform says the code was used).
	Login(ctx context.Context, creds Credentials, codes *TOTP) error
	// Check keeps the session warm: a cheap signed-in request. It returns
	// ErrSignedOut when the session ended.
	Check(ctx context.Context) error
	// Jobs returns the jobs published since the previous call (a watch over
	// plain HTTP), with the platform's published_at.
	Jobs(ctx context.Context) ([]wire.Job, error)
	// Book books one job. idemKey is sent as the idempotency key where the
	// platform takes one: the job's booking key (the same on every attempt
	// of the job), or the operation id from a v3 panel. gate is called right before the request's
	// bytes leave; if it refuses, the result is NOT_SENT.
	Book(ctx context.Context, key, idemKey string, gate Gate) BookResult
	// Bookings lists one page of the client's bookings from cursor ("":
	// the start), with proof of completeness.
	Bookings(ctx context.Context, cursor string) (Bookings, error)
	// Cookies returns the session's cookies (to keep in the agent's state);
	// SetCookies adopts stored ones (another worker's fresh login).
	Cookies() []*http.Cookie
	SetCookies(cookies []*http.Cookie)
}

// PageState is what a browser page shows, as far as a worker cares.
type PageState int

// Page states.
const (
	PageOK PageState = iota
	PageSignedOut
	PageCaptcha
	// PageBroken: the page is at the jobs view's address but is not the
	// working view — an error page the platform served (a 5xx while it
	// loaded). Its scripts never run, so a watcher on it is blind while it
	// looks warm: the worker loads the view again.
	PageBroken
)

func (s PageState) String() string {
	switch s {
	case PageSignedOut:
		return "signed_out"
	case PageCaptcha:
		return "captcha"
	case PageBroken:
		return "broken"
	}
	return "ok"
}

// Browser is the platform seen through a real browser page.
type Browser interface {
	// Login signs the page in (form fields, then the one-time code) and
	// leaves it on the jobs view.
	Login(ctx context.Context, page *rod.Page, creds Credentials, codes *TOTP) error
	// JobsURL is the page a watcher and a browser actor keep open.
	JobsURL() string
	// IsJobsRequest tells the page's own requests whose responses carry
	// jobs as JSON (by method, URL and body: a GraphQL operation name),
	// read by the watcher through CDP network events (never the DOM).
	IsJobsRequest(method string, u *url.URL, body []byte) bool
	// ParseJobs decodes such a response body.
	ParseJobs(body []byte) ([]wire.Job, error)
	// IsSignedOutResponse tells a jobs response that says the session ended.
	IsSignedOutResponse(status int) bool
	// BookRequestPattern is the CDP Fetch URL pattern of the booking request,
	// and IsBookRequest confirms a paused request is one.
	BookRequestPattern() string
	IsBookRequest(method string, u *url.URL, body []byte) bool
	// BookRequestKey reads the job key from a booking request (its URL or
	// body), so the actor lets only the booking of its own job leave.
	BookRequestKey(u *url.URL, body []byte) string
	// IdempotencyHeader is the request header that carries the booking key
	// ("" if the platform takes none).
	IdempotencyHeader() string
	// ClickBook clicks the job's booking control on the page (waiting for
	// it to appear within ctx).
	ClickBook(ctx context.Context, page *rod.Page, key string) error
	// ParseBookResponse maps the booking answer to a result.
	ParseBookResponse(status int, header http.Header, body []byte) BookResult
	// State detects a captcha, a signed-out page, or a jobs view that is
	// an error page (PageBroken).
	State(ctx context.Context, page *rod.Page) (PageState, error)
	// Bookings lists one page of the client's bookings from cursor, from
	// inside the signed-in page.
	Bookings(ctx context.Context, page *rod.Page, cursor string) (Bookings, error)
}

// ServerTimer is implemented by a browser side whose jobs responses carry
// the platform's own clock in the body, finer than the Date header every
// HTTP answer has. Watchers read the platform's clock offset from it, so the
// panel can put published_at on its own clock (docs/CLAIMS.md).
type ServerTimer interface {
	// ServerTime reads the platform's time from a jobs response body
	// (false when the body carries none).
	ServerTime(body []byte) (time.Time, bool)
}

// Adapter is one platform.
type Adapter interface {
	// Name is the platform's name in worker settings ("sandbox").
	Name() string
	// NewSession returns a signed-out HTTP session.
	NewSession(opts SessionOptions) (Session, error)
	// Browser returns the browser side.
	Browser() Browser
}

// KeyPolicy is implemented by an adapter whose platform states whether it
// honours idempotency keys (replays a repeated key instead of booking
// again). The agent compares it with the tenant's setting, which the lease
// carries, and refuses to claim when they disagree (CheckKeys).
type KeyPolicy interface {
	HonoursIdempotencyKeys(ctx context.Context) (bool, error)
}

// Metered is implemented by an adapter that sends requests of its own,
// outside any session (the sandbox's idempotency status read): SetAdmit
// gives it the account's request budget hook (SessionOptions.Admit), called
// right before each such request; an error sends nothing.
type Metered interface {
	SetAdmit(admit func(*http.Request) error)
}

// ErrKeysMismatch: the tenant's setting and the platform disagree on
// whether idempotency keys are honoured. Claiming stops until an admin
// fixes the setting (or the platform's configuration).
var ErrKeysMismatch = errors.New("platform: idempotency keys: the tenant's setting does not match the platform")

// CheckKeys compares the tenant's setting (honoured) with what the platform
// says, when the adapter can tell (KeyPolicy); an adapter that cannot is
// trusted to the setting. A mismatch wraps ErrKeysMismatch and says what to
// change; a failed read is returned as it is (do not claim on it either).
func CheckKeys(ctx context.Context, ad Adapter, honoured bool) error {
	kp, ok := ad.(KeyPolicy)
	if !ok {
		return nil
	}
	board, err := kp.HonoursIdempotencyKeys(ctx)
	if err != nil {
		return fmt.Errorf("platform: %s: cannot read whether it honours idempotency keys: %w", ad.Name(), err)
	}
	if board == honoured {
		return nil
	}
	if honoured {
		return fmt.Errorf("%w: the tenant's setting says %s honours idempotency keys, but the platform says it does not: "+
			"a second attempt could book the job twice; an admin must turn the setting off (Claim settings) or turn keys on at the platform",
			ErrKeysMismatch, ad.Name())
	}
	return fmt.Errorf("%w: the platform %s honours idempotency keys, but the tenant's setting says it does not: "+
		"an admin must turn the setting on (Claim settings) so the engine knows a retry is safe", ErrKeysMismatch, ad.Name())
}

// Factory builds an adapter for one account's platform base URL.
type Factory func(baseURL string) (Adapter, error)
