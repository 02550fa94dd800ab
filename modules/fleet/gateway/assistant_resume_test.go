package gateway_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/assistant/model/stub"
	"github.com/fleetwright/fleetwright/modules/assistant/store"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/limit"
)

// A task an enrolled assistant stopped at the tenant's model_spend_day
// raises an assistant.limit alarm; resumed under the same limit it stops
// again and the alarm stays open; resumed after the limit was raised it
// runs to its end and the alarm is resolved, by the assistant, with its
// history kept.
func TestResumingALimitStoppedTaskResolvesItsAlarm(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, limit.Set(ctx, b.db.App, ops, b.tenant, limit.ModelSpendPerDay, 1, true, fleet.LimitNotifier{}))
	loop := stub.Step{Tool: "list_tabs", Args: map[string]any{}}
	h, m, id, _ := b.enrolledAssistant(t, "", "assistant-resume", stub.Script{Final: &loop}, priced)
	homeShows(t, h, "tenant per day $0.000001 spend (model_spend_day)")

	task, err := h.Submit("List the tabs", []string{h.StudioURL + "/brief"}, nil)
	require.NoError(t, err)
	tj, err := h.Wait(task, 60*time.Second, false, store.StatusStopped)
	require.NoError(t, err)
	require.Contains(t, tj.StopReason, "the tenant's model_spend_day limit")
	key := fmt.Sprintf("%s/%d", id, task)
	isOpen := func() bool {
		open, err := alarm.IsOpen(ctx, b.db.App, b.tenant, fleet.AlarmAssistantLimit, key)
		require.NoError(t, err)
		return open
	}
	require.Eventually(t, isOpen, 15*time.Second, 100*time.Millisecond, "the limit stop raised an alarm")

	resume := func() {
		t.Helper()
		resp, body, err := h.Post(fmt.Sprintf("/tasks/%d/resume", task), url.Values{})
		require.NoError(t, err)
		require.Less(t, resp.StatusCode, 400, body)
	}
	// Under the same limit it stops again at once: still an open alarm.
	resume()
	tj, err = h.Wait(task, 60*time.Second, false, store.StatusStopped)
	require.NoError(t, err)
	require.Contains(t, tj.StopReason, "the tenant's model_spend_day limit")
	require.Eventually(t, isOpen, 15*time.Second, 100*time.Millisecond, "stopped again, the alarm is open")

	// The limit raised (pushed to the assistant), the task resumed: it
	// finishes, and the alarm resolves.
	require.NoError(t, limit.Set(ctx, b.db.App, ops, b.tenant, limit.ModelSpendPerDay, 1000*1000000, true, fleet.LimitNotifier{}))
	homeShows(t, h, "tenant per day $1000.00 spend (model_spend_day)")
	m.SetScript(stub.Script{}) // the model finishes
	resume()
	_, err = h.Wait(task, 60*time.Second, false, store.StatusDone)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !isOpen() }, 15*time.Second, 100*time.Millisecond, "resumed, the alarm resolves")
	all, err := alarm.ListTenant(ctx, b.db.App, b.tenant, false, 10)
	require.NoError(t, err)
	var found bool
	for _, a := range all {
		if a.Kind == fleet.AlarmAssistantLimit && a.Key == key {
			found = true
			require.NotNil(t, a.ResolvedAt, "resolved, and kept")
			require.Contains(t, a.ResolvedBy, "assistant agent-assistant-resume")
		}
	}
	require.True(t, found, "the alarm is kept, resolved")
}
