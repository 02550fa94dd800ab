package agent

import (
	"sync"
	"time"

	"github.com/fleetwright/fleetwright/app/clock"
)

// browserTime adds up the seconds the agent's browsers were open for work,
// per worker kind, since the agent process started: the state report
// carries the running totals (wire.State.BrowserSeconds) and the panel
// turns the growth between two reports into fleet_browser_seconds_total.
// A browser still open counts up to now.
type browserTime struct {
	clock  clock.Clock
	notify func()

	mu     sync.Mutex
	closed map[string]time.Duration
	open   map[int]openBrowser
	next   int
}

type openBrowser struct {
	kind  string
	since time.Time
}

func newBrowserTime(c clock.Clock, notify func()) *browserTime {
	return &browserTime{clock: c, notify: notify, closed: map[string]time.Duration{}, open: map[int]openBrowser{}}
}

// opened starts counting one browser of a worker of kind; the returned
// function stops it (once; later calls do nothing).
func (b *browserTime) opened(kind string) (closed func()) {
	if b == nil {
		return func() {}
	}
	b.mu.Lock()
	b.next++
	id := b.next
	b.open[id] = openBrowser{kind: kind, since: b.clock.Now()}
	b.mu.Unlock()
	b.notify()
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			if o, ok := b.open[id]; ok {
				b.closed[o.kind] += max(b.clock.Since(o.since), 0)
				delete(b.open, id)
			}
			b.mu.Unlock()
			b.notify()
		})
	}
}

// seconds are the totals per kind, open browsers counted up to now (nil
// when no browser was ever open).
func (b *browserTime) seconds() map[string]float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.closed) == 0 && len(b.open) == 0 {
		return nil
	}
	out := map[string]float64{}
	for k, d := range b.closed {
		out[k] += d.Seconds()
	}
	now := b.clock.Now()
	for _, o := range b.open {
		out[o.kind] += max(now.Sub(o.since), 0).Seconds()
	}
	return out
}
