package agent

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"

	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/platform/engine"
	"github.com/fleetwright/fleetwright/modules/platform/spec"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// agentDialect is a dialect of the sandbox board and the adapter the
// agent's HTTP actor books through on it: the built-in sandbox adapter on
// the classic one, the engine over examples/platforms/haulbridge.yaml on
// the html one (named by the worker's platform setting). The browser
// workers drive the classic pages only, so these tests run HTTP actors.
type agentDialect struct {
	name     string
	platform string
	factory  platform.Factory
}

func agentDialects(t *testing.T) []agentDialect {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "examples", "platforms", "haulbridge.yaml"))
	require.NoError(t, err)
	html, err := spec.Parse("haulbridge.yaml", src)
	require.NoError(t, err)
	return []agentDialect{
		{name: board.DialectClassic, platform: defaultAdapter},
		{name: board.DialectHTML, platform: html.Name, factory: engine.Factory(html)},
	}
}

// worker names the dialect's adapter in a worker's settings.
func (d agentDialect) worker(w wire.WorkerSpec) wire.WorkerSpec {
	if d.factory == nil {
		return w
	}
	s := map[string]string{SettingPlatform: d.platform}
	for k, v := range w.Settings {
		s[k] = v
	}
	w.Settings = s
	return w
}

// agent leaves the agent as it is: its built-in specs include the html
// dialect's, which the worker's platform setting names.
func (d agentDialect) agent(*Config) {}

func (d agentDialect) board(c *board.Config) { c.Dialect = d.name }

// On both dialects the HTTP actor signs in, books with the job's booking
// key, is refused a second lease of the same job (the fence), answers a
// look-up with proof, signs in again after a session storm and keeps
// booking, and stops for a person at a captcha, booking nothing.
func TestHTTPActorOnBothDialects(t *testing.T) {
	for _, d := range agentDialects(t) {
		t.Run(d.name, func(t *testing.T) {
			ctx := context.Background()
			s, creds := boardAccount(t, d.board, func(c *board.Config) { c.IdempotencyKeys = true })
			w := d.worker(wire.WorkerSpec{Name: "h1", Kind: KindHTTPActor, Settings: map[string]string{SettingKeepWarmMS: "300"}})
			p := newClaimPanel(t, s.URL(), creds, w)
			// The tenant books on the platform its accounts' workers name:
			// the account's row says which, and the setting is that one's.
			workers, err := json.Marshal([]wire.WorkerSpec{w})
			require.NoError(t, err)
			require.NoError(t, db.InTenant(ctx, p.db.App, p.tenant, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO accounts (tenant_id, account_key, board_url, username, client, secret_box, workers)
					VALUES ($1, 'acme-1', $2, 'acme-1', 'acme', '\x00', $3)`, p.tenant, s.URL(), workers)
				return err
			}))
			require.NoError(t, p.claims.SetHonoursIdempotency(ctx, audit.Entry{Actor: "admin"}, p.tenant, d.platform, true))
			stateDir := filepath.Join(t.TempDir(), "state")
			stop, logs := runAgentWith(t, p, stateDir, d.agent)
			p.waitConnected(t)
			p.event(t, "session_refreshed", 20*time.Second)

			loads, err := s.Publish(ctx, 4, nil)
			require.NoError(t, err)
			p.offer(t, loads[0])
			o := p.outcome(t, 20*time.Second)
			require.Equal(t, wire.ResultConfirmed, o.Result, o.Detail)
			bk := s.Bookings("acme")
			require.Len(t, bk, 1)
			require.Equal(t, loads[0].ID, bk[0].LoadID)
			require.NotEmpty(t, bk[0].IdempotencyKey, "the booking key travels with the booking")

			// Fenced: the same job offered again is not leased again.
			p.offer(t, loads[0])
			p.offer(t, loads[1])
			o = p.outcome(t, 20*time.Second)
			require.Equal(t, loads[1].ID, o.Key, "only the second load is acted on")
			require.Equal(t, wire.ResultConfirmed, o.Result, o.Detail)
			require.EqualValues(t, 2, s.Stats().BookingRequests)

			require.NoError(t, p.send(wire.Lookup{RequestID: "lk-1", Keys: []string{loads[0].ID}}))
			select {
			case lr := <-p.lookups:
				require.True(t, lr.Complete, lr.Error)
				require.Equal(t, "acme", lr.Client)
				require.Len(t, lr.Bookings, 1)
				require.Equal(t, loads[0].ID, lr.Bookings[0].Key)
			case <-time.After(10 * time.Second):
				t.Fatal("no lookup result")
			}

			// A session storm: the keep-warm check notices, the actor signs
			// in again (waiting for the next code if this step's is used)
			// and books.
			require.Equal(t, 1, s.SessionStorm(1))
			p.event(t, "session_refreshed", 60*time.Second)
			p.offer(t, loads[2])
			o = p.outcome(t, 20*time.Second)
			require.Equal(t, wire.ResultConfirmed, o.Result, o.Detail)

			// A captcha: UNKNOWN, and the worker waits for a person.
			ch := s.Chaos()
			ch.CaptchaRate = 1
			require.NoError(t, s.SetChaos(ch))
			p.offer(t, loads[3])
			o = p.outcome(t, 20*time.Second)
			require.Equal(t, wire.ResultUnknown, o.Result)
			require.Contains(t, o.Detail, "captcha")
			e := p.event(t, "needs_person", 10*time.Second)
			require.Equal(t, "captcha", e.Fields["reason"])
			require.Len(t, s.Bookings("acme"), 3, "the captcha booked nothing")
			require.Zero(t, s.Stats().DuplicateConfirmations)
			stop()
			noSecrets(t, logs, creds, stateDir)
		})
	}
}
