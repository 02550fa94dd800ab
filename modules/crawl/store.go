// Package crawl runs crawl jobs (docs/CRAWL.md): it stores jobs per tenant
// with every version kept, runs them as durable River jobs split into page
// tasks that crawler workers in agents fetch, keeps the per-domain
// politeness budget fleet-wide in the cell's Redis, and stores the items
// found with first and last sighting and a change hash.
package crawl

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/crawl/spec"
)

// Store keeps jobs, versions, runs and items.
type Store struct {
	pool  *pgxpool.Pool
	opts  spec.Options
	vault *vault.Vault
}

// NewStore returns a store; opts are the spec checks it applies on Apply.
func NewStore(pool *pgxpool.Pool, opts spec.Options) *Store { return &Store{pool: pool, opts: opts} }

// Job is a stored job at its current version.
type Job struct {
	ID        string
	Name      string
	Version   int
	Paused    bool
	UpdatedAt time.Time
	Source    string
	Spec      *spec.Job
}

// Errors.
var (
	ErrNoJob     = errors.New("crawl: no such job")
	ErrRunActive = errors.New("crawl: a run of this job is already queued or running (runs never overlap)")
)

// Apply stores a job file as the job's next version (a new job at version
// 1). The same text as the current version changes nothing. Audited.
func (s *Store) Apply(ctx context.Context, tenant string, by audit.Entry, file string, src []byte) (Job, bool, error) {
	j, err := spec.Parse(file, src, s.opts)
	if err != nil {
		return Job{}, false, err
	}
	specJSON, err := json.Marshal(j)
	if err != nil {
		return Job{}, false, fmt.Errorf("crawl: %w", err)
	}
	var out Job
	changed := false
	err = db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		var id, cur string
		var version int
		err := tx.QueryRow(ctx, `SELECT j.id, j.current_version, v.source FROM crawl_jobs j
			JOIN crawl_job_versions v ON v.job_id = j.id AND v.version = j.current_version
			WHERE j.name = $1 FOR UPDATE OF j`, j.Name).Scan(&id, &version, &cur)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			version = 1
			if err := tx.QueryRow(ctx, `INSERT INTO crawl_jobs (tenant_id, name) VALUES (app_tenant(), $1) RETURNING id`, j.Name).Scan(&id); err != nil {
				return fmt.Errorf("crawl: create job: %w", err)
			}
		case err != nil:
			return fmt.Errorf("crawl: read job: %w", err)
		case cur == string(src):
			out = Job{ID: id, Name: j.Name, Version: version, Source: cur, Spec: j}
			return nil
		default:
			version++
		}
		if _, err := tx.Exec(ctx, `INSERT INTO crawl_job_versions (tenant_id, job_id, version, source, spec, created_by)
			VALUES (app_tenant(), $1, $2, $3, $4, $5)`, id, version, string(src), specJSON, by.Actor); err != nil {
			return fmt.Errorf("crawl: store version: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE crawl_jobs SET current_version = $2, updated_at = now() WHERE id = $1`, id, version); err != nil {
			return fmt.Errorf("crawl: update job: %w", err)
		}
		by.Action, by.Target = "crawl.job.apply", "crawl_job:"+id
		by.Detail = map[string]any{"name": j.Name, "version": version}
		if err := audit.Append(ctx, tx, by); err != nil {
			return err
		}
		changed = true
		out = Job{ID: id, Name: j.Name, Version: version, Source: string(src), Spec: j}
		return nil
	})
	return out, changed, err
}

// Jobs lists the tenant's jobs at their current versions.
func (s *Store) Jobs(ctx context.Context, tenant string) ([]Job, error) {
	var out []Job
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT j.id, j.name, j.current_version, j.paused, j.updated_at, v.source
			FROM crawl_jobs j JOIN crawl_job_versions v ON v.job_id = j.id AND v.version = j.current_version ORDER BY j.name`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var j Job
			if err := rows.Scan(&j.ID, &j.Name, &j.Version, &j.Paused, &j.UpdatedAt, &j.Source); err != nil {
				return err
			}
			out = append(out, j)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("crawl: list jobs: %w", err)
	}
	for i := range out {
		out[i].Spec, _ = spec.Parse(out[i].Name, []byte(out[i].Source), spec.Options{})
	}
	return out, nil
}

// JobByName returns one job at its current version.
func (s *Store) JobByName(ctx context.Context, tenant, name string) (Job, error) {
	return s.job(ctx, tenant, "j.name = $1", name)
}

// JobByID returns one job at its current version.
func (s *Store) JobByID(ctx context.Context, tenant, id string) (Job, error) {
	return s.job(ctx, tenant, "j.id = $1", id)
}

func (s *Store) job(ctx context.Context, tenant, where string, arg any) (Job, error) {
	var j Job
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT j.id, j.name, j.current_version, j.paused, j.updated_at, v.source
			FROM crawl_jobs j JOIN crawl_job_versions v ON v.job_id = j.id AND v.version = j.current_version WHERE `+where, arg).
			Scan(&j.ID, &j.Name, &j.Version, &j.Paused, &j.UpdatedAt, &j.Source)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Job{}, ErrNoJob
	}
	if err != nil {
		return Job{}, fmt.Errorf("crawl: read job: %w", err)
	}
	if j.Spec, err = spec.Parse(j.Name, []byte(j.Source), spec.Options{}); err != nil {
		return Job{}, fmt.Errorf("crawl: stored job %s no longer parses: %w", j.Name, err)
	}
	return j, nil
}

// Version is one stored version of a job.
type Version struct {
	Version   int
	Source    string
	CreatedBy string
	CreatedAt time.Time
}

// Versions lists a job's versions, newest first.
func (s *Store) Versions(ctx context.Context, tenant, jobID string) ([]Version, error) {
	var out []Version
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT version, source, created_by, created_at FROM crawl_job_versions WHERE job_id = $1 ORDER BY version DESC`, jobID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var v Version
			if err := rows.Scan(&v.Version, &v.Source, &v.CreatedBy, &v.CreatedAt); err != nil {
				return err
			}
			out = append(out, v)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("crawl: versions: %w", err)
	}
	return out, nil
}

// SetPaused pauses or resumes a job's schedule and manual runs. Audited.
func (s *Store) SetPaused(ctx context.Context, tenant string, by audit.Entry, jobID string, paused bool) error {
	return db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE crawl_jobs SET paused = $2, updated_at = now() WHERE id = $1`, jobID, paused)
		if err != nil {
			return fmt.Errorf("crawl: pause: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return ErrNoJob
		}
		by.Action, by.Target = "crawl.job.resume", "crawl_job:"+jobID
		if paused {
			by.Action = "crawl.job.pause"
		}
		return audit.Append(ctx, tx, by)
	})
}

// Run is one run of a job.
type Run struct {
	ID               string
	JobID            string
	Version          int
	State            string
	Reason           string
	Trigger          string
	QueuedAt         time.Time
	StartedAt        *time.Time
	FinishedAt       *time.Time
	Pages            int
	Items            int
	NewItems         int
	ChangedItems     int
	Errors           int
	SelectorFailures int
	// Captchas counts pages that showed a captcha nobody solved.
	Captchas int
	Bytes    int64
	Domains  map[string]DomainFigures
}

// DomainFigures are one domain's request figures in a run.
type DomainFigures struct {
	Requests  int   `json:"requests"`
	Errors    int   `json:"errors"`
	Throttled int   `json:"throttled"`
	TotalMS   int64 `json:"ms"`
}

// QueueRun records a queued run; ErrRunActive when one is queued or
// running already.
func (s *Store) QueueRun(ctx context.Context, tx pgx.Tx, jobID, trigger string) (string, error) {
	var id string
	err := tx.QueryRow(ctx, `INSERT INTO crawl_runs (tenant_id, job_id, version, state, trigger)
		SELECT app_tenant(), id, current_version, 'queued', $2 FROM crawl_jobs WHERE id = $1 RETURNING id`, jobID, trigger).Scan(&id)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return "", ErrRunActive
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNoJob
	}
	if err != nil {
		return "", fmt.Errorf("crawl: queue run: %w", err)
	}
	return id, nil
}

// StartRun marks a run running.
func (s *Store) StartRun(ctx context.Context, tenant, runID string, at time.Time) error {
	return db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE crawl_runs SET state = 'running', started_at = $2 WHERE id = $1 AND state IN ('queued', 'running')`, runID, at)
		return err
	})
}

// FinishRun records a run's end and its figures.
func (s *Store) FinishRun(ctx context.Context, tenant string, r Run, trace map[string]any) error {
	dom, _ := json.Marshal(r.Domains)
	var tr []byte
	if trace != nil {
		tr, _ = json.Marshal(trace)
	}
	return db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE crawl_runs SET state = $2, reason = $3, finished_at = $4, pages = $5, items = $6,
			new_items = $7, changed_items = $8, errors = $9, selector_failures = $10, bytes = $11, domains = $12, trace = $13,
			captchas = $14
			WHERE id = $1`, r.ID, r.State, r.Reason, r.FinishedAt, r.Pages, r.Items, r.NewItems, r.ChangedItems, r.Errors,
			r.SelectorFailures, r.Bytes, dom, tr, r.Captchas)
		if err != nil {
			return fmt.Errorf("crawl: finish run: %w", err)
		}
		return nil
	})
}

// Runs lists a job's runs, newest first (all jobs when jobID is empty).
func (s *Store) Runs(ctx context.Context, tenant, jobID string, limit int) ([]Run, error) {
	var out []Run
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, job_id, version, state, reason, trigger, queued_at, started_at, finished_at, pages, items,
			new_items, changed_items, errors, selector_failures, bytes, domains, captchas FROM crawl_runs
			WHERE ($1 = '' OR job_id::text = $1) ORDER BY queued_at DESC LIMIT $2`, jobID, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r Run
			var dom []byte
			if err := rows.Scan(&r.ID, &r.JobID, &r.Version, &r.State, &r.Reason, &r.Trigger, &r.QueuedAt, &r.StartedAt, &r.FinishedAt,
				&r.Pages, &r.Items, &r.NewItems, &r.ChangedItems, &r.Errors, &r.SelectorFailures, &r.Bytes, &dom, &r.Captchas); err != nil {
				return err
			}
			_ = json.Unmarshal(dom, &r.Domains)
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("crawl: runs: %w", err)
	}
	return out, nil
}

// Run reads one run.
func (s *Store) Run(ctx context.Context, tenant, runID string) (Run, error) {
	var r Run
	var dom []byte
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT id, job_id, version, state, reason, trigger, queued_at, started_at, finished_at, pages, items,
			new_items, changed_items, errors, selector_failures, bytes, domains, captchas FROM crawl_runs WHERE id = $1`, runID).
			Scan(&r.ID, &r.JobID, &r.Version, &r.State, &r.Reason, &r.Trigger, &r.QueuedAt, &r.StartedAt, &r.FinishedAt,
				&r.Pages, &r.Items, &r.NewItems, &r.ChangedItems, &r.Errors, &r.SelectorFailures, &r.Bytes, &dom, &r.Captchas)
	})
	if err != nil {
		return Run{}, fmt.Errorf("crawl: run %s: %w", runID, err)
	}
	_ = json.Unmarshal(dom, &r.Domains)
	return r, nil
}

// ItemKey is an item's identity from the job's item_key fields.
func ItemKey(fields []string, it map[string]any) (string, bool) {
	parts := make([]string, len(fields))
	for i, f := range fields {
		v, ok := it[f]
		if !ok || v == nil {
			return "", false
		}
		s := fmt.Sprint(v)
		if s == "" {
			return "", false
		}
		parts[i] = s
	}
	return strings.Join(parts, "\x1f"), true
}

// hashItem is SHA-256 of the item's canonical JSON (sorted keys).
func hashItem(it map[string]any) ([]byte, []byte) {
	keys := make([]string, 0, len(it))
	for k := range it {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	// encoding/json sorts map keys already; keys are listed for clarity.
	b, _ := json.Marshal(it)
	sum := sha256.Sum256(b)
	return sum[:], b
}

// SaveItems upserts a page's items: new keys get first_seen, known keys
// get last_seen, and a different hash counts as a change. It returns how
// many were new and how many changed.
func (s *Store) SaveItems(ctx context.Context, tenant, jobID, runID string, keyed map[string]map[string]any, at time.Time) (added, changed int, err error) {
	if len(keyed) == 0 {
		return 0, 0, nil
	}
	err = db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		keys := make([]string, 0, len(keyed))
		for k := range keyed {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			h, data := hashItem(keyed[k])
			b.Queue(`INSERT INTO crawl_items AS i (tenant_id, job_id, key, data, hash, first_seen, last_seen, changed_at, first_run, last_run)
				VALUES (app_tenant(), $1, $2, $3, $4, $5, $5, $5, $6, $6)
				ON CONFLICT (tenant_id, job_id, key) DO UPDATE SET data = EXCLUDED.data, hash = EXCLUDED.hash,
					last_seen = EXCLUDED.last_seen, last_run = EXCLUDED.last_run,
					changed_at = CASE WHEN i.hash <> EXCLUDED.hash THEN EXCLUDED.last_seen ELSE i.changed_at END
				RETURNING (xmax = 0), (changed_at = last_seen AND first_seen <> last_seen)`, jobID, k, data, h, at, runID)
		}
		br := tx.SendBatch(ctx, b)
		for range keys {
			var inserted, ch bool
			if err := br.QueryRow().Scan(&inserted, &ch); err != nil {
				br.Close()
				return err
			}
			if inserted {
				added++
			} else if ch {
				changed++
			}
		}
		return br.Close()
	})
	if err != nil {
		return 0, 0, fmt.Errorf("crawl: save items: %w", err)
	}
	return added, changed, nil
}

// Item is one stored item.
type Item struct {
	Key       string         `json:"key"`
	Data      map[string]any `json:"data"`
	FirstSeen time.Time      `json:"first_seen"`
	LastSeen  time.Time      `json:"last_seen"`
	ChangedAt time.Time      `json:"changed_at"`
	Hash      string         `json:"hash"`
}

// ItemFilter narrows Items.
type ItemFilter struct {
	// RunID keeps the items the run saw (last_run).
	RunID string
	// Contains keeps items whose data contains this text.
	Contains string
	Limit    int
	Offset   int
}

// Items lists a job's items, oldest first.
func (s *Store) Items(ctx context.Context, tenant, jobID string, f ItemFilter) ([]Item, int, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	var out []Item
	total := 0
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		where := `job_id = $1 AND ($2 = '' OR last_run::text = $2) AND ($3 = '' OR data::text ILIKE '%' || $3 || '%')`
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM crawl_items WHERE `+where, jobID, f.RunID, f.Contains).Scan(&total); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT key, data, first_seen, last_seen, changed_at, encode(hash, 'hex') FROM crawl_items WHERE `+where+`
			ORDER BY first_seen, key LIMIT $4 OFFSET $5`, jobID, f.RunID, f.Contains, f.Limit, f.Offset)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var it Item
			if err := rows.Scan(&it.Key, &it.Data, &it.FirstSeen, &it.LastSeen, &it.ChangedAt, &it.Hash); err != nil {
				return err
			}
			out = append(out, it)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, 0, fmt.Errorf("crawl: items: %w", err)
	}
	return out, total, nil
}

// Cell renders an item value for a table or CSV: text as it is, numbers
// without exponent, anything else as JSON.
func Cell(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}
