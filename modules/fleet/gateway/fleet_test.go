package gateway_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/agent"
	"github.com/fleetwright/fleetwright/modules/agent/supervisor"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/factory"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/fleet/gateway"
	fleetweb "github.com/fleetwright/fleetwright/modules/fleet/web"
	"github.com/fleetwright/fleetwright/modules/wire"
	"github.com/fleetwright/fleetwright/views"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// ops is the actor of the tests' changes.
var ops = audit.Entry{Actor: "ops@example.com"}

type bundle struct {
	db     *testenv.Database
	store  *fleet.Store
	tenant string
}

func setup(t *testing.T) *bundle {
	d := testenv.DB(t)
	key := make([]byte, vault.KeySize)
	v, err := vault.New(key)
	require.NoError(t, err)
	b := &bundle{db: d, store: fleet.NewStore(d.App, v)}
	b.tenant = factory.Tenant(t, d, "acme", "Acme Freight")
	return b
}

// replica starts one panel replica's gateway on its own HTTP server.
func (b *bundle) replica(t *testing.T, name string) (*gateway.Gateway, string) {
	var inst string
	require.NoError(t, b.db.App.QueryRow(context.Background(), "SELECT id::text FROM installation").Scan(&inst))
	g := gateway.New(b.store, nil, gateway.Config{ReplicaID: newUUID(t, b), InstallationID: inst,
		PollEvery: time.Hour}, testenv.Logger(t).With("replica", name))
	r := chi.NewRouter()
	r.Get("/agent/ws", g.ServeHTTP)
	srv := httptest.NewServer(r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Listen(ctx, b.db.AppURL) }()
	t.Cleanup(func() { g.CloseAll(); srv.Close(); cancel(); <-done })
	return g, srv.URL
}

func newUUID(t *testing.T, b *bundle) string {
	var id string
	require.NoError(t, b.db.App.QueryRow(context.Background(), "SELECT gen_random_uuid()::text").Scan(&id))
	return id
}

func (b *bundle) agent(t *testing.T, key string) (id, token string) {
	ctx := context.Background()
	acct, err := b.store.CreateAccount(ctx, b.tenant, fleet.AccountInput{Key: key, BoardURL: "http://127.0.0.1:1", Client: "acme",
		Username: "user-" + key, Password: "pw-" + key + "-Secret!", TOTPSecret: "JBSWY3DPEHPK3PXP",
		Workers: []wire.WorkerSpec{{Name: "idle-1", Kind: "idle"}}}, ops)
	require.NoError(t, err)
	id, token, err = b.store.CreateAgent(ctx, b.tenant, acct, "agent-"+key, ops)
	require.NoError(t, err)
	return id, token
}

// runAgent runs the real agent role in-process against url.
func runAgent(t *testing.T, url, token string) (stateDir string, done chan error) {
	dir := filepath.Join(t.TempDir(), "state")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	tok := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tok, []byte(token+"\n"), 0o600))
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	go func() {
		done <- agent.Run(ctx, agent.Config{PanelURL: url, TokenFile: tok, StateDir: dir, StateEvery: 200 * time.Millisecond,
			IOTimeout: 5 * time.Second, Kinds: map[string]agent.WorkerFunc{"idle": idleWorker}}, slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	})
	return dir, done
}

func idleWorker(ctx context.Context, _ *supervisor.Handle, _ agent.WorkerEnv) error {
	<-ctx.Done()
	return ctx.Err()
}

type row struct {
	Connected bool
	Paused    bool
	State     wire.State
	Offset    *float64
	Remote    string
}

func (b *bundle) read(t *testing.T, agentID string) row {
	var r row
	var st []byte
	var remote *string
	err := db.InTenant(context.Background(), b.db.App, b.tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(context.Background(), `SELECT connected, paused, state, clock_error_ms, remote_addr FROM agents WHERE id = $1`, agentID).
			Scan(&r.Connected, &r.Paused, &st, &r.Offset, &remote)
	})
	require.NoError(t, err)
	if st != nil {
		require.NoError(t, json.Unmarshal(st, &r.State))
	}
	if remote != nil {
		r.Remote = *remote
	}
	return r
}

func TestAgentConnectsReportsAndObeysACommandFromAnotherReplica(t *testing.T) {
	b := setup(t)
	_, urlA := b.replica(t, "a")
	_, _ = b.replica(t, "b")
	id, token := b.agent(t, "acct-1")
	runAgent(t, urlA, token)

	require.Eventually(t, func() bool {
		r := b.read(t, id)
		return r.Connected && len(r.State.Workers) == 1 && r.Offset != nil
	}, 15*time.Second, 50*time.Millisecond, "agent online with its worker and a measured clock offset")
	require.Equal(t, "127.0.0.1", b.read(t, id).Remote)

	// Replica b's operator pauses it: the command is persisted and the
	// NOTIFY wakes replica a, which holds the connection.
	_, err := b.store.Enqueue(context.Background(), b.tenant, id, fleet.CmdPause, fleet.CommandBody{Reason: "test"}, ops)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return b.read(t, id).State.Paused }, 10*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { return len(b.pending(t, id)) == 0 }, 5*time.Second, 50*time.Millisecond, "the command is acknowledged")

	// A dropped LISTEN connection loses notifications, never commands.
	super, err := pgx.Connect(context.Background(), b.db.SuperURL)
	require.NoError(t, err)
	defer super.Close(context.Background())
	_, err = super.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%'`)
	require.NoError(t, err)
	_, err = b.store.Enqueue(context.Background(), b.tenant, id, fleet.CmdResume, fleet.CommandBody{}, ops)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !b.read(t, id).State.Paused }, 15*time.Second, 50*time.Millisecond)
}

func (b *bundle) pending(t *testing.T, agentID string) []fleet.Command {
	cs, err := b.store.Pending(context.Background(), b.tenant, agentID)
	require.NoError(t, err)
	return cs
}

func TestDeletedAgentRetiresItselfAndLeavesNoSecret(t *testing.T) {
	b := setup(t)
	_, url := b.replica(t, "a")
	id, token := b.agent(t, "acct-2")
	dir, done := runAgent(t, url, token)
	require.Eventually(t, func() bool { return b.read(t, id).Connected }, 15*time.Second, 50*time.Millisecond)
	require.NoError(t, b.store.Retire(context.Background(), b.tenant, id, "account closed", ops))
	select {
	case err := <-done:
		require.Equal(t, agent.ExitRetired, agent.ExitCode(err), "%v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("agent did not retire")
	}
	// The tombstone answers "retired" to the old token.
	_, err := b.store.Authenticate(context.Background(), token)
	require.ErrorIs(t, err, fleet.ErrRetired)
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		data, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		for _, secret := range []string{token, "pw-acct-2-Secret!", "JBSWY3DPEHPK3PXP"} {
			require.NotContains(t, string(data), secret, e.Name())
		}
	}
}

func dial(t *testing.T, url string) *websocket.Conn {
	ws, _, err := websocket.Dial(context.Background(), strings.Replace(url, "http", "ws", 1)+"/agent/ws", nil)
	require.NoError(t, err)
	t.Cleanup(func() { ws.CloseNow() })
	return ws
}

func exchange(t *testing.T, ws *websocket.Conn, data []byte) wire.Frame {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, ws.Write(ctx, websocket.MessageText, data))
	_, reply, err := ws.Read(ctx)
	require.NoError(t, err)
	f, err := wire.Decode(reply)
	require.NoError(t, err)
	return f
}

func TestGoldenV1HelloIsWelcomedAndTooOldIsRefusedWithRange(t *testing.T) {
	b := setup(t)
	_, url := b.replica(t, "a")
	_, token := b.agent(t, "acct-3")

	golden, err := os.ReadFile("../../wire/testdata/v1/hello.json")
	require.NoError(t, err)
	// The golden hello carries a fixture token; give it this agent's.
	var env map[string]any
	require.NoError(t, json.Unmarshal(golden, &env))
	env["body"].(map[string]any)["token"] = token
	data, _ := json.Marshal(env)
	f := exchange(t, dial(t, url), data)
	w, ok := f.Message.(wire.Welcome)
	require.True(t, ok, "%#v", f.Message)
	require.Equal(t, 1, w.Version)
	// A v1 agent has no installation key to seal the credentials to: it is
	// welcomed, and keeps what it has, but gets no credentials.
	require.Empty(t, w.Credentials.Username)
	require.True(t, w.Credentials.Password.IsZero())
	require.True(t, w.Credentials.TOTPSecret.IsZero())

	env["body"].(map[string]any)["version"] = 0
	env["body"].(map[string]any)["min_version"] = 0
	data, _ = json.Marshal(env)
	f = exchange(t, dial(t, url), data)
	_, isErr := f.Message.(wire.Error)
	require.True(t, isErr, "a hello with no valid version range is a protocol error: %#v", f.Message)

	h := wire.Hello{Version: 9, MinVersion: 8, Build: "future", Host: "h", Clock: time.Now(), Token: wire.NewSecret(token)}
	data, err = wire.Encode(wire.Current, wire.Frame{Time: time.Now(), Message: h})
	require.NoError(t, err)
	f = exchange(t, dial(t, url), data)
	rj, ok := f.Message.(wire.Reject)
	require.True(t, ok, "%#v", f.Message)
	require.Equal(t, wire.RejectIncompatibleVersion, rj.Reason)
	require.Equal(t, wire.MinSupported, rj.MinVersion)
	require.Equal(t, wire.Current, rj.MaxVersion)
	require.Contains(t, rj.Message, fmt.Sprintf("panel speaks %d..%d", wire.MinSupported, wire.Current))
}

func TestUnknownTokenAndMalformedMessagesNeverCrashThePanel(t *testing.T) {
	b := setup(t)
	_, url := b.replica(t, "a")
	for _, tok := range []string{"nonsense", "fwa_" + strings.Repeat("z", 32) + "_x", "fwa_" + strings.ReplaceAll(b.tenant, "-", "") + "_forged"} {
		h := wire.Hello{Version: wire.Current, MinVersion: 1, Clock: time.Now(), Token: wire.NewSecret(tok)}
		data, err := wire.Encode(wire.Current, wire.Frame{Time: time.Now(), Message: h})
		require.NoError(t, err)
		f := exchange(t, dial(t, url), data)
		rj, ok := f.Message.(wire.Reject)
		require.True(t, ok, "%#v", f.Message)
		require.Equal(t, wire.RejectUnknownToken, rj.Reason)
		require.NotEmpty(t, rj.InstallationID)
	}
	for _, bad := range [][]byte{[]byte("{not json"), []byte(`{"type":"lease_grant","id":"x","time":"2026-01-01T00:00:00Z","body":{}}`),
		[]byte(`{"type":"hello","id":"x","time":"2026-01-01T00:00:00Z","body":{"version":"three"}}`),
		[]byte(`{"type":"state","id":"x","time":"2026-01-01T00:00:00Z","body":{"padding":"` + strings.Repeat("a", wire.MaxMessageBytes) + `"}}`)} {
		f := exchange(t, dial(t, url), bad)
		e, ok := f.Message.(wire.Error)
		require.True(t, ok, "%#v", f.Message)
		require.NotEmpty(t, e.Code)
	}
	// Still serving.
	_, token := b.agent(t, "acct-4")
	h := wire.Hello{Version: wire.Current, MinVersion: 1, Clock: time.Now(), Token: wire.NewSecret(token)}
	data, _ := wire.Encode(wire.Current, wire.Frame{Time: time.Now(), Message: h})
	_, ok := exchange(t, dial(t, url), data).Message.(wire.Welcome)
	require.True(t, ok)
}

// A captcha stops a worker; the fleet page shows the request for a person,
// with the page's screenshot, until a newer event of that worker arrives.
func TestNeedsPersonIsShownWithItsScreenshot(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	id, _ := b.agent(t, "acct-np")
	a := fleet.Agent{ID: id, Tenant: b.tenant}
	shot := base64.StdEncoding.EncodeToString([]byte("\xff\xd8\xff\xe0 tiny jpeg"))
	require.NoError(t, b.store.AddEvent(ctx, a, wire.Event{Level: wire.LevelError, Kind: "needs_person", Worker: "actor-1",
		Message: "the platform shows a captcha", At: time.Now(), Fields: map[string]string{"screenshot_jpeg_base64": shot}}))
	f, err := b.store.List(ctx, b.tenant)
	require.NoError(t, err)
	require.Len(t, f.NeedsPerson, 1)
	require.Equal(t, shot, f.NeedsPerson[0].Event.Screenshot)

	var html bytes.Buffer
	require.NoError(t, fleetweb.Page(views.Page{Title: "Fleet"}, fleetweb.PageModel{Slug: "acme", Fleet: f, CanSteer: true}).Render(ctx, &html))
	require.Contains(t, html.String(), `data-testid="needs-person-agent-acct-np"`)
	require.Contains(t, html.String(), `src="data:image/jpeg;base64,`+shot+`"`)
	require.Contains(t, html.String(), "restart actor-1")

	require.NoError(t, b.store.AddEvent(ctx, a, wire.Event{Level: wire.LevelInfo, Kind: "worker_restarted", Worker: "actor-1",
		Message: "restarted by a person", At: time.Now()}))
	f, err = b.store.List(ctx, b.tenant)
	require.NoError(t, err)
	require.Empty(t, f.NeedsPerson)
}

// TestClaimPauseReachesConnectedAgents: a pause switch (the tenant's, then
// the fleet's) reaches a connected agent within seconds through the NOTIFY
// route — the gateway never polls here — and a resume never lifts the pause
// an operator put on that one agent.
func TestClaimPauseReachesConnectedAgents(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	_, url := b.replica(t, "a")
	id, token := b.agent(t, "acct-p")
	runAgent(t, url, token)
	require.Eventually(t, func() bool { r := b.read(t, id); return r.Connected && len(r.State.Workers) == 1 },
		15*time.Second, 50*time.Millisecond)
	require.False(t, b.read(t, id).State.Paused)

	claims := claim.NewStore(b.db.App, nil)
	claims.SetAgentNotifier(fleet.PauseNotifier{})
	paused := func(want bool) {
		t.Helper()
		require.Eventually(t, func() bool { return b.read(t, id).State.Paused == want }, 10*time.Second, 50*time.Millisecond)
		require.Eventually(t, func() bool { return len(b.pending(t, id)) == 0 }, 5*time.Second, 50*time.Millisecond, "acknowledged")
	}
	require.NoError(t, claims.SetPaused(ctx, ops, b.tenant, true))
	paused(true)
	require.NoError(t, claims.SetPaused(ctx, ops, b.tenant, false))
	paused(false)
	require.NoError(t, claims.SetPaused(ctx, ops, "", true))
	paused(true)
	_, err := b.store.Enqueue(ctx, b.tenant, id, fleet.CmdPause, fleet.CommandBody{Reason: "one agent"}, ops)
	require.NoError(t, err)
	require.NoError(t, claims.SetPaused(ctx, ops, "", false))
	require.Eventually(t, func() bool { return len(b.pending(t, id)) == 0 }, 10*time.Second, 50*time.Millisecond)
	// The agent reports its state every 200 ms: a lifted pause would show.
	require.Never(t, func() bool { return !b.read(t, id).State.Paused }, time.Second, 50*time.Millisecond,
		"the operator's pause of this agent stands")
}

// Resuming one agent never lifts its tenant's pause: the agent is told the
// pause that still applies.
func TestResumeKeepsTheTenantsPause(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	_, url := b.replica(t, "a")
	id, token := b.agent(t, "acct-r")
	runAgent(t, url, token)
	require.Eventually(t, func() bool { r := b.read(t, id); return r.Connected && len(r.State.Workers) == 1 },
		15*time.Second, 50*time.Millisecond)
	_, err := b.store.Enqueue(ctx, b.tenant, id, fleet.CmdPause, fleet.CommandBody{}, ops)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return b.read(t, id).State.Paused }, 10*time.Second, 50*time.Millisecond)
	_, err = b.db.Owner.Exec(ctx, `UPDATE tenants SET paused = true WHERE id = $1`, b.tenant)
	require.NoError(t, err)
	_, err = b.store.Enqueue(ctx, b.tenant, id, fleet.CmdResume, fleet.CommandBody{}, ops)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(b.pending(t, id)) == 0 }, 10*time.Second, 50*time.Millisecond)
	// A state report after the command.
	var acked time.Time
	require.NoError(t, b.db.Owner.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&acked))
	require.Eventually(t, func() bool {
		var after bool
		err := db.InTenant(ctx, b.db.App, b.tenant, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT COALESCE(state_at > $2, false) FROM agents WHERE id = $1`, id, acked).Scan(&after)
		})
		return err == nil && after
	}, 10*time.Second, 20*time.Millisecond, "a state report after the command")
	require.True(t, b.read(t, id).State.Paused, "the tenant is still paused")
	require.False(t, b.read(t, id).Paused, "the agent's own pause is lifted")
}
