package alarm

import (
	"context"
	"fmt"
	"log/slog"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetwright/fleetwright/app/server"
)

// Count is the number of open alarms of one kind and severity.
type Count struct {
	Kind     string
	Severity Severity
	Open     int
}

// Counts returns the open alarms of every tenant and the system by kind and
// severity. It reads each tenant in its own row-level-security scope (one
// round trip for all of them), so it reveals numbers, never a tenant's rows.
func Counts(ctx context.Context, pool *pgxpool.Pool) ([]Count, error) {
	rows, err := pool.Query(ctx, `SELECT id::text FROM tenants`)
	if err != nil {
		return nil, fmt.Errorf("alarm: counts: %w", err)
	}
	tenants, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("alarm: counts: %w", err)
	}
	tenants = append(tenants, System)
	sum := map[[2]string]int{}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		for _, t := range tenants {
			b.Queue(`SELECT set_config('app.tenant_id', $1, true)`, t)
			b.Queue(`SELECT kind, severity, count(*) FROM alarms WHERE tenant_id = app_tenant() AND resolved_at IS NULL GROUP BY 1, 2`)
		}
		br := tx.SendBatch(ctx, b)
		defer br.Close()
		for range tenants {
			if _, err := br.Exec(); err != nil {
				return err
			}
			rows, err := br.Query()
			if err != nil {
				return err
			}
			for rows.Next() {
				var kind, sev string
				var n int
				if err := rows.Scan(&kind, &sev, &n); err != nil {
					rows.Close()
					return err
				}
				sum[[2]string{kind, sev}] += n
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
		}
		return br.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("alarm: counts: %w", err)
	}
	out := make([]Count, 0, len(sum))
	for k, n := range sum {
		out = append(out, Count{Kind: k[0], Severity: Severity(k[1]), Open: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Severity < out[j].Severity
	})
	return out, nil
}

// Collector exports fleet_alarms_open{kind,severity}, read from Postgres at
// each scrape, so every panel replica reports the same, current figure.
// Kinds with no open alarm are exported as absent, not zero; alert rules use
// `sum(fleet_alarms_open) or vector(0)`. A scrape during a database outage
// reports the last figures read, with their age (server.Snapshot, source
// "alarms"): an alert keeps firing through the outage instead of resolving.
func Collector(pool *pgxpool.Pool, log *slog.Logger) prometheus.Collector {
	return server.NewSnapshot("alarms", []*prometheus.Desc{openDesc}, func(ctx context.Context) ([]prometheus.Metric, error) {
		counts, err := Counts(ctx, pool)
		if err != nil {
			return nil, err
		}
		out := make([]prometheus.Metric, 0, len(counts))
		for _, n := range counts {
			out = append(out, prometheus.MustNewConstMetric(openDesc, prometheus.GaugeValue, float64(n.Open), n.Kind, string(n.Severity)))
		}
		return out, nil
	}, log)
}

var openDesc = prometheus.NewDesc("fleet_alarms_open", "Alarms open now, by kind and severity (every tenant and the system).",
	[]string{"kind", "severity"}, nil)
