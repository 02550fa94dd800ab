// Package limit holds the installation's caps on the work a fleet does, per
// tenant and globally: browser concurrency, run time per task, retries,
// crawl pages per day, requests per platform account per hour and an
// enrolled assistant's model spend per day. The lowest of the task's own,
// the tenant's and the global limit applies (Limits.Apply). Limits are set in the console (/limits) and the
// CLI (fleetwright limit), each change audited; reaching one stops the work
// with a reason that names the limit and where it was set, logged and
// raised as a limit.reached alarm (Reached), never a silent drop.
package limit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/audit"
)

// Global is the tenant id the global limits are stored under (the system
// chain's all-zero id).
const Global = audit.System

// Name names one limit.
type Name string

// The limits. Each is enforced where the work happens (docs/OPERATIONS.md,
// "Limits").
const (
	// BrowserConcurrency caps the tenant's browser page loads in flight at
	// once across the fleet (crawl runs in browser mode).
	BrowserConcurrency Name = "browser_concurrency"
	// RunTime caps one task's wall time (a crawl run), in seconds.
	RunTime Name = "run_time"
	// Retries caps the retries of one failed step (a crawl page).
	Retries Name = "retries"
	// CrawlPagesPerDay caps the pages a tenant's crawl runs fetch per UTC day.
	CrawlPagesPerDay Name = "crawl_pages_day"
	// ModelSpendPerDay caps an enrolled assistant's model spend per UTC day,
	// in micro-USD.
	ModelSpendPerDay Name = "model_spend_day"
	// AccountRequestsPerHour caps the HTTP requests an agent's workers send
	// to the platform for one account in any rolling hour (watchers'
	// polling included). The panel sends it to each agent (wire
	// RequestLimit); the agent counts and holds its workers at the budget.
	AccountRequestsPerHour Name = "account_requests_hour"
)

// Unit says how a limit's value is read and written.
type Unit int

// The units.
const (
	Count    Unit = iota // a whole number
	Duration             // seconds, written as a Go duration ("30m")
	USD                  // micro-USD, written in dollars ("2.50")
)

// Def describes one limit for pages and the CLI.
type Def struct {
	Name  Name
	Label string
	Unit  Unit
	// Where says where it is enforced, for people.
	Where string
}

// Defs are every limit, in the order pages list them.
var Defs = []Def{
	{BrowserConcurrency, "Browser page loads at once", Count, "crawl runs in browser mode wait for a free slot (fleet-wide, per tenant)"},
	{RunTime, "Run time per task", Duration, "a crawl run stops when it reaches it"},
	{Retries, "Retries per failed step", Count, "a crawl page is given up after this many retries"},
	{CrawlPagesPerDay, "Crawl pages per day (UTC)", Count, "crawl runs stop when the tenant's pages today reach it"},
	{ModelSpendPerDay, "Model spend per assistant per day (UTC)", USD, "the panel sends it to its enrolled assistants (pushed when it changes); an assistant whose spend today reaches it stops its task, naming the limit (an assistant.limit alarm)"},
	{AccountRequestsPerHour, "Requests per platform account per hour", Count, "each agent counts its account's requests to the platform (page loads, polls, sign-ins, bookings) over a rolling hour; at the budget it stops polling and taking work until the window frees (a claim already acting finishes)"},
}

// DefOf returns the definition of n.
func DefOf(n Name) (Def, bool) {
	for _, d := range Defs {
		if d.Name == n {
			return d, true
		}
	}
	return Def{}, false
}

// Names lists the limits' names, for error messages.
func Names() string {
	s := make([]string, len(Defs))
	for i, d := range Defs {
		s[i] = string(d.Name)
	}
	return strings.Join(s, ", ")
}

// Parse reads a value written for people ("30m", "2.50", "100"); "" or
// "none" means no limit (ok false).
func (d Def) Parse(s string) (v int64, ok bool, err error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.EqualFold(s, "none") {
		return 0, false, nil
	}
	switch d.Unit {
	case Duration:
		t, err := time.ParseDuration(s)
		if err != nil {
			if n, err2 := strconv.ParseInt(s, 10, 64); err2 == nil {
				t = time.Duration(n) * time.Second
			} else {
				return 0, false, fmt.Errorf("%s: %q is not a duration (write 30m, 2h or a number of seconds)", d.Name, s)
			}
		}
		if t < time.Second {
			return 0, false, fmt.Errorf("%s: %q is under one second", d.Name, s)
		}
		return int64(t / time.Second), true, nil
	case USD:
		f, err := strconv.ParseFloat(strings.TrimPrefix(s, "$"), 64)
		if err != nil || f < 0 || math.IsInf(f, 0) || f > 1e9 {
			return 0, false, fmt.Errorf("%s: %q is not an amount in USD (write 2.50)", d.Name, s)
		}
		v := int64(math.Round(f * 1e6))
		if v == 0 {
			return 0, false, fmt.Errorf("%s: %q would allow no spend at all: write an amount of at least 0.000001, or none to remove the limit", d.Name, s)
		}
		return v, true, nil
	default:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return 0, false, fmt.Errorf("%s: %q is not a whole number of 0 or more", d.Name, s)
		}
		return n, true, nil
	}
}

// Format writes a value for people.
func (d Def) Format(v int64) string {
	switch d.Unit {
	case Duration:
		return (time.Duration(v) * time.Second).String()
	case USD:
		prec := 2
		if v%10000 != 0 {
			prec = -1 // below a cent: as precise as stored
		}
		return "$" + strconv.FormatFloat(float64(v)/1e6, 'f', prec, 64)
	}
	return strconv.FormatInt(v, 10)
}

// Limits are a tenant's stored limits and the global ones.
type Limits struct {
	Tenant map[Name]int64
	Global map[Name]int64
}

// Effective is the limit that applies, and where it was set.
type Effective struct {
	Name  Name
	Value int64
	// From is "task", "tenant" or "global".
	From string
	Set  bool
}

// Reason words a reached limit for pages and logs: "limit: crawl_pages_day
// 1000 (tenant)".
func (e Effective) Reason() string {
	d, _ := DefOf(e.Name)
	return fmt.Sprintf("limit: %s %s (%s limit)", e.Name, d.Format(e.Value), e.From)
}

// Apply returns the lowest of the task's own value (task ≤ 0: none), the
// tenant's and the global limit.
func (l Limits) Apply(n Name, task int64) Effective {
	e := Effective{Name: n}
	try := func(v int64, ok bool, from string) {
		if ok && (!e.Set || v < e.Value) {
			e.Value, e.From, e.Set = v, from, true
		}
	}
	try(task, task > 0, "task")
	v, ok := l.Tenant[n]
	try(v, ok, "tenant")
	v, ok = l.Global[n]
	try(v, ok, "global")
	return e
}

// Get is Apply without a task value.
func (l Limits) Get(n Name) Effective { return l.Apply(n, 0) }

// Load reads a tenant's limits and the global ones in the tenant's scope.
func Load(ctx context.Context, pool *pgxpool.Pool, tenant string) (Limits, error) {
	var l Limits
	err := db.InTenant(ctx, pool, tenant, func(tx pgx.Tx) error {
		var err error
		l, err = load(ctx, tx, tenant)
		return err
	})
	return l, err
}

func load(ctx context.Context, tx pgx.Tx, tenant string) (Limits, error) {
	l := Limits{Tenant: map[Name]int64{}, Global: map[Name]int64{}}
	rows, err := tx.Query(ctx, `SELECT tenant_id::text, name, value FROM limits WHERE tenant_id = $1::uuid OR tenant_id = $2::uuid`, tenant, Global)
	if err != nil {
		return l, fmt.Errorf("limit: load: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var t, n string
		var v int64
		if err := rows.Scan(&t, &n, &v); err != nil {
			return l, fmt.Errorf("limit: load: %w", err)
		}
		if t == Global {
			l.Global[Name(n)] = v
		} else {
			l.Tenant[Name(n)] = v
		}
	}
	if err := rows.Err(); err != nil {
		return l, fmt.Errorf("limit: load: %w", err)
	}
	return l, nil
}

// Notifier is told that a limit changed, inside a transaction in the scope
// of a tenant concerned, so the change and the news commit together. The
// fleet implements it (fleet.LimitNotifier): the enrolled assistants of the
// tenant get the limits they apply (model_spend_day) at once, and its agents
// their account's request budget (account_requests_hour).
type Notifier interface {
	LimitChanged(ctx context.Context, tx pgx.Tx, tenant string, n Name, by audit.Entry) error
}

// ErrNotTold is returned when a global limit is set but telling some
// tenant's work failed: the limit applies; the work learns it when it next
// reads it (an enrolled assistant, at its next connection).
var ErrNotTold = errors.New("limit")

// ErrUnknown is returned for a name that is no limit.
var ErrUnknown = errors.New("limit: unknown limit")

// Set stores (ok) or removes (!ok) one limit of a tenant, or a global one
// (tenant Global), audited in that tenant's chain (the system chain for a
// global limit) as limit.set in the same transaction. The notifiers are
// told: of a tenant's limit in the same transaction; of a global one, each
// tenant in its own transaction right after the limit commits (the row is
// the truth: a notice that fails is reported and changes nothing stored;
// those not told learn the limit when they next connect).
func Set(ctx context.Context, pool *pgxpool.Pool, by audit.Entry, tenant string, n Name, value int64, ok bool, tell ...Notifier) error {
	d, known := DefOf(n)
	if !known {
		return fmt.Errorf("%w %q (limits: %s)", ErrUnknown, n, Names())
	}
	if value < 0 {
		return fmt.Errorf("limit: %s must be 0 or more", n)
	}
	if ok && value == 0 && d.Unit == USD {
		return fmt.Errorf("limit: %s of 0 would allow no spend at all: set at least one micro-dollar, or remove the limit", n)
	}
	err := db.InTenant(ctx, pool, tenant, func(tx pgx.Tx) error {
		var old *int64
		if err := tx.QueryRow(ctx, `SELECT value FROM limits WHERE tenant_id = app_tenant() AND name = $1`, string(n)).Scan(&old); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		detail := map[string]any{"limit": string(n), "old": "none", "new": "none"}
		if old != nil {
			detail["old"] = d.Format(*old)
		}
		if ok {
			detail["new"] = d.Format(value)
			if _, err := tx.Exec(ctx, `INSERT INTO limits (name, value, updated_by) VALUES ($1, $2, $3)
				ON CONFLICT (tenant_id, name) DO UPDATE SET value = EXCLUDED.value, updated_at = now(), updated_by = EXCLUDED.updated_by`,
				string(n), value, by.Actor); err != nil {
				return err
			}
		} else if _, err := tx.Exec(ctx, `DELETE FROM limits WHERE tenant_id = app_tenant() AND name = $1`, string(n)); err != nil {
			return err
		}
		target := "tenant"
		if tenant == Global {
			target = "global"
		}
		e := by
		e.Action, e.Target, e.Detail = "limit.set", target+" "+string(n), detail
		if err := audit.Append(ctx, tx, e); err != nil {
			return err
		}
		if tenant == Global {
			return nil
		}
		for _, nt := range tell {
			if err := nt.LimitChanged(ctx, tx, tenant, n, by); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("limit: set %s: %w", n, err)
	}
	if tenant != Global || len(tell) == 0 {
		return nil
	}
	rows, err := pool.Query(ctx, `SELECT id::text FROM tenants ORDER BY slug`)
	if err != nil {
		return fmt.Errorf("%w: %s is set, but the tenants' work was not told: %w", ErrNotTold, n, err)
	}
	tenants, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("%w: %s is set, but the tenants' work was not told: %w", ErrNotTold, n, err)
	}
	var first error
	for _, t := range tenants {
		err := db.InTenant(ctx, pool, t, func(tx pgx.Tx) error {
			for _, nt := range tell {
				if err := nt.LimitChanged(ctx, tx, t, n, by); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil && first == nil {
			first = fmt.Errorf("%w: %s is set, but the work of a tenant was not told: %w", ErrNotTold, n, err)
		}
	}
	return first
}

// AlarmKind is the alarm raised when a limit stops work.
const AlarmKind = "limit.reached"

var reachedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "fleet_limit_reached_total",
	Help: "Work stopped or held because a limit was reached, by limit.",
}, []string{"limit"})

// Metrics registers the limit counter on reg (once per registry).
func Metrics(reg prometheus.Registerer) {
	if err := reg.Register(reachedTotal); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			panic(err)
		}
	}
}

// Reached records that e stopped some work (what: "crawl run shop-prices"):
// one warning in the log, the fleet_limit_reached_total counter, and a
// limit.reached alarm of the tenant keyed by the limit, linking to link
// (the page that shows the stopped work). The alarm is resolved by a person
// or by Clear when work under the limit next ends within it.
func Reached(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger, tenant string, e Effective, what, link string) {
	ReachedKey(ctx, pool, log, tenant, e, string(e.Name), what, link)
}

// ReachedKey is Reached with the alarm's key given, for a limit that holds
// several things apart (one alarm per platform account's request budget).
func ReachedKey(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger, tenant string, e Effective, key, what, link string) {
	reachedTotal.WithLabelValues(string(e.Name)).Inc()
	if log != nil {
		log.Warn("limit reached: work stopped", "tenant", tenant, "limit", string(e.Name), "value", e.Value, "from", e.From, "work", what)
	}
	if link == "" {
		link = "/limits"
	}
	_, err := alarm.Raise(ctx, pool, alarm.Alarm{Kind: AlarmKind, Key: key, Tenant: tenant, Severity: alarm.Warning,
		Summary: what + " stopped: " + e.Reason(), Detail: "Raise or remove the limit on the Limits page, or wait for its window to pass.",
		Link: link})
	if err != nil && log != nil {
		log.Error("limit: raise alarm", "err", err)
	}
}

// Clear resolves the tenant's limit.reached alarm for n (work under it
// ended within it).
func Clear(ctx context.Context, pool *pgxpool.Pool, tenant string, n Name) error {
	return ClearKey(ctx, pool, tenant, string(n))
}

// ClearKey resolves the tenant's limit.reached alarm raised by ReachedKey.
func ClearKey(ctx context.Context, pool *pgxpool.Pool, tenant, key string) error {
	if _, err := alarm.Resolve(ctx, pool, tenant, AlarmKind, key, "limit"); err != nil {
		return fmt.Errorf("limit: clear: %w", err)
	}
	return nil
}
