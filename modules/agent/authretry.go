package agent

import "time"

// The authentication retry schedule, with its reasons.
//
// Only an explicit unknown_token answer counts. After the n-th consecutive one
// the agent pauses 3 s × 2^(n−1) while that stays under 15 minutes: 3 s, 6 s,
// … 768 s (n = 1…9). A freshly deployed agent races the panel's database
// write of its token, so the first retry must be quick; a 30 s first retry
// once turned every deployment into minutes of downtime. From n = 10 on the
// pauses rise from 15 to 25 minutes: pause n falls in its own one-minute band
// [15 + (n−10), 16 + (n−10)) min, jittered inside the band, so the pauses
// never decrease and never leave 15–25 min. The 20th consecutive answer means
// the account was deleted while the agent's host was forgotten: it wipes its
// credentials, cookies and token, marks itself retired and exits with
// ExitRetired, so it stops knocking with live credentials. From the first
// answer to retirement takes 3 h 40 min to 3 h 51 min.
//
// A welcome resets the count. Network errors, timeouts, 5xx and version
// rejects neither count nor reset (they have their own reconnect backoff).
// Answers count only from the panel installation that last welcomed the
// agent (a never-welcomed agent counts any), so a panel started by mistake on
// an empty database cannot make the whole fleet wipe itself.
const (
	// AuthFirstPause is the pause after the first unknown_token answer.
	AuthFirstPause = 3 * time.Second
	// AuthSlowFrom and AuthSlowTo bound the slow phase's pauses.
	AuthSlowFrom = 15 * time.Minute
	AuthSlowTo   = 25 * time.Minute
	// RetireAfter is the consecutive unknown_token answer that retires the agent.
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

// netBackoff returns the pause before reconnect attempt n (n ≥ 1 since the
// last welcome).
func netBackoff(n int, jitter float64) time.Duration {
	d := NetBackoffMin
	for i := 1; i < n && d < NetBackoffMax; i++ {
		d *= 2
	}
	d = min(d, NetBackoffMax)
	jitter = min(max(jitter, 0), 1)
	return d/2 + time.Duration(jitter*float64(d/2))
}
