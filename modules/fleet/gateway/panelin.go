package gateway

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetwright/fleetwright/modules/wire"
)

// panelIn measures one replica's own share of the claim path: the monotonic
// time from a sighting's arrival on this replica's agent connection to the
// moment this replica starts sending the job to its actors (the first offer
// of the job). A job dispatched and delivered by another replica is not
// measured here: the figure is one replica's clock, never two.
type panelIn struct {
	mu      sync.Mutex
	arrived map[string]time.Time // tenant \x00 job key → first arrival
	hist    prometheus.Histogram
	hook    func(tenant, key string, d time.Duration)
}

// panelInLimit bounds the arrivals kept; panelInAge is how long one waits
// for its offer (a sighting the cell dedupes never gets one).
const (
	panelInLimit = 50_000
	panelInAge   = 30 * time.Second
)

// PanelInBuckets cover the real range up to a minute, so no percentile
// reads a bucket's edge under load.
var PanelInBuckets = []float64{.0001, .00025, .0005, .001, .002, .003, .005, .0075, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

func newPanelIn() *panelIn {
	return &panelIn{arrived: map[string]time.Time{},
		hist: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fleet_claim_panel_in_seconds",
			Help: "One replica's monotonic time from a sighting's arrival on an agent connection to the first send of the job to its actors " +
				"(the offer): dedupe, queue, dispatcher, job record and the hop back, all inside this replica.",
			Buckets: PanelInBuckets})}
}

// seen records the arrival of a DETECTED frame's sightings.
func (p *panelIn) seen(tenant string, d wire.Detected, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.arrived) >= panelInLimit {
		for k, t := range p.arrived {
			if at.Sub(t) > panelInAge {
				delete(p.arrived, k)
			}
		}
	}
	for _, s := range d.Sightings {
		if len(p.arrived) >= panelInLimit {
			return
		}
		k := tenant + "\x00" + s.Job.Key
		if _, ok := p.arrived[k]; !ok {
			p.arrived[k] = at
		}
	}
}

// sending is called when this replica starts sending a job to its actors.
func (p *panelIn) sending(tenant, key string) {
	now := time.Now()
	k := tenant + "\x00" + key
	p.mu.Lock()
	at, ok := p.arrived[k]
	delete(p.arrived, k)
	hook := p.hook
	p.mu.Unlock()
	if !ok {
		return
	}
	d := now.Sub(at)
	p.hist.Observe(d.Seconds())
	if hook != nil {
		hook(tenant, key, d)
	}
}

// OnPanelIn registers f to receive every panel-in figure this replica
// measures (fleetwright bench reads them per job); nil removes it.
func (g *Gateway) OnPanelIn(f func(tenant, key string, d time.Duration)) {
	g.panelIn.mu.Lock()
	g.panelIn.hook = f
	g.panelIn.mu.Unlock()
}
