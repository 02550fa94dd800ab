package agent

import (
	"os"
	"sync"
	"time"

	"github.com/fleetwright/fleetwright/app/clock"
)

// ClockSkewEnv is a chaos switch of `fleetwright loadtest` (its
// agent_clock_skew kind; docs/LOADTEST.md, "The agent's chaos switches"): a
// Go duration ("-3m") added to the agent's wall clock, as on a host whose
// clock is wrong by that much. It is compiled into every build because the
// load test drives the shipped binary. Never set it on a real fleet.
const ClockSkewEnv = "FLEET_CHAOS_AGENT_CLOCK_SKEW"

// skewed is a clock offset from another by a fixed amount.
type skewed struct {
	clock.Clock
	by time.Duration
}

func (s skewed) Now() time.Time                  { return s.Clock.Now().Add(s.by) }
func (s skewed) Since(t time.Time) time.Duration { return s.Now().Sub(t) }

// clockSkew reads ClockSkewEnv (0 when unset or malformed).
func clockSkew() time.Duration {
	d, err := time.ParseDuration(os.Getenv(ClockSkewEnv))
	if err != nil {
		return 0
	}
	return d
}

// panelClock is the agent's clock corrected to the panel's, from the pings
// the panel sends: a ping carries its send time t0 (panel clock) and arrives
// at t1 (agent clock), so t1 − t0 is the agent's offset plus the one-way
// delay, and the smallest of the recent samples is the tightest. Codes that
// a platform checks against real time (TOTP) use it, so a host whose clock
// is minutes off still signs in; before the first ping it is the agent's
// own clock.
type panelClock struct {
	clock.Clock
	mu      sync.Mutex
	samples []time.Duration
}

// panelClockWindow is how many recent pings the estimate keeps.
const panelClockWindow = 8

func (p *panelClock) add(panelSent, agentReceived time.Time) {
	if panelSent.IsZero() || agentReceived.IsZero() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.samples = append(p.samples, agentReceived.Sub(panelSent))
	if len(p.samples) > panelClockWindow {
		p.samples = p.samples[len(p.samples)-panelClockWindow:]
	}
}

// offset is the agent's clock minus the panel's (0 before the first ping).
func (p *panelClock) offset() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.samples) == 0 {
		return 0
	}
	best := p.samples[0]
	for _, s := range p.samples[1:] {
		best = min(best, s)
	}
	return best
}

// Now is the panel's time as the agent best knows it.
func (p *panelClock) Now() time.Time { return p.Clock.Now().Add(-p.offset()) }

// Since is measured on the corrected clock.
func (p *panelClock) Since(t time.Time) time.Duration { return p.Now().Sub(t) }
