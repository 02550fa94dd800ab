package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// histogram is one Prometheus histogram's cumulative buckets.
type histogram struct {
	le    []float64
	count map[float64]float64
}

// The replicas' own histograms the run reads: the panel's share of
// detect→leased per step, and panel_in (one replica's monotonic time from a
// sighting's arrival to the first offer or grant of its job).
const (
	metricPanelSteps = "fleet_claim_panel_seconds"
	metricPanelIn    = "fleet_claim_panel_in_seconds"
	// scrapeEvery is how often both replicas' /metrics are read during the
	// run, so a replica the schedule kills loses at most this much of what
	// it measured.
	scrapeEvery = 2 * time.Second
	// panelInTargetMS is issue 16's target for panel_in's p50 in the full
	// chaos run; it is reported, not judged (the guarantees decide).
	panelInTargetMS = 3.0
)

// replicaSeries is what one replica measured: base holds the series of its
// earlier processes (a killed replica's unit starts a new one, whose
// counters start at zero), last the latest scrape of the current process.
type replicaSeries struct {
	started    float64               // process_start_time_seconds of the last scrape
	base, last map[string]*histogram // metric \x00 label value → histogram
}

// scraper reads both replicas' histograms every scrapeEvery and keeps
// them across the replicas' restarts.
type scraper struct {
	mu   sync.Mutex
	reps [2]*replicaSeries
}

func newScraper() *scraper {
	s := &scraper{}
	for i := range s.reps {
		s.reps[i] = &replicaSeries{base: map[string]*histogram{}, last: map[string]*histogram{}}
	}
	return s
}

// scrapeLoop scrapes until ctx ends.
func (r *runner) scrapeLoop(ctx context.Context) {
	for r.sleep(ctx, scrapeEvery) {
		r.scrapeAll(ctx, false)
	}
}

// scrapeAll reads each replica's /metrics once and folds it in. A replica
// whose process_start_time_seconds changed since its last scrape is a new
// process: what the old one measured moves to base (a counter that went
// down says the same).
func (r *runner) scrapeAll(ctx context.Context, final bool) {
	client := &http.Client{Timeout: scrapeEvery}
	if final {
		client.Timeout = 5 * time.Second
	}
	for i, p := range r.panels {
		if p == nil {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.metricsURL(i), nil)
		if err != nil {
			continue
		}
		resp, err := client.Do(req)
		if err != nil {
			if final {
				r.note("metrics of replica %d: %v", i+1, err)
			}
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			continue // a partial scrape is no scrape
		}
		now := map[string]*histogram{}
		for _, m := range []struct{ metric, label string }{{metricPanelSteps, "step"}, {metricPanelIn, ""}} {
			hs := map[string]*histogram{}
			parseHistograms(bufio.NewScanner(bytes.NewReader(body)), m.metric, m.label, hs)
			for k, h := range hs {
				now[m.metric+"\x00"+k] = h
			}
		}
		r.scrape.fold(i, processStart(body), now)
	}
}

// fold merges one scrape of replica i into its series.
func (s *scraper) fold(i int, started float64, now map[string]*histogram) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs := s.reps[i]
	restarted := started != rs.started
	for k, old := range rs.last {
		if h, ok := now[k]; !ok || h.total() < old.total() {
			restarted = true
		}
	}
	if restarted {
		for k, old := range rs.last {
			b := rs.base[k]
			if b == nil {
				b = &histogram{count: map[float64]float64{}}
				rs.base[k] = b
			}
			b.add(old)
		}
	}
	rs.started, rs.last = started, now
}

// processStart reads process_start_time_seconds from a scrape (0 when absent).
func processStart(body []byte) float64 {
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "process_start_time_seconds "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

// merged returns metric's histograms over both replicas and all their
// processes, by label value.
func (s *scraper) merged(metric string) map[string]*histogram {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]*histogram{}
	for _, rs := range s.reps {
		for _, part := range []map[string]*histogram{rs.base, rs.last} {
			for k, h := range part {
				m, key, _ := strings.Cut(k, "\x00")
				if m != metric {
					continue
				}
				o := out[key]
				if o == nil {
					o = &histogram{count: map[float64]float64{}}
					out[key] = o
				}
				o.add(h)
			}
		}
	}
	return out
}

// panelShare is the merged fleet_claim_panel_seconds per step.
func (r *runner) panelShare() map[string]Stage {
	out := map[string]Stage{}
	for step, h := range r.scrape.merged(metricPanelSteps) {
		out[step] = h.stage()
	}
	return out
}

// panelIn is the merged fleet_claim_panel_in_seconds.
func (r *runner) panelIn() Stage {
	if h := r.scrape.merged(metricPanelIn)[""]; h != nil {
		return h.stage()
	}
	return Stage{}
}

// parseHistograms adds the _bucket lines of metric (keyed by label's
// value; "" when label is "") to hs.
func parseHistograms(sc *bufio.Scanner, metric, label string, hs map[string]*histogram) {
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	prefix := metric + "_bucket{"
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		if end < 0 {
			continue
		}
		labels, val := line[len(prefix):end], strings.TrimSpace(line[end+1:])
		var key, le string
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			v = strings.Trim(v, `"`)
			switch {
			case k == "le":
				le = v
			case label != "" && k == label:
				key = v
			}
		}
		n, err := strconv.ParseFloat(val, 64)
		if err != nil || (key == "" && label != "") {
			continue
		}
		bound := math.Inf(1)
		if le != "+Inf" {
			if bound, err = strconv.ParseFloat(le, 64); err != nil {
				continue
			}
		}
		h := hs[key]
		if h == nil {
			h = &histogram{count: map[float64]float64{}}
			hs[key] = h
		}
		if _, ok := h.count[bound]; !ok {
			h.le = append(h.le, bound)
		}
		h.count[bound] += n
	}
}

// add adds o's buckets to h.
func (h *histogram) add(o *histogram) {
	for _, le := range o.le {
		if _, ok := h.count[le]; !ok {
			h.le = append(h.le, le)
		}
		h.count[le] += o.count[le]
	}
}

func (h *histogram) total() float64 { return h.count[math.Inf(1)] }

// quantile interpolates linearly within the bucket (as Prometheus'
// histogram_quantile does), in milliseconds.
func (h *histogram) quantile(q float64) float64 {
	sort.Float64s(h.le)
	total := h.total()
	if total == 0 {
		return 0
	}
	rank := q * total
	prevLe, prevN := 0.0, 0.0
	for _, le := range h.le {
		n := h.count[le]
		if n >= rank {
			if math.IsInf(le, 1) {
				return round2(prevLe * 1000)
			}
			if n == prevN {
				return round2(le * 1000)
			}
			return round2((prevLe + (le-prevLe)*(rank-prevN)/(n-prevN)) * 1000)
		}
		prevLe, prevN = le, n
	}
	return round2(prevLe * 1000)
}

func (h *histogram) stage() Stage {
	return Stage{Count: int(h.total()), P50: h.quantile(.5), P95: h.quantile(.95), P99: h.quantile(.99)}
}
