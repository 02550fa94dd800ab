// Package alarm records conditions a person must see: a hung or
// crash-looping worker, a failing cell, a crawl that found nothing, a claim
// conflict. Any module raises one with a de-duplication key and resolves it
// when the condition ends:
//
//	err := alarm.Raise(ctx, pool, alarm.Alarm{
//		Kind: "crawl.zero_results", Key: jobID, Tenant: tenantID,
//		Severity: alarm.Warning, Summary: "crawl shop-prices found no item",
//		Detail: "3 pages fetched, selector .price matched nothing", Link: "/t/acme/crawls/" + jobID,
//	})
//	...
//	err = alarm.Resolve(ctx, pool, tenantID, "crawl.zero_results", jobID, "crawl")
//
// While an alarm is open, raising the same (Tenant, Kind, Key) again only
// refreshes it (its summary, detail, last-seen time and count): one
// condition is one alarm however often it is seen. Resolving closes it; a
// later raise opens a new one. Every opening and resolving is written to
// alarm_events in the same transaction (the notification channels deliver
// from there) and logged once, never on a refresh.
//
// Alarms live in Postgres under row-level security: a tenant's alarms in the
// tenant's rows, system alarms (Tenant empty or System) on the all-zero
// tenant, like the audit log's system chain. Open alarms are exported as the
// gauge fleet_alarms_open{kind,severity} (see Collector).
package alarm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/db"
)

// System is the tenant of alarms that belong to no tenant (the panel's own
// queues, cells, embedded services). It is the audit log's system chain.
const System = "00000000-0000-0000-0000-000000000000"

// Severity says how urgently a person must act.
type Severity string

// The severities, lowest first.
const (
	Info     Severity = "info"
	Warning  Severity = "warning"
	Critical Severity = "critical"
)

// Alarm is one condition. Kind names the condition for machines and
// metrics (dotted lower case: "worker.hung", "cell.failing"); Key tells one
// instance of it from another (an agent and worker, a cell name, a crawl
// job id). Summary is one line for people; Detail may be longer; Link is a
// console path that explains it. None of them may hold a secret: they reach
// the console, the log and the notification channels.
type Alarm struct {
	Kind     string
	Key      string
	Tenant   string
	Severity Severity
	Summary  string
	Detail   string
	Link     string
	// At is when the condition was seen; zero means the database's clock.
	At time.Time
}

// Open is a stored alarm as pages and channels show it.
type Open struct {
	ID         int64
	Tenant     string
	Kind       string
	Key        string
	Severity   Severity
	Summary    string
	Detail     string
	Link       string
	RaisedAt   time.Time
	LastSeenAt time.Time
	Count      int
	ResolvedAt *time.Time
	ResolvedBy string
	// AcknowledgedAt and AcknowledgedBy say that a person took it on.
	AcknowledgedAt *time.Time
	AcknowledgedBy string
	// SilencedUntil is when a silence set by SilencedBy (at SilencedAt)
	// ends; nil when it was never silenced. See Silenced.
	SilencedAt    *time.Time
	SilencedUntil *time.Time
	SilencedBy    string
}

// Silenced reports whether the alarm is silenced at now: open, with a
// silence that ends after now. A silenced alarm is listed on the alarms
// page but not counted in the attention strip, and not notified again.
func (o Open) Silenced(now time.Time) bool {
	return o.ResolvedAt == nil && o.SilencedUntil != nil && o.SilencedUntil.After(now)
}

// Conn is where an alarm is written: a *pgxpool.Pool (the alarm commits in
// its own tenant-scoped transaction), or a pgx.Tx the caller already scoped
// to the alarm's tenant with db.InTenant (the alarm then commits or rolls
// back with the caller's change). A transaction scoped to another tenant is
// refused, never silently re-scoped.
type Conn interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

var kindRE = regexp.MustCompile(`^[a-z][a-z0-9_.]*$`)

func (a *Alarm) check() error {
	if a.Tenant == "" {
		a.Tenant = System
	}
	if a.Severity == "" {
		a.Severity = Warning
	}
	switch {
	case !kindRE.MatchString(a.Kind) || len(a.Kind) > 100:
		return fmt.Errorf("alarm: kind %q must be dotted lower case (like worker.hung), at most 100 characters", a.Kind)
	case a.Key == "" || len(a.Key) > 300:
		return fmt.Errorf("alarm: %s: key must be 1 to 300 bytes", a.Kind)
	case a.Severity != Info && a.Severity != Warning && a.Severity != Critical:
		return fmt.Errorf("alarm: %s: severity %q is not info, warning or critical", a.Kind, a.Severity)
	case strings.TrimSpace(a.Summary) == "":
		return fmt.Errorf("alarm: %s: a summary is required", a.Kind)
	}
	a.Summary = clip(a.Summary, 500)
	a.Detail = clip(a.Detail, 4000)
	return nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Raise opens the alarm, or refreshes the open one with the same tenant,
// kind and key. It reports whether a new alarm was opened.
func Raise(ctx context.Context, c Conn, a Alarm) (opened bool, err error) {
	if err := a.check(); err != nil {
		return false, err
	}
	var id int64
	var silenced bool
	err = inTenant(ctx, c, a.Tenant, func(tx pgx.Tx) error {
		at := nullTime(a.At)
		// Refresh first: the common case for a condition seen on every sweep.
		err := tx.QueryRow(ctx, `UPDATE alarms SET summary = $3, detail = $4, link = $5, severity = $6,
				last_seen_at = COALESCE($7, clock_timestamp()), raised_count = raised_count + 1
			WHERE tenant_id = app_tenant() AND kind = $1 AND key = $2 AND resolved_at IS NULL RETURNING id`,
			a.Kind, a.Key, a.Summary, a.Detail, a.Link, string(a.Severity), at).Scan(&id)
		if err == nil {
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// ON CONFLICT covers two raisers racing to open the same alarm. A
		// silence of the same condition that has not ended yet carries over
		// (a flapping condition stays quiet for as long as a person said).
		err = tx.QueryRow(ctx, `INSERT INTO alarms (kind, key, severity, summary, detail, link, raised_at, last_seen_at,
				silenced_at, silenced_until, silenced_by)
			SELECT $1, $2, $3, $4, $5, $6, COALESCE($7, clock_timestamp()), COALESCE($7, clock_timestamp()),
				s.silenced_at, s.silenced_until, s.silenced_by
			FROM (SELECT 1) one LEFT JOIN LATERAL (SELECT silenced_at, silenced_until, silenced_by FROM alarms
				WHERE tenant_id = app_tenant() AND kind = $1 AND key = $2 AND silenced_until > COALESCE($7, clock_timestamp())
				ORDER BY silenced_until DESC LIMIT 1) s ON true
			ON CONFLICT (tenant_id, kind, key) WHERE resolved_at IS NULL DO NOTHING RETURNING id, silenced_until IS NOT NULL`,
			a.Kind, a.Key, string(a.Severity), a.Summary, a.Detail, a.Link, at).Scan(&id, &silenced)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		opened = true
		if silenced {
			return nil // no event: the channels are not told while it is silenced
		}
		_, err = tx.Exec(ctx, `INSERT INTO alarm_events (alarm_id, event, at) VALUES ($1, 'raised', COALESCE($2, clock_timestamp()))`, id, at)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("alarm: raise %s %s: %w", a.Kind, a.Key, err)
	}
	if opened && silenced {
		slog.Default().Info("alarm raised while silenced", "id", id, "kind", a.Kind, "key", a.Key, "tenant", a.Tenant,
			"severity", string(a.Severity), "summary", a.Summary)
	} else if opened {
		level := slog.LevelWarn
		if a.Severity == Info {
			level = slog.LevelInfo
		} else if a.Severity == Critical {
			level = slog.LevelError
		}
		slog.Default().Log(ctx, level, "alarm raised", "id", id, "kind", a.Kind, "key", a.Key,
			"tenant", a.Tenant, "severity", string(a.Severity), "summary", a.Summary, "link", a.Link)
	}
	return opened, nil
}

// Resolve closes the open alarm of tenant, kind and key, if there is one,
// and records who or what resolved it (a user's email, "system", a module).
// It reports whether an alarm was closed; resolving a closed or unknown
// alarm is not an error, so a sweep may resolve on every healthy look.
func Resolve(ctx context.Context, c Conn, tenant, kind, key, by string) (bool, error) {
	return resolve(ctx, c, tenant, kind, key, by, time.Time{})
}

// ResolveAt is Resolve at a given time (an injected clock's).
func ResolveAt(ctx context.Context, c Conn, tenant, kind, key, by string, at time.Time) (bool, error) {
	return resolve(ctx, c, tenant, kind, key, by, at)
}

func resolve(ctx context.Context, c Conn, tenant, kind, key, by string, at time.Time) (bool, error) {
	if tenant == "" {
		tenant = System
	}
	if by == "" {
		by = "system"
	}
	var id int64
	closed := false
	err := inTenant(ctx, c, tenant, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `UPDATE alarms SET resolved_at = COALESCE($3, clock_timestamp()), resolved_by = $4
			WHERE tenant_id = app_tenant() AND kind = $1 AND key = $2 AND resolved_at IS NULL RETURNING id`,
			kind, key, nullTime(at), by).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		closed = true
		// The channels hear of the end of what they heard of: an alarm
		// opened while silenced ends as quietly as it began.
		_, err = tx.Exec(ctx, `INSERT INTO alarm_events (alarm_id, event, at)
			SELECT $1, 'resolved', COALESCE($2, clock_timestamp())
			WHERE EXISTS (SELECT 1 FROM alarm_events WHERE alarm_id = $1 AND event = 'raised')`, id, nullTime(at))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("alarm: resolve %s %s: %w", kind, key, err)
	}
	if closed {
		slog.Default().Info("alarm resolved", "id", id, "kind", kind, "key", key, "tenant", tenant, "by", by)
	}
	return closed, nil
}

// ResolveByID closes one open alarm of the tenant by its id (the console's
// button), recording who did it.
func ResolveByID(ctx context.Context, c Conn, tenant string, id int64, by string) (bool, error) {
	if tenant == "" {
		tenant = System
	}
	var kind, key string
	err := inTenant(ctx, c, tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT kind, key FROM alarms WHERE id = $1 AND tenant_id = app_tenant() AND resolved_at IS NULL`, id).Scan(&kind, &key)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("alarm: resolve %d: %w", id, err)
	}
	return Resolve(ctx, c, tenant, kind, key, by)
}

// List returns the alarms visible in tx (a tenant's, or every tenant's on the
// audited cross-tenant path), open ones first, newest first; with openOnly
// the resolved ones are left out. limit ≤ 0 means 200.
func List(ctx context.Context, tx pgx.Tx, openOnly bool, limit int) ([]Open, error) {
	if limit <= 0 {
		limit = 200
	}
	rows, err := tx.Query(ctx, `SELECT id, tenant_id::text, kind, key, severity, summary, detail, link,
			raised_at, last_seen_at, raised_count, resolved_at, COALESCE(resolved_by, ''),
			acknowledged_at, COALESCE(acknowledged_by, ''), silenced_at, silenced_until, COALESCE(silenced_by, '')
		FROM alarms WHERE NOT $1 OR resolved_at IS NULL
		ORDER BY resolved_at IS NOT NULL, CASE severity WHEN 'critical' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END, raised_at DESC, id DESC
		LIMIT $2`, openOnly, limit)
	if err != nil {
		return nil, fmt.Errorf("alarm: list: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Open, error) {
		var o Open
		var sev string
		err := r.Scan(&o.ID, &o.Tenant, &o.Kind, &o.Key, &sev, &o.Summary, &o.Detail, &o.Link,
			&o.RaisedAt, &o.LastSeenAt, &o.Count, &o.ResolvedAt, &o.ResolvedBy,
			&o.AcknowledgedAt, &o.AcknowledgedBy, &o.SilencedAt, &o.SilencedUntil, &o.SilencedBy)
		o.Severity = Severity(sev)
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("alarm: list: %w", err)
	}
	return out, nil
}

// ListTenant returns a tenant's alarms (System for the system's) as List does.
func ListTenant(ctx context.Context, pool *pgxpool.Pool, tenant string, openOnly bool, limit int) ([]Open, error) {
	if tenant == "" {
		tenant = System
	}
	var out []Open
	err := db.InTenant(ctx, pool, tenant, func(tx pgx.Tx) error {
		var err error
		out, err = List(ctx, tx, openOnly, limit)
		return err
	})
	return out, err
}

// IsOpen reports whether the alarm of tenant, kind and key is open.
func IsOpen(ctx context.Context, pool *pgxpool.Pool, tenant, kind, key string) (bool, error) {
	if tenant == "" {
		tenant = System
	}
	var open bool
	err := db.InTenant(ctx, pool, tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM alarms WHERE tenant_id = app_tenant() AND kind = $1 AND key = $2 AND resolved_at IS NULL)`,
			kind, key).Scan(&open)
	})
	if err != nil {
		return false, fmt.Errorf("alarm: %w", err)
	}
	return open, nil
}

// inTenant runs fn in a transaction scoped to tenant: its own on a pool, or
// the caller's after checking that it is scoped to that tenant.
func inTenant(ctx context.Context, c Conn, tenant string, fn func(pgx.Tx) error) error {
	switch v := c.(type) {
	case *pgxpool.Pool:
		return db.InTenant(ctx, v, tenant, fn)
	case pgx.Tx:
		var scoped string
		if err := v.QueryRow(ctx, `SELECT COALESCE(app_tenant()::text, '')`).Scan(&scoped); err != nil {
			return err
		}
		if scoped != tenant {
			return fmt.Errorf("the transaction is scoped to tenant %q, not the alarm's %q: raise it on the pool or in a db.InTenant transaction of its tenant", scoped, tenant)
		}
		return fn(v)
	default:
		return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT set_config('app.tenant_id', $1, true)", tenant); err != nil {
				return err
			}
			return fn(tx)
		})
	}
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}
