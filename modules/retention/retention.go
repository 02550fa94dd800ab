// Package retention keeps each tenant's data only as long as its settings
// say (GDPR storage limitation, docs/LAW_REGISTER.md) and no longer: agent
// events and their screenshots, the claim archive, crawl items, runs and
// traces, resolved alarms, and whole audit entries (dropped only behind a
// sealed, anchored checkpoint, so `audit verify` still passes). A daily
// schedule (Kind) prunes in small batches; what is still needed is never
// pruned: the newest event of each agent and kind, archived claims whose job
// is part of a conflict, the newest runs of each crawl job (the sudden-drop
// rule's median), traces an open alarm links to, open alarms, and audit
// entries not sealed yet. Client addresses of audit entries are kept in
// clear beside the chain for their own period; the monthly keys their
// chained hashes were made with are deleted once the longest address
// retention of any tenant has passed, after which no hash links to an
// address any more.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/schedule"
)

// Global is the tenant id the global settings are stored under.
const Global = audit.System

// Kind names one kind of data.
type Kind string

// The kinds of data retention prunes.
const (
	AgentEvents   Kind = "agent_events"
	Screenshots   Kind = "screenshots"
	ClaimsArchive Kind = "claims_archive"
	CrawlItems    Kind = "crawl_items"
	CrawlRuns     Kind = "crawl_runs"
	CrawlTraces   Kind = "crawl_traces"
	Alarms        Kind = "alarms"
	AuditLog      Kind = "audit_log"
	// ClientAddresses are the clear client addresses of audit entries,
	// kept beside the chain (the entry keeps only a keyed hash).
	ClientAddresses Kind = "client_addresses"
)

// Def describes one kind: its default in days (0: kept forever) and what
// pruning keeps regardless.
type Def struct {
	Kind    Kind
	Label   string
	Default int
	Keeps   string
}

// Defs are every kind, in the order pages and the CLI list them.
var Defs = []Def{
	{AgentEvents, "Agent events", 30, "the newest event of each agent and kind"},
	{Screenshots, "Screenshots in agent events", 7, "the newest event of each agent and kind keeps its screenshot; older events lose only the image"},
	{ClaimsArchive, "Claim archive", 90, "archived claims of a job that is part of a conflict"},
	{CrawlItems, "Crawl items (since last seen)", 180, "items seen within the period"},
	{CrawlRuns, "Crawl runs", 90, "the 20 newest runs of each job (the sudden-drop rule's median) and runs not finished"},
	{CrawlTraces, "Crawl traces", 30, "traces an open alarm links to"},
	{Alarms, "Resolved alarms", 90, "open alarms"},
	{AuditLog, "Audit log entries", 0, "entries not sealed yet; older ones are dropped only behind an anchored checkpoint"},
	{ClientAddresses, "Client addresses of audit entries", 90, "the entry's keyed hash of the address, which links to nothing once the month's key is deleted (after the longest address retention of any tenant)"},
}

// DefOf returns the definition of k.
func DefOf(k Kind) (Def, bool) {
	for _, d := range Defs {
		if d.Kind == k {
			return d, true
		}
	}
	return Def{}, false
}

// Kinds lists the kinds' names, for error messages.
func Kinds() string {
	s := make([]string, len(Defs))
	for i, d := range Defs {
		s[i] = string(d.Kind)
	}
	return strings.Join(s, ", ")
}

// ParseDays reads "30", "30d", "forever" (0) or "default" (ok false).
func ParseDays(s string) (days int, ok bool, err error) {
	s = strings.TrimSpace(strings.ToLower(s))
	switch s {
	case "", "default", "none":
		return 0, false, nil
	case "forever", "0":
		return 0, true, nil
	}
	n, err := strconv.Atoi(strings.TrimSuffix(s, "d"))
	if err != nil || n < 1 || n > 36500 {
		return 0, false, fmt.Errorf("retention: %q is not a number of days from 1 to 36500, \"forever\" or \"default\"", s)
	}
	return n, true, nil
}

// FormatDays writes days for people.
func FormatDays(d int) string {
	if d == 0 {
		return "forever"
	}
	return strconv.Itoa(d) + " days"
}

// Settings are a tenant's stored settings and the global ones.
type Settings struct {
	Tenant map[Kind]int
	Global map[Kind]int
}

// Days is how long kind k is kept, and where that was set ("tenant",
// "global" or "default"); 0 keeps it forever.
func (s Settings) Days(k Kind) (int, string) {
	if d, ok := s.Tenant[k]; ok {
		return d, "tenant"
	}
	if d, ok := s.Global[k]; ok {
		return d, "global"
	}
	def, _ := DefOf(k)
	return def.Default, "default"
}

// Load reads a tenant's settings and the global ones.
func Load(ctx context.Context, pool *pgxpool.Pool, tenant string) (Settings, error) {
	s := Settings{Tenant: map[Kind]int{}, Global: map[Kind]int{}}
	err := db.InTenant(ctx, pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT tenant_id::text, kind, days FROM retention WHERE tenant_id = $1::uuid OR tenant_id = $2::uuid`, tenant, Global)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var t, k string
			var d int
			if err := rows.Scan(&t, &k, &d); err != nil {
				return err
			}
			if t == Global {
				s.Global[Kind(k)] = d
			} else {
				s.Tenant[Kind(k)] = d
			}
		}
		return rows.Err()
	})
	if err != nil {
		return s, fmt.Errorf("retention: load: %w", err)
	}
	return s, nil
}

// ErrUnknown is returned for a kind retention does not know.
var ErrUnknown = errors.New("retention: unknown kind")

// Set stores (ok) or removes (!ok: back to the global or default) how long
// a tenant keeps kind k (tenant Global: the global setting), audited as
// retention.set in that tenant's chain.
func Set(ctx context.Context, pool *pgxpool.Pool, by audit.Entry, tenant string, k Kind, days int, ok bool) error {
	if _, known := DefOf(k); !known {
		return fmt.Errorf("%w %q (kinds: %s)", ErrUnknown, k, Kinds())
	}
	err := db.InTenant(ctx, pool, tenant, func(tx pgx.Tx) error {
		detail := map[string]any{"kind": string(k), "days": "default"}
		if ok {
			detail["days"] = FormatDays(days)
			if _, err := tx.Exec(ctx, `INSERT INTO retention (kind, days, updated_by) VALUES ($1, $2, $3)
				ON CONFLICT (tenant_id, kind) DO UPDATE SET days = EXCLUDED.days, updated_at = now(), updated_by = EXCLUDED.updated_by`,
				string(k), days, by.Actor); err != nil {
				return err
			}
		} else if _, err := tx.Exec(ctx, `DELETE FROM retention WHERE tenant_id = app_tenant() AND kind = $1`, string(k)); err != nil {
			return err
		}
		by.Action, by.Target, by.Detail = "retention.set", string(k), detail
		return audit.Append(ctx, tx, by)
	})
	if err != nil {
		return fmt.Errorf("retention: set %s: %w", k, err)
	}
	return nil
}

// Pruner deletes what is past retention.
type Pruner struct {
	DB *pgxpool.Pool
	// Anchor receives the audit checkpoints (the panel's anchor file).
	Anchor *audit.Anchor
	// Keys are the panel's client-address keys (nil in a process without
	// its secret key): this and next month's are created ahead, and those
	// a prune deletes are forgotten.
	Keys  *audit.AddressKeys
	Clock clock.Clock
	Log   *slog.Logger
	// Batch is the most rows one statement deletes (default 5000), so a
	// first prune of a large backlog never holds long locks.
	Batch int
}

// Counts are the rows pruned per kind.
type Counts map[Kind]int64

// Report is one prune of every tenant and the system.
type Report struct {
	// Tenants maps a tenant id (Global for the system) to what was pruned.
	Tenants map[string]Counts
	// AddressKeys are the months whose client-address keys were deleted.
	AddressKeys []string
}

// Total is every row pruned.
func (r Report) Total() int64 {
	var n int64
	for _, c := range r.Tenants {
		for _, v := range c {
			n += v
		}
	}
	return n
}

// Run prunes every tenant and the system, each in its own scope, and
// records each tenant's counts as a retention.prune audit entry in its
// chain (none when nothing was pruned).
func (p *Pruner) Run(ctx context.Context) (Report, error) { return p.run(ctx, 0) }

// run is Run for the schedule's run runID (0: not scheduled), which each
// audit entry names (schedule_run), so the console shows what that run
// deleted.
func (p *Pruner) run(ctx context.Context, runID int64) (Report, error) {
	if p.Clock == nil {
		p.Clock = clock.Real{}
	}
	if p.Log == nil {
		p.Log = slog.New(slog.DiscardHandler)
	}
	if p.Batch <= 0 {
		p.Batch = 5000
	}
	rep := Report{Tenants: map[string]Counts{}}
	rows, err := p.DB.Query(ctx, `SELECT id::text FROM tenants ORDER BY id`)
	if err != nil {
		return rep, fmt.Errorf("retention: list tenants: %w", err)
	}
	tenants, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return rep, fmt.Errorf("retention: list tenants: %w", err)
	}
	var errs []error
	// The longest client-address retention of any tenant (the system
	// included); forever (0) anywhere keeps every monthly key.
	longest, forever, known := 0, false, true
	for _, t := range append([]string{Global}, tenants...) {
		c, addrDays, err := p.tenant(ctx, t, runID)
		if len(c) > 0 {
			rep.Tenants[t] = c
		}
		if err != nil {
			errs = append(errs, err)
		}
		switch {
		case addrDays < 0:
			known = false
		case addrDays == 0:
			forever = true
		case addrDays > longest:
			longest = addrDays
		}
	}
	// This and next month's client-address keys exist before they are
	// needed (where this process holds the keys: the panel).
	if p.Keys != nil {
		if err := p.Keys.Ensure(ctx); err != nil {
			errs = append(errs, fmt.Errorf("retention: %w", err))
		}
	}
	if known && !forever {
		// A month's key goes once its last day is older than the
		// longest retention, and one day more: the entry's month is the
		// panel's clock, its time the database's.
		before := audit.MonthOf(p.Clock.Now().Add(-time.Duration(longest+1) * 24 * time.Hour))
		months, err := p.dropKeys(ctx, before, longest)
		rep.AddressKeys = months
		if err != nil {
			errs = append(errs, err)
		}
	}
	return rep, errors.Join(errs...)
}

// dropKeys deletes the monthly address keys before month, logged and
// audited on the system chain.
func (p *Pruner) dropKeys(ctx context.Context, before string, longest int) ([]string, error) {
	months, err := audit.DeleteAddressKeysBefore(audit.WithAddressKeys(ctx, p.Keys), p.DB, before)
	if err != nil || len(months) == 0 {
		return months, err
	}
	p.Log.Info("retention deleted address keys", "months", months, "longest_days", longest)
	err = audit.InSystem(ctx, p.DB, func(tx pgx.Tx) error {
		return audit.Append(ctx, tx, audit.Entry{Actor: "system", Action: "retention.prune", Target: "address keys",
			Detail: map[string]any{"address_keys": months, "longest_days": longest}})
	})
	if err != nil {
		return months, fmt.Errorf("retention: address keys: %w", err)
	}
	return months, nil
}

// tenant prunes one tenant, and returns its client-address retention in
// days (-1 when its settings could not be read).
func (p *Pruner) tenant(ctx context.Context, tenant string, runID int64) (Counts, int, error) {
	s, err := Load(ctx, p.DB, tenant)
	if err != nil {
		return nil, -1, err
	}
	addrDays, _ := s.Days(ClientAddresses)
	c, err := p.prunePast(ctx, tenant, s, runID)
	return c, addrDays, err
}

func (p *Pruner) prunePast(ctx context.Context, tenant string, s Settings, runID int64) (Counts, error) {
	var err error
	now := p.Clock.Now()
	c := Counts{}
	for _, def := range Defs {
		days, _ := s.Days(def.Kind)
		if days == 0 {
			continue
		}
		if tenant == Global && def.Kind != Alarms && def.Kind != AuditLog && def.Kind != ClientAddresses {
			continue // the system owns no rows of the other kinds
		}
		cutoff := now.Add(-time.Duration(days) * 24 * time.Hour)
		n, err := p.prune(ctx, tenant, def.Kind, cutoff)
		if n > 0 {
			c[def.Kind] = n
		}
		if err != nil {
			return c, fmt.Errorf("retention: prune %s of %s: %w", def.Kind, tenant, err)
		}
	}
	if len(c) == 0 {
		return c, nil
	}
	detail := map[string]any{}
	for k, v := range c {
		detail[string(k)] = v
	}
	p.Log.Info("retention pruned", "tenant", tenant, "counts", detail)
	if runID > 0 {
		detail["schedule_run"] = runID
	}
	err = db.InTenant(ctx, p.DB, tenant, func(tx pgx.Tx) error {
		return audit.Append(ctx, tx, audit.Entry{Actor: "system", Action: "retention.prune", Target: "tenant data", Detail: detail})
	})
	return c, err
}

// statements delete one batch of a kind older than $1, at most $2 rows,
// in the tenant's scope (row-level security keeps them to its rows).
var statements = map[Kind][]string{
	AgentEvents: {`DELETE FROM agent_events WHERE id IN (
		SELECT id FROM agent_events e WHERE at < $1
			AND id <> (SELECT max(id) FROM agent_events n WHERE n.agent_id = e.agent_id AND n.kind = e.kind)
		LIMIT $2)`},
	Screenshots: {`UPDATE agent_events SET fields = fields - 'screenshot_jpeg_base64' WHERE id IN (
		SELECT id FROM agent_events e WHERE at < $1 AND fields ? 'screenshot_jpeg_base64'
			AND id <> (SELECT max(id) FROM agent_events n WHERE n.agent_id = e.agent_id AND n.kind = e.kind)
		LIMIT $2)`,
		// A crawl trace's page screenshot (browser mode); the trace stays.
		`UPDATE crawl_traces SET trace = trace - 'screenshot_jpeg_base64' WHERE id IN (
		SELECT id FROM crawl_traces t WHERE at < $1 AND trace ? 'screenshot_jpeg_base64'
			AND NOT EXISTS (SELECT 1 FROM alarms a WHERE a.resolved_at IS NULL AND a.link LIKE '%/crawl/traces/' || t.id)
		LIMIT $2)`},
	ClaimsArchive: {`DELETE FROM claims_archive WHERE (tenant_id, target_job_key, token) IN (
		SELECT tenant_id, target_job_key, token FROM claims_archive a WHERE archived_at < $1
			AND NOT EXISTS (SELECT 1 FROM claim_attempts x WHERE x.tenant_id = a.tenant_id AND x.target_job_key = a.target_job_key AND x.conflict)
		LIMIT $2)`},
	CrawlItems: {`DELETE FROM crawl_items WHERE (tenant_id, job_id, key) IN (
		SELECT tenant_id, job_id, key FROM crawl_items WHERE last_seen < $1 LIMIT $2)`},
	CrawlRuns: {`DELETE FROM crawl_runs WHERE id IN (
		SELECT id FROM crawl_runs r WHERE finished_at < $1
			AND id NOT IN (SELECT id FROM crawl_runs n WHERE n.job_id = r.job_id ORDER BY queued_at DESC LIMIT 20)
		LIMIT $2)`},
	CrawlTraces: {`DELETE FROM crawl_traces WHERE id IN (
		SELECT id FROM crawl_traces t WHERE at < $1
			AND NOT EXISTS (SELECT 1 FROM alarms a WHERE a.resolved_at IS NULL AND a.link LIKE '%/crawl/traces/' || t.id)
		LIMIT $2)`},
	Alarms: {`DELETE FROM alarms WHERE id IN (
		SELECT id FROM alarms WHERE resolved_at < $1 AND tenant_id = app_tenant() LIMIT $2)`},
	// The clear address only: the chained entry keeps its keyed hash.
	ClientAddresses: {`DELETE FROM audit_addresses WHERE entry_id IN (
		SELECT entry_id FROM audit_addresses WHERE at < $1 AND tenant_id = app_tenant() LIMIT $2)`},
}

func (p *Pruner) prune(ctx context.Context, tenant string, k Kind, cutoff time.Time) (int64, error) {
	if k == AuditLog {
		res, err := audit.DropBefore(ctx, p.DB, p.Anchor, tenant, cutoff)
		return res.Entries, err
	}
	var total int64
	for _, stmt := range statements[k] {
		for {
			var n int64
			err := db.InTenant(ctx, p.DB, tenant, func(tx pgx.Tx) error {
				tag, err := tx.Exec(ctx, stmt, cutoff, p.Batch)
				n = tag.RowsAffected()
				return err
			})
			total += n
			if err != nil {
				return total, err
			}
			if n < int64(p.Batch) {
				break
			}
		}
	}
	return total, nil
}

// KindName is the schedule kind of the daily prune.
const KindName = "retention.prune"

// Kind is the schedule kind that runs the pruner.
func (p *Pruner) Kind() schedule.Kind {
	return schedule.Kind{Name: KindName, Lease: 10 * time.Minute, Timeout: 2 * time.Hour,
		Handle: func(ctx context.Context, r schedule.Run) error {
			_, err := p.run(ctx, r.ID)
			return err
		}}
}

// Spec is the system schedule of the daily prune: 03:40 UTC, one run for
// any number of missed days (pruning is idempotent).
func Spec(cron string) schedule.Spec {
	if cron == "" {
		cron = "40 3 * * *"
	}
	return schedule.Spec{Name: "retention", Kind: KindName, Cron: cron, TimeZone: "UTC", CatchUp: schedule.One, Enabled: true}
}
