package page

import (
	"strconv"
	"time"
)

// Duration is a duration in words a person reads at a glance: "45 s",
// "1 min 30 s", "7 min", "2 h 5 min", "3 d 4 h" (never Go's "15m0s"). It lives here, not
// in views, so that modules writing alarm summaries and events (read on
// pages, in notifications and in logs) word durations as pages do without
// importing the layout.
func Duration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + " s"
	case d < time.Hour:
		m, sec := int(d.Minutes()), int(d.Seconds())%60
		if m < 10 && sec != 0 {
			// Under ten minutes the seconds still matter to a reader: an
			// allowance of 1 min 30 s is not "1 min".
			return strconv.Itoa(m) + " min " + strconv.Itoa(sec) + " s"
		}
		return strconv.Itoa(m) + " min"
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
