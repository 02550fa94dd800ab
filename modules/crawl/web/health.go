package web

import (
	"fmt"
	"strconv"
	"time"

	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/crawl"
)

// health is a run's state as the pages show it: the words, the badge and
// what it means. A run that ended "succeeded" with no item where items were
// expected is not shown as a success: the crawler's own zero-result rule
// (crawl.Judge) decides, so the badge and the alarm never disagree.
type health struct {
	Words string
	Class string
	Title string
	// Zero: the run found no item where items were expected.
	Zero bool
}

// runHealth judges run r of job j given the runs before it (newest first;
// only succeeded and stopped ones count, as for the alarm rules).
func runHealth(j crawl.Job, r crawl.Run, before []crawl.Run) health {
	h := health{Words: r.State, Class: stateBadge(r.State)}
	switch r.State {
	case "succeeded":
		h.Title = "the run finished: " + r.Reason
	case "failed":
		h.Title = "the run failed: " + r.Reason
	case "stopped":
		h.Title = "the run stopped at a limit or by hand: " + r.Reason
	}
	if r.State == "queued" || r.State == "running" || r.Items > 0 || j.Spec == nil {
		return h
	}
	var previous []int
	for _, b := range before {
		if b.State != "succeeded" && b.State != "stopped" {
			continue
		}
		previous = append(previous, b.Items)
		if len(previous) == 7 {
			break
		}
	}
	if !zeroExpected(j, r, previous) {
		return h
	}
	h.Zero, h.Class = true, "badge warn"
	h.Words = r.State + " — 0 items, " + expectedWords(j, previous)
	h.Title = "the run " + r.State + " but found no item where items were expected (the zero-result alarm's rule): a selector may have changed"
	return h
}

// zeroExpected is the zero-result rule of crawl.Judge for this run.
func zeroExpected(j crawl.Job, r crawl.Run, previous []int) bool {
	if j.Spec.Alarms.DropShare == nil || j.Spec.Alarms.ErrorRate == nil {
		// Not a parsed job (every parsed job has its defaults): apply the
		// same rule by hand.
		expected := j.Spec.ExpectedItems != nil && j.Spec.ExpectedItems.Min > 0
		return r.Items == 0 && r.State != "failed" && (expected || (len(previous) > 0 && previous[0] > 0))
	}
	for _, v := range crawl.Judge(j, r, previous) {
		if v.Kind == crawl.AlarmZeroResults {
			return v.Failing
		}
	}
	return false
}

// expectedWords says how many items were expected: the job's expected
// range, else what the run before found.
func expectedWords(j crawl.Job, previous []int) string {
	if e := j.Spec.ExpectedItems; e != nil && e.Min > 0 {
		return fmt.Sprintf("expected %d–%d", e.Min, e.Max)
	}
	if len(previous) > 0 {
		return "expected ~" + strconv.Itoa(previous[0]) + " (the run before)"
	}
	return "expected some"
}

// jobAlarm is one kind of open alarm on a job, in words.
type jobAlarm struct {
	Kind, Words, Summary string
	Severity             alarm.Severity
	Since                time.Time
}

// jobAlarms groups a tenant's open alarms by job (alarm key = job id).
func jobAlarms(open []alarm.Open) map[string][]jobAlarm {
	out := map[string][]jobAlarm{}
	for _, a := range open {
		if len(a.Kind) < 6 || a.Kind[:6] != "crawl." {
			continue
		}
		out[a.Key] = append(out[a.Key], jobAlarm{Kind: a.Kind, Words: alarm.KindName(a.Kind), Summary: a.Summary, Severity: a.Severity, Since: a.RaisedAt})
	}
	return out
}

func alarmClass(s alarm.Severity) string {
	if s == alarm.Critical {
		return "badge bad"
	}
	return "badge warn"
}

// bytesWords is a byte count with its unit (1 KiB = 1024 bytes).
func bytesWords(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// durWords is a duration as a person reads it: "850 ms", "12.4 s",
// "3 min 05 s", "1 h 02 min".
func durWords(d time.Duration) string {
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	case d < time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%d min %02d s", int(d.Minutes()), int(d.Seconds())%60)
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%d h %02d min", int(d.Hours()), int(d.Minutes())%60)
}

// at is an absolute time with its zone.
func at(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }
