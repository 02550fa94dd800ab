package assistant

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/fleetwright/fleetwright/modules/assistant/store"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// keyPanelLimits keeps the enrolling panel's limits (JSON of
// wire.AssistantLimits) so that they hold across restarts and while the
// panel is unreachable; retirement from the panel clears them.
const keyPanelLimits = "panel_limits"

// bound is one candidate cap on a quantity and where it comes from, as the
// stop reason names it: "the task's", "the person's", "the tenant's" or
// "the global" (a panel's spend per day adds "model_spend_day", the name
// of the limit an operator sets on the panel's Limits page).
type bound struct {
	cap    float64
	source string
}

// lowestBound is the lowest non-zero cap (zero: none) and its source.
func lowestBound(bs ...bound) (bound, bool) {
	var best bound
	found := false
	for _, b := range bs {
		if b.cap > 0 && (!found || b.cap < best.cap) {
			best, found = b, true
		}
	}
	return best, found
}

// PanelLimits returns the limits the enrolling panel sent last (zero
// values when none, or when the assistant is not enrolled).
func (r *Runner) PanelLimits(ctx context.Context) wire.AssistantLimits {
	var l wire.AssistantLimits
	if v := r.setting(ctx, keyPanelLimits, ""); v != "" {
		_ = json.Unmarshal([]byte(v), &l)
	}
	return l
}

// setPanelLimits records the panel's limits (nil: the panel sets none).
// They apply from the running task's next step.
func (r *Runner) setPanelLimits(ctx context.Context, l *wire.AssistantLimits) error {
	v := ""
	if l != nil && !(l.Tenant.IsZero() && l.Global.IsZero()) {
		b, err := json.Marshal(l)
		if err != nil {
			return fmt.Errorf("assistant: panel limits: %w", err)
		}
		v = string(b)
	}
	if v == r.setting(ctx, keyPanelLimits, "") {
		return nil
	}
	if err := r.St.SetSetting(ctx, keyPanelLimits, v); err != nil {
		return fmt.Errorf("assistant: panel limits: %w", err)
	}
	r.Log.Info("assistant: the panel's limits", "limits", v)
	return nil
}

// sourceNote is what a stop reason adds to name the limit.
func sourceNote(source string) string {
	return ", " + source + " limit"
}

// dollars writes an amount in dollars: cents when whole, else every digit
// down to the micro-dollar (a limit of $0.000001 reads as one).
func dollars(v float64) string {
	m := int64(math.Round(v * 1e6))
	if m%10000 == 0 {
		return "$" + strconv.FormatFloat(float64(m)/1e6, 'f', 2, 64)
	}
	return "$" + strconv.FormatFloat(float64(m)/1e6, 'f', -1, 64)
}

// The sources of a limit, as stop reasons name them.
const (
	srcTask   = "the task's"
	srcPerson = "the person's"
	srcTenant = "the tenant's"
	srcGlobal = "the global"
	// The panel's spend per day is its model_spend_day limit.
	srcTenantSpend = "the tenant's model_spend_day"
	srcGlobalSpend = "the global model_spend_day"
)

// taskBounds are the candidate caps on each per-task quantity: the task's
// own (already the lower of its form's and the person's defaults), the
// tenant's and the global one.
func taskBounds(t store.Limits, p wire.AssistantLimits) map[string][]bound {
	return map[string][]bound{
		"steps":  {{float64(t.Steps), srcTask}, {float64(p.Tenant.TaskSteps), srcTenant}, {float64(p.Global.TaskSteps), srcGlobal}},
		"tokens": {{float64(t.Tokens), srcTask}, {float64(p.Tenant.TaskTokens), srcTenant}, {float64(p.Global.TaskTokens), srcGlobal}},
		"cost":   {{t.CostUSD, srcTask}, {p.Tenant.TaskCostUSD, srcTenant}, {p.Global.TaskCostUSD, srcGlobal}},
		"wall":   {{t.WallTime.Seconds(), srcTask}, {float64(p.Tenant.TaskWallSeconds), srcTenant}, {float64(p.Global.TaskWallSeconds), srcGlobal}},
		"tabs":   {{float64(t.Tabs), srcTask}, {float64(p.Tenant.TaskTabs), srcTenant}, {float64(p.Global.TaskTabs), srcGlobal}},
	}
}

// tabLimit is the effective cap on a task's open tabs (0: none) and the
// note naming a panel's limit.
func (r *Runner) tabLimit(ctx context.Context, ru *run) (int, string) {
	b, ok := lowestBound(taskBounds(ru.task.Limits, r.PanelLimits(ctx))["tabs"]...)
	if !ok {
		return 0, ""
	}
	return int(b.cap), sourceNote(b.source)
}

// limit says which limit, if any, ends the task before its next step: per
// task, the lowest of the task's, the tenant's and the global limit; per
// day, the lowest of the person's, the tenant's and the global one. The
// reason names the quantity, its use and cap, and which limit it was.
func (r *Runner) limit(ctx context.Context, ru *run) (string, error) {
	t, err := r.St.Task(ctx, ru.task.ID)
	if err != nil {
		return "", err
	}
	p := r.PanelLimits(ctx)
	tb := taskBounds(ru.task.Limits, p)
	if b, ok := lowestBound(tb["steps"]...); ok && float64(t.Steps) >= b.cap {
		return fmt.Sprintf("limit reached: steps (%d of %d%s)", t.Steps, int(b.cap), sourceNote(b.source)), nil
	}
	if b, ok := lowestBound(tb["tokens"]...); ok && float64(t.TokensIn+t.TokensOut) >= b.cap {
		return fmt.Sprintf("limit reached: model tokens (%d of %d%s)", t.TokensIn+t.TokensOut, int(b.cap), sourceNote(b.source)), nil
	}
	if b, ok := lowestBound(tb["cost"]...); ok && float64(t.CostMicro)/1e6 >= b.cap {
		return fmt.Sprintf("limit reached: spend (%s of %s%s)", dollars(float64(t.CostMicro)/1e6), dollars(b.cap), sourceNote(b.source)), nil
	}
	if b, ok := lowestBound(tb["wall"]...); ok {
		capDur := time.Duration(b.cap * float64(time.Second))
		if el := ru.prior + r.Clock.Since(ru.started); el >= capDur {
			return fmt.Sprintf("limit reached: wall time (%s of %s%s)", el.Round(time.Millisecond), capDur, sourceNote(b.source)), nil
		}
	}
	now := r.Clock.Now()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, now.Location())
	u, err := r.St.UsageSince(ctx, day)
	if err != nil {
		return "", err
	}
	num := func(key string) float64 {
		v, _ := strconv.ParseFloat(r.setting(ctx, key, "0"), 64)
		return v
	}
	if b, ok := lowestBound(bound{num(keyDayTokens), srcPerson}, bound{float64(p.Tenant.DayTokens), srcTenant}, bound{float64(p.Global.DayTokens), srcGlobal}); ok && float64(u.Tokens) >= b.cap {
		return fmt.Sprintf("limit reached: model tokens today (%d of %d%s)", u.Tokens, int(b.cap), sourceNote(b.source)), nil
	}
	if b, ok := lowestBound(bound{num(keyDaySteps), srcPerson}, bound{float64(p.Tenant.DaySteps), srcTenant}, bound{float64(p.Global.DaySteps), srcGlobal}); ok && float64(u.Steps) >= b.cap {
		return fmt.Sprintf("limit reached: steps today (%d of %d%s)", u.Steps, int(b.cap), sourceNote(b.source)), nil
	}
	if b, ok := lowestBound(bound{num(keyDayCost), srcPerson}); ok && float64(u.CostMicro)/1e6 >= b.cap {
		return fmt.Sprintf("limit reached: spend today (%s of %s%s)", dollars(float64(u.CostMicro)/1e6), dollars(b.cap), sourceNote(b.source)), nil
	}
	// The panel's model_spend_day counts the UTC day, as the panel defines
	// it for every tenant; the person's own daily limits count their day.
	if b, ok := lowestBound(bound{p.Tenant.DayCostUSD, srcTenantSpend}, bound{p.Global.DayCostUSD, srcGlobalSpend}); ok {
		utc := now.UTC()
		uu, err := r.St.UsageSince(ctx, time.Date(utc.Year(), utc.Month(), utc.Day(), 0, 0, 0, 0, time.UTC))
		if err != nil {
			return "", err
		}
		if float64(uu.CostMicro)/1e6 >= b.cap {
			return fmt.Sprintf("limit reached: spend today, UTC (%s of %s%s)", dollars(float64(uu.CostMicro)/1e6), dollars(b.cap), sourceNote(b.source)), nil
		}
	}
	return "", nil
}
