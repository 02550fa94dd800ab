package schedule

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Cron is a parsed five-field cron expression (minute hour day-of-month
// month day-of-week) read in a time zone. Fields take *, numbers, ranges
// a-b, steps */n and a-b/n, lists a,b and English names (jan, mon); the
// macros @hourly, @daily (@midnight), @weekly, @monthly and @yearly
// (@annually) stand for their usual expressions. As in Vixie cron, when both
// day fields are restricted a day matching either one fires.
//
// Times that a daylight-saving change skips never fire (02:30 on the night
// the clock jumps from 02:00 to 03:00); times it repeats fire once, at
// their first occurrence.
type Cron struct {
	expr                     string
	loc                      *time.Location
	minute, hour, dom, month uint64
	dow                      uint64
	domStar, dowStar         bool
}

var macros = map[string]string{
	"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
	"@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}

var monthNames = map[string]int{"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
	"jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12}
var dayNames = map[string]int{"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}

// ParseCron parses expr in the IANA time zone tz ("Europe/Berlin", "UTC").
func ParseCron(expr, tz string) (*Cron, error) {
	if tz == "" {
		return nil, fmt.Errorf("schedule: a time zone is required (an IANA name such as UTC or Europe/Berlin)")
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("schedule: unknown time zone %q (use an IANA name such as UTC or Europe/Berlin)", tz)
	}
	src := strings.TrimSpace(expr)
	if m, ok := macros[strings.ToLower(src)]; ok {
		src = m
	}
	f := strings.Fields(src)
	if len(f) != 5 {
		return nil, fmt.Errorf("schedule: cron expression %q has %d fields; five are needed: minute hour day-of-month month day-of-week (or @hourly, @daily, @weekly, @monthly, @yearly)", expr, len(f))
	}
	c := &Cron{expr: strings.TrimSpace(expr), loc: loc}
	parts := []struct {
		name   string
		lo, hi int
		names  map[string]int
		dst    *uint64
		star   *bool
	}{
		{"minute", 0, 59, nil, &c.minute, nil},
		{"hour", 0, 23, nil, &c.hour, nil},
		{"day of month", 1, 31, nil, &c.dom, &c.domStar},
		{"month", 1, 12, monthNames, &c.month, nil},
		{"day of week", 0, 7, dayNames, &c.dow, &c.dowStar},
	}
	for i, p := range parts {
		set, star, err := parseField(f[i], p.lo, p.hi, p.names)
		if err != nil {
			return nil, fmt.Errorf("schedule: cron expression %q: %s field: %w", expr, p.name, err)
		}
		*p.dst = set
		if p.star != nil {
			*p.star = star
		}
	}
	// 7 is Sunday too.
	if c.dow&(1<<7) != 0 {
		c.dow = c.dow&^(1<<7) | 1
	}
	return c, nil
}

func parseField(s string, lo, hi int, names map[string]int) (set uint64, star bool, err error) {
	for _, item := range strings.Split(s, ",") {
		if item == "" {
			return 0, false, fmt.Errorf("empty list item in %q", s)
		}
		rng, stepStr, hasStep := strings.Cut(item, "/")
		step := 1
		if hasStep {
			if step, err = strconv.Atoi(stepStr); err != nil || step < 1 || step > hi {
				return 0, false, fmt.Errorf("step %q must be a number from 1 to %d", stepStr, hi)
			}
		}
		a, b := lo, hi
		switch {
		case rng == "*":
			star = star || !hasStep
		case strings.Contains(rng, "-"):
			x, y, _ := strings.Cut(rng, "-")
			if a, err = value(x, lo, hi, names); err != nil {
				return 0, false, err
			}
			if b, err = value(y, lo, hi, names); err != nil {
				return 0, false, err
			}
			if a > b {
				return 0, false, fmt.Errorf("range %q runs backwards", rng)
			}
		default:
			if a, err = value(rng, lo, hi, names); err != nil {
				return 0, false, err
			}
			if !hasStep {
				b = a
			}
		}
		for v := a; v <= b; v += step {
			set |= 1 << uint(v)
		}
	}
	return set, star, nil
}

func value(s string, lo, hi int, names map[string]int) (int, error) {
	if v, ok := names[strings.ToLower(s)]; ok {
		return v, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("%q is not a value from %d to %d", s, lo, hi)
	}
	return v, nil
}

// String returns the expression as given.
func (c *Cron) String() string { return c.expr }

// Location is the time zone the expression is read in.
func (c *Cron) Location() *time.Location { return c.loc }

func (c *Cron) dayMatches(t time.Time) bool {
	d := c.dom&(1<<uint(t.Day())) != 0
	w := c.dow&(1<<uint(t.Weekday())) != 0
	if c.domStar || c.dowStar {
		return d && w
	}
	return d || w
}

// Next returns the first time strictly after t at which the expression
// fires, or the zero time if none comes within five years (30 February).
func (c *Cron) Next(t time.Time) time.Time {
	// Steps within a day are taken on absolute time, never by rebuilding a
	// wall-clock time with time.Date: in the repeated hour at the end of
	// summer time, time.Date may pick either occurrence.
	t = t.In(c.loc).Truncate(time.Minute).Add(time.Minute)
	limit := t.AddDate(5, 0, 0)
	for t.Before(limit) {
		if c.month&(1<<uint(t.Month())) == 0 {
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, c.loc)
			continue
		}
		if !c.dayMatches(t) {
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, c.loc)
			continue
		}
		if c.hour&(1<<uint(t.Hour())) == 0 {
			t = t.Add(time.Duration(60-t.Minute()) * time.Minute)
			continue
		}
		if c.minute&(1<<uint(t.Minute())) == 0 || c.hour != allHours && repeated(t) {
			t = t.Add(time.Minute)
			continue
		}
		return t
	}
	return time.Time{}
}

const allHours = 1<<24 - 1

// repeated reports whether t's wall-clock time already occurred an hour
// earlier (the hour repeated when summer time ends): a schedule at fixed
// hours fires at the first occurrence only, while one running every hour
// keeps to absolute time and fires in both.
func repeated(t time.Time) bool {
	e := t.Add(-time.Hour)
	return e.Hour() == t.Hour() && e.Minute() == t.Minute() && e.Day() == t.Day()
}

// NextN returns the next n fire times after t.
func (c *Cron) NextN(t time.Time, n int) []time.Time {
	out := make([]time.Time, 0, n)
	for len(out) < n {
		t = c.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

// NextRuns parses expr in tz and returns its next n fire times after from:
// what the console shows before a schedule is enabled.
func NextRuns(expr, tz string, from time.Time, n int) ([]time.Time, error) {
	c, err := ParseCron(expr, tz)
	if err != nil {
		return nil, err
	}
	out := c.NextN(from, n)
	if len(out) == 0 {
		return nil, fmt.Errorf("schedule: cron expression %q never fires (no such date within five years)", expr)
	}
	return out, nil
}
