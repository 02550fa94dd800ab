package loadtest

import (
	"fmt"

	"github.com/fleetwright/fleetwright/modules/wire"
)

// tenantPlan is one tenant of the run: a board client, the cell it is routed
// to, and its agents.
type tenantPlan struct {
	Slug, Name, Client, Cell string
	Agents                   []*agentPlan
}

// agentPlan is one agent process: one board account and its workers.
type agentPlan struct {
	Tenant   int
	Name     string // agent and board username
	Workers  []wire.WorkerSpec
	Browsers int // browser workers (Chromium instances) in it
	Replica  int // which panel replica it dials
}

// httpOnly reports whether the agent runs no Chromium: killing it leaves no
// browser behind and cannot push the run over its browser budget.
func (a *agentPlan) httpOnly() bool { return a.Browsers == 0 }

// acts reports whether the agent has an actor.
func (a *agentPlan) acts() bool {
	for _, w := range a.Workers {
		if w.Kind != "watcher" {
			return true
		}
	}
	return false
}

// actorsPerAgent is how many actors one agent process hosts: enough to keep
// the process count sane on two cores, few enough that killing one agent
// takes a fraction of a tenant's actors.
const actorsPerAgent = 6

// plan lays out three tenants in two cells: per tenant one agent with the
// browser watcher, then agents of up to six actors; browser actors (one per
// 24 workers, at most browsers−3 and at most three) go first.
func plan(workers, browsers int) ([]*tenantPlan, error) {
	if workers < 6 {
		return nil, fmt.Errorf("loadtest: at least 6 workers, got %d", workers)
	}
	tenants := []*tenantPlan{
		{Slug: "acme", Name: "Acme Freight", Client: "acme", Cell: "default"},
		{Slug: "north", Name: "North Haulage", Client: "north", Cell: "default"},
		{Slug: "delta", Name: "Delta Logistics", Client: "delta", Cell: "b"},
	}
	actors := workers - len(tenants)
	browserActors := min(browsers-len(tenants), 3, (actors+23)/24)
	if browserActors < 0 {
		return nil, fmt.Errorf("loadtest: --browsers must leave room for the three watchers")
	}
	for ti, t := range tenants {
		t.Agents = append(t.Agents, &agentPlan{Tenant: ti, Name: fmt.Sprintf("%s-watch", t.Client),
			Workers: []wire.WorkerSpec{{Name: "watcher-1", Kind: "watcher"}}, Browsers: 1})
		n := actors / len(tenants)
		if ti < actors%len(tenants) {
			n++
		}
		var kinds []string
		if ti < browserActors {
			kinds = append(kinds, "actor")
		}
		for len(kinds) < n {
			kinds = append(kinds, "http_actor")
		}
		for i := 0; i < len(kinds); i += actorsPerAgent {
			a := &agentPlan{Tenant: ti, Name: fmt.Sprintf("%s-act%d", t.Client, i/actorsPerAgent+1)}
			for j, k := range kinds[i:min(i+actorsPerAgent, len(kinds))] {
				a.Workers = append(a.Workers, wire.WorkerSpec{Name: fmt.Sprintf("%s-%d", k, i+j+1), Kind: k})
				if k != "http_actor" {
					a.Browsers++
				}
			}
			t.Agents = append(t.Agents, a)
		}
		// Spread each tenant over both replicas, so every replica's
		// reconciler finds an agent of every tenant to look up bookings.
		for i, a := range t.Agents {
			a.Replica = (ti + i) % 2
		}
	}
	return tenants, nil
}

// counts sums a plan's workers and browsers.
func counts(ts []*tenantPlan) (workers, browsers, agents int) {
	for _, t := range ts {
		for _, a := range t.Agents {
			workers += len(a.Workers)
			browsers += a.Browsers
			agents++
		}
	}
	return
}
