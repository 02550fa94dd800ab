// Package web is the crawler's console: jobs (list, apply with live
// validation, versions and their diffs, run now, pause), runs, items (paged,
// filterable, exported as CSV or JSON Lines — the tenant-scoped items API),
// alarm traces, and the items-per-cycle chart with its expected band and
// the alarms marked on it.
package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/fleetwright/fleetwright/app/server"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/crawl"
	"github.com/fleetwright/fleetwright/modules/crawl/spec"
	"github.com/fleetwright/fleetwright/views"
)

// Deps are what the pages need.
type Deps struct {
	Service *crawl.Service
	Shell   *auth.Shell
	Log     interface {
		Error(msg string, args ...any)
		Warn(msg string, args ...any)
	}
}

// Mount declares the crawl pages. Reading needs fleet.read, changing
// (apply, run, pause) fleet.steer, both in the tenant's scope.
func Mount(r chi.Router, d Deps) {
	r.Method(http.MethodGet, "/t/{tenant}/crawl", auth.Require(auth.FleetRead, d.jobs))
	r.Method(http.MethodPost, "/t/{tenant}/crawl/validate", auth.Require(auth.FleetSteer, d.validate))
	r.Method(http.MethodPost, "/t/{tenant}/crawl/jobs", auth.Require(auth.FleetSteer, d.apply))
	r.Method(http.MethodGet, "/t/{tenant}/crawl/jobs/{job}", auth.Require(auth.FleetRead, d.job))
	r.Method(http.MethodGet, "/t/{tenant}/crawl/jobs/{job}/items", auth.Require(auth.FleetRead, d.items))
	r.Method(http.MethodPost, "/t/{tenant}/crawl/jobs/{job}/run", auth.Require(auth.FleetSteer, d.run))
	r.Method(http.MethodPost, "/t/{tenant}/crawl/jobs/{job}/pause", auth.Require(auth.FleetSteer, d.pause(true)))
	r.Method(http.MethodPost, "/t/{tenant}/crawl/jobs/{job}/resume", auth.Require(auth.FleetSteer, d.pause(false)))
	r.Method(http.MethodGet, "/t/{tenant}/crawl/traces/{trace}", auth.Require(auth.FleetRead, d.trace))
	mountProxies(r, d)
}

func actor(r *http.Request) audit.Entry {
	u := auth.UserFrom(r.Context())
	return audit.Entry{ActorID: u.ID, Actor: u.Email, IP: server.ClientIP(r)}
}

func (d Deps) back(w http.ResponseWriter, r *http.Request, to, kind, text string) {
	auth.Flash(w, kind, text)
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// JobRow is one job on the list.
type JobRow struct {
	Job  crawl.Job
	Last *crawl.Run
	// Health is the last run's state in words (a zero-item run where items
	// were expected is not a plain success).
	Health health
	// Alarms are the job's open alarms.
	Alarms []jobAlarm
}

type jobsModel struct {
	Slug     string
	Rows     []JobRow
	CanSteer bool
	// Held names the pause switch that holds the tenant's crawl work ("":
	// none).
	Held   string
	Source string
	Errors []spec.FieldError
}

func (d Deps) jobsModel(r *http.Request) (jobsModel, error) {
	t, _ := auth.TenantFrom(r.Context())
	jobs, err := d.Service.Store.Jobs(r.Context(), t.ID)
	if err != nil {
		return jobsModel{}, err
	}
	m := jobsModel{Slug: t.Slug, CanSteer: auth.UserFrom(r.Context()).Has(auth.FleetSteer)}
	m.Held, _ = d.Service.Store.Held(r.Context(), t.ID)
	open, err := alarm.ListTenant(r.Context(), d.Service.Pool, t.ID, true, 500)
	if err != nil {
		return jobsModel{}, err
	}
	byJob := jobAlarms(open)
	for _, j := range jobs {
		row := JobRow{Job: j, Alarms: byJob[j.ID]}
		// The last run and the seven before it: what the zero-result rule
		// compares it with.
		if runs, err := d.Service.Store.Runs(r.Context(), t.ID, j.ID, 8); err == nil && len(runs) > 0 {
			row.Last = &runs[0]
			row.Health = runHealth(j, runs[0], runs[1:])
		}
		m.Rows = append(m.Rows, row)
	}
	return m, nil
}

func (d Deps) jobs(w http.ResponseWriter, r *http.Request) {
	m, err := d.jobsModel(r)
	if err != nil {
		d.Log.Error("crawl jobs page", "err", err)
		auth.ServerError(w, r)
		return
	}
	t, _ := auth.TenantFrom(r.Context())
	views.Render(w, r, http.StatusOK, JobsPage(d.Shell.Page(w, r, t.Name+" · Crawl"), m))
}

func parseErrors(err error) []spec.FieldError {
	var errs *spec.Errors
	if errors.As(err, &errs) {
		return errs.List
	}
	return []spec.FieldError{{Msg: err.Error()}}
}

// validate answers the editor's live validation (htmx): the errors with
// their field paths and lines, or an OK line.
func (d Deps) validate(w http.ResponseWriter, r *http.Request) {
	src := r.FormValue("source")
	var fe []spec.FieldError
	var job *spec.Job
	if strings.TrimSpace(src) != "" {
		j, err := spec.Parse("job", []byte(src), spec.Options{})
		if err != nil {
			fe = parseErrors(err)
		}
		job = j
	}
	views.Render(w, r, http.StatusOK, Validation(fe, job))
}

func (d Deps) apply(w http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	src := r.FormValue("source")
	j, changed, err := d.Service.Apply(r.Context(), t.ID, actor(r), "job", []byte(src))
	if err != nil {
		m, merr := d.jobsModel(r)
		if merr != nil {
			auth.ServerError(w, r)
			return
		}
		m.Source, m.Errors = src, parseErrors(err)
		views.Render(w, r, http.StatusUnprocessableEntity, JobsPage(d.Shell.Page(w, r, t.Name+" · Crawl"), m))
		return
	}
	msg := fmt.Sprintf("Job %s unchanged (version %d).", j.Name, j.Version)
	if changed {
		msg = fmt.Sprintf("Job %s saved as version %d.", j.Name, j.Version)
	}
	d.back(w, r, "/t/"+t.Slug+"/crawl/jobs/"+j.ID, "ok", msg)
}

// Point is one run on the items-per-cycle chart.
type Point struct {
	Run    crawl.Run
	Alarms []string
}

// RunRow is one run in the runs table, with its state in words.
type RunRow struct {
	crawl.Run
	Health health
}

type jobModel struct {
	Slug     string
	Job      crawl.Job
	Versions []crawl.Version
	Diff     []DiffLine
	DiffFrom int
	Runs     []RunRow
	Chart    []Point
	Traces   []crawl.Trace
	Open     []alarm.Open
	CanSteer bool
	Edit     string
	// Held names the pause switch that holds the tenant's crawl work.
	Held string
}

func (d Deps) jobFor(w http.ResponseWriter, r *http.Request) (crawl.Job, bool) {
	t, _ := auth.TenantFrom(r.Context())
	j, err := d.Service.Store.JobByID(r.Context(), t.ID, chi.URLParam(r, "job"))
	if errors.Is(err, crawl.ErrNoJob) || (err != nil && strings.Contains(err.Error(), "invalid input syntax")) {
		auth.NotFound(w, r)
		return j, false
	}
	if err != nil {
		d.Log.Error("crawl job", "err", err)
		auth.ServerError(w, r)
		return j, false
	}
	return j, true
}

func (d Deps) job(w http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	j, ok := d.jobFor(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	m := jobModel{Slug: t.Slug, Job: j, CanSteer: auth.UserFrom(ctx).Has(auth.FleetSteer), Edit: j.Source}
	m.Held, _ = d.Service.Store.Held(ctx, t.ID)
	var err error
	if m.Versions, err = d.Service.Store.Versions(ctx, t.ID, j.ID); err != nil {
		d.Log.Error("crawl versions", "err", err)
		auth.ServerError(w, r)
		return
	}
	// The diff shown: the version asked for (?diff=N) against its
	// predecessor; by default the current one.
	want := j.Version
	if n, err := strconv.Atoi(r.URL.Query().Get("diff")); err == nil {
		want = n
	}
	for i, v := range m.Versions {
		if v.Version == want && i+1 < len(m.Versions) {
			m.Diff, m.DiffFrom = Diff(m.Versions[i+1].Source, v.Source), m.Versions[i+1].Version
		}
	}
	runs, err := d.Service.Store.Runs(ctx, t.ID, j.ID, 57)
	if err != nil {
		auth.ServerError(w, r)
		return
	}
	for i := range runs[:min(len(runs), 50)] {
		m.Runs = append(m.Runs, RunRow{Run: runs[i], Health: runHealth(j, runs[i], runs[i+1:])})
	}
	m.Traces, _ = d.Service.Store.Traces(ctx, t.ID, j.ID, 20)
	alarmsByRun := map[string][]string{}
	for _, tr := range m.Traces {
		alarmsByRun[tr.RunID] = append(alarmsByRun[tr.RunID], tr.Rule)
	}
	for i := len(m.Runs) - 1; i >= 0; i-- {
		if m.Runs[i].State == "queued" || m.Runs[i].State == "running" {
			continue
		}
		m.Chart = append(m.Chart, Point{Run: m.Runs[i].Run, Alarms: alarmsByRun[m.Runs[i].ID]})
	}
	open, _ := alarm.ListTenant(ctx, d.Service.Pool, t.ID, true, 100)
	for _, a := range open {
		if a.Key == j.ID {
			m.Open = append(m.Open, a)
		}
	}
	views.Render(w, r, http.StatusOK, JobPage(d.Shell.Page(w, r, t.Name+" · "+j.Name), m))
}

func (d Deps) run(w http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	j, ok := d.jobFor(w, r)
	if !ok {
		return
	}
	to := "/t/" + t.Slug + "/crawl/jobs/" + j.ID
	id, err := d.Service.QueueRun(r.Context(), t.ID, j.ID, "console", actor(r))
	switch {
	case errors.Is(err, crawl.ErrRunActive), errors.Is(err, crawl.ErrPaused):
		d.back(w, r, to, "warn", err.Error())
	case err != nil:
		d.Log.Error("crawl run", "err", err)
		d.back(w, r, to, "bad", "The run could not be queued.")
	default:
		d.back(w, r, to, "ok", "Run "+id+" queued.")
	}
}

func (d Deps) pause(paused bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t, _ := auth.TenantFrom(r.Context())
		j, ok := d.jobFor(w, r)
		if !ok {
			return
		}
		to := "/t/" + t.Slug + "/crawl/jobs/" + j.ID
		if err := d.Service.SetPaused(r.Context(), t.ID, actor(r), j.ID, paused); err != nil {
			d.Log.Error("crawl pause", "err", err)
			d.back(w, r, to, "bad", "The job could not be changed.")
			return
		}
		word := "resumed"
		if paused {
			word = "paused"
		}
		d.back(w, r, to, "ok", "Job "+j.Name+" "+word+".")
	}
}

// itemsPage is how many items a page shows.
const itemsPage = 50

type itemsModel struct {
	Slug     string
	Job      crawl.Job
	Items    []crawl.Item
	Total    int
	Page     int
	Run      string
	Contains string
}

func (d Deps) items(w http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	j, ok := d.jobFor(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	f := crawl.ItemFilter{RunID: q.Get("run"), Contains: q.Get("q")}
	if f.RunID != "" && len(f.RunID) != 36 {
		auth.ErrorPage(w, r, http.StatusBadRequest, "Bad filter", "run must be a run id.")
		return
	}
	switch format := q.Get("format"); format {
	case "csv", "jsonl":
		d.export(w, r, t.ID, j, f, format)
		return
	case "", "html":
	default:
		auth.ErrorPage(w, r, http.StatusBadRequest, "Bad format", "format is csv, jsonl or html.")
		return
	}
	page, _ := strconv.Atoi(q.Get("page"))
	page = max(page, 1)
	f.Limit, f.Offset = itemsPage, (page-1)*itemsPage
	items, total, err := d.Service.Store.Items(r.Context(), t.ID, j.ID, f)
	if err != nil {
		d.Log.Error("crawl items", "err", err)
		auth.ServerError(w, r)
		return
	}
	m := itemsModel{Slug: t.Slug, Job: j, Items: items, Total: total, Page: page, Run: f.RunID, Contains: f.Contains}
	views.Render(w, r, http.StatusOK, ItemsPage(d.Shell.Page(w, r, t.Name+" · "+j.Name+" · Items"), m))
}

// export streams every matching item: the items API, in the tenant's scope.
func (d Deps) export(w http.ResponseWriter, r *http.Request, tenant string, j crawl.Job, f crawl.ItemFilter, format string) {
	name := j.Name + "-items." + format
	if format == "csv" {
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/x-ndjson")
	}
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	var cw *crawl.ItemsCSV
	if format == "csv" {
		var err error
		if cw, err = crawl.NewItemsCSV(w, j.Spec.Extract.Order); err != nil {
			return
		}
	}
	enc := json.NewEncoder(w)
	for off := 0; ; off += 500 {
		f.Limit, f.Offset = 500, off
		items, _, err := d.Service.Store.Items(r.Context(), tenant, j.ID, f)
		if err != nil {
			d.Log.Error("crawl export", "err", err)
			return
		}
		for _, it := range items {
			if format == "jsonl" {
				_ = enc.Encode(it)
				continue
			}
			if err := cw.Write(it); err != nil {
				return // the client went away
			}
		}
		if cw != nil {
			if err := cw.Flush(); err != nil {
				return
			}
		}
		if len(items) < 500 {
			return
		}
	}
}

// Cell renders an item value for a table or CSV (crawl.Cell, named here
// for the pages).
func Cell(v any) string { return crawl.Cell(v) }

func (d Deps) trace(w http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	id, err := strconv.ParseInt(chi.URLParam(r, "trace"), 10, 64)
	if err != nil {
		auth.NotFound(w, r)
		return
	}
	tr, err := d.Service.Store.TraceByID(r.Context(), t.ID, id)
	if err != nil {
		auth.NotFound(w, r)
		return
	}
	views.Render(w, r, http.StatusOK, TracePage(d.Shell.Page(w, r, t.Name+" · Trace"), t.Slug, tr))
}
