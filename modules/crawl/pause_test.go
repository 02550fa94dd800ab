package crawl_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/crawl"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// pauseShop is a site of one listing page and n item pages; the first item
// page answers only when release is closed, so it is in flight as long as
// the test wants.
type pauseShop struct {
	base    string
	port    int
	release chan struct{}
	inside  chan struct{} // closed when /p/1 is being served
	mu      sync.Mutex
	hits    []string
}

func (s *pauseShop) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.hits...)
}

func startPauseShop(t *testing.T, n int) *pauseShop {
	ln, err := net.Listen("tcp", "127.0.0.29:0")
	require.NoError(t, err)
	s := &pauseShop{base: "http://" + ln.Addr().String(), port: ln.Addr().(*net.TCPAddr).Port,
		release: make(chan struct{}), inside: make(chan struct{})}
	var once sync.Once
	mux := http.NewServeMux()
	mux.HandleFunc("GET /robots.txt", http.NotFound)
	mux.HandleFunc("GET /list", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.hits = append(s.hits, r.URL.Path)
		s.mu.Unlock()
		fmt.Fprint(w, `<html><body><ul>`)
		for i := 1; i <= n; i++ {
			fmt.Fprintf(w, `<li><a class="item" href="/p/%d">Item %d</a></li>`, i, i)
		}
		fmt.Fprint(w, `</ul></body></html>`)
	})
	mux.HandleFunc("GET /p/{n}", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.hits = append(s.hits, r.URL.Path)
		s.mu.Unlock()
		if r.PathValue("n") == "1" {
			once.Do(func() { close(s.inside) })
			select {
			case <-s.release:
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprintf(w, `<html><body><div class="item"><h1>Item %s</h1><a class="self" href="%s">self</a></div></body></html>`, r.PathValue("n"), r.URL.Path)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

// TestPauseHoldsCrawls: the fleet's pause switch (the claim engine's, the
// one `fleetwright admin pause` turns) holds a running crawl: the page in
// flight finishes and is recorded, no new page starts, the run is shown
// held with the switch that holds it, its run_time does not run out while
// it waits, and the same switch turned off lets it finish. The tenant's
// switch holds it the same way. An agent that heard a pause refuses a page
// task handed to it directly, and fetches again after the resume.
func TestPauseHoldsCrawls(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := newRig(t, ctx, nil)
	shop := startPauseShop(t, 4)
	cs := claim.NewStore(r.d.App, nil)
	cs.SetAgentNotifier(fleet.PauseNotifier{})
	require.NoError(t, r.svc.Store.SetEgress(ctx, r.tenant, ops, crawl.EgressPolicy{Allow: []string{fmt.Sprintf("127.0.0.0/8:%d", shop.port)}}))
	_, _, err := r.svc.Apply(ctx, r.tenant, ops, "shop.yaml", []byte(fmt.Sprintf(`version: 1
name: shop
start: {urls: ["%s/list"]}
allowed_domains: [127.0.0.29]
follow: {css: a.item}
extract:
  items: div.item
  fields:
    url: {css: a.self, attr: href, transform: [absolute_url], required: true}
item_key: url
politeness: {delay: 10ms, retries: 0}
limits: {concurrency: 1, run_time: 6s}
`, shop.base)))
	require.NoError(t, err)
	j, err := r.svc.Store.JobByName(ctx, r.tenant, "shop")
	require.NoError(t, err)
	id, err := r.svc.QueueRun(ctx, r.tenant, j.ID, "test", ops)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- r.runner.Execute(ctx, r.tenant, id) }()

	// /p/1 is in flight when the fleet is paused.
	select {
	case <-shop.inside:
	case <-ctx.Done():
		t.Fatal("the first item page was never asked for")
	}
	require.NoError(t, cs.SetPaused(ctx, ops, "", true))
	require.Eventually(t, func() bool {
		run, err := r.svc.Store.Run(ctx, r.tenant, id)
		return err == nil && run.HeldSince != nil && run.HeldReason == crawl.HeldFleet
	}, 10*time.Second, 50*time.Millisecond, "the run is shown held by the fleet's switch")
	held, err := r.svc.Store.Held(ctx, r.tenant)
	require.NoError(t, err)
	require.Equal(t, crawl.HeldFleet, held)
	close(shop.release) // the page in flight finishes
	require.Eventually(t, func() bool {
		run, err := r.svc.Store.Run(ctx, r.tenant, id)
		return err == nil && run.State == "running"
	}, 5*time.Second, 50*time.Millisecond)
	// Held past the job's run_time (6 s) and several polls of the switch:
	// no new page starts, and the run does not stop on its run_time.
	require.Never(t, func() bool {
		return len(shop.seen()) > 2
	}, 8*time.Second, 100*time.Millisecond, "no page starts while the fleet is paused: %v", shop.seen())
	require.Equal(t, []string{"/list", "/p/1"}, shop.seen())
	run, err := r.svc.Store.Run(ctx, r.tenant, id)
	require.NoError(t, err)
	require.Equal(t, "running", run.State)
	require.NotNil(t, run.HeldSince)

	// The agent heard the pause too: a page task given to it directly is
	// refused, not fetched.
	agents := r.a.CrawlAgents(r.tenant)
	require.Len(t, agents, 1)
	task := wire.PageTask{TaskID: wire.NewID(), RunID: id, Kind: wire.PageItem, URL: shop.base + "/p/9", Render: "http",
		AllowedDomains: []string{"127.0.0.29"}, EgressAllow: []string{fmt.Sprintf("127.0.0.0/8:%d", shop.port)}, TimeoutMS: 5000,
		Rules: wire.CrawlRules{Format: "html"}}
	require.Eventually(t, func() bool {
		res, err := r.a.Crawl(ctx, r.tenant, agents[0], task)
		return err == nil && res.Error == wire.PagePaused
	}, 10*time.Second, 100*time.Millisecond, "the paused agent refuses a page task")
	require.NotContains(t, shop.seen(), "/p/9")

	// The tenant's switch on, the fleet's off: still held, by the tenant.
	require.NoError(t, cs.SetPaused(ctx, ops, r.tenant, true))
	require.NoError(t, cs.SetPaused(ctx, ops, "", false))
	require.Eventually(t, func() bool {
		run, err := r.svc.Store.Run(ctx, r.tenant, id)
		return err == nil && run.HeldReason == crawl.HeldTenant
	}, 10*time.Second, 50*time.Millisecond, "the run is shown held by the tenant's switch")
	require.Len(t, shop.seen(), 2)

	// The same switch off: the run goes on and finishes every page.
	require.NoError(t, cs.SetPaused(ctx, ops, r.tenant, false))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("the run did not finish after the resume")
	}
	run, err = r.svc.Store.Run(ctx, r.tenant, id)
	require.NoError(t, err)
	require.Equal(t, "succeeded", run.State, run.Reason)
	require.Equal(t, 4, run.Items)
	require.Nil(t, run.HeldSince)
	require.Empty(t, run.HeldReason)
	require.Len(t, shop.seen(), 5, strings.Join(shop.seen(), " "))
	res, err := r.a.Crawl(ctx, r.tenant, agents[0], task)
	require.NoError(t, err)
	require.Empty(t, res.Error, "the resumed agent fetches again")
}
