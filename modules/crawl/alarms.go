package crawl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/egress"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/notify"
)

// Alarm kinds a crawl raises (through modules/alarm: console, metrics, log,
// notification channels).
const (
	AlarmZeroResults     = "crawl.zero_results"
	AlarmSuddenDrop      = "crawl.sudden_drop"
	AlarmSelectorFailure = "crawl.selector_failure"
	AlarmErrorRate       = "crawl.error_rate"
	// AlarmCaptcha: pages showed a captcha that nobody solved; a person
	// must look.
	AlarmCaptcha = "crawl.captcha"
)

// trailingRuns is how many earlier runs the sudden-drop median looks at.
const trailingRuns = 7

// Rules checks a finished run against the job's alarm rules, raising each
// failing one with a saved trace and resolving each that holds again. It is
// the Runner's OnFinish.
type Rules struct {
	Store *Store
	Log   *slog.Logger
	// Egress is the tenant's egress allowlist, for the job's webhook
	// (alarms.webhook), which goes through the egress guard; nil: none.
	Egress Egress
	// Clock stamps webhook messages (default: real).
	Clock clock.Clock
}

// Verdict is one rule's outcome for a run.
type Verdict struct {
	Kind    string
	Failing bool
	Summary string
	Detail  string
}

// Judge applies the rules to a run given the item counts of the job's
// previous runs (newest first); pure, for tests and the console.
func Judge(job Job, run Run, previous []int) []Verdict {
	j := job.Spec
	var out []Verdict
	expected := j.ExpectedItems != nil && j.ExpectedItems.Min > 0
	hadItems := len(previous) > 0 && previous[0] > 0
	zero := run.Items == 0 && run.State != "failed" && (expected || hadItems)
	why := "the previous run found items"
	if expected {
		why = fmt.Sprintf("expected %d–%d", j.ExpectedItems.Min, j.ExpectedItems.Max)
	}
	out = append(out, Verdict{Kind: AlarmZeroResults, Failing: zero,
		Summary: fmt.Sprintf("Zero-result anomaly in crawl %s — selector may have changed", job.Name),
		Detail:  fmt.Sprintf("run %s fetched %d pages and found no item (%s); rule: zero items when items were expected", run.ID, run.Pages, why)})

	med := median(previous)
	share := *j.Alarms.DropShare
	drop := run.Items > 0 && med > 0 && float64(run.Items) < share*med
	out = append(out, Verdict{Kind: AlarmSuddenDrop, Failing: drop,
		Summary: fmt.Sprintf("Sudden drop in crawl %s: %d items, trailing median %.0f", job.Name, run.Items, med),
		Detail:  fmt.Sprintf("run %s found %d items, below %.0f %% of the median %.0f of the last %d runs; rule: sudden drop", run.ID, run.Items, share*100, med, len(previous))})

	out = append(out, Verdict{Kind: AlarmSelectorFailure, Failing: run.SelectorFailures > 0,
		Summary: fmt.Sprintf("Selector failure in crawl %s: %d items dropped", job.Name, run.SelectorFailures),
		Detail:  fmt.Sprintf("run %s dropped %d items whose required fields (or item key) matched nothing; rule: a selector stops matching", run.ID, run.SelectorFailures)})

	rate := run.ErrorRate()
	out = append(out, Verdict{Kind: AlarmErrorRate, Failing: rate > *j.Alarms.ErrorRate || run.State == "failed",
		Summary: fmt.Sprintf("Error rate in crawl %s: %.0f %% of pages failed", job.Name, rate*100),
		Detail:  fmt.Sprintf("run %s: %d of %d pages failed (threshold %.0f %%), state %s (%s); rule: error rate", run.ID, run.Errors, run.Pages+run.Errors, *j.Alarms.ErrorRate*100, run.State, run.Reason)})

	out = append(out, Verdict{Kind: AlarmCaptcha, Failing: run.Captchas > 0,
		Summary: fmt.Sprintf("Captcha in crawl %s: %d page(s) ask for a person", job.Name, run.Captchas),
		Detail: fmt.Sprintf("run %s: %d page(s) showed a captcha; nothing solves one without a recorded authorisation, so a person must look at the site (rule: captcha)",
			run.ID, run.Captchas)})
	return out
}

func median(xs []int) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]int(nil), xs...)
	sort.Ints(s)
	n := len(s)
	if n%2 == 1 {
		return float64(s[n/2])
	}
	return float64(s[n/2-1]+s[n/2]) / 2
}

// OnFinish implements Runner.OnFinish.
func (r *Rules) OnFinish(ctx context.Context, tenant string, job Job, run Run, trace map[string]any) {
	prev, err := r.Store.previousItems(ctx, tenant, job.ID, run.ID, trailingRuns)
	if err != nil {
		r.Log.Error("crawl: alarm rules", "job", job.Name, "err", err)
		return
	}
	for _, v := range Judge(job, run, prev) {
		if !v.Failing {
			resolved, err := alarm.Resolve(ctx, r.Store.pool, tenant, v.Kind, job.ID, "crawl")
			if err != nil {
				r.Log.Error("crawl: resolve alarm", "kind", v.Kind, "err", err)
			}
			if resolved {
				r.webhook(ctx, tenant, job, "resolved", v, alarm.Warning, "")
			}
			continue
		}
		id, err := r.Store.SaveTrace(ctx, tenant, job.ID, run.ID, v.Kind, v.Detail, trace)
		if err != nil {
			r.Log.Error("crawl: save trace", "err", err)
		}
		sev := alarm.Warning
		if v.Kind == AlarmZeroResults {
			sev = alarm.Critical
		}
		link := ""
		var slug string
		if r.Store.pool.QueryRow(ctx, `SELECT slug FROM tenants WHERE id = $1`, tenant).Scan(&slug) == nil {
			link = fmt.Sprintf("/t/%s/crawl/traces/%d", slug, id)
		}
		opened, err := alarm.Raise(ctx, r.Store.pool, alarm.Alarm{Kind: v.Kind, Key: job.ID, Tenant: tenant, Severity: sev,
			Summary: v.Summary + " · Trace saved", Detail: v.Detail, Link: link})
		if err != nil {
			r.Log.Error("crawl: raise alarm", "kind", v.Kind, "err", err)
		}
		if opened {
			r.webhook(ctx, tenant, job, "raised", v, sev, link)
		}
	}
}

// previousItems lists the item counts of the job's finished runs before
// this one, newest first.
func (s *Store) previousItems(ctx context.Context, tenant, jobID, runID string, n int) ([]int, error) {
	var out []int
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT items FROM crawl_runs WHERE job_id = $1 AND id <> $2 AND state IN ('succeeded', 'stopped')
			ORDER BY finished_at DESC LIMIT $3`, jobID, runID, n)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowTo[int])
		return err
	})
	return out, err
}

// Trace is a saved alarm trace.
type Trace struct {
	ID     int64          `json:"id"`
	JobID  string         `json:"job_id"`
	RunID  string         `json:"run_id"`
	Rule   string         `json:"rule"`
	Detail string         `json:"detail"`
	Trace  map[string]any `json:"trace"`
	At     time.Time      `json:"at"`
}

// SaveTrace stores the evidence of a failing rule.
func (s *Store) SaveTrace(ctx context.Context, tenant, jobID, runID, rule, detail string, trace map[string]any) (int64, error) {
	if trace == nil {
		trace = map[string]any{}
	}
	b, _ := json.Marshal(trace)
	var id int64
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `INSERT INTO crawl_traces (tenant_id, job_id, run_id, rule, detail, trace) VALUES (app_tenant(), $1, $2, $3, $4, $5) RETURNING id`,
			jobID, runID, rule, detail, b).Scan(&id)
	})
	if err != nil {
		return 0, fmt.Errorf("crawl: save trace: %w", err)
	}
	return id, nil
}

// TraceByID reads one saved trace.
func (s *Store) TraceByID(ctx context.Context, tenant string, id int64) (Trace, error) {
	var t Trace
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT id, job_id, run_id, rule, detail, trace, at FROM crawl_traces WHERE id = $1`, id).
			Scan(&t.ID, &t.JobID, &t.RunID, &t.Rule, &t.Detail, &t.Trace, &t.At)
	})
	if err != nil {
		return Trace{}, fmt.Errorf("crawl: trace %d: %w", id, err)
	}
	return t, nil
}

// Traces lists a job's saved traces, newest first.
func (s *Store) Traces(ctx context.Context, tenant, jobID string, limit int) ([]Trace, error) {
	var out []Trace
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, job_id, run_id, rule, detail, trace, at FROM crawl_traces WHERE ($1 = '' OR job_id::text = $1) ORDER BY id DESC LIMIT $2`, jobID, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var t Trace
			if err := rows.Scan(&t.ID, &t.JobID, &t.RunID, &t.Rule, &t.Detail, &t.Trace, &t.At); err != nil {
				return err
			}
			out = append(out, t)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("crawl: traces: %w", err)
	}
	return out, nil
}

// webhook posts an alarm that opened or resolved to the job's own webhook
// (alarms.webhook) through the egress guard, in the notification
// channels' message format (modules/notify.Message). Twice at most; a
// failure is logged (the alarm itself is in the console and the channels).
func (r *Rules) webhook(ctx context.Context, tenant string, job Job, event string, v Verdict, sev alarm.Severity, link string) {
	target := job.Spec.Alarms.Webhook
	if target == "" {
		return
	}
	clk := r.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	var allow []string
	var ports []int
	if r.Egress != nil {
		allow, ports = r.Egress(ctx, tenant)
	}
	pre, err := egress.ParseEntries(allow)
	if err != nil {
		pre = nil
	}
	g, err := egress.New(egress.Config{Policy: egress.Policy{Entries: pre, Ports: append(append([]int(nil), egress.DefaultPorts...), ports...)}, Logger: r.Log})
	if err != nil {
		r.Log.Error("crawl: webhook guard", "err", err)
		return
	}
	client := g.Client(egress.ClientOptions{Timeout: 10 * time.Second, MaxRedirects: -1})
	defer client.CloseIdleConnections()
	var m notify.Message
	now := clk.Now().UTC().Format(time.RFC3339)
	m.Event, m.At = event, now
	m.Alarm.Tenant, m.Alarm.Kind, m.Alarm.Key, m.Alarm.Severity = tenant, v.Kind, job.ID, string(sev)
	m.Alarm.Summary, m.Alarm.Detail, m.Alarm.Link, m.Alarm.RaisedAt = v.Summary, v.Detail, link, now
	if event == "resolved" {
		m.Alarm.ResolvedBy = "crawl"
	}
	body, _ := json.Marshal(m)
	var last error
	for range 2 {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
		if err != nil {
			last = egress.RedactError(err, target)
			break
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "fleetwright-crawl")
		req.Header.Set("X-Fleetwright-Job", job.Name)
		resp, err := client.Do(req)
		err = egress.RedactError(err, target) // a url.Error's text holds the whole URL, token and all
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return
			}
			err = fmt.Errorf("answered %s", resp.Status)
		}
		last = err
	}
	r.Log.Warn("crawl: job webhook failed", "job", job.Name, "webhook", egress.RedactEndpoint(target), "alarm", v.Kind, "err", last)
}
