package health

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetwright/fleetwright/app/server"
	"github.com/fleetwright/fleetwright/modules/wire"
)

var (
	oldestDesc = prometheus.NewDesc("fleet_worker_oldest_task_seconds",
		"Age of the oldest unfinished task of a worker, as of its agent's last state report plus the time since (0: none waiting).",
		[]string{"tenant", "agent", "worker", "kind"}, nil)
	lastOpDesc = prometheus.NewDesc("fleet_worker_last_operation_timestamp_seconds",
		"When the worker last completed an operation (Unix time; absent if never).",
		[]string{"tenant", "agent", "worker", "kind"}, nil)
	restartsDesc = prometheus.NewDesc("fleet_worker_restarts",
		"Restarts of the worker under its supervisor since its agent process started.",
		[]string{"tenant", "agent", "worker", "kind"}, nil)
	runningDesc = prometheus.NewDesc("fleet_worker_running",
		"1 when the worker reports running on a connected agent, else 0.",
		[]string{"tenant", "agent", "worker", "kind"}, nil)
	queueDesc = prometheus.NewDesc("fleet_queue_oldest_job_seconds",
		"Age of the oldest job of a River queue by state (available: waiting to start; running: since its attempt began).",
		[]string{"queue", "state"}, nil)
)

// Collector exports the per-worker figures (oldest task, last completed
// operation, restarts, running) of every tenant and the River queues' ages,
// read from Postgres at each scrape so every replica reports the same. A
// scrape during a database outage reports the last figures read, with their
// age (server.Snapshot, sources "workers" and "queues").
func Collector(pool *pgxpool.Pool, log *slog.Logger) prometheus.Collector {
	c := &collector{pool: pool, log: log}
	return collectors{
		server.NewSnapshot("workers", []*prometheus.Desc{oldestDesc, lastOpDesc, restartsDesc, runningDesc}, func(ctx context.Context) ([]prometheus.Metric, error) {
			var out []prometheus.Metric
			err := c.workers(ctx, func(m prometheus.Metric) { out = append(out, m) })
			return out, err
		}, log),
		server.NewSnapshot("queues", []*prometheus.Desc{queueDesc}, func(ctx context.Context) ([]prometheus.Metric, error) {
			ages, err := QueueAges(ctx, c.pool)
			if err != nil {
				return nil, err
			}
			out := make([]prometheus.Metric, 0, len(ages))
			for _, q := range ages {
				out = append(out, prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, q.Oldest.Seconds(), q.Queue, q.State))
			}
			return out, nil
		}, log),
	}
}

// collectors is several collectors registered as one.
type collectors []prometheus.Collector

func (cs collectors) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range cs {
		c.Describe(ch)
	}
}

func (cs collectors) Collect(ch chan<- prometheus.Metric) {
	for _, c := range cs {
		c.Collect(ch)
	}
}

type collector struct {
	pool *pgxpool.Pool
	log  *slog.Logger
}

// workers reads each tenant in its own scope, in one transaction.
func (c *collector) workers(ctx context.Context, emit func(prometheus.Metric)) error {
	rows, err := c.pool.Query(ctx, `SELECT id::text, slug FROM tenants`)
	if err != nil {
		return err
	}
	tenants, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (tenantRow, error) {
		var t tenantRow
		return t, r.Scan(&t.id, &t.slug)
	})
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		dup := map[[3]string]bool{}
		for _, t := range tenants {
			if _, err := tx.Exec(ctx, `SELECT set_config('app.tenant_id', $1, true)`, t.id); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, `SELECT ag.name,
					ag.connected AND EXISTS (SELECT 1 FROM panel_replicas r WHERE r.id = ag.replica_id AND r.last_seen > now() - interval '30 seconds'),
					EXTRACT(EPOCH FROM (now() - COALESCE(ag.state_at, ag.last_seen, now())))::float8, ag.state
				FROM agents ag WHERE ag.retired_at IS NULL AND ag.state IS NOT NULL`)
			if err != nil {
				return err
			}
			for rows.Next() {
				var name string
				var live bool
				var since float64
				var raw []byte
				if err := rows.Scan(&name, &live, &since, &raw); err != nil {
					rows.Close()
					return err
				}
				var st wire.State
				if json.Unmarshal(raw, &st) != nil {
					continue
				}
				for _, w := range st.Workers {
					// Two agents of one name would make a duplicate series
					// and fail the whole scrape: the first one is kept.
					if k := [3]string{t.slug, name, w.Name}; dup[k] {
						continue
					} else {
						dup[k] = true
					}
					l := []string{t.slug, name, w.Name, w.Kind}
					age := 0.0
					if w.OldestTaskAgeMillis != nil && *w.OldestTaskAgeMillis > 0 {
						age = float64(*w.OldestTaskAgeMillis)/1000 + since
					}
					emit(prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age, l...))
					if w.LastOperation != nil {
						emit(prometheus.MustNewConstMetric(lastOpDesc, prometheus.GaugeValue, float64(w.LastOperation.FinishedAt.UnixMilli())/1000, l...))
					}
					emit(prometheus.MustNewConstMetric(restartsDesc, prometheus.GaugeValue, float64(w.Restarts), l...))
					running := 0.0
					if live && w.State == wire.WorkerRunning {
						running = 1
					}
					emit(prometheus.MustNewConstMetric(runningDesc, prometheus.GaugeValue, running, l...))
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
		}
		return nil
	})
}
