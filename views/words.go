package views

import (
	"strconv"
	"time"
)

// Duration is a duration in words a person reads at a glance: "45 s",
// "7 min", "2 h 5 min", "3 d 4 h" (never Go's "15m0s").
func Duration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + " s"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + " min"
	case d < 24*time.Hour:
		h, m := int(d.Hours()), int(d.Minutes())%60
		if m == 0 {
			return strconv.Itoa(h) + " h"
		}
		return strconv.Itoa(h) + " h " + strconv.Itoa(m) + " min"
	}
	days, h := int(d.Hours())/24, int(d.Hours())%24
	if h == 0 {
		return strconv.Itoa(days) + " d"
	}
	return strconv.Itoa(days) + " d " + strconv.Itoa(h) + " h"
}

// Stamp is an absolute time with its zone, as every page writes one:
// "2026-12-02 14:05:09 UTC".
func Stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }
