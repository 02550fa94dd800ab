// Package latency turns claims into the figures people read: p50/p95/p99 of
// every stage (for the whole tenant, a cell or a worker), a histogram and a
// per-minute series drawn as SVG, and the per-claim CSV export. It computes
// and draws, and reads nothing: the claims come from claim.Store.Window.
package latency

import (
	"fmt"
	"html"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fleetwright/fleetwright/app/csvsafe"
	"github.com/fleetwright/fleetwright/modules/claim"
)

// Percentiles of one stage in one group.
type Percentiles struct {
	Stage         string
	N             int
	P50, P95, P99 time.Duration
	// Clock (publish → detect only) says how well the platform's clock was
	// known: the platform stamps published_at, the agents' clocks the
	// sighting.
	Clock *ClockBound
}

// ClockBound summarises the per-claim error bounds of publish → detect:
// Measured of the stage's N claims had a reading of the platform's clock
// (the rest compare the platform's own published_at with the panel's
// clock, of unknown error); P50 and Max are the readings' bounds.
type ClockBound struct {
	Measured int
	P50, Max time.Duration
}

// Group is the latency of one group (a cell, a worker, or the whole tenant).
type Group struct {
	Name   string
	Stages []Percentiles
}

// Quantile is the nearest-rank q-quantile of sorted durations.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// Summarize computes p50/p95/p99 of every stage over claims.
func Summarize(name string, claims []claim.Claim) Group {
	by := map[string][]time.Duration{}
	var bounds []time.Duration
	for _, c := range claims {
		for s, d := range c.StageDurations() {
			by[s] = append(by[s], d)
			if s == claim.StagePublishSeen && c.BoardClockErrorMS != nil {
				bounds = append(bounds, time.Duration(*c.BoardClockErrorMS)*time.Millisecond)
			}
		}
	}
	sort.Slice(bounds, func(i, j int) bool { return bounds[i] < bounds[j] })
	g := Group{Name: name}
	for _, s := range claim.Stages {
		ds := by[s]
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		p := Percentiles{Stage: s, N: len(ds), P50: Quantile(ds, .5), P95: Quantile(ds, .95), P99: Quantile(ds, .99)}
		if s == claim.StagePublishSeen {
			p.Clock = &ClockBound{Measured: len(bounds), P50: Quantile(bounds, .5), Max: Quantile(bounds, 1)}
		}
		g.Stages = append(g.Stages, p)
	}
	return g
}

// GroupBy splits claims by cell or worker ("" or "tenant": one group).
func GroupBy(claims []claim.Claim, by string) []Group {
	if by != "cell" && by != "worker" {
		return []Group{Summarize("tenant", claims)}
	}
	parts := map[string][]claim.Claim{}
	for _, c := range claims {
		k := c.Cell
		if by == "worker" {
			k = c.Holder.Worker
		}
		parts[k] = append(parts[k], c)
	}
	names := make([]string, 0, len(parts))
	for k := range parts {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]Group, 0, len(names))
	for _, n := range names {
		out = append(out, Summarize(n, parts[n]))
	}
	return out
}

// WriteCSV writes one row per claim: its timestamps, stage durations in
// milliseconds, the agent clock's error bound and the platform clock's
// (empty when the platform's clock was not measured).
func WriteCSV(w io.Writer, claims []claim.Claim) error {
	cw := csvsafe.NewWriter(w)
	head := []string{"job", "state", "cell", "worker", "token", "published_at", "seen_at", "queued_at", "leased_at",
		"act_sent_at", "confirmed_at", "clock_error_ms", "board_clock_error_ms"}
	for _, s := range claim.Stages {
		head = append(head, s+"_ms")
	}
	if err := cw.Write(head); err != nil {
		return err
	}
	ts := func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	for _, c := range claims {
		leased := c.LeasedAt
		row := []string{c.Key, string(c.State), c.Cell, c.Holder.Worker, strconv.FormatInt(c.Token, 10),
			ts(c.PublishedAt), ts(c.SeenAt), ts(c.QueueAt), ts(&leased), ts(c.ActSentAt), ts(c.ConfirmedAt),
			strconv.FormatInt(c.ClockErrorMS, 10), ""}
		if c.BoardClockErrorMS != nil {
			row[len(row)-1] = strconv.FormatInt(*c.BoardClockErrorMS, 10)
		}
		d := c.StageDurations()
		for _, s := range claim.Stages {
			if v, ok := d[s]; ok {
				row = append(row, strconv.FormatFloat(float64(v)/float64(time.Millisecond), 'f', 3, 64))
			} else {
				row = append(row, "")
			}
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	return cw.Flush()
}

// histBounds are the histogram's bucket upper bounds (ms).
var histBounds = []float64{5, 10, 25, 50, 75, 100, 150, 200, 300, 500, 750, 1000, 2000, 5000, math.Inf(1)}

// HistogramSVG draws the distribution of one stage over claims as bars.
func HistogramSVG(stage string, claims []claim.Claim) string {
	counts := make([]int, len(histBounds))
	total := 0
	for _, c := range claims {
		d, ok := c.StageDurations()[stage]
		if !ok {
			continue
		}
		ms := float64(d) / float64(time.Millisecond)
		for i, b := range histBounds {
			if ms <= b {
				counts[i]++
				break
			}
		}
		total++
	}
	const w, h, pad = 420, 140, 20
	peak := 1
	for _, c := range counts {
		peak = max(peak, c)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s histogram" data-testid="hist-%s">`,
		w, h+pad*2, html.EscapeString(stage), html.EscapeString(stage))
	fmt.Fprintf(&sb, `<text class="title" x="4" y="14" font-size="12">%s <tspan font-weight="400">· n = %d · ms</tspan></text>`, html.EscapeString(StageLabel(stage)), total)
	fmt.Fprintf(&sb, `<line class="axis" x1="4" x2="%d" y1="%d" y2="%d" stroke="#dde3ea"/>`, w-4, pad+h, pad+h)
	bw := float64(w-8) / float64(len(counts))
	for i, c := range counts {
		bh := float64(h-10) * float64(c) / float64(peak)
		x := 4 + float64(i)*bw
		fmt.Fprintf(&sb, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="1.5" fill="#4f7fbf"><title>≤%s ms: %d</title></rect>`,
			x, float64(pad+h)-bh, bw-2, bh, boundLabel(histBounds[i]), c)
		fmt.Fprintf(&sb, `<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%s</text>`, x+bw/2, pad+h+13, boundLabel(histBounds[i]))
	}
	sb.WriteString(`</svg>`)
	return sb.String()
}

func boundLabel(b float64) string {
	if math.IsInf(b, 1) {
		return "more"
	}
	return strconv.FormatFloat(b, 'f', -1, 64)
}

// SeriesSVG draws p50 and p95 of a stage per minute of lease time, for a
// wide card.
func SeriesSVG(stage string, claims []claim.Claim) string {
	return seriesSVG(stage, claims, 1000, "series-")
}

// NarrowSeriesSVG is SeriesSVG for a phone's width: the same figures in a
// drawing a third as wide, so its words are not shrunk out of sight.
func NarrowSeriesSVG(stage string, claims []claim.Claim) string {
	return seriesSVG(stage, claims, 380, "series-narrow-")
}

func seriesSVG(stage string, claims []claim.Claim, w int, testid string) string {
	type bucket struct {
		at time.Time
		ds []time.Duration
	}
	var buckets []*bucket
	idx := map[int64]*bucket{}
	for _, c := range claims {
		d, ok := c.StageDurations()[stage]
		if !ok {
			continue
		}
		m := c.LeasedAt.Truncate(time.Minute)
		b := idx[m.Unix()]
		if b == nil {
			b = &bucket{at: m}
			idx[m.Unix()] = b
			buckets = append(buckets, b)
		}
		b.ds = append(b.ds, d)
	}
	sort.Slice(buckets, func(i, j int) bool { return buckets[i].at.Before(buckets[j].at) })
	const h, pad = 150, 34
	const left = 64 // room for the y-axis labels
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s over time" data-testid="%s%s">`,
		w, h+pad*2, html.EscapeString(stage), testid, html.EscapeString(stage))
	fmt.Fprintf(&sb, `<text class="title" x="4" y="14" font-size="12">%s per minute <tspan font-weight="400">· p50 (blue), p95 (red)</tspan></text>`, html.EscapeString(StageLabel(stage)))
	if len(buckets) == 0 {
		sb.WriteString(`<text x="4" y="40" font-size="12">no data in the window</text></svg>`)
		return sb.String()
	}
	var p50, p95 []time.Duration
	peak := time.Millisecond
	for _, b := range buckets {
		sort.Slice(b.ds, func(i, j int) bool { return b.ds[i] < b.ds[j] })
		a, c := Quantile(b.ds, .5), Quantile(b.ds, .95)
		p50, p95 = append(p50, a), append(p95, c)
		peak = max(peak, c)
	}
	xy := func(i int, d time.Duration) (float64, float64) {
		x := float64(left+w-pad) / 2
		if len(buckets) > 1 {
			x = float64(left) + float64(i)*float64(w-pad-left)/float64(len(buckets)-1)
		}
		return x, float64(pad+h) - float64(h)*float64(d)/float64(peak)
	}
	// Grid lines at 0, half the peak and the peak, labelled.
	for _, f := range []float64{0, .5, 1} {
		y := float64(pad+h) - float64(h)*f
		fmt.Fprintf(&sb, `<line class="axis" x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#dde3ea"/>`, left, w-pad, y, y)
		fmt.Fprintf(&sb, `<text x="%d" y="%.1f" font-size="10" text-anchor="end">%s</text>`, left-6, y+3,
			axisLabel(time.Duration(float64(peak)*f)))
	}
	for _, line := range []struct {
		ds    []time.Duration
		class string
	}{{p50, "p50"}, {p95, "p95"}} {
		pts := make([]string, len(line.ds))
		stroke := map[string]string{"p50": "#1f5fa8", "p95": "#c0392b"}[line.class]
		for i, d := range line.ds {
			x, y := xy(i, d)
			pts[i] = fmt.Sprintf("%.1f,%.1f", x, y)
			fmt.Fprintf(&sb, `<circle class="%s" cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s %s: %s</title></circle>`,
				line.class, x, y, stroke, buckets[i].at.UTC().Format("15:04"), line.class, d.Round(100*time.Microsecond))
		}
		fmt.Fprintf(&sb, `<polyline class="%s" fill="none" stroke="%s" stroke-width="2" points="%s"/>`, line.class, stroke, strings.Join(pts, " "))
	}
	fmt.Fprintf(&sb, `<text x="%d" y="%d" font-size="10">%s UTC</text>`, left, pad+h+16, buckets[0].at.UTC().Format("15:04"))
	fmt.Fprintf(&sb, `<text x="%d" y="%d" font-size="10" text-anchor="end">%s UTC · %d minute(s)</text>`, w-pad, pad+h+16,
		buckets[len(buckets)-1].at.UTC().Format("15:04"), len(buckets))
	sb.WriteString(`</svg>`)
	return sb.String()
}

// axisLabel reads a latency on an axis with its unit apart: "0 ms",
// "377 ms", "1.2 s".
func axisLabel(d time.Duration) string {
	if d < time.Second {
		return strconv.FormatInt(d.Round(time.Millisecond).Milliseconds(), 10) + " ms"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
}

// StageLabel names a stage for people ("detect → queued").
func StageLabel(stage string) string {
	switch stage {
	case claim.StagePublishSeen:
		return "publish → detect"
	case claim.StageSeenQueued:
		return "detect → queued"
	case claim.StageQueuedLeased:
		return "queued → leased"
	case claim.StageLeasedActSent:
		return "leased → act sent"
	case claim.StageActSentConfirm:
		return "act sent → confirmed"
	case claim.StageDetectAction:
		return "detect → action"
	}
	return stage
}
