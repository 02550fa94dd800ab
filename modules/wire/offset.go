package wire

import (
	"errors"
	"sync"
	"time"
)

// Clock offset, NTP-style, measured by the panel over ping/pong.
//
// The panel initiates: it sends Ping at t0 (panel clock), the agent receives
// it at t1 and answers at t2 (agent clock, in the Pong), the panel receives
// the Pong at t3 (panel clock). Then
//
//	offset     = ((t1 − t0) + (t2 − t3)) / 2   agent clock minus panel clock
//	round trip = (t3 − t0) − (t2 − t1)          time on the network
//	error      = round trip / 2
//
// The true offset lies within offset ± error whatever the split of the round
// trip between the two directions, so the error bound is honest, not a guess.
// The sample with the lowest round trip over the last few measurements has
// the tightest bound, so the estimator keeps that one.

// Sample is one ping/pong exchange.
type Sample struct {
	T0 time.Time // panel sent the ping
	T1 time.Time // agent received it
	T2 time.Time // agent sent the pong
	T3 time.Time // panel received the pong
}

// SampleFromPong builds a sample from a pong and the panel's clock when it
// arrived.
func SampleFromPong(p Pong, received time.Time) Sample {
	return Sample{T0: p.PingSentAt, T1: p.ReceivedAt, T2: p.SentAt, T3: received}
}

// Offset is the agent's clock minus the panel's.
func (s Sample) Offset() time.Duration {
	return (s.T1.Sub(s.T0) + s.T2.Sub(s.T3)) / 2
}

// RoundTrip is the time spent on the network (the agent's own processing
// time excluded).
func (s Sample) RoundTrip() time.Duration {
	return s.T3.Sub(s.T0) - s.T2.Sub(s.T1)
}

// ErrBadSample is returned for a sample that cannot be right (a timestamp
// missing, time running backwards on one side, a negative round trip).
var ErrBadSample = errors.New("wire: clock offset sample is inconsistent")

func (s Sample) check() error {
	if s.T0.IsZero() || s.T1.IsZero() || s.T2.IsZero() || s.T3.IsZero() ||
		s.T3.Before(s.T0) || s.T2.Before(s.T1) || s.RoundTrip() < 0 {
		return ErrBadSample
	}
	return nil
}

// Estimate is the best current knowledge of an agent's clock.
type Estimate struct {
	// Offset is the agent's clock minus the panel's.
	Offset time.Duration
	// ErrorBound: the true offset is within Offset ± ErrorBound.
	ErrorBound time.Duration
	// RoundTrip of the sample chosen.
	RoundTrip time.Duration
	// MeasuredAt is when the chosen sample completed (panel clock).
	MeasuredAt time.Time
}

// ToPanel converts an agent timestamp to the panel's clock. The result is
// uncertain by ErrorBound.
func (e Estimate) ToPanel(agentTime time.Time) time.Time { return agentTime.Add(-e.Offset) }

// DefaultOffsetWindow is how many recent samples the estimator chooses from.
// With a ping every 30 s, that is the last four minutes: short enough to
// follow a drifting clock, long enough to ride over a congested moment.
const DefaultOffsetWindow = 8

// Estimator keeps the last window samples and estimates from the one with the
// lowest round trip. It is safe for concurrent use.
type Estimator struct {
	mu      sync.Mutex
	window  int
	samples []Sample // ring, newest last
}

// NewEstimator returns an estimator over the last window samples (window < 1
// means DefaultOffsetWindow).
func NewEstimator(window int) *Estimator {
	if window < 1 {
		window = DefaultOffsetWindow
	}
	return &Estimator{window: window}
}

// Add records a sample; an inconsistent one is refused with ErrBadSample and
// changes nothing.
func (e *Estimator) Add(s Sample) error {
	if err := s.check(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.samples = append(e.samples, s)
	if len(e.samples) > e.window {
		e.samples = append(e.samples[:0], e.samples[len(e.samples)-e.window:]...)
	}
	return nil
}

// Estimate returns the estimate from the lowest-round-trip sample in the
// window (the newest one on a tie), and false before the first sample.
func (e *Estimator) Estimate() (Estimate, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.samples) == 0 {
		return Estimate{}, false
	}
	best := e.samples[0]
	for _, s := range e.samples[1:] {
		if s.RoundTrip() <= best.RoundTrip() {
			best = s
		}
	}
	rt := best.RoundTrip()
	return Estimate{Offset: best.Offset(), ErrorBound: rt / 2, RoundTrip: rt, MeasuredAt: best.T3}, true
}
