package gateway_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/assistant"
	"github.com/fleetwright/fleetwright/modules/assistant/eval"
	"github.com/fleetwright/fleetwright/modules/assistant/model/stub"
	"github.com/fleetwright/fleetwright/modules/assistant/store"
	"github.com/fleetwright/fleetwright/modules/fleet/gateway"
)

// An enrolled assistant whose panel answers "unknown token" 19 times in a
// row and then welcomes it again is not retired; once the panel that
// enrolled it answers 20 times in a row, it retires: it stops dialling, works
// alone, and never uses that token again — not after the token is known
// again, not after a restart. The reconnect pauses run on the assistant's
// injected clock on the protocol's schedule (3 s × 2^(n−1), then 15–25
// min), which the test reads from the assistant's log and checks; the test
// moves the clock by exactly each pause, so each move releases one dial.
func TestTwentyUnknownTokenAnswersInARowRetireTheAssistant(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	var inst string
	require.NoError(t, b.db.App.QueryRow(ctx, "SELECT id::text FROM installation").Scan(&inst))
	g := gateway.New(b.store, nil, gateway.Config{ReplicaID: newUUID(t, b), InstallationID: inst, PollEvery: time.Hour},
		testenv.Logger(t).With("replica", "a"))
	var dials atomic.Int64 // every WebSocket request the panel gets
	r := chi.NewRouter()
	r.Get("/agent/ws", func(w http.ResponseWriter, req *http.Request) { dials.Add(1); g.ServeHTTP(w, req) })
	srv := httptest.NewServer(r)
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); g.Listen(lctx, b.db.AppURL) }()
	t.Cleanup(func() { g.CloseAll(); srv.Close(); cancel(); <-done })

	id, token := b.agent(t, "assistant-retire")
	dir := testenv.SharedTempDir(t) // the browser's user reaches the profile under it
	tok := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tok, []byte(token+"\n"), 0o600))
	h, err := eval.StartStudio()
	require.NoError(t, err)
	t.Cleanup(h.Close)
	ms := httptest.NewServer(stub.New(stub.Script{}, nil).Handler())
	t.Cleanup(ms.Close)
	clk := clock.NewFake(time.Now())
	logs := &testenv.SyncBuffer{}
	log := slog.New(logging.Wrap(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	cfg := assistant.Config{ModelURL: ms.URL, Model: "stub", StateDir: filepath.Join(dir, "state"), Panel: srv.URL, TokenFile: tok,
		ReportEvery: 200 * time.Millisecond, Limits: store.Limits{Steps: 10, WallTime: 5 * time.Minute, Tabs: 4}, Clock: clk,
		EgressAllow: []string{"127.0.0.1/32"}, EgressPorts: []string{eval.Port(h.StudioURL)}}
	require.NoError(t, h.StartAssistant(ctx, cfg, log))

	const unknown = "does not know the agent's token"
	answers := func() int { return strings.Count(logs.String(), unknown) }
	welcomes := func() int { return strings.Count(logs.String(), "assistant: enrolled in the panel") }
	require.Eventually(t, func() bool { return welcomes() == 1 && b.read(t, id).Connected }, 60*time.Second, 50*time.Millisecond)

	var hash []byte
	setHash := func(sql string, args ...any) {
		t.Helper()
		require.NoError(t, db.InTenant(ctx, b.db.App, b.tenant, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, sql, args...)
			return err
		}))
	}
	require.NoError(t, db.TenantRow(ctx, b.db.App, b.tenant, `SELECT token_hash FROM agents WHERE id = $1`, id).Scan(&hash))
	forget := func() { setHash(`UPDATE agents SET token_hash = sha256(token_hash) WHERE id = $1`, id) }
	know := func() { setHash(`UPDATE agents SET token_hash = $2 WHERE id = $1`, id, hash) }
	// follow moves the assistant's clock by each reconnect pause it logs —
	// exactly that pause, once it waits on it — until cond holds: a dial
	// comes only when the pause the schedule gave has passed. A pause seen
	// when cond came true is left for the next follow.
	var pauses []time.Duration     // every reconnect pause, in order
	var authPauses []time.Duration // those after an unknown-token answer
	mark := 0                      // clk.Sleeps() seen so far
	pending := time.Duration(-1)   // a pause logged and not yet passed
	follow := func(cond func() bool, what string) {
		t.Helper()
		for {
			if pending >= 0 && !cond() {
				p := pending
				require.Eventually(t, func() bool {
					if i := slices.Index(clk.Sleeps()[mark:], p); i >= 0 {
						mark += i + 1
						return true
					}
					return false
				}, 10*time.Second, time.Millisecond, "the assistant waits on the pause it logged")
				pending = -1
				clk.Advance(p)
			}
			if cond() {
				return
			}
			var lines []string
			require.Eventually(t, func() bool {
				lines = reconnects(logs.String())
				return cond() || len(lines) > len(pauses)
			}, 60*time.Second, 2*time.Millisecond, what)
			if len(lines) > len(pauses) {
				line := lines[len(pauses)]
				pending = retryIn(t, line)
				pauses = append(pauses, pending)
				if strings.Contains(line, unknown) {
					authPauses = append(authPauses, pending)
				}
			}
		}
	}
	// The protocol's schedule after n answers in a row: 3 s × 2^(n−1)
	// under 15 min, then rising within 15–25 min.
	schedule := func(got []time.Duration) {
		t.Helper()
		require.Len(t, got, 19)
		for i, w := range []time.Duration{3, 6, 12, 24, 48, 96, 192, 384, 768} {
			require.Equal(t, w*time.Second, got[i], "pause after answer %d", i+1)
		}
		for i := 9; i < len(got); i++ {
			require.GreaterOrEqual(t, got[i], 15*time.Minute, "pause after answer %d", i+1)
			require.Less(t, got[i], 25*time.Minute, "pause after answer %d", i+1)
			require.GreaterOrEqual(t, got[i], got[i-1], "pause after answer %d never decreases", i+1)
		}
	}

	// The token forgotten (the agent deleted without a tombstone), the
	// connection dropped: 19 answers, then the panel knows it again.
	forget()
	g.CloseAll()
	follow(func() bool { return answers() >= 19 && len(authPauses) == 19 }, "19 unknown-token answers")
	require.Equal(t, 19, answers())
	schedule(authPauses)
	require.Less(t, pauses[0], 2*time.Second, "a drop: the network backoff (0.5–1 s), not an authentication pause")
	know()
	follow(func() bool { return welcomes() == 2 }, "welcomed again")
	require.Eventually(t, func() bool { return b.read(t, id).Connected }, 30*time.Second, 50*time.Millisecond)
	_, home, err := h.Get("/")
	require.NoError(t, err)
	require.NotContains(t, home, "retired from the panel", "19 answers and a welcome do not retire it")

	// A welcome breaks the run: 19 more are still not 20 in a row, and the
	// schedule starts again from 3 s.
	forget()
	g.CloseAll()
	authPauses = nil
	follow(func() bool { return answers() >= 38 && len(authPauses) == 19 }, "19 more unknown-token answers")
	require.Equal(t, 38, answers())
	schedule(authPauses)
	_, home, err = h.Get("/")
	require.NoError(t, err)
	require.NotContains(t, home, "retired from the panel")

	// The 20th in a row retires it (that answer ends the loop: no
	// "reconnecting" line, and exactly one more dial).
	at38 := dials.Load()
	follow(func() bool { return strings.Contains(logs.String(), "retired from the panel; working alone") }, "retired")
	require.Equal(t, 38, answers())
	require.Equal(t, at38+1, dials.Load())
	_, home, err = h.Get("/")
	require.NoError(t, err)
	require.Contains(t, home, "the panel that enrolled it answered 20 times in a row that it does not know its token")
	require.Contains(t, home, "a new token enrols it again")

	// Never again: the panel knows the token now, time passes, and no dial
	// comes — nor after a restart with the same token file.
	know()
	before := dials.Load()
	for range 300 {
		clk.Advance(time.Second)
	}
	// Real time, not an event: what is shown is that no dial comes; one
	// would start within milliseconds of the clock's move.
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, before, dials.Load(), "a retired assistant does not dial")
	require.NoError(t, h.StopAssistant())
	require.NoError(t, h.StartAssistant(ctx, cfg, log))
	_, home, err = h.Get("/")
	require.NoError(t, err)
	require.Contains(t, home, "retired from the panel at ")
	for range 300 {
		clk.Advance(time.Second)
	}
	time.Sleep(500 * time.Millisecond) // the same: no dial comes
	require.Equal(t, before, dials.Load(), "restarted, it still does not use the retired token")
	require.False(t, b.read(t, id).Connected)

	// The person's work goes on alone.
	task, err := h.Submit("Finish at once", []string{h.StudioURL + "/brief"}, nil)
	require.NoError(t, err)
	_, err = h.Wait(task, 60*time.Second, false, store.StatusDone)
	require.NoError(t, err)
}

// reconnects are the assistant's "reconnecting" log lines, in order.
func reconnects(log string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "assistant: disconnected from the panel; reconnecting") {
			out = append(out, l)
		}
	}
	return out
}

var retryInRe = regexp.MustCompile(`retry_in=(\S+)`)

// retryIn is the pause a reconnect line names.
func retryIn(t *testing.T, line string) time.Duration {
	t.Helper()
	m := retryInRe.FindStringSubmatch(line)
	require.NotNil(t, m, line)
	d, err := time.ParseDuration(m[1])
	require.NoError(t, err, line)
	return d
}
