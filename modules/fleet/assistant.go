package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/limit"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// CmdAssistantTask starts a task on an enrolled assistant (the console's
// "Start a task"); the assistant takes it only if its person allows tasks
// from the panel.
const CmdAssistantTask = "assistant_task"

// AlarmAssistantLimit is the alarm kind raised when an enrolled assistant's
// task stops at a limit; its key is "<agent id>/<task id>".
const AlarmAssistantLimit = "assistant.limit"

// maxLimitSteps and friends bound what an operator may set: beyond them a
// value is a typo, not a limit.
const (
	maxLimitSteps  = 100000
	maxLimitTokens = 1 << 30
	maxLimitUSD    = 1e6
	maxLimitWall   = 7 * 24 * 3600
	maxLimitTabs   = 100
)

// ErrNotAssistant is returned for an assistant command to an agent that
// never reported as an assistant.
var ErrNotAssistant = errors.New("fleet: that agent is not an enrolled assistant")

// CheckLimitSet refuses negative, non-finite or absurd limits, naming the
// field. Zero means no limit.
func CheckLimitSet(s wire.AssistantLimitSet) error {
	ints := []struct {
		name string
		v    int
		max  int
	}{
		{"steps per task", s.TaskSteps, maxLimitSteps}, {"tokens per task", s.TaskTokens, maxLimitTokens},
		{"wall time per task (seconds)", s.TaskWallSeconds, maxLimitWall}, {"open tabs per task", s.TaskTabs, maxLimitTabs},
		{"steps per day", s.DaySteps, maxLimitSteps * 100}, {"tokens per day", s.DayTokens, maxLimitTokens},
	}
	for _, f := range ints {
		if f.v < 0 || f.v > f.max {
			return Invalid(fmt.Sprintf("%s must be between 0 (no limit) and %d, not %d", f.name, f.max, f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"spend per task (USD)", s.TaskCostUSD}, {"spend per day (USD)", s.DayCostUSD}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 || f.v > maxLimitUSD {
			return Invalid(fmt.Sprintf("%s must be between 0 (no limit) and %.0f", f.name, float64(maxLimitUSD)))
		}
	}
	return nil
}

// Invalid is a refusal of the person's input, shown as it is.
type Invalid string

func (e Invalid) Error() string { return string(e) }

// AssistantLimits reads the tenant's and the installation's limits for
// enrolled assistants (nil when neither sets one). Spend per day is not
// kept here: it is the model_spend_day limit of modules/limit (the tenant's
// and the global row), the one source of truth the /limits page and
// `fleetwright limit` set.
func (s *Store) AssistantLimits(ctx context.Context, tenant string) (*wire.AssistantLimits, error) {
	var tb, gb []byte
	err := db.TenantRow(ctx, s.pool, tenant, `SELECT t.assistant_limits, (SELECT assistant_limits FROM fleet_switches)
		FROM tenants t WHERE t.id = $1`, tenant).Scan(&tb, &gb)
	if err != nil {
		return nil, fmt.Errorf("fleet: assistant limits: %w", err)
	}
	var l wire.AssistantLimits
	if err := errors.Join(json.Unmarshal(tb, &l.Tenant), json.Unmarshal(gb, &l.Global)); err != nil {
		return nil, fmt.Errorf("fleet: assistant limits: %w", err)
	}
	lim, err := limit.Load(ctx, s.pool, tenant)
	if err != nil {
		return nil, fmt.Errorf("fleet: assistant limits: %w", err)
	}
	l.Tenant.DayCostUSD = spendUSD(lim.Tenant)
	l.Global.DayCostUSD = spendUSD(lim.Global)
	if l.Tenant.IsZero() && l.Global.IsZero() {
		return nil, nil
	}
	return &l, nil
}

// spendUSD is a scope's model_spend_day in USD (0: none). A stored 0
// (which limit.Set no longer accepts) allows no spend: it is sent as the
// smallest amount, one micro-dollar, as the wire's 0 means no limit.
func spendUSD(m map[limit.Name]int64) float64 {
	v, ok := m[limit.ModelSpendPerDay]
	if !ok {
		return 0
	}
	return float64(max(v, 1)) / 1e6
}

// ErrSpendElsewhere refuses a spend per day in the assistant limits: it is
// the model_spend_day limit.
var ErrSpendElsewhere = Invalid("spend per day is the model_spend_day limit: set it on the Limits page or with `fleetwright limit set model_spend_day`")

// SetAssistantLimits sets the tenant's limits for its enrolled assistants,
// or the installation's when tenant is empty (audited on the system chain),
// and tells the connected assistants concerned: each gets a configure
// command whose limits are read when it is sent, woken at commit. Spend
// per day is refused here: it is the model_spend_day limit (limit.Set).
func (s *Store) SetAssistantLimits(ctx context.Context, tenant string, set wire.AssistantLimitSet, by audit.Entry) error {
	if set.DayCostUSD != 0 {
		return ErrSpendElsewhere
	}
	if err := CheckLimitSet(set); err != nil {
		return err
	}
	b, err := json.Marshal(set)
	if err != nil {
		return fmt.Errorf("fleet: assistant limits: %w", err)
	}
	var detail map[string]any
	_ = json.Unmarshal(b, &detail)
	if tenant != "" {
		err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `UPDATE tenants SET assistant_limits = $2 WHERE id = $1`, tenant, b); err != nil {
				return err
			}
			e := by
			e.Action, e.Target, e.Detail = "fleet.assistant_limits", "tenant", detail
			if err := audit.Append(ctx, tx, e); err != nil {
				return err
			}
			return tellAssistants(ctx, tx, tenant, "assistant limits changed", by)
		})
		if err != nil {
			return fmt.Errorf("fleet: assistant limits: %w", err)
		}
		return nil
	}
	err = audit.InSystem(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE fleet_switches SET assistant_limits = $1, updated_at = now()`, b); err != nil {
			return err
		}
		e := by
		e.Action, e.Target, e.Detail = "fleet.assistant_limits", "installation", detail
		return audit.Append(ctx, tx, e)
	})
	if err != nil {
		return fmt.Errorf("fleet: assistant limits: %w", err)
	}
	// The limits are set; each tenant's assistants are told in that
	// tenant's transaction (those not told learn them at their next welcome).
	rows, err := s.pool.Query(ctx, `SELECT id::text FROM tenants ORDER BY slug`)
	if err != nil {
		return fmt.Errorf("fleet: assistant limits are set, but the assistants were not told: %w", err)
	}
	tenants, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("fleet: assistant limits are set, but the assistants were not told: %w", err)
	}
	var first error
	for _, t := range tenants {
		if err := db.InTenant(ctx, s.pool, t, func(tx pgx.Tx) error { return tellAssistants(ctx, tx, t, "assistant limits changed", by) }); err != nil && first == nil {
			first = fmt.Errorf("fleet: assistant limits are set, but the assistants of a tenant were not told: %w", err)
		}
	}
	return first
}

// LimitNotifier tells a tenant's enrolled assistants that a limit they
// apply changed (limit.Notifier): model_spend_day is their spend per day.
// Each live assistant gets a configure command whose limits are read when
// it is sent, woken at commit on whichever replica holds it — also when
// the change comes from `fleetwright limit set` in another process.
type LimitNotifier struct{}

// LimitChanged queues the configure commands in tx (tenant scope).
func (LimitNotifier) LimitChanged(ctx context.Context, tx pgx.Tx, tenant string, n limit.Name, by audit.Entry) error {
	if n == limit.AccountRequestsPerHour {
		return tellAgentsOfLimit(ctx, tx, tenant, by) // requests.go
	}
	if n != limit.ModelSpendPerDay {
		return nil
	}
	if err := tellAssistants(ctx, tx, tenant, "limit "+string(n)+" changed", by); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	return nil
}

// tellAssistants queues a configure command for each live assistant of the
// tenant (an agent that has reported as one) and wakes their replicas.
func tellAssistants(ctx context.Context, tx pgx.Tx, tenant, reason string, by audit.Entry) error {
	b, _ := json.Marshal(CommandBody{Reason: reason})
	rows, err := tx.Query(ctx, `INSERT INTO agent_commands (tenant_id, agent_id, kind, body, created_by)
		SELECT tenant_id, id, $2, $3, $4 FROM agents
		WHERE tenant_id = $1 AND retired_at IS NULL AND assistant_report IS NOT NULL
		RETURNING agent_id::text`, tenant, CmdConfigure, b, by.Actor)
	if err != nil {
		return fmt.Errorf("tell assistants: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("tell assistants: %w", err)
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, id) FROM unnest($2::text[]) AS id`, NotifyChannel, ids); err != nil {
		return fmt.Errorf("tell assistants: %w", err)
	}
	return nil
}

// AssistantTaskInput is a task started from the console.
type AssistantTaskInput struct {
	Goal string
	URLs []string
}

// Check refuses an empty goal, a missing or malformed start URL, and sizes
// beyond what the report and the command row carry.
func (in AssistantTaskInput) Check() error {
	if g := strings.TrimSpace(in.Goal); g == "" || len(g) > 2000 {
		return Invalid("the task needs a goal of at most 2,000 characters")
	}
	if len(in.URLs) == 0 || len(in.URLs) > 10 {
		return Invalid("give one to ten start URLs (the task's plan), one per line")
	}
	for _, raw := range in.URLs {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || len(raw) > 2000 {
			return Invalid(fmt.Sprintf("start URL %q is not an absolute http(s) URL without user info", raw))
		}
	}
	return nil
}

// StartAssistantTask queues a task for an enrolled assistant (audited with
// the command). The goal and URLs are not secret: they travel in the
// command's body.
func (s *Store) StartAssistantTask(ctx context.Context, tenant, agentID string, in AssistantTaskInput, by audit.Entry) (string, error) {
	in.Goal = strings.TrimSpace(in.Goal)
	if err := in.Check(); err != nil {
		return "", err
	}
	b, _ := json.Marshal(CommandBody{Goal: in.Goal, URLs: in.URLs, By: by.Actor})
	var id string
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		var isAssistant bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM agents WHERE id::text = $1 AND tenant_id = $2
			AND retired_at IS NULL AND assistant_report IS NOT NULL)`, agentID, tenant).Scan(&isAssistant); err != nil {
			return err
		}
		if !isAssistant {
			if ok, err := agentInTenantTx(ctx, tx, tenant, agentID); err != nil || !ok {
				if err == nil {
					err = ErrNotTenantAgent
				}
				return err
			}
			return ErrNotAssistant
		}
		return enqueueTx(ctx, tx, tenant, agentID, CmdAssistantTask, b, by, &id)
	})
	if err != nil {
		return "", fmt.Errorf("fleet: start assistant task: %w", err)
	}
	return id, nil
}

func agentInTenantTx(ctx context.Context, tx pgx.Tx, tenant, agentID string) (bool, error) {
	var ok bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM agents WHERE id::text = $1 AND tenant_id = $2)`, agentID, tenant).Scan(&ok)
	return ok, err
}

// GlobalAssistantLimits reads the installation's limits for enrolled
// assistants alone (the Limits pages' assistant section), with spend per
// day from the global model_spend_day limit.
func (s *Store) GlobalAssistantLimits(ctx context.Context) (wire.AssistantLimitSet, error) {
	var g wire.AssistantLimitSet
	var gb []byte
	if err := s.pool.QueryRow(ctx, `SELECT assistant_limits FROM fleet_switches`).Scan(&gb); err != nil {
		return g, fmt.Errorf("fleet: global assistant limits: %w", err)
	}
	if err := json.Unmarshal(gb, &g); err != nil {
		return g, fmt.Errorf("fleet: global assistant limits: %w", err)
	}
	lim, err := limit.Load(ctx, s.pool, limit.Global)
	if err != nil {
		return g, fmt.Errorf("fleet: global assistant limits: %w", err)
	}
	g.DayCostUSD = spendUSD(lim.Global)
	return g, nil
}
