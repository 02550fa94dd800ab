package loadtest

import (
	"bufio"
	"context"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// histogram is one Prometheus histogram's cumulative buckets.
type histogram struct {
	le    []float64
	count map[float64]float64
}

// panelShare scrapes fleet_claim_panel_seconds from both replicas and
// merges them. A replica killed during the run lost what it measured
// before; its restarted process counts from then on.
func (r *runner) panelShare(ctx context.Context) map[string]Stage {
	hs := map[string]*histogram{}
	client := &http.Client{Timeout: 5 * time.Second}
	for i := range r.panels {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.panelURL(i)+"/metrics", nil)
		if err != nil {
			continue
		}
		resp, err := client.Do(req)
		if err != nil {
			r.note("metrics of replica %d: %v", i+1, err)
			continue
		}
		parseHistograms(bufio.NewScanner(resp.Body), "fleet_claim_panel_seconds", "step", hs)
		resp.Body.Close()
	}
	out := map[string]Stage{}
	for step, h := range hs {
		out[step] = h.stage()
	}
	return out
}

// parseHistograms adds the _bucket lines of metric (keyed by label) to hs.
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
			switch k {
			case label:
				key = v
			case "le":
				le = v
			}
		}
		n, err := strconv.ParseFloat(val, 64)
		if err != nil || key == "" {
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

// quantile interpolates linearly within the bucket (as Prometheus'
// histogram_quantile does), in milliseconds.
func (h *histogram) quantile(q float64) float64 {
	sort.Float64s(h.le)
	total := h.count[math.Inf(1)]
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
	return Stage{Count: int(h.count[math.Inf(1)]), P50: h.quantile(.5), P95: h.quantile(.95), P99: h.quantile(.99)}
}
