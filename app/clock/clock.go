// Package clock gives time-based rules an injectable source of time, so that
// the 3 s first retry, the 15–25 minute pauses, the 5-restarts-in-300-s budget
// and lease expiry can be tested in milliseconds.
package clock

import (
	"sync"
	"time"
)

// Clock is the time source every time rule takes.
type Clock interface {
	Now() time.Time
	// After delivers the time once d has passed on this clock.
	After(d time.Duration) <-chan time.Time
	// Since returns the time elapsed since t on this clock.
	Since(t time.Time) time.Duration
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// After wraps time.After.
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Since wraps time.Since.
func (Real) Since(t time.Time) time.Duration { return time.Since(t) }

// Fake is a manually advanced clock for tests. Its zero value is not usable;
// create it with NewFake.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
	// sleeps records every duration passed to After, in order, so tests can
	// assert an exact schedule of pauses.
	sleeps []time.Duration
	added  chan struct{}
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// NewFake returns a fake clock set to start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, added: make(chan struct{}, 1024)}
}

// Now returns the fake's current time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Since returns the fake time elapsed since t.
func (f *Fake) Since(t time.Time) time.Duration { return f.Now().Sub(t) }

// After returns a channel that fires when the fake clock is advanced past d.
func (f *Fake) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	f.sleeps = append(f.sleeps, d)
	if d <= 0 {
		ch <- f.now
	} else {
		f.waiters = append(f.waiters, waiter{at: f.now.Add(d), ch: ch})
	}
	select {
	case f.added <- struct{}{}:
	default:
	}
	return ch
}

// Advance moves the clock forward by d and fires every timer now due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if !w.at.After(f.now) {
			w.ch <- f.now
		} else {
			kept = append(kept, w)
		}
	}
	f.waiters = kept
}

// Sleeps returns a copy of every duration requested through After so far.
func (f *Fake) Sleeps() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.sleeps...)
}

// Pending reports how many timers are waiting.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// BlockUntil waits (in real time, up to timeout) until at least n timers are
// waiting, so a test can advance the clock only once the code under test is
// actually asleep. It reports whether that happened.
func (f *Fake) BlockUntil(n int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if f.Pending() >= n {
			return true
		}
		select {
		case <-f.added:
		case <-time.After(time.Millisecond):
		}
	}
	return f.Pending() >= n
}
