package link

import (
	"math/rand/v2"
	"time"
)

// The authentication retry schedule, with its reasons.
//
// Only an explicit unknown_token answer counts. After the n-th consecutive one
// the end pauses 3 s × 2^(n−1) while that stays under 15 minutes: 3 s, 6 s,
// … 768 s (n = 1…9). A freshly deployed agent races the panel's database
// write of its token, so the first retry must be quick; a 30 s first retry
// once turned every deployment into minutes of downtime. From n = 10 on the
// pauses rise from 15 to 25 minutes: pause n falls in its own one-minute band
// [15 + (n−10), 16 + (n−10)) min, jittered inside the band, so the pauses
// never decrease and never leave 15–25 min. The 20th consecutive answer means
// the agent was deleted while its host was forgotten: the end retires, so it
// stops knocking with live credentials. From the first answer to retirement
// takes 3 h 40 min to 3 h 51 min.
//
// A welcome resets the count. Network errors, timeouts, 5xx and version
// rejects neither count nor reset (they have their own reconnect backoff).
// Answers count only from the panel installation that last welcomed the end
// (a never-welcomed end counts any), so a panel started by mistake on an
// empty database cannot make the whole fleet retire.
const (
	// AuthFirstPause is the pause after the first unknown_token answer.
	AuthFirstPause = 3 * time.Second
	// AuthSlowFrom and AuthSlowTo bound the slow phase's pauses.
	AuthSlowFrom = 15 * time.Minute
	AuthSlowTo   = 25 * time.Minute
	// RetireAfter is the consecutive unknown_token answer that retires.
	RetireAfter = 20
)

// firstSlow is the first n whose doubling pause would reach 15 minutes (10).
var firstSlow = func() int {
	n := 1
	for AuthFirstPause<<(n-1) < AuthSlowFrom {
		n++
	}
	return n
}()

// AuthPause is the pause after the n-th consecutive unknown_token answer
// (1 ≤ n < RetireAfter); jitter in [0, 1) places it inside its band.
func AuthPause(n int, jitter float64) time.Duration {
	if n < 1 {
		n = 1
	}
	if n < firstSlow {
		return AuthFirstPause << (n - 1)
	}
	jitter = min(max(jitter, 0), 0.999999)
	steps := RetireAfter - firstSlow // 10 bands of one minute
	band := (AuthSlowTo - AuthSlowFrom) / time.Duration(steps)
	k := min(n-firstSlow, steps-1)
	return AuthSlowFrom + time.Duration(k)*band + time.Duration(jitter*float64(band))
}

// Network reconnect backoff (drops, timeouts, 5xx, version rejects, answers
// from another installation): doubling from NetBackoffMin to NetBackoffMax,
// with jitter in the upper half so a fleet that lost its panel does not
// reconnect in lockstep.
const (
	NetBackoffMin = time.Second
	NetBackoffMax = time.Minute
)

// NetBackoff returns the pause before reconnect attempt n (n ≥ 1 since the
// last welcome); jitter in [0, 1] places it in the upper half.
func NetBackoff(n int, jitter float64) time.Duration {
	d := NetBackoffMin
	for i := 1; i < n && d < NetBackoffMax; i++ {
		d *= 2
	}
	d = min(d, NetBackoffMax)
	jitter = min(max(jitter, 0), 1)
	return d/2 + time.Duration(jitter*float64(d/2))
}

// Retry keeps one end's reconnect schedule and its retirement rule across
// connections. The role keeps Installation and Unknown in its state, so a
// restart neither resets the count nor forgets who welcomed it, and reads
// them back into a Retry when it starts.
type Retry struct {
	// Jitter returns numbers in [0, 1) (default math/rand/v2).
	Jitter func() float64
	// Installation is the panel installation that last welcomed this end
	// ("": never welcomed).
	Installation string
	// Unknown is the count of consecutive unknown_token answers that count.
	Unknown int

	attempt int // network attempts since the last welcome
}

// Verdict is what to do after an unknown_token answer.
type Verdict struct {
	// Counted: the answer came from the installation that welcomed this
	// end (or it never was): Unknown grew by one; keep it.
	Counted bool
	// Retire: that was the RetireAfter-th in a row; retire now, no pause.
	Retire bool
	// Pause is the wait before the next dial.
	Pause time.Duration
}

// Welcomed records a welcome from installation: it resets the count and the
// network backoff.
func (r *Retry) Welcomed(installation string) {
	r.Installation, r.Unknown, r.attempt = installation, 0, 0
}

// UnknownToken applies an unknown_token answer from installation.
func (r *Retry) UnknownToken(installation string) Verdict {
	if r.Installation != "" && installation != r.Installation {
		return Verdict{Pause: r.Failed()}
	}
	r.Unknown++
	if r.Unknown >= RetireAfter {
		return Verdict{Counted: true, Retire: true}
	}
	return Verdict{Counted: true, Pause: AuthPause(r.Unknown, r.jitter())}
}

// Failed is the pause after any other end of a connection (a failed dial,
// a drop, a 5xx, a version reject, an answer from another installation):
// the network backoff, which neither counts nor resets unknown_token answers.
func (r *Retry) Failed() time.Duration {
	r.attempt++
	return NetBackoff(r.attempt, r.jitter())
}

func (r *Retry) jitter() float64 {
	if r.Jitter == nil {
		return rand.Float64()
	}
	return r.Jitter()
}
