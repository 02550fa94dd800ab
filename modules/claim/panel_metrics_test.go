package claim_test

import (
	"context"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// TestPanelShareIsMeasured: the lease and act statements and the offer's
// arrival at a replica each land in fleet_claim_panel_seconds, so a report
// can give the panel's own share of detect → leased apart from the network.
func TestPanelShareIsMeasured(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := setup(t, func(c *claim.Config) { c.Registerer = reg })
	ctx := context.Background()
	b.job(t, b.tenant, "P1")
	h := claim.Holder{Agent: uuid(), Worker: "a"}
	lr := b.engine.Lease(ctx, b.tenant, h, wire.LeaseRequest{RequestID: "1", Worker: "a", Key: "P1"})
	require.True(t, lr.Granted)
	ar := b.engine.Act(ctx, b.tenant, h, wire.ActRequest{RequestID: "2", Worker: "a", Key: "P1", Token: lr.Token})
	require.True(t, ar.OK)
	b.engine.Deliver(ctx, b.tenant, wire.Offer{OfferID: "o", Job: wire.Job{Key: "P2"}, QueuedAt: time.Now().Add(-40 * time.Millisecond)})

	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	text := rec.Body.String()
	sample := func(series, step string) float64 {
		m := regexp.MustCompile(`(?m)^fleet_claim_panel_seconds_` + series + `\{step="` + step + `"\} (\S+)$`).FindStringSubmatch(text)
		require.NotNil(t, m, "%s of step %s in:\n%s", series, step, text)
		v, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		return v
	}
	for _, step := range []string{claim.PanelStepLease, claim.PanelStepAct, claim.PanelStepQueuedOffered} {
		require.EqualValues(t, 1, sample("count", step), step)
	}
	require.GreaterOrEqual(t, sample("sum", claim.PanelStepQueuedOffered), 0.04, "queued → offered is measured from the offer's queued_at")
	require.Greater(t, sample("sum", claim.PanelStepLease), 0.0)
}
