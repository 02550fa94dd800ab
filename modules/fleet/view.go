package fleet

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/traits"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// LiveWindow is how fresh a replica's heartbeat must be for its agents to
// count as connected: a replica that died without cleaning up leaves rows
// saying "connected" that this window sees through.
const LiveWindow = 30 * time.Second

// AgentView is one row of the fleet page.
type AgentView struct {
	ID, Name, AccountKey, Region, TokenHint string
	Host, Remote, Build                     string
	Protocol                                int
	Connected, Paused, Retired              bool
	LastSeen                                *time.Time
	ClockOffsetMS, ClockErrorMS             *float64
	State                                   wire.State
	// SharedEgress: another agent of the tenant connects from the same
	// address (every account should have its own).
	SharedEgress bool
	// Egress is what the agent's crawler was last handed to fetch through
	// (a pool's proxy, or the account's own address; empty: it never
	// crawled), with that proxy's state (active, benched, removed).
	Egress, EgressState string
	EgressAt            *time.Time
	Traits              traits.Traits
	Events              []EventView
	// Assistant is the latest report of an enrolled assistant (nil for
	// other agents).
	Assistant *wire.AssistantReport
	// Health marks workers the panel's health sweep found hung or in a
	// crash loop (their open alarms), with the alarm's summary as detail;
	// CrashLoop marks the agent process itself.
	Health       map[string]string
	HealthDetail map[string]string
	CrashLoop    bool
	// Offline is the summary of the agent's open agent.offline alarm (the
	// health sweep found it silent past its allowance), else "".
	Offline string
}

// WorkerUnknown is the state the console shows for a worker whose agent
// is not connected or not heard from: its last report is history.
const WorkerUnknown = "unknown"

// WorkerShown is how the console shows one of the agent's workers: its
// reported state while the agent is connected and heard from; otherwise
// unknown, with when the agent was last heard from and why — never a stale
// "running".
func (a AgentView) WorkerShown(w wire.WorkerState) (state, detail string) {
	if a.Connected && a.Offline == "" {
		return w.State, fmt.Sprintf("%d restarts", w.Restarts)
	}
	last := "never heard from"
	if a.LastSeen != nil {
		last = "last heard from " + a.LastSeen.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	why := "the agent is disconnected"
	if a.Offline != "" {
		why = a.Offline
	}
	return WorkerUnknown, fmt.Sprintf("%s, reporting %s; %s", last, w.State, why)
}

// EventView is a recent event of an agent.
type EventView struct {
	At                           time.Time
	Level, Kind, Worker, Message string
	// Screenshot is a small JPEG (base64) of the page that needs a person.
	Screenshot string
}

// NeedsPerson is a worker stopped on something only a person may do (a
// captcha): shown at the top of the fleet page with its screenshot.
type NeedsPerson struct {
	AgentID, Agent string
	Event          EventView
}

// Fleet is the fleet page's model.
type Fleet struct {
	Agents []AgentView
	// CollisionOdds is the birthday bound of two of the tenant's accounts
	// sharing all three traits; Collisions are the actual ones.
	CollisionOdds float64
	Collisions    []traits.Collision
	Accounts      []AccountView
	NeedsPerson   []NeedsPerson
}

// AccountView is an account without its secrets.
type AccountView struct {
	ID, Key, Region, BoardURL, Username string
	// Client is the platform client the account books as ("" for an
	// account made before the one-client rule: not stated).
	Client  string
	Workers []wire.WorkerSpec
	// Platform names the platform version the account runs ("": the
	// sandbox built into the agent); PlatformHeld says the review gate
	// holds it (a real target with no recorded review: it claims nothing).
	Platform     string
	PlatformHeld bool
}

// List returns the tenant's fleet as the console shows it.
func (s *Store) List(ctx context.Context, tenant string) (Fleet, error) {
	var f Fleet
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT ag.id::text, ag.name, ac.account_key, ac.region, ag.token_hint, COALESCE(ag.host, ''),
			       COALESCE(ag.remote_addr, ''), COALESCE(ag.build, ''), COALESCE(ag.protocol, 0),
			       ag.connected AND EXISTS (SELECT 1 FROM panel_replicas r WHERE r.id = ag.replica_id
			                                AND r.last_seen > now() - make_interval(secs => $1)),
			       ag.paused, ag.retired_at IS NOT NULL, ag.last_seen, ag.clock_offset_ms, ag.clock_error_ms, ag.state, ag.assistant_report
			FROM agents ag JOIN accounts ac ON ac.id = ag.account_id
			ORDER BY ag.retired_at IS NOT NULL, ac.account_key, ag.name`, LiveWindow.Seconds())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var a AgentView
			var st, ar []byte
			if err := rows.Scan(&a.ID, &a.Name, &a.AccountKey, &a.Region, &a.TokenHint, &a.Host, &a.Remote, &a.Build,
				&a.Protocol, &a.Connected, &a.Paused, &a.Retired, &a.LastSeen, &a.ClockOffsetMS, &a.ClockErrorMS, &st, &ar); err != nil {
				return err
			}
			if ar != nil {
				a.Assistant = &wire.AssistantReport{}
				_ = json.Unmarshal(ar, a.Assistant)
			}
			if st != nil {
				_ = json.Unmarshal(st, &a.State)
			}
			a.Traits, _ = traits.For(a.AccountKey, a.Region)
			f.Agents = append(f.Agents, a)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		acc, err := tx.Query(ctx, `SELECT ac.id::text, ac.account_key, ac.region, ac.board_url, ac.username, ac.client, ac.workers,
			COALESCE(p.name || ' v' || ap.version, ''),
			ap.account_id IS NOT NULL AND NOT v.shipped
			  AND NOT EXISTS (SELECT 1 FROM platform_reviews r WHERE r.platform_id = ap.platform_id AND r.withdrawn_at IS NULL)
			FROM accounts ac
			LEFT JOIN account_platforms ap ON ap.account_id = ac.id
			LEFT JOIN platforms p ON p.id = ap.platform_id
			LEFT JOIN platform_versions v ON v.platform_id = ap.platform_id AND v.version = ap.version
			ORDER BY ac.account_key`)
		if err != nil {
			return err
		}
		defer acc.Close()
		for acc.Next() {
			var a AccountView
			var w []byte
			if err := acc.Scan(&a.ID, &a.Key, &a.Region, &a.BoardURL, &a.Username, &a.Client, &w, &a.Platform, &a.PlatformHeld); err != nil {
				return err
			}
			_ = json.Unmarshal(w, &a.Workers)
			f.Accounts = append(f.Accounts, a)
		}
		if err := acc.Err(); err != nil {
			return err
		}
		ev, err := tx.Query(ctx, `SELECT agent_id::text, at, level, kind, worker, message,
			COALESCE(fields->>'screenshot_jpeg_base64', '') FROM (
			SELECT *, row_number() OVER (PARTITION BY agent_id ORDER BY id DESC) AS n FROM agent_events) e
			WHERE n <= 10 ORDER BY id DESC`)
		if err != nil {
			return err
		}
		defer ev.Close()
		byID := map[string]*AgentView{}
		for i := range f.Agents {
			byID[f.Agents[i].ID] = &f.Agents[i]
		}
		for ev.Next() {
			var id string
			var e EventView
			if err := ev.Scan(&id, &e.At, &e.Level, &e.Kind, &e.Worker, &e.Message, &e.Screenshot); err != nil {
				return err
			}
			if _, err := base64.StdEncoding.DecodeString(e.Screenshot); err != nil {
				e.Screenshot = "" // only a real image goes into the page
			}
			if a := byID[id]; a != nil {
				// The newest event per worker decides: a worker that needs
				// a person until it is restarted (or reports otherwise).
				if (e.Kind == "needs_person" || e.Kind == "worker_needs_person") && !a.Retired && !a.sawWorker(e.Worker) {
					f.NeedsPerson = append(f.NeedsPerson, NeedsPerson{AgentID: a.ID, Agent: a.Name, Event: e})
				}
				a.Events = append(a.Events, e)
			}
		}
		if err := ev.Err(); err != nil {
			return err
		}
		eg, err := tx.Query(ctx, `SELECT e.agent_id::text, e.label, e.at, COALESCE(p.state, '')
			FROM crawl_agent_egress e LEFT JOIN crawl_proxies p ON p.id = e.proxy_id`)
		if err != nil {
			return err
		}
		defer eg.Close()
		for eg.Next() {
			var id, label, state string
			var at time.Time
			if err := eg.Scan(&id, &label, &at, &state); err != nil {
				return err
			}
			if a := byID[id]; a != nil {
				a.Egress, a.EgressState, a.EgressAt = label, state, &at
			}
		}
		if err := eg.Err(); err != nil {
			return err
		}
		return markHealth(ctx, tx, byID)
	})
	if err != nil {
		return Fleet{}, fmt.Errorf("fleet: list: %w", err)
	}
	for i := range f.Agents {
		f.Agents[i].Events = f.Agents[i].Events[:min(len(f.Agents[i].Events), 3)]
	}
	egress := map[string]int{}
	for _, a := range f.Agents {
		if a.Remote != "" && !a.Retired {
			egress[a.Remote]++
		}
	}
	for i := range f.Agents {
		f.Agents[i].SharedEgress = !f.Agents[i].Retired && egress[f.Agents[i].Remote] > 1
	}
	keys := make([]string, 0, len(f.Accounts))
	for _, a := range f.Accounts {
		keys = append(keys, a.Key)
	}
	sort.Strings(keys)
	f.CollisionOdds = traits.CollisionOdds(len(keys))
	f.Collisions = traits.Collisions(keys)
	return f, nil
}

// sawWorker reports whether a newer event of the same worker was already
// listed (events come newest first).
func (a *AgentView) sawWorker(worker string) bool {
	for _, e := range a.Events {
		if e.Worker == worker {
			return true
		}
	}
	return false
}
