package gateway_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/agent"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/board/boardtest"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/fleet/gateway"
	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/platform/engine"
	"github.com/fleetwright/fleetwright/modules/platform/spec"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// lookupFleet is a real sandbox board, one account of client "acme" on it
// with an HTTP actor in a real agent, connected to a gateway whose claim
// engine looks bookings up through it.
type lookupFleet struct {
	*bundle
	board *board.Server
	g     *gateway.Gateway
	eng   *claim.Engine
	acme  claim.Client
}

func startLookupFleet(t *testing.T) *lookupFleet {
	t.Helper()
	return startLookupFleetOn(t, lookupDialects(t)[0])
}

// lookupDialect is a dialect of the sandbox board and the adapter the
// agent's actor books and looks up through on it.
type lookupDialect struct {
	name string
	// platform names the worker's adapter ("": the agent's built-in
	// sandbox adapter), built by factory.
	platform string
	factory  platform.Factory
}

// lookupDialects: the classic dialect through the agent's built-in
// adapter, the html one through the engine over
// examples/platforms/haulbridge.yaml.
func lookupDialects(t *testing.T) []lookupDialect {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "..", "examples", "platforms", "haulbridge.yaml"))
	require.NoError(t, err)
	html, err := spec.Parse("haulbridge.yaml", src)
	require.NoError(t, err)
	return []lookupDialect{{name: board.DialectClassic}, {name: board.DialectHTML, platform: html.Name, factory: engine.Factory(html)}}
}

func startLookupFleetOn(t *testing.T, d lookupDialect) *lookupFleet {
	t.Helper()
	b := setup(t)
	ctx := context.Background()
	brd := boardtest.Start(t, func(c *board.Config) { c.Dialect = d.name })
	acct, err := brd.CreateAccount(ctx, board.AccountSpec{Username: "acme-1", Password: "acme-password-1", Client: "acme"})
	require.NoError(t, err)
	var settings map[string]string
	if d.platform != "" {
		// The agent's built-in specs include the html dialect's.
		settings = map[string]string{agent.SettingPlatform: d.platform}
	}
	id, err := b.store.CreateAccount(ctx, b.tenant, fleet.AccountInput{Key: "acme-1", BoardURL: brd.URL(), Client: "acme",
		Username: "acme-1", Password: "acme-password-1", TOTPSecret: acct.TOTPSecret,
		Workers: []wire.WorkerSpec{{Name: "http_actor-1", Kind: agent.KindHTTPActor, Settings: settings}}}, ops)
	require.NoError(t, err)
	_, token, err := b.store.CreateAgent(ctx, b.tenant, id, "agent-acme-1", ops)
	require.NoError(t, err)
	g, url := b.replica(t, "one")
	eng, err := claim.NewEngine(claim.NewStore(b.db.App, nil), claim.Config{Log: testenv.Logger(t)})
	require.NoError(t, err)
	g.SetClaims(eng)
	eng.SetLookuper(g)

	dir := filepath.Join(t.TempDir(), "state")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	tok := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tok, []byte(token+"\n"), 0o600))
	actx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(actx, agent.Config{PanelURL: url, TokenFile: tok, StateDir: dir, StateEvery: 200 * time.Millisecond,
			IOTimeout: 5 * time.Second}, slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	})
	acme := claim.Client{Board: brd.URL(), Name: "acme"}
	// The actor has signed in once a look-up is answered complete.
	require.Eventually(t, func() bool {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		res, err := g.Lookup(lctx, b.tenant, acme, wire.Lookup{RequestID: wire.NewID(), Keys: []string{"none"}})
		return err == nil && res.Complete
	}, time.Minute, 200*time.Millisecond, "the agent's actor signs in and answers look-ups")
	return &lookupFleet{bundle: b, board: brd, g: g, eng: eng, acme: acme}
}

// TestLookupOfTenThousandBookingsIsComplete is issue 11's item 9: one client
// with 10,001 bookings on the real board (a single answer holding them
// would be about 1.2 MB, far over the codec's 64 KiB). The agent answers
// page by page, each answer under the limit, and the pages hold every
// booking exactly once; a keyed look-up finds the last booking in one
// answer; and the engine's duplicate sweep walks every page and finds the
// load booked twice at the very end of the list.
func TestLookupOfTenThousandBookingsIsComplete(t *testing.T) {
	for _, d := range lookupDialects(t) {
		t.Run(d.name, func(t *testing.T) { lookupTenThousand(t, d) })
	}
}

func lookupTenThousand(t *testing.T, d lookupDialect) {
	f := startLookupFleetOn(t, d)
	ctx := context.Background()
	loads, err := f.board.Publish(ctx, 10000, nil)
	require.NoError(t, err)
	for _, l := range loads {
		_, err := f.board.InjectBooking(ctx, "acme-1", l.ID)
		require.NoError(t, err)
	}
	// The last booking of the list books load 17 a second time.
	_, err = f.board.InjectBooking(ctx, "acme-1", loads[17].ID)
	require.NoError(t, err)
	require.Len(t, f.board.Bookings("acme"), 10001)

	seen := map[string]bool{}
	cursor, pages := "", 0
	for {
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		res, err := f.g.Lookup(lctx, f.tenant, f.acme, wire.Lookup{RequestID: wire.NewID(), Cursor: cursor})
		cancel()
		require.NoError(t, err)
		require.True(t, res.Complete, "page %d: %s", pages+1, res.Error)
		require.Equal(t, "acme", res.Client, "the platform says which client answered")
		raw, err := wire.Encode(wire.Current, wire.Frame{Time: time.Now(), Message: res})
		require.NoError(t, err)
		require.LessOrEqual(t, len(raw), wire.MaxMessageBytes)
		for _, bk := range res.Bookings {
			require.False(t, seen[bk.BookingID], "booking %s on two pages", bk.BookingID)
			seen[bk.BookingID] = true
		}
		pages++
		if res.Next == "" {
			break
		}
		cursor = res.Next
	}
	require.Len(t, seen, 10001, "every booking, each once")
	require.Greater(t, pages, 10, "the answer was paged")
	t.Logf("10,001 bookings in %d answers", pages)

	// A keyed look-up (the reconciler's) carries only what it asks for:
	// the agent walks every page of the board and answers once.
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	res, err := f.g.Lookup(lctx, f.tenant, f.acme, wire.Lookup{RequestID: wire.NewID(), Keys: []string{loads[17].ID, loads[9999].ID}})
	cancel()
	require.NoError(t, err)
	require.True(t, res.Complete, res.Error)
	require.Empty(t, res.Next)
	require.Len(t, res.Bookings, 3)

	// The duplicate sweep reads all 10,001 and finds the second booking of
	// load 17, the last of the list.
	require.NoError(t, f.eng.DuplicateSweep(ctx))
	n, dups, err := f.eng.Store().DuplicateConfirmations(ctx, f.tenant)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Len(t, dups, 1)
	require.Equal(t, loads[17].ID, dups[0].Key)
}

// A v3 agent cannot page: the panel's look-up reaches it without a cursor,
// its one answer is the whole list, and the engine asks no second page.
func TestAV3AgentAnswersALookupInOne(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	g, url := b.replica(t, "one")
	eng, err := claim.NewEngine(claim.NewStore(b.db.App, nil), claim.Config{Log: testenv.Logger(t)})
	require.NoError(t, err)
	g.SetClaims(eng)
	eng.SetLookuper(g)
	_, token := b.agent(t, "acct-v3")
	a := connectRawV(t, url, token, wire.V3)
	require.Eventually(t, func() bool { return g.ConnectedCount() == 1 }, 10*time.Second, 10*time.Millisecond)

	done := make(chan error, 1)
	go func() { done <- eng.DuplicateSweep(ctx) }()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	next := func(rctx context.Context) (wire.Lookup, []byte, bool) {
		for {
			_, raw, err := a.ws.Read(rctx)
			if err != nil {
				return wire.Lookup{}, nil, false
			}
			f, err := wire.Decode(raw)
			require.NoError(t, err)
			if l, ok := f.Message.(wire.Lookup); ok {
				return l, raw, true
			}
		}
	}
	l, raw, ok := next(rctx)
	require.True(t, ok, "the v3 agent is asked")
	require.NotContains(t, string(raw), `"cursor"`, "the first page has no cursor")
	now := time.Now()
	ans, err := wire.Encode(wire.V3, wire.Frame{Time: now, Message: wire.LookupResult{RequestID: l.RequestID, Complete: true,
		Bookings: []wire.Booking{{Key: "LD-1", BookingID: "1", BookedAt: now}, {Key: "LD-1", BookingID: "2", BookedAt: now}},
		Next:     "2", Client: "acme"}})
	require.NoError(t, err)
	require.NotContains(t, string(ans), `"next"`, "a v3 answer cannot say a page follows")
	require.NoError(t, a.ws.Write(rctx, websocket.MessageText, ans))
	require.NoError(t, <-done)
	sctx, scancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer scancel()
	_, _, again := next(sctx)
	require.False(t, again, "no second page is asked of a v3 agent")
	n, dups, err := eng.Store().DuplicateConfirmations(ctx, b.tenant)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, "LD-1", dups[0].Key)
}
