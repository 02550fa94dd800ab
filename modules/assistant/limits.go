package assistant

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/fleetwright/fleetwright/modules/assistant/store"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// keyPanelLimits keeps the enrolling panel's limits (JSON of
// wire.AssistantLimits) so that they hold across restarts and while the
// panel is unreachable; retirement from the panel clears them.
const keyPanelLimits = "panel_limits"

// bound is one candidate cap on a quantity and where it comes from.
type bound struct {
	cap    float64
	source string // "" for the task's own (and the person's) limits
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

// sourceNote is what a stop reason adds to name a panel's limit.
func sourceNote(source string) string {
	if source == "" {
		return ""
	}
	return ", " + source + " limit"
}

// taskBounds are the candidate caps on each per-task quantity: the task's
// own (already the lower of its form's and the person's defaults), the
// tenant's and the global one.
func taskBounds(t store.Limits, p wire.AssistantLimits) map[string][]bound {
	return map[string][]bound{
		"steps":  {{float64(t.Steps), ""}, {float64(p.Tenant.TaskSteps), "the tenant's"}, {float64(p.Global.TaskSteps), "the global"}},
		"tokens": {{float64(t.Tokens), ""}, {float64(p.Tenant.TaskTokens), "the tenant's"}, {float64(p.Global.TaskTokens), "the global"}},
		"cost":   {{t.CostUSD, ""}, {p.Tenant.TaskCostUSD, "the tenant's"}, {p.Global.TaskCostUSD, "the global"}},
		"wall":   {{t.WallTime.Seconds(), ""}, {float64(p.Tenant.TaskWallSeconds), "the tenant's"}, {float64(p.Global.TaskWallSeconds), "the global"}},
		"tabs":   {{float64(t.Tabs), ""}, {float64(p.Tenant.TaskTabs), "the tenant's"}, {float64(p.Global.TaskTabs), "the global"}},
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
// reason names the quantity, its use and cap, and a panel's limit as such.
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
		return fmt.Sprintf("limit reached: spend ($%.4f of $%.4f%s)", float64(t.CostMicro)/1e6, b.cap, sourceNote(b.source)), nil
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
	if b, ok := lowestBound(bound{num(keyDayTokens), ""}, bound{float64(p.Tenant.DayTokens), "the tenant's"}, bound{float64(p.Global.DayTokens), "the global"}); ok && float64(u.Tokens) >= b.cap {
		return fmt.Sprintf("limit reached: model tokens today (%d of %d%s)", u.Tokens, int(b.cap), sourceNote(b.source)), nil
	}
	if b, ok := lowestBound(bound{num(keyDaySteps), ""}, bound{float64(p.Tenant.DaySteps), "the tenant's"}, bound{float64(p.Global.DaySteps), "the global"}); ok && float64(u.Steps) >= b.cap {
		return fmt.Sprintf("limit reached: steps today (%d of %d%s)", u.Steps, int(b.cap), sourceNote(b.source)), nil
	}
	if b, ok := lowestBound(bound{num(keyDayCost), ""}, bound{p.Tenant.DayCostUSD, "the tenant's"}, bound{p.Global.DayCostUSD, "the global"}); ok && float64(u.CostMicro)/1e6 >= b.cap {
		return fmt.Sprintf("limit reached: spend today ($%.4f of $%.4f%s)", float64(u.CostMicro)/1e6, b.cap, sourceNote(b.source)), nil
	}
	return "", nil
}
