package bench

import (
	"context"

	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/panel"
)

// mode is a dispatch mode the bench measures: how a tenant is switched to
// it (nil: the mode every tenant has without a setting).
type mode struct {
	name string
	// about is one line for the report.
	about string
	set   func(ctx context.Context, p *panel.Panel, tenant string) error
}

// modes are the dispatch modes this build has. Only modes the panel really
// runs are listed: a mode that is not built is reported as absent, never
// imitated.
var modes = []mode{
	{name: "assign", about: "the dispatcher chooses one warm actor and grants the job in the commit that records it (lease_grant → gate_check → gate_result)",
		set: func(ctx context.Context, p *panel.Panel, tenant string) error {
			return p.Claims.SetDispatchMode(ctx, audit.Entry{Actor: "fleetwright bench"}, tenant, claim.DispatchAssign)
		}},
	{name: "race", about: "every matching actor is offered the job and races for its lease (offer → lease_request → lease_result → act_request → act_result)",
		set: func(ctx context.Context, p *panel.Panel, tenant string) error {
			return p.Claims.SetDispatchMode(ctx, audit.Entry{Actor: "fleetwright bench"}, tenant, claim.DispatchRace)
		}},
}

// ModeNames lists the dispatch modes this build has, in report order.
func ModeNames() []string {
	out := make([]string, len(modes))
	for i, m := range modes {
		out[i] = m.name
	}
	return out
}

func hasMode(name string) bool {
	for _, m := range modes {
		if m.name == name {
			return true
		}
	}
	return false
}

func modeNamed(name string) mode {
	for _, m := range modes {
		if m.name == name {
			return m
		}
	}
	return mode{}
}

// absentModes names the dispatch modes issue 16 plans that this build does
// not have, so the report says they were not measured.
var absentModes = func() []string {
	var out []string
	for _, n := range []string{"race", "assign"} {
		if !hasMode(n) {
			out = append(out, n)
		}
	}
	return out
}()
