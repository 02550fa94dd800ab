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

	"github.com/fleetwright/fleetwright/modules/cell"
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
	b.useRace(t, b.tenant, "the lease, act and offer steps are the race path's (assign's grant steps: TestTwoReplicasNeverGrantAJobTwice)")
	b.job(t, b.tenant, "P1")
	h := claim.Holder{Agent: uuid(), Worker: "a"}
	lr := b.engine.Lease(ctx, b.tenant, h, wire.LeaseRequest{RequestID: "1", Worker: "a", Key: "P1"})
	require.True(t, lr.Granted)
	ar := b.engine.Act(ctx, b.tenant, h, wire.ActRequest{RequestID: "2", Worker: "a", Key: "P1", Token: lr.Token})
	require.True(t, ar.OK)
	b.engine.Deliver(ctx, b.tenant, wire.Offer{OfferID: "o", Job: wire.Job{Key: "P2"}, QueuedAt: time.Now().Add(-40 * time.Millisecond)}, cell.OfferMeta{})
	// A re-offer of a job first queued 50 s ago, published 20 ms ago: timed
	// from its own publication, and not counted as a first offer.
	b.engine.Deliver(ctx, b.tenant, wire.Offer{OfferID: "o2", Job: wire.Job{Key: "P3"}, QueuedAt: time.Now().Add(-50 * time.Second)},
		cell.OfferMeta{PublishedAt: time.Now().Add(-20 * time.Millisecond), Again: true})

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
	require.EqualValues(t, 1, sample("count", claim.PanelStepReoffered))
	require.GreaterOrEqual(t, sample("sum", claim.PanelStepReoffered), 0.02)
	require.Less(t, sample("sum", claim.PanelStepReoffered), 10.0, "a re-offer is timed from its own start, not the job's first queueing")
	require.Less(t, sample("sum", claim.PanelStepQueuedOffered), 10.0, "a re-offer does not count as a first offer")
	// The buckets reach a minute: a 50 s step would read a real bucket.
	require.Regexp(t, `fleet_claim_panel_seconds_bucket\{step="reoffered",le="60"\} 1`, text)
}
