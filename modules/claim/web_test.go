package claim_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

func TestPages(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	h := claim.Holder{Agent: uuid(), Worker: "actor-7"}
	b.job(t, b.tenant, "LD-PAGE")
	lr := b.engine.Lease(ctx, b.tenant, h, wire.LeaseRequest{RequestID: "1", Worker: h.Worker, Key: "LD-PAGE"})
	require.True(t, lr.Granted)
	require.True(t, b.engine.Act(ctx, b.tenant, h, wire.ActRequest{RequestID: "2", Worker: h.Worker, Key: "LD-PAGE", Token: lr.Token}).OK)
	sent := time.Now()
	ok := time.Now().Add(150 * time.Millisecond)
	require.True(t, b.engine.Outcome(ctx, b.tenant, h, wire.Outcome{RequestID: "3", Worker: h.Worker, Key: "LD-PAGE", Token: lr.Token,
		Result: wire.ResultConfirmed, SentAt: &sent, ConfirmedAt: &ok}, claim.Offset{}).OK)

	r := chi.NewRouter()
	claim.Mount(r, claim.WebDeps{Engine: b.engine, Actor: func(*http.Request) string { return "operator:ann" }})
	srv := httptest.NewServer(r)
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) string {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		return string(body)
	}
	page := get("/claims/?tenant=acme")
	require.Contains(t, page, `data-testid="claim-LD-PAGE"`)
	require.Contains(t, page, `hx-trigger="every 2s"`)
	require.Contains(t, page, "CONFIRMED")
	rows := get("/claims/rows?tenant=" + b.tenant + "&state=CONFIRMED")
	require.Contains(t, rows, "LD-PAGE")
	require.NotContains(t, get("/claims/rows?tenant="+b.tenant+"&state=UNKNOWN"), "LD-PAGE")

	lat := get("/claims/latency?tenant=acme&window=1h&by=worker")
	require.Contains(t, lat, `data-testid="latency-actor-7"`)
	require.Contains(t, lat, `data-testid="hist-detect_action"`)
	require.Contains(t, lat, `<svg`)
	csv := get("/claims/latency.csv?tenant=acme&window=1h")
	require.True(t, strings.HasPrefix(csv, "job,state,cell,worker,token"))
	require.Contains(t, csv, "LD-PAGE,CONFIRMED,default,actor-7")

	require.Contains(t, get("/claims/settings?tenant=acme"), `data-testid="filters"`)
	post := func(path string, form url.Values) string {
		resp, err := noRedirect.PostForm(srv.URL+path, form)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		return resp.Header.Get("Location")
	}
	loc := post("/claims/pause", url.Values{"tenant": {b.tenant}, "scope": {"tenant"}, "paused": {"true"}})
	require.Contains(t, loc, "ok=")
	tn, err := b.store.TenantBySlug(ctx, "acme")
	require.NoError(t, err)
	require.True(t, tn.Paused)
	// Bad input: a clear message, nothing changed.
	loc = post("/claims/limits", url.Values{"tenant": {b.tenant}, "daily_booking_cap": {"lots"}})
	require.Contains(t, loc, "err=")
	tn, _ = b.store.TenantBySlug(ctx, "acme")
	require.Nil(t, tn.DailyBookingCap)
	post("/claims/limits", url.Values{"tenant": {b.tenant}, "daily_booking_cap": {"40"}, "review_above_usd": {"2500"}})
	tn, _ = b.store.TenantBySlug(ctx, "acme")
	require.Equal(t, 40, *tn.DailyBookingCap)
	require.EqualValues(t, 250000, *tn.ReviewAboveCents)
	post("/claims/filters", url.Values{"tenant": {b.tenant}, "name": {"TX reefers"}, "enabled": {"1"},
		"origins": {"TX; ok"}, "equipment": {"Reefer"}, "min_rate_per_mile_usd": {"2.75"}})
	fs, err := b.store.Filters(ctx, b.tenant)
	require.NoError(t, err)
	require.Len(t, fs, 2)
	require.Equal(t, []string{"tx", "ok"}, fs[1].Origins)
	require.Equal(t, 275, fs[1].MinRatePerMileCents)
	log, err := b.store.AuditLog(ctx, b.tenant, "", 20)
	require.NoError(t, err)
	var actions []string
	for _, a := range log {
		actions = append(actions, a.Actor+" "+a.Action)
	}
	require.Subset(t, actions, []string{"operator:ann claim.pause", "operator:ann claim.limits", "operator:ann claim.filter.put"})
}
