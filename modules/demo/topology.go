package demo

import (
	"github.com/fleetwright/fleetwright/modules/cell"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// AdminEmail is the demo's console administrator.
const AdminEmail = "admin@demo.test"

// CellB is the second cell, on the demo's second embedded Redis; cell A is
// the panel's own ("default").
const CellB = "cell-b"

// Tenant is one of the demo's tenants: a panel tenant and, on the board, a
// client of the same name.
type Tenant struct {
	Slug, Name, Cell string
	// Filter is the tenant's one claim filter; each matches most loads.
	Filter claim.Filter
}

// Agent is one of the demo's agents: a platform (board) account of its
// tenant's client, its panel account and agent, and one process.
type Agent struct {
	Tenant string
	// Key is the account key, the board username and (as "agent-"+Key) the
	// agent's name, as the console names agents it creates.
	Key string
	// Kind is the one worker's kind: watcher, actor, http_actor or crawler.
	Kind string
}

// Name is the agent's name on the fleet page.
func (a Agent) Name() string { return "agent-" + a.Key }

// Browser reports whether the agent runs a Chromium.
func (a Agent) Browser() bool { return a.Kind == "watcher" || a.Kind == "actor" }

// Workers are the account's worker specs, named as the console names them.
func (a Agent) Workers() []wire.WorkerSpec {
	return []wire.WorkerSpec{{Name: a.Kind + "-1", Kind: a.Kind}}
}

func intp(n int) *int { return &n }

// Tenants are the demo's tenants: two on cell A, one on cell B. Board rates
// run 1.60–3.40 $/mile, weights 5,000–44,000 lb over six equipment types, so
// each filter wants roughly nine loads in ten, and each tenant's filter
// leaves out different ones.
var Tenants = []Tenant{
	{Slug: "acme", Name: "Acme Freight", Cell: cell.DefaultCell,
		Filter: claim.Filter{Name: "demo: paying loads", Enabled: true, MinRatePerMileCents: 180}},
	{Slug: "delta", Name: "Delta Logistics", Cell: cell.DefaultCell,
		Filter: claim.Filter{Name: "demo: no power-only", Enabled: true,
			Equipment: []string{"Dry Van", "Reefer", "Flatbed", "Step Deck", "Hotshot"}}},
	{Slug: "north", Name: "North Haulage", Cell: CellB,
		Filter: claim.Filter{Name: "demo: up to 40,000 lb", Enabled: true, MaxWeightLbs: intp(40000)}},
}

// Agents are the demo's fleet: one browser watcher per tenant, one browser
// actor, and HTTP actors. Four Chromium processes in all — what a two-core
// machine carries beside the panel, Postgres and the board.
var Agents = []Agent{
	{"acme", "acme-watch", "watcher"},
	{"acme", "acme-browser", "actor"},
	{"acme", "acme-http-1", "http_actor"},
	{"acme", "acme-http-2", "http_actor"},
	{"delta", "delta-watch", "watcher"},
	{"delta", "delta-http-1", "http_actor"},
	{"delta", "delta-http-2", "http_actor"},
	{"north", "north-watch", "watcher"},
	{"north", "north-http-1", "http_actor"},
	{"north", "north-http-2", "http_actor"},
	// The crawler: acme crawls the sandbox catalogue on a schedule.
	{"acme", "acme-crawl", "crawler"},
}
