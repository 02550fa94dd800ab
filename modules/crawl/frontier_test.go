package crawl_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/crawl"
)

// hostsShop serves one listing page of n items on each of several loopback
// hosts (one port for all) and records when each host was asked for an
// item page.
type hostsShop struct {
	port int
	mu   sync.Mutex
	hits map[string][]time.Time // host → item page requests
}

func startHostsShop(t *testing.T, hosts []string, n int) *hostsShop {
	s := &hostsShop{hits: map[string][]time.Time{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /robots.txt", http.NotFound)
	mux.HandleFunc("GET /list", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<html><body><ul>`)
		for i := 1; i <= n; i++ {
			// The listing's query (a job's tag) goes on to its items.
			fmt.Fprintf(w, `<li><a class="item" href="/p/%d?%s">Item %d</a></li>`, i, r.URL.RawQuery, i)
		}
		fmt.Fprint(w, `</ul></body></html>`)
	})
	mux.HandleFunc("GET /p/{n}", func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.Host)
		s.mu.Lock()
		s.hits[host] = append(s.hits[host], time.Now())
		if r.URL.RawQuery != "" {
			s.hits[r.URL.RawQuery] = append(s.hits[r.URL.RawQuery], time.Now())
		}
		s.mu.Unlock()
		fmt.Fprintf(w, `<html><head><link rel="canonical" href="http://%s/p/%s?%s"></head><body><h1>Item</h1></body></html>`,
			r.Host, r.PathValue("n"), r.URL.RawQuery)
	})
	s.port = freePort(t, hosts)
	for _, h := range hosts {
		ln, err := net.Listen("tcp", fmt.Sprintf("%s:%d", h, s.port))
		require.NoError(t, err)
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
	}
	return s
}

// times are the item page requests of a host, or of a job's tag.
func (s *hostsShop) times(host string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]time.Time(nil), s.hits[host]...)
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// TestFrontierKeepsHostsBusy: a polite run across three hosts (10
// requests/s each, one in flight per host) with fewer in-flight slots than
// hosts crawls the hosts side by side: pages waiting for their host's
// turn hold no in-flight slot, so each host's item pages are spread over
// the same stretch of time instead of one host after another. No host
// gets more than its rate in any second.
func TestFrontierKeepsHostsBusy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := newRig(t, ctx, nil)
	hosts := []string{"127.0.0.45", "127.0.0.46", "127.0.0.47"}
	const n = 20
	shop := startHostsShop(t, hosts, n)
	require.NoError(t, r.svc.Store.SetEgress(ctx, r.tenant, ops, crawl.EgressPolicy{Allow: []string{fmt.Sprintf("127.0.0.0/8:%d", shop.port)}}))
	_, _, err := r.svc.Apply(ctx, r.tenant, ops, "hosts.yaml", []byte(fmt.Sprintf(`version: 1
name: hosts
start:
  templates:
    - url: "http://{host}:%d/list"
      params: {host: [127.0.0.45, 127.0.0.46, 127.0.0.47]}
allowed_domains: [127.0.0.45, 127.0.0.46, 127.0.0.47]
follow: {css: a.item}
extract:
  fields:
    url: {css: "link[rel=canonical]", attr: href, required: true}
item_key: url
politeness: {concurrency: 1, delay: 100ms, jitter: 0, autothrottle: false}
limits: {concurrency: 2}
`, shop.port)))
	require.NoError(t, err)
	run := r.run(t, ctx, "hosts")
	require.Equal(t, "succeeded", run.State, run.Reason)
	require.Equal(t, 3*n, run.Items)

	// Each host's item pages span a stretch of time; the hosts were busy
	// side by side when those stretches overlap almost whole. Crawled one
	// host after another, they barely overlap at all.
	var first, last []time.Time
	var longest time.Duration
	for _, h := range hosts {
		ts := shop.times(h)
		require.Len(t, ts, n, h)
		first, last = append(first, ts[0]), append(last, ts[n-1])
		longest = max(longest, ts[n-1].Sub(ts[0]))
		// Politeness holds per host: at most 10 requests in any second
		// (one more for the window's edges).
		for i := range ts {
			j := i
			for j < len(ts) && ts[j].Sub(ts[i]) < time.Second {
				j++
			}
			require.LessOrEqual(t, j-i, 11, "host %s over its rate", h)
		}
	}
	overlap := overlapOf(first, last)
	require.Greater(t, overlap, longest*7/10, "the hosts were crawled side by side: overlap %s of the longest stretch %s", overlap, longest)
}

// overlapOf is how long the stretches [first[i], last[i]] all overlap.
func overlapOf(first, last []time.Time) time.Duration {
	latestFirst, earliestLast := first[0], last[0]
	for i := range first {
		if first[i].After(latestFirst) {
			latestFirst = first[i]
		}
		if last[i].Before(earliestLast) {
			earliestLast = last[i]
		}
	}
	return earliestLast.Sub(latestFirst)
}

// TestRunsSharingAHostTakeTurns: two runs crawl one host whose
// politeness allows one request in flight: the host's slot goes to them in
// turns, so both runs' item pages are spread over the same stretch of
// time. Without the budget's queue of waiters, the run whose own request
// just ended would ask again first and take every slot until it is done.
func TestRunsSharingAHostTakeTurns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := newRig(t, ctx, nil)
	const n = 20
	shop := startHostsShop(t, []string{"127.0.0.48"}, n)
	require.NoError(t, r.svc.Store.SetEgress(ctx, r.tenant, ops, crawl.EgressPolicy{Allow: []string{fmt.Sprintf("127.0.0.0/8:%d", shop.port)}}))
	ids := map[string]string{}
	for _, job := range []string{"a", "b"} {
		_, _, err := r.svc.Apply(ctx, r.tenant, ops, job+".yaml", []byte(fmt.Sprintf(`version: 1
name: share-%s
start: {urls: ["http://127.0.0.48:%d/list?job=%s"]}
allowed_domains: [127.0.0.48]
follow: {css: a.item}
extract:
  fields:
    url: {css: "link[rel=canonical]", attr: href, required: true}
item_key: url
politeness: {concurrency: 1, delay: 20ms, jitter: 0, autothrottle: false}
limits: {concurrency: 4}
`, job, shop.port, job)))
		require.NoError(t, err)
		j, err := r.svc.Store.JobByName(ctx, r.tenant, "share-"+job)
		require.NoError(t, err)
		ids[job], err = r.svc.QueueRun(ctx, r.tenant, j.ID, "test", ops)
		require.NoError(t, err)
	}
	done := make(chan error, 2)
	for _, id := range ids {
		go func() { done <- r.runner.Execute(ctx, r.tenant, id) }()
	}
	for range 2 {
		require.NoError(t, <-done)
	}
	var first, last []time.Time
	var longest time.Duration
	for job, id := range ids {
		run, err := r.svc.Store.Run(ctx, r.tenant, id)
		require.NoError(t, err)
		require.Equal(t, "succeeded", run.State, run.Reason)
		require.Equal(t, n, run.Items, job)
		ts := shop.times("job=" + job)
		require.Len(t, ts, n, job)
		first, last = append(first, ts[0]), append(last, ts[n-1])
		longest = max(longest, ts[n-1].Sub(ts[0]))
	}
	overlap := overlapOf(first, last)
	require.Greater(t, overlap, longest*7/10, "the runs took turns: overlap %s of the longest stretch %s", overlap, longest)
}
