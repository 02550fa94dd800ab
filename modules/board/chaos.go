package board

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// Layouts of the loads page.
const (
	LayoutV1 = "v1" // a table of rows with a "Book" button
	LayoutV2 = "v2" // cards with a "Reserve" button: the silent layout change
)

// Duration is a time.Duration that reads and writes JSON as "250ms".
type Duration time.Duration

// MarshalJSON writes the Go duration syntax.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON accepts "250ms" or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err := json.Unmarshal(b, &n); err != nil {
			return fmt.Errorf("duration must be a string like \"250ms\"")
		}
		*d = Duration(n)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// Chaos is the set of failure switches. Every field can be changed at run
// time through PATCH /_sandbox/chaos; only the fields present change.
type Chaos struct {
	// Latency is added before every board request (pages and /api), as a
	// distribution: "", "20ms", "fixed:20ms", "uniform:5ms-50ms",
	// "normal:40ms,10ms" (mean, standard deviation) or "exp:30ms" (mean).
	Latency string `json:"latency"`
	// ErrorRate is the fraction of board requests answered 503 without effect.
	ErrorRate float64 `json:"error_rate"`
	// BookErrorRate is the fraction of booking requests answered 503
	// without effect while every other request works: the booking API
	// failing while the feed still shows loads.
	BookErrorRate float64 `json:"book_error_rate,omitempty"`
	// DropResponseRate is the fraction of bookings that commit and then
	// have their connection closed with no response: an UNKNOWN outcome.
	DropResponseRate float64 `json:"drop_response_rate"`
	// DropReusedResponseRate is the fraction of bookings that arrive on a
	// reused keep-alive connection (one that carried an earlier request),
	// commit, and then have that connection closed with no response: what
	// a proxy's idle timeout, a load balancer's reset or a restart does to
	// a real board. A client stack that resends a request whose reused
	// connection closed before any answer books twice here.
	DropReusedResponseRate float64 `json:"drop_reused_response_rate,omitempty"`
	// LateCommitRate is the fraction of bookings answered 504 at once and
	// committed LateCommitDelay later, after the client has given up.
	LateCommitRate  float64  `json:"late_commit_rate"`
	LateCommitDelay Duration `json:"late_commit_delay"`
	// Hold keeps each booking request open this long before handling it,
	// so a test can kill a worker in the middle of its action.
	Hold Duration `json:"hold"`
	// SessionStormEvery expires every session at this interval (0: never).
	SessionStormEvery Duration `json:"session_storm_every"`
	// CaptchaRate is the fraction of bookings answered with a captcha
	// interstitial instead of being processed.
	CaptchaRate float64 `json:"captcha_rate"`
	// Layout is the loads page's markup: v1 or v2.
	Layout string `json:"layout"`
}

func (c Chaos) validate() error {
	for name, v := range map[string]float64{
		"error_rate": c.ErrorRate, "book_error_rate": c.BookErrorRate, "drop_response_rate": c.DropResponseRate,
		"drop_reused_response_rate": c.DropReusedResponseRate,
		"late_commit_rate":          c.LateCommitRate, "captcha_rate": c.CaptchaRate,
	} {
		if v < 0 || v > 1 || math.IsNaN(v) {
			return fmt.Errorf("%s must be between 0 and 1, got %v", name, v)
		}
	}
	if c.LateCommitDelay < 0 || c.Hold < 0 || c.SessionStormEvery < 0 {
		return fmt.Errorf("durations must not be negative")
	}
	if c.Layout != LayoutV1 && c.Layout != LayoutV2 {
		return fmt.Errorf("layout must be %s or %s, got %q", LayoutV1, LayoutV2, c.Layout)
	}
	if _, err := parseLatency(c.Latency); err != nil {
		return err
	}
	return nil
}

// latency is a parsed distribution of added delay.
type latency struct {
	kind     string
	a, b     time.Duration
	disabled bool
}

func parseLatency(spec string) (latency, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" || spec == "0" || spec == "none" {
		return latency{disabled: true}, nil
	}
	kind, arg, ok := strings.Cut(spec, ":")
	if !ok {
		kind, arg = "fixed", spec
	}
	bad := func(err error) (latency, error) {
		return latency{}, fmt.Errorf("latency %q: %v (want 20ms, uniform:5ms-50ms, normal:40ms,10ms or exp:30ms)", spec, err)
	}
	two := func(sep string) (time.Duration, time.Duration, error) {
		x, y, ok := strings.Cut(arg, sep)
		if !ok {
			return 0, 0, fmt.Errorf("needs two durations separated by %q", sep)
		}
		a, err := time.ParseDuration(strings.TrimSpace(x))
		if err != nil {
			return 0, 0, err
		}
		b, err := time.ParseDuration(strings.TrimSpace(y))
		return a, b, err
	}
	l := latency{kind: kind}
	var err error
	switch kind {
	case "fixed", "exp":
		l.a, err = time.ParseDuration(arg)
	case "uniform":
		l.a, l.b, err = two("-")
		if err == nil && l.b < l.a {
			err = fmt.Errorf("upper bound below lower bound")
		}
	case "normal":
		l.a, l.b, err = two(",")
	default:
		err = fmt.Errorf("unknown distribution %q", kind)
	}
	if err != nil {
		return bad(err)
	}
	if l.a < 0 || l.b < 0 {
		return bad(fmt.Errorf("negative duration"))
	}
	return l, nil
}

// sample draws one delay; never negative.
func (l latency) sample(r *rand.Rand) time.Duration {
	if l.disabled {
		return 0
	}
	var d float64
	switch l.kind {
	case "fixed":
		d = float64(l.a)
	case "uniform":
		d = float64(l.a) + r.Float64()*float64(l.b-l.a)
	case "normal":
		d = float64(l.a) + r.NormFloat64()*float64(l.b)
	case "exp":
		d = r.ExpFloat64() * float64(l.a)
	}
	if d < 0 {
		return 0
	}
	return time.Duration(d)
}

func seedRand(seed int, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), stream))
}
