package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// A crawl run executes on whichever panel replica River gave it to, while
// the tenant's agents may be connected to any replica. A page task for an
// agent held elsewhere is relayed: a row in crawl_relay and a NOTIFY on the
// command channel ("crawl_relay:TENANT:ID"); the replica holding the agent
// sends the task, writes the result into the row and NOTIFYs back
// ("crawl_result:ID"). A proxy's credentials cross in the row sealed by the
// vault (every replica has the panel's secret key) and are sealed to the
// agent's installation key by the replica that sends the task.

const (
	relayPrefix  = "crawl_relay:"
	resultPrefix = "crawl_result:"
	// remoteTTL is how long the list of agents held by other replicas is
	// reused before it is read again.
	remoteTTL = 2 * time.Second
)

type relayState struct {
	mu      sync.Mutex
	waiting map[string]chan struct{}
	remote  map[string]remoteList
}

type remoteList struct {
	at  time.Time
	ids []string
}

func (g *Gateway) relay() *relayState {
	g.relayOnce.Do(func() {
		g.relays = &relayState{waiting: map[string]chan struct{}{}, remote: map[string]remoteList{}}
	})
	return g.relays
}

// remoteCrawlAgents lists the tenant's agents that speak the crawl protocol
// and are connected to another live replica (read at most every remoteTTL).
func (g *Gateway) remoteCrawlAgents(tenant string) []string {
	if g.store == nil || g.store.Pool() == nil {
		return nil
	}
	rs := g.relay()
	now := time.Now()
	rs.mu.Lock()
	if l, ok := rs.remote[tenant]; ok && now.Sub(l.at) < remoteTTL {
		rs.mu.Unlock()
		return l.ids
	}
	rs.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var ids []string
	err := db.InTenant(ctx, g.store.Pool(), tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT a.id::text FROM agents a
			WHERE a.connected AND a.retired_at IS NULL AND COALESCE(a.protocol, 0) >= $2 AND a.replica_id IS NOT NULL AND a.replica_id::text <> $1
			  AND EXISTS (SELECT 1 FROM panel_replicas r WHERE r.id = a.replica_id AND r.last_seen > now() - make_interval(secs => $3))
			ORDER BY a.id`, g.cfg.ReplicaID, int(wire.V4), fleet.LiveWindow.Seconds())
		if err != nil {
			return err
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		g.log.Warn("crawl: agents on other replicas", "tenant", tenant, "err", err)
	}
	rs.mu.Lock()
	rs.remote[tenant] = remoteList{at: now, ids: ids}
	rs.mu.Unlock()
	return ids
}

// relayTask hands t to an agent held by another replica and waits for its
// result.
func (g *Gateway) relayTask(ctx context.Context, tenant, agentID string, t wire.PageTask) (wire.PageResult, error) {
	var creds []byte
	if t.Proxy != nil {
		if c := t.Proxy.Credentials; c.Username != "" || !c.Password.IsZero() {
			b, _ := json.Marshal(relayCreds{Username: c.Username, Password: c.Password.Reveal()})
			creds = b
			defer clear(b)
		}
	}
	task, err := json.Marshal(t)
	if err != nil {
		return wire.PageResult{}, fmt.Errorf("fleet: relay: %w", err)
	}
	rs := g.relay()
	var id string
	wake := make(chan struct{}, 1)
	err = db.InTenant(ctx, g.store.Pool(), tenant, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO crawl_relay (tenant_id, agent_id, from_replica, task) VALUES (app_tenant(), $1, $2, $3) RETURNING id::text`,
			agentID, g.cfg.ReplicaID, task).Scan(&id); err != nil {
			return err
		}
		if creds != nil {
			if g.store.Vault() == nil {
				return errors.New("no vault to seal the proxy's credentials with")
			}
			if _, err := tx.Exec(ctx, `UPDATE crawl_relay SET creds = $2 WHERE id = $1`, id, g.store.Vault().Seal(creds, relayContext(id))); err != nil {
				return err
			}
		}
		rs.mu.Lock()
		rs.waiting[id] = wake
		rs.mu.Unlock()
		_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, fleet.NotifyChannel, relayPrefix+tenant+":"+id)
		return err
	})
	defer func() {
		rs.mu.Lock()
		delete(rs.waiting, id)
		rs.mu.Unlock()
		if id != "" {
			_ = db.InTenant(context.WithoutCancel(ctx), g.store.Pool(), tenant, func(tx pgx.Tx) error {
				_, err := tx.Exec(context.WithoutCancel(ctx), `DELETE FROM crawl_relay WHERE id = $1 OR created_at < now() - interval '10 minutes'`, id)
				return err
			})
		}
	}()
	if err != nil {
		return wire.PageResult{}, fmt.Errorf("fleet: relay: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(t.TimeoutMS)*time.Millisecond+20*time.Second)
	defer cancel()
	poll := time.NewTicker(time.Second) // a lost NOTIFY delays an answer by at most this
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return wire.PageResult{}, fmt.Errorf("fleet: relayed page task: %w", ctx.Err())
		case <-wake:
		case <-poll.C:
		}
		var result []byte
		var relayErr *string
		err := db.InTenant(ctx, g.store.Pool(), tenant, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT result, error FROM crawl_relay WHERE id = $1`, id).Scan(&result, &relayErr)
		})
		if err != nil {
			return wire.PageResult{}, fmt.Errorf("fleet: relay: %w", err)
		}
		if relayErr != nil {
			return wire.PageResult{}, fmt.Errorf("fleet: relayed page task: %s", *relayErr)
		}
		if result != nil {
			var r wire.PageResult
			if err := json.Unmarshal(result, &r); err != nil {
				return wire.PageResult{}, fmt.Errorf("fleet: relay: %w", err)
			}
			return r, nil
		}
	}
}

type relayCreds struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// relayNotified handles the relay's notifications; false for any other.
func (g *Gateway) relayNotified(ctx context.Context, payload string) bool {
	switch {
	case strings.HasPrefix(payload, resultPrefix):
		id := strings.TrimPrefix(payload, resultPrefix)
		rs := g.relay()
		rs.mu.Lock()
		ch := rs.waiting[id]
		rs.mu.Unlock()
		if ch != nil {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		return true
	case strings.HasPrefix(payload, relayPrefix):
		tenant, id, ok := strings.Cut(strings.TrimPrefix(payload, relayPrefix), ":")
		if ok {
			go g.serveRelay(ctx, tenant, id)
		}
		return true
	}
	return false
}

// serveRelay sends a relayed task to its agent when this replica holds it,
// and writes the answer back.
func (g *Gateway) serveRelay(ctx context.Context, tenant, id string) {
	var agentID string
	var task, creds []byte
	err := db.InTenant(ctx, g.store.Pool(), tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT agent_id::text, task, creds FROM crawl_relay WHERE id = $1 AND result IS NULL AND error IS NULL`, id).
			Scan(&agentID, &task, &creds)
	})
	if err != nil {
		return // answered already, or gone
	}
	g.mu.Lock()
	local := g.byTenant[tenant][agentID] != nil
	g.mu.Unlock()
	if !local {
		return // another replica holds it (or none: the origin times out)
	}
	var t wire.PageTask
	answer := func(result []byte, msg string) {
		err := db.InTenant(ctx, g.store.Pool(), tenant, func(tx pgx.Tx) error {
			var res, e any
			if result != nil {
				res = result
			} else {
				e = msg
			}
			if _, err := tx.Exec(ctx, `UPDATE crawl_relay SET result = $2, error = $3, answered_at = now() WHERE id = $1`, id, res, e); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, fleet.NotifyChannel, resultPrefix+id)
			return err
		})
		if err != nil {
			g.log.Warn("crawl: answer a relayed page task", "err", err)
		}
	}
	if err := json.Unmarshal(task, &t); err != nil {
		answer(nil, "malformed relayed task")
		return
	}
	if creds != nil && t.Proxy != nil {
		if g.store.Vault() == nil {
			answer(nil, "no vault on the holding replica to open the proxy's credentials")
			return
		}
		pt, err := g.store.Vault().Open(creds, relayContext(id))
		if err != nil {
			answer(nil, "the proxy's credentials do not open on the holding replica (another secret key?)")
			return
		}
		var rc relayCreds
		_ = json.Unmarshal(pt, &rc)
		clear(pt)
		t.Proxy.Credentials = wire.Credentials{Username: rc.Username, Password: wire.NewSecret(rc.Password)}
	}
	res, err := g.Crawl(ctx, tenant, agentID, t)
	if err != nil {
		answer(nil, err.Error())
		return
	}
	b, err := json.Marshal(res)
	if err != nil {
		answer(nil, "result does not encode")
		return
	}
	answer(b, "")
}
