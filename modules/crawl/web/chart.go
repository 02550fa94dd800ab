package web

import (
	"fmt"
	"strings"
)

// chart is the items-per-cycle chart's geometry: one point per finished
// run, the expected band behind, alarms as red marks.
type chart struct {
	W, H               int
	Line               string
	BandY, BandH       int
	HasBand            bool
	Dots               []dot
	MaxLabel, MinLabel string
}

type dot struct {
	X, Y  int
	Alarm bool
	Title string
}

func makeChart(points []Point, minItems, maxItems int, hasBand bool) chart {
	c := chart{W: 640, H: 160}
	top := 1
	for _, p := range points {
		top = max(top, p.Run.Items)
	}
	if hasBand {
		top = max(top, maxItems)
	}
	top = top + top/10 + 1
	pad := 20
	y := func(v int) int { return c.H - pad - (c.H-2*pad)*v/top }
	var pts []string
	for i, p := range points {
		x := pad
		if len(points) > 1 {
			x = pad + (c.W-2*pad)*i/(len(points)-1)
		}
		yy := y(p.Run.Items)
		pts = append(pts, fmt.Sprintf("%d,%d", x, yy))
		title := fmt.Sprintf("%s · %d items · %s", p.Run.QueuedAt.UTC().Format("01-02 15:04:05"), p.Run.Items, p.Run.State)
		if len(p.Alarms) > 0 {
			title += " · alarm: " + strings.Join(p.Alarms, ", ")
		}
		c.Dots = append(c.Dots, dot{X: x, Y: yy, Alarm: len(p.Alarms) > 0, Title: title})
	}
	c.Line = strings.Join(pts, " ")
	if hasBand {
		c.HasBand = true
		c.BandY = y(maxItems)
		c.BandH = y(minItems) - c.BandY
	}
	c.MaxLabel = fmt.Sprint(top)
	c.MinLabel = "0"
	return c
}
