package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// NotifyChannel carries command wake-ups between panel replicas. The payload
// is the agent id; the persisted command row is the truth.
const NotifyChannel = "fleet_agent_commands"

// Command kinds an operator can send.
const (
	CmdPause             = "pause"
	CmdResume            = "resume"
	CmdRestartWorker     = "restart_worker"
	CmdRetire            = "retire"
	CmdRotateCredentials = "rotate_credentials"
	CmdConfigure         = "configure"
)

// CommandBody holds a command's non-secret arguments. Credentials and
// configuration are read fresh when the command is sent, so no secret is
// ever written to the commands table.
type CommandBody struct {
	Reason string `json:"reason,omitempty"`
	Worker string `json:"worker,omitempty"`
	// Goal, URLs and By are an assistant task's (CmdAssistantTask).
	Goal string   `json:"goal,omitempty"`
	URLs []string `json:"urls,omitempty"`
	By   string   `json:"by,omitempty"`
}

// Command is a persisted command.
type Command struct {
	ID, Kind string
	Body     CommandBody
}

// Enqueue persists a command for an agent and wakes the replica holding its
// connection (NOTIFY is delivered at commit, only if the insert commits).
func (s *Store) Enqueue(ctx context.Context, tenant, agentID, kind string, body CommandBody, by audit.Entry) (string, error) {
	switch kind {
	case CmdPause, CmdResume, CmdRetire, CmdRotateCredentials, CmdConfigure:
	case CmdAssistantTask:
		return "", errors.New("fleet: an assistant task is started with StartAssistantTask")
	case CmdRestartWorker:
		if body.Worker == "" {
			return "", errors.New("fleet: restart_worker needs a worker name")
		}
	default:
		return "", fmt.Errorf("fleet: unknown command %q", kind)
	}
	b, _ := json.Marshal(body)
	var id string
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		return enqueueTx(ctx, tx, tenant, agentID, kind, b, by, &id)
	})
	if err != nil {
		return "", fmt.Errorf("fleet: enqueue %s: %w", kind, err)
	}
	return id, nil
}

func enqueueTx(ctx context.Context, tx pgx.Tx, tenant, agentID, kind string, body []byte, by audit.Entry, id *string) error {
	var mine bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM agents WHERE id::text = $1 AND tenant_id = $2)`, agentID, tenant).Scan(&mine); err != nil {
		return err
	}
	if !mine {
		return ErrNotTenantAgent
	}
	if err := tx.QueryRow(ctx, `INSERT INTO agent_commands (tenant_id, agent_id, kind, body, created_by)
		VALUES ($1, $2, $3, $4, $5) RETURNING id::text`, tenant, agentID, kind, body, by.Actor).Scan(id); err != nil {
		return err
	}
	var detail map[string]any
	_ = json.Unmarshal(body, &detail)
	by.Action, by.Target, by.Detail = "fleet.agent."+kind, "agent "+agentID, detail
	if err := audit.Append(ctx, tx, by); err != nil {
		return err
	}
	if kind == CmdPause || kind == CmdResume {
		if _, err := tx.Exec(ctx, `UPDATE agents SET paused = $2 WHERE id = $1`, agentID, kind == CmdPause); err != nil {
			return err
		}
	}
	_, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", NotifyChannel, agentID)
	return err
}

// Retire deletes an agent: it leaves a tombstone (its token is answered
// "retired") and a retire command for a connected agent.
func (s *Store) Retire(ctx context.Context, tenant, agentID, reason string, by audit.Entry) error {
	b, _ := json.Marshal(CommandBody{Reason: reason})
	return db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE agents SET retired_at = now() WHERE id = $1 AND retired_at IS NULL`, agentID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return errors.New("fleet: no such live agent")
		}
		var id string
		return enqueueTx(ctx, tx, tenant, agentID, CmdRetire, b, by, &id)
	})
}

// Pending returns an agent's unacknowledged commands, oldest first.
func (s *Store) Pending(ctx context.Context, tenant, agentID string) ([]Command, error) {
	var out []Command
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id::text, kind, body FROM agent_commands
			WHERE agent_id = $1 AND acked_at IS NULL ORDER BY created_at, id`, agentID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c Command
			var b []byte
			if err := rows.Scan(&c.ID, &c.Kind, &b); err != nil {
				return err
			}
			_ = json.Unmarshal(b, &c.Body)
			out = append(out, c)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("fleet: pending commands: %w", err)
	}
	return out, nil
}

// MarkSent notes when a command was (last) written to the agent.
func (s *Store) MarkSent(ctx context.Context, tenant, id string) error {
	return db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE agent_commands SET sent_at = now() WHERE id = $1`, id)
		return err
	})
}

// Ack records the agent's result for a command; it reports whether the id
// named a command of that agent.
func (s *Store) Ack(ctx context.Context, tenant, agentID string, r wire.CommandResult) (bool, error) {
	var n int64
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE agent_commands SET acked_at = now(), ok = $3, error = NULLIF($4, '')
			WHERE id::text = $1 AND agent_id = $2 AND acked_at IS NULL`, r.CommandID, agentID, r.OK, r.Error)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("fleet: ack: %w", err)
	}
	return n == 1, nil
}

// Message turns a persisted command into the protocol message.
func (s *Store) Message(ctx context.Context, a Agent, c Command) (wire.Message, error) {
	switch c.Kind {
	case CmdPause:
		return wire.Pause{CommandID: c.ID, Reason: c.Body.Reason}, nil
	case CmdResume:
		// Lifting this agent's own pause must not lift its tenant's or the
		// fleet's: while either holds, the agent gets its configuration
		// with the pause that still applies.
		cfg, _, err := s.Welcome(ctx, a)
		if err != nil && !errors.Is(err, ErrSealedElsewhere) {
			return nil, err
		}
		if cfg.Paused {
			return s.configureFor(ctx, c.ID, a, cfg)
		}
		return wire.Resume{CommandID: c.ID}, nil
	case CmdRestartWorker:
		return wire.RestartWorker{CommandID: c.ID, Worker: c.Body.Worker}, nil
	case CmdRetire:
		return wire.Retire{CommandID: c.ID, Reason: c.Body.Reason}, nil
	case CmdRotateCredentials, CmdConfigure:
		cfg, creds, err := s.Welcome(ctx, a)
		// A configuration needs no credentials; a rotation without them
		// fails, saying why.
		if err != nil && (c.Kind != CmdConfigure || !errors.Is(err, ErrSealedElsewhere)) {
			return nil, err
		}
		if c.Kind == CmdConfigure {
			return s.configureFor(ctx, c.ID, a, cfg)
		}
		return wire.RotateCredentials{CommandID: c.ID, Credentials: creds}, nil
	case CmdAssistantTask:
		return wire.AssistantTaskStart{CommandID: c.ID, Goal: c.Body.Goal, StartURLs: c.Body.URLs, By: c.Body.By}, nil
	}
	return nil, fmt.Errorf("fleet: unknown command kind %q", c.Kind)
}

// PauseNotifier tells a tenant's agents that a claim pause switch (the
// tenant's or the fleet's) changed; the claim engine calls it inside the
// transaction of the change (claim.AgentNotifier). Each live agent gets a
// configure command: its configuration's pause state is read when the
// command is sent (the agent's own pause OR the tenant's OR the fleet's), so
// a resume never lifts a pause an operator put on one agent, and commands
// sent after the change commits always carry it. Connected agents are woken
// at commit by NOTIFY, on whichever replica holds them — also when the
// change comes from `fleetwright admin pause` in another process; the
// others learn it at their next welcome.
type PauseNotifier struct{}

// PauseChanged queues the configure commands in tx (tenant scope) and audits
// them once for the tenant.
func (PauseNotifier) PauseChanged(ctx context.Context, tx pgx.Tx, tenant string, paused bool, by audit.Entry) error {
	reason := "claims resumed"
	if paused {
		reason = "claims paused"
	}
	b, _ := json.Marshal(CommandBody{Reason: reason})
	rows, err := tx.Query(ctx, `INSERT INTO agent_commands (tenant_id, agent_id, kind, body, created_by)
		SELECT tenant_id, id, $2, $3, $4 FROM agents WHERE tenant_id = $1 AND retired_at IS NULL
		RETURNING agent_id::text`, tenant, CmdConfigure, b, by.Actor)
	if err != nil {
		return fmt.Errorf("fleet: tell agents: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("fleet: tell agents: %w", err)
	}
	if len(ids) == 0 {
		return nil
	}
	by.Action, by.Target = "fleet.agents.configure", "agents"
	by.Detail = map[string]any{"reason": reason, "agents": len(ids)}
	if err := audit.Append(ctx, tx, by); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, id) FROM unnest($2::text[]) AS id`, NotifyChannel, ids); err != nil {
		return fmt.Errorf("fleet: tell agents: %w", err)
	}
	return nil
}
