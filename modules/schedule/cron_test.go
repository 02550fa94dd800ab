package schedule

import (
	"strings"
	"testing"
	"time"
)

func mustCron(t *testing.T, expr, tz string) *Cron {
	t.Helper()
	c, err := ParseCron(expr, tz)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func fmtTimes(ts []time.Time) string {
	var s []string
	for _, t := range ts {
		s = append(s, t.Format("2006-01-02 15:04 MST"))
	}
	return strings.Join(s, ", ")
}

func TestCronNextRunsInTimeZone(t *testing.T) {
	from := time.Date(2026, 3, 27, 12, 0, 0, 0, time.UTC) // a Friday
	for _, c := range []struct{ expr, tz, want string }{
		{"0 6 * * mon-fri", "Europe/Berlin", "2026-03-30 06:00 CEST, 2026-03-31 06:00 CEST, 2026-04-01 06:00 CEST, 2026-04-02 06:00 CEST, 2026-04-03 06:00 CEST"},
		{"*/20 13 * * *", "UTC", "2026-03-27 13:00 UTC, 2026-03-27 13:20 UTC, 2026-03-27 13:40 UTC, 2026-03-28 13:00 UTC, 2026-03-28 13:20 UTC"},
		{"@monthly", "America/New_York", "2026-04-01 00:00 EDT, 2026-05-01 00:00 EDT, 2026-06-01 00:00 EDT, 2026-07-01 00:00 EDT, 2026-08-01 00:00 EDT"},
		{"0 0 29 feb *", "UTC", "2028-02-29 00:00 UTC, 2032-02-29 00:00 UTC, 2036-02-29 00:00 UTC, 2040-02-29 00:00 UTC, 2044-02-29 00:00 UTC"},
		// Both day fields restricted: either one matches (Vixie cron).
		{"0 9 1 * sun", "UTC", "2026-03-29 09:00 UTC, 2026-04-01 09:00 UTC, 2026-04-05 09:00 UTC, 2026-04-12 09:00 UTC, 2026-04-19 09:00 UTC"},
		{"30 8 * jan,jul 7", "UTC", "2026-07-05 08:30 UTC, 2026-07-12 08:30 UTC, 2026-07-19 08:30 UTC, 2026-07-26 08:30 UTC, 2027-01-03 08:30 UTC"},
	} {
		got, err := NextRuns(c.expr, c.tz, from, 5)
		if err != nil {
			t.Fatalf("%s: %v", c.expr, err)
		}
		if fmtTimes(got) != c.want {
			t.Errorf("%s in %s:\n got  %s\n want %s", c.expr, c.tz, fmtTimes(got), c.want)
		}
	}
}

func TestCronDaylightSaving(t *testing.T) {
	// Spring forward in Berlin (29 March 2026, 02:00 → 03:00): 02:30 never
	// exists, so the daily 02:30 run skips that day.
	c := mustCron(t, "30 2 * * *", "Europe/Berlin")
	got := fmtTimes(c.NextN(time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC), 2))
	if got != "2026-03-30 02:30 CEST, 2026-03-31 02:30 CEST" {
		t.Errorf("spring forward: %s", got)
	}
	// Fall back (25 October 2026, 03:00 → 02:00): 02:30 happens twice and
	// the daily run fires once.
	got = fmtTimes(c.NextN(time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC), 2))
	if got != "2026-10-25 02:30 CEST, 2026-10-26 02:30 CET" {
		t.Errorf("fall back: %s", got)
	}
	// An hourly schedule keeps to absolute time through the repeated hour.
	h := mustCron(t, "15 * * * *", "Europe/Berlin")
	got = fmtTimes(h.NextN(time.Date(2026, 10, 24, 23, 30, 0, 0, time.UTC), 3)) // 01:30 CEST
	if got != "2026-10-25 02:15 CEST, 2026-10-25 02:15 CET, 2026-10-25 03:15 CET" {
		t.Errorf("hourly through fall back: %s", got)
	}
}

func TestCronRefusesBadExpressionsClearly(t *testing.T) {
	for _, c := range []struct{ expr, tz, want string }{
		{"* * * *", "UTC", "five are needed"},
		{"61 * * * *", "UTC", "minute field"},
		{"* * * foo *", "UTC", "month field"},
		{"5-1 * * * *", "UTC", "runs backwards"},
		{"*/0 * * * *", "UTC", "step"},
		{"* * * * *", "Mars/Olympus", "unknown time zone"},
		{"* * * * *", "", "time zone is required"},
	} {
		if _, err := ParseCron(c.expr, c.tz); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q %q: got %v, want %q", c.expr, c.tz, err, c.want)
		}
	}
	if _, err := NextRuns("0 0 30 feb *", "UTC", time.Now(), 5); err == nil || !strings.Contains(err.Error(), "never fires") {
		t.Errorf("30 February: %v", err)
	}
}

func TestDueTimesAfterLongOutageStaysBounded(t *testing.T) {
	c := mustCron(t, "* * * * *", "UTC")
	first := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := first.Add(100 * 24 * time.Hour) // 144,000 minutes
	recent, total := dueTimes(c, first, now, 3)
	if total != maxEnumerate {
		t.Fatalf("total %d, want the floor %d", total, maxEnumerate)
	}
	if fmtTimes(recent) != fmtTimes([]time.Time{now.Add(-2 * time.Minute), now.Add(-time.Minute), now}) {
		t.Fatalf("recent: %s", fmtTimes(recent))
	}
}
