package web

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// chart is the items-per-cycle chart's geometry: one point per finished
// run placed by when it was queued (a time axis in UTC), the expected band
// behind, alarms as red marks, and the item count on a labelled y axis.
type chart struct {
	W, H               int
	Left, Right        int
	Top, Bottom        int
	Line               string
	BandY, BandH       int
	HasBand            bool
	BandLabel          string
	Dots               []dot
	YTicks, XTicks     []tick
	MaxLabel, MinLabel string
	XTitle, YTitle     string
}

type dot struct {
	X, Y  int
	Alarm bool
	Zero  bool
	Title string
}

// tick is one axis label and where it goes.
type tick struct {
	At    int
	Label string
}

func makeChart(points []Point, minItems, maxItems int, hasBand bool) chart {
	c := chart{W: 720, H: 200, Left: 52, Right: 16, Top: 12, Bottom: 36, XTitle: "run queued (UTC)", YTitle: "items"}
	top := 1
	for _, p := range points {
		top = max(top, p.Run.Items)
	}
	if hasBand {
		top = max(top, maxItems)
	}
	top = niceCeil(top + top/10)
	plotW, plotH := c.W-c.Left-c.Right, c.H-c.Top-c.Bottom
	y := func(v int) int { return c.Top + plotH - plotH*v/top }
	var t0, t1 time.Time
	for i, p := range points {
		if i == 0 || p.Run.QueuedAt.Before(t0) {
			t0 = p.Run.QueuedAt
		}
		if i == 0 || p.Run.QueuedAt.After(t1) {
			t1 = p.Run.QueuedAt
		}
	}
	span := t1.Sub(t0)
	x := func(t time.Time) int {
		if span <= 0 {
			return c.Left + plotW/2
		}
		return c.Left + int(float64(plotW)*float64(t.Sub(t0))/float64(span))
	}
	var pts []string
	for _, p := range points {
		xx, yy := x(p.Run.QueuedAt), y(p.Run.Items)
		pts = append(pts, fmt.Sprintf("%d,%d", xx, yy))
		title := fmt.Sprintf("%s · %d items · %s", at(p.Run.QueuedAt), p.Run.Items, p.Run.State)
		if len(p.Alarms) > 0 {
			title += " · alarm: " + strings.Join(p.Alarms, ", ")
		}
		c.Dots = append(c.Dots, dot{X: xx, Y: yy, Alarm: len(p.Alarms) > 0, Zero: p.Run.Items == 0, Title: title})
	}
	c.Line = strings.Join(pts, " ")
	if hasBand {
		c.HasBand = true
		c.BandY = y(maxItems)
		c.BandH = y(minItems) - c.BandY
		c.BandLabel = fmt.Sprintf("expected %d–%d items", minItems, maxItems)
	}
	for _, v := range []int{0, top / 2, top} {
		c.YTicks = append(c.YTicks, tick{At: y(v), Label: strconv.Itoa(v)})
	}
	c.MaxLabel, c.MinLabel = strconv.Itoa(top), "0"
	// Time labels: the first and last run, and up to three between.
	layout := "15:04"
	if span >= 24*time.Hour || t0.UTC().YearDay() != t1.UTC().YearDay() {
		layout = "01-02 15:04"
	}
	n := 4
	if span <= 0 {
		n = 0
	}
	for i := 0; i <= n; i++ {
		t := t0.Add(time.Duration(int64(span) * int64(i) / int64(max(n, 1))))
		c.XTicks = append(c.XTicks, tick{At: x(t), Label: t.UTC().Format(layout)})
	}
	return c
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten, so the y axis
// reads in round numbers.
func niceCeil(v int) int {
	if v <= 1 {
		return 1
	}
	p := 1
	for p*10 < v {
		p *= 10
	}
	for _, m := range []int{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
