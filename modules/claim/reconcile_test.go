package claim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/board/boardtest"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// boardLookuper is the test's stand-in for "any signed-in agent of the
// tenant": it looks the client's bookings up on the real sandbox board over
// HTTP with a signed-in session, page by page from the engine's cursor the
// way an agent's adapter does (two bookings a page, so the engine's walk
// over pages runs in every test with more), and reports Complete only when
// the board's answer proves the page.
type boardLookuper struct {
	c *boardtest.Client
	// anyClient answers whatever client it is asked for (an agent whose
	// account is set to the wrong client); the board's answer still names
	// the client the session really is.
	anyClient bool
}

// lookupPage is how many bookings one answer of boardLookuper carries.
const lookupPage = 2

func (l boardLookuper) Lookup(ctx context.Context, tenant string, as claim.Client, q wire.Lookup) (wire.LookupResult, error) {
	res := wire.LookupResult{RequestID: q.RequestID}
	if !l.anyClient && (as.Name != l.c.Client || strings.TrimRight(as.Board, "/") != strings.TrimRight(l.c.Base, "/")) {
		// The gateway asks only an agent of the claim's own client.
		return res, fmt.Errorf("no agent of %s (this one is client %q on %s)", as, l.c.Client, l.c.Base)
	}
	after := q.Cursor
	if after == "" {
		after = "0"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/api/bookings?after=%s&limit=%d", l.c.Base, after, lookupPage), nil)
	if err != nil {
		return res, err
	}
	resp, err := l.c.HTTP.Do(req)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	var body struct {
		SignedIn  bool   `json:"signed_in"`
		Complete  bool   `json:"complete"`
		Client    string `json:"client"`
		NextAfter *int64 `json:"next_after"`
		More      *bool  `json:"more"`
		Bookings  []struct {
			ID       int64     `json:"id"`
			LoadID   string    `json:"load_id"`
			Account  string    `json:"account"`
			BookedAt time.Time `json:"booked_at"`
		} `json:"bookings"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		res.Error = "unreadable answer"
		return res, nil
	}
	if resp.StatusCode != http.StatusOK || !body.SignedIn || body.More == nil || body.NextAfter == nil || (!*body.More && !body.Complete) {
		res.Error = fmt.Sprintf("HTTP %d, signed_in=%v", resp.StatusCode, body.SignedIn)
		return res, nil
	}
	res.Complete, res.Client = true, body.Client
	if *body.More {
		res.Next = fmt.Sprint(*body.NextAfter)
	}
	for _, b := range body.Bookings {
		if len(q.Keys) > 0 && !slices.Contains(q.Keys, b.LoadID) {
			continue
		}
		res.Bookings = append(res.Bookings, wire.Booking{Key: b.LoadID, BookingID: fmt.Sprint(b.ID), BookedAt: b.BookedAt, Account: b.Account})
	}
	return res, nil
}

type recBundle struct {
	*bundle
	reg   *prometheus.Registry
	logs  *testenv.SyncBuffer
	board *board.Server
	// client is the classic dialect's raw HTTP session (nil on the html
	// dialect); sess is the dialect's adapter session, signed in.
	client *boardtest.Client
	sess   platform.Session
	// dialect and lk: the board's dialect and the engine's look-up.
	dialect dialect
	lk      claim.Lookuper
	// sessions is how many board sessions the setup signed in.
	sessions int
	load     func() string
	h        claim.Holder
}

// book books key through the dialect's adapter, as an agent's actor does.
func (r *recBundle) book(t *testing.T, key, bookingKey string) platform.BookResult {
	t.Helper()
	return r.sess.Book(context.Background(), key, bookingKey, nil)
}

// setupReconcile is setupReconcileOn the classic dialect.
func setupReconcile(t *testing.T, boardMod ...func(*board.Config)) *recBundle {
	t.Helper()
	return setupReconcileOn(t, dialects(t)[0], boardMod...)
}

// setupReconcileOn starts a real board of the dialect with one signed-in
// account, a running River client with the engine's workers, and a grace of
// 2 s (hard timeout 1 s + board worst latency 800 ms + clock error 200 ms).
// The look-ups go two bookings a page: the classic dialect's by raw HTTP
// (boardLookuper), the html dialect's through its adapter
// (sessionLookuper).
func setupReconcileOn(t *testing.T, d dialect, boardMod ...func(*board.Config)) *recBundle {
	t.Helper()
	ctx := context.Background()
	logs := &testenv.SyncBuffer{}
	reg := prometheus.NewRegistry()
	b := setup(t, func(c *claim.Config) {
		c.Registerer = reg
		c.Log = slog.New(slog.NewTextHandler(io.MultiWriter(logs, testenvWriter{t}), nil))
		c.WatchFirst = 100 * time.Millisecond
		c.HardTimeout = time.Second
		c.BoardWorstLatency = 800 * time.Millisecond
		c.ClockErrorBound = 200 * time.Millisecond
		c.Backoff = func(int) time.Duration { return 100 * time.Millisecond }
		c.SweepEvery = time.Hour
		c.DuplicateSweepEvery = time.Hour
	})
	require.Equal(t, 2*time.Second, b.engine.Config().Grace)
	s := boardtest.Start(t, append([]func(*board.Config){func(c *board.Config) { c.Dialect = d.name }}, boardMod...)...)
	acct, err := s.CreateAccount(ctx, board.AccountSpec{Username: "acme-1", Password: "acme-password-1", Client: "acme"})
	require.NoError(t, err)
	sess := d.session(t, s.URL(), "acme-1", "acme-password-1", acct.TOTPSecret)
	var c *boardtest.Client
	if d.name == board.DialectClassic {
		// The second sign-in of the account answers with the next step's
		// code, which the board accepts (it allows one step of skew either
		// way) and which is newer than the one the session used: a code of
		// the same step would be refused as used, and the sign-in would
		// wait up to 30 s for the next.
		next := func() time.Time { return time.Now().Add(30 * time.Second) }
		c, err = boardtest.Login(ctx, s.URL(), "acme-1", "acme-password-1", acct.TOTPSecret, next)
		require.NoError(t, err)
	}
	// The tenant's one account books as acme on this board: the client
	// every look-up of its claims must come from.
	require.NoError(t, db.InTenant(ctx, b.db.App, b.tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO accounts (tenant_id, account_key, board_url, username, client, secret_box)
			VALUES ($1, 'acme-1', $2, 'acme-1', 'acme', '\x00')`, b.tenant, s.URL())
		return err
	}))
	lk := d.lookuper(c, sess, s.URL(), false)
	b.engine.SetLookuper(lk)

	workers := river.NewWorkers()
	b.engine.AddWorkers(workers)
	rc, err := river.NewClient(riverpgxv5.New(b.db.App), &river.Config{
		Queues: claim.Queues(), Workers: workers,
		FetchPollInterval: 20 * time.Millisecond, FetchCooldown: 5 * time.Millisecond,
		Logger: testenv_logger(t),
	})
	require.NoError(t, err)
	b.store.SetEnqueuer(rc)
	require.NoError(t, rc.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rc.Stop(sctx)
	})
	r := &recBundle{bundle: b, reg: reg, logs: logs, board: s, client: c, sess: sess, dialect: d, lk: lk, sessions: 1,
		h: claim.Holder{Agent: uuid(), Worker: "actor-1"}}
	if c != nil {
		r.sessions = 2
	}
	r.load = func() string {
		loads, err := s.Publish(ctx, 1, nil)
		require.NoError(t, err)
		b.job(t, b.tenant, loads[0].ID, func(j *wire.Job) { j.ExpiresAt = loads[0].ExpiresAt })
		return loads[0].ID
	}
	return r
}

type testenvWriter struct{ t *testing.T }

func (w testenvWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// metric is the value of a counter of the engine's registry (0 when absent).
func (r *recBundle) metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := r.reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// lookupBookings is the board's answer for key, as a look-up sees it.
func (r *recBundle) lookupBookings(t *testing.T, key string) []wire.Booking {
	t.Helper()
	var out []wire.Booking
	cursor := ""
	for {
		res, err := r.lk.Lookup(context.Background(), r.tenant, claim.Client{Board: r.board.URL(), Name: "acme"},
			wire.Lookup{RequestID: "t", Keys: []string{key}, Cursor: cursor})
		require.NoError(t, err)
		require.True(t, res.Complete)
		for _, b := range res.Bookings {
			if b.Key == key {
				out = append(out, b)
			}
		}
		if res.Next == "" {
			return out
		}
		cursor = res.Next
	}
}

// act starts acting on key the tenant's dispatch mode's way (assign, the
// default: the dispatcher's grant, written ACTING in one commit; race: a
// lease and the fenced act through the engine) and returns the token.
func (r *recBundle) act(t *testing.T, key string) int64 {
	t.Helper()
	ctx := context.Background()
	if r.mode(t) == claim.DispatchAssign {
		g, err := r.store.Grant(ctx, claim.GrantRequest{Job: claim.QueuedJob{Tenant: r.tenant, Cell: "default", Job: wire.Job{Key: key}},
			Holder: r.h, SendWithin: r.engine.Config().LeaseFor, HardTimeout: r.engine.Config().HardTimeout})
		require.NoError(t, err)
		return g.Token
	}
	lr := r.engine.Lease(ctx, r.tenant, r.h, wire.LeaseRequest{RequestID: "l-" + key, Worker: r.h.Worker, Key: key})
	require.True(t, lr.Granted, lr.Reason)
	ar := r.engine.Act(ctx, r.tenant, r.h, wire.ActRequest{RequestID: "a-" + key, Worker: r.h.Worker, Key: key, Token: lr.Token})
	require.True(t, ar.OK, ar.Reason)
	return lr.Token
}

func (r *recBundle) mode(t *testing.T) string {
	t.Helper()
	m, err := r.store.DispatchMode(context.Background(), r.tenant)
	require.NoError(t, err)
	return m
}

// opened is the transitions act leaves: a grant is ACTING at once.
func (r *recBundle) opened(t *testing.T) []string {
	t.Helper()
	if r.mode(t) == claim.DispatchAssign {
		return []string{"ACTING"}
	}
	return []string{"LEASED", "ACTING"}
}

// then is opened followed by more transitions.
func (r *recBundle) then(t *testing.T, more ...string) []string {
	t.Helper()
	return append(r.opened(t), more...)
}

func (r *recBundle) reportUnknown(t *testing.T, key string, token int64, detail string) {
	t.Helper()
	ack := r.engine.Outcome(context.Background(), r.tenant, r.h, wire.Outcome{RequestID: "o-" + key, Worker: r.h.Worker,
		Key: key, Token: token, Result: wire.ResultUnknown, Detail: detail}, claim.Offset{})
	require.True(t, ack.OK, ack.Reason)
}

// dbNow is the database's clock, which the reconciler's grace is counted by.
func (r *recBundle) dbNow(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, r.db.Owner.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now))
	return now
}

// lookedUpAfter waits until a reconcile attempt that started after at has
// finished: a look-up past grace has been made and its answer applied.
func (r *recBundle) lookedUpAfter(t *testing.T, at time.Time) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		err := r.db.Owner.QueryRow(context.Background(), `SELECT count(*) FROM river_job
			WHERE kind = 'claim.reconcile' AND attempted_at > $1 AND state <> 'running'`, at).Scan(&n)
		return err == nil && n > 0
	}, 30*time.Second, 20*time.Millisecond, "a look-up after %s", at)
}

func (r *recBundle) state(t *testing.T, key string) claim.State {
	t.Helper()
	c, err := r.store.Get(context.Background(), r.tenant, key)
	require.NoError(t, err)
	return c.State
}

func (r *recBundle) transitions(t *testing.T, key string) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	require.NoError(t, db.InTenant(ctx, r.db.App, r.tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT to_state FROM claim_transitions WHERE target_job_key = $1 ORDER BY id`, key)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}))
	return out
}

// TestReconcileDroppedResponseConfirms: the board booked but its answer was
// lost; the UNKNOWN is settled CONFIRMED from the board's evidence. In both
// dispatch modes.
func TestReconcileDroppedResponseConfirms(t *testing.T) {
	for _, d := range dialects(t) {
		for _, mode := range bothModes {
			t.Run(d.name+"/"+mode, func(t *testing.T) { reconcileDroppedResponse(t, d, mode) })
		}
	}
}

func reconcileDroppedResponse(t *testing.T, d dialect, mode string) {
	r := setupReconcileOn(t, d)
	ctx := context.Background()
	require.NoError(t, r.engine.SetDispatchMode(ctx, testActor, r.tenant, mode))
	key := r.load()
	token := r.act(t, key)
	calm := r.board.Chaos()
	ch := calm
	ch.DropResponseRate = 1
	require.NoError(t, r.board.SetChaos(ch))
	res := r.book(t, key, "")
	require.Equal(t, wire.ResultUnknown, res.Result, "the board dropped the response: %s", res.Detail)
	require.Contains(t, res.Detail, "no answer")
	require.NoError(t, r.board.SetChaos(calm))
	r.reportUnknown(t, key, token, "connection closed without an answer")
	require.Eventually(t, func() bool { return r.state(t, key) == claim.Confirmed }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, r.then(t, "UNKNOWN", "CONFIRMED"), r.transitions(t, key))
	c, err := r.store.Get(ctx, r.tenant, key)
	require.NoError(t, err)
	require.NotNil(t, c.ConfirmedAt, "confirmed_at comes from the board's booking")
	log, err := r.store.AuditLog(ctx, r.tenant, "claim.reconcile.confirm", 5)
	require.NoError(t, err)
	require.Len(t, log, 1)
	require.Contains(t, log[0].Detail, key, "the evidence (the board's booking) is audited")
}

// TestReconcileLateCommitWaitsForGrace: a commit that lands after the first
// look-ups (within grace) is found; the claim is never released before it.
// In both dispatch modes.
func TestReconcileLateCommitWaitsForGrace(t *testing.T) {
	for _, d := range dialects(t) {
		for _, mode := range bothModes {
			t.Run(d.name+"/"+mode, func(t *testing.T) { reconcileLateCommit(t, d, mode) })
		}
	}
}

func reconcileLateCommit(t *testing.T, d dialect, mode string) {
	r := setupReconcileOn(t, d)
	ctx := context.Background()
	require.NoError(t, r.engine.SetDispatchMode(ctx, testActor, r.tenant, mode))
	key := r.load()
	token := r.act(t, key)
	calm := r.board.Chaos()
	ch := calm
	ch.LateCommitRate, ch.LateCommitDelay = 1, board.Duration(1200*time.Millisecond)
	require.NoError(t, r.board.SetChaos(ch))
	res := r.book(t, key, "")
	require.Equal(t, wire.ResultUnknown, res.Result, res.Detail)
	require.Contains(t, res.Detail, "HTTP 504")
	require.NoError(t, r.board.SetChaos(calm))
	r.reportUnknown(t, key, token, "HTTP 504")
	// The first look-ups find nothing (the commit is still pending on the
	// board); the reconciler must wait for grace, not release.
	require.Eventually(t, func() bool { return r.state(t, key) == claim.Confirmed }, 10*time.Second, 20*time.Millisecond)
	require.NotContains(t, r.transitions(t, key), "RELEASED", "never released before the late commit")
	require.Len(t, r.board.Bookings("acme"), 1)
}

// Keys on: the release after grace is offered again, but only after a fresh
// complete look-up at the time of the re-offer (the sweep's); before it the
// lease statement refuses it.
func TestReconcileNeverSentReleasesAfterGrace(t *testing.T) {
	for _, d := range dialects(t) {
		t.Run(d.name, func(t *testing.T) { reconcileNeverSent(t, d) })
	}
}

func reconcileNeverSent(t *testing.T, d dialect) {
	r := setupReconcileOn(t, d)
	r.store.SetHonoursIdempotencyKeysForTest(true)
	ctx := context.Background()
	key := r.load()
	token := r.act(t, key)
	started := time.Now()
	// The request never reached the board (the worker's connection failed
	// before sending, but it cannot prove it): UNKNOWN.
	r.reportUnknown(t, key, token, "dial failed")
	// While UNKNOWN nobody can lease it.
	other := claim.Holder{Agent: uuid(), Worker: "actor-2"}
	lr := r.engine.Lease(ctx, r.tenant, other, wire.LeaseRequest{RequestID: "x", Worker: other.Worker, Key: key})
	require.False(t, lr.Granted)
	require.Equal(t, wire.ReasonHeld, lr.Reason)
	require.Eventually(t, func() bool { return r.state(t, key) == claim.Released }, 10*time.Second, 20*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(started), r.engine.Config().Grace-50*time.Millisecond, "not released before grace")
	c, err := r.store.Get(ctx, r.tenant, key)
	require.NoError(t, err)
	require.GreaterOrEqual(t, c.SettledAt.Sub(*c.ActStartedAt), r.engine.Config().Grace, "grace by the database clock")
	require.Equal(t, "RELEASED", c.Outcome, "keys honoured: released, not given up")
	// Not before a fresh look-up clears it.
	lr = r.engine.Lease(ctx, r.tenant, other, wire.LeaseRequest{RequestID: "y0", Worker: other.Worker, Key: key})
	require.False(t, lr.Granted)
	require.Equal(t, wire.ReasonHeld, lr.Reason)
	// The leader's sweep re-offers it after a fresh complete look-up (no cell
	// is attached here, so the offer itself goes nowhere).
	require.NoError(t, r.engine.SweepAll(ctx))
	cleared, err := r.store.AuditLog(ctx, r.tenant, "claim.reoffer.cleared", 5)
	require.NoError(t, err)
	require.Len(t, cleared, 1)
	// Only now can it be leased again, with a higher token.
	lr = r.engine.Lease(ctx, r.tenant, other, wire.LeaseRequest{RequestID: "y", Worker: other.Worker, Key: key})
	require.True(t, lr.Granted, lr.Reason)
	require.Greater(t, lr.Token, token)
	log, err := r.store.AuditLog(ctx, r.tenant, "claim.reconcile.release", 5)
	require.NoError(t, err)
	require.Len(t, log, 1)
	require.Contains(t, log[0].Detail, `"complete": true`)
}

func TestReconcileSignedOutLookupReleasesNothing(t *testing.T) {
	for _, d := range dialects(t) {
		t.Run(d.name, func(t *testing.T) { reconcileSignedOut(t, d) })
	}
}

func reconcileSignedOut(t *testing.T, d dialect) {
	r := setupReconcileOn(t, d)
	ctx := context.Background()
	key := r.load()
	token := r.act(t, key)
	require.Equal(t, r.sessions, r.board.SessionStorm(1), "the look-up session is signed out")
	r.reportUnknown(t, key, token, "timeout")
	pastGrace := r.dbNow(t).Add(r.engine.Config().Grace)
	// Well past grace, many look-ups later, the claim is still UNKNOWN.
	var attempts int
	require.Eventually(t, func() bool {
		require.NoError(t, r.db.Owner.QueryRow(ctx, `SELECT COALESCE(max(attempt), 0) FROM river_job WHERE kind = 'claim.reconcile'`).Scan(&attempts))
		return attempts >= 5
	}, 15*time.Second, 50*time.Millisecond)
	r.lookedUpAfter(t, pastGrace)
	require.Equal(t, claim.Unknown, r.state(t, key), "a signed-out answer proves nothing")
	require.Equal(t, r.then(t, "UNKNOWN"), r.transitions(t, key))
}

func TestDuplicateSweepCountsBoardEvidence(t *testing.T) {
	for _, d := range dialects(t) {
		t.Run(d.name, func(t *testing.T) { duplicateSweep(t, d) })
	}
}

func duplicateSweep(t *testing.T, d dialect) {
	r := setupReconcileOn(t, d)
	ctx := context.Background()
	key := r.load()
	token := r.act(t, key)
	res := r.book(t, key, "")
	require.Equal(t, wire.ResultConfirmed, res.Result, res.Detail)
	ack := r.engine.Outcome(ctx, r.tenant, r.h, wire.Outcome{RequestID: "o", Worker: r.h.Worker, Key: key, Token: token,
		Result: wire.ResultConfirmed}, claim.Offset{})
	require.True(t, ack.OK)
	require.NoError(t, r.engine.DuplicateSweep(ctx))
	n, _, err := r.store.DuplicateConfirmations(ctx, r.tenant)
	require.NoError(t, err)
	require.Zero(t, n, "one booking: no duplicate")
	// A second booking of the same load for the same client, injected
	// straight on the board: only the board's evidence can show it.
	_, err = r.board.InjectBooking(ctx, "acme-1", key)
	require.NoError(t, err)
	require.NoError(t, r.engine.DuplicateSweep(ctx))
	n, dups, err := r.store.DuplicateConfirmations(ctx, r.tenant)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, key, dups[0].Key)
	require.EqualValues(t, 1, r.board.Stats().DuplicateConfirmations, "agrees with the board's oracle")
}

// TestReconcilerAcceptsOnlyTheClaimsOwnClient (issue 11, item 8): the
// attempt booked as client "beta"; the only signed-in session answering is
// one of client "acme" on the same board, whose bookings hold nothing of
// the job. Taken as evidence, that "no booking" would settle the claim past
// grace; the engine refuses the answer (the board names client acme) and
// the claim stays UNKNOWN. Once its own client answers, it settles.
func TestReconcilerAcceptsOnlyTheClaimsOwnClient(t *testing.T) {
	for _, d := range dialects(t) {
		t.Run(d.name, func(t *testing.T) { reconcilerOwnClient(t, d) })
	}
}

func reconcilerOwnClient(t *testing.T, d dialect) {
	r := setupReconcileOn(t, d)
	ctx := context.Background()
	r.engine.SetLookuper(d.lookuper(r.client, r.sess, r.board.URL(), true))
	key := r.load()
	token := r.act(t, key)
	setClient := func(client string) {
		require.NoError(t, db.InTenant(ctx, r.db.App, r.tenant, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE claim_attempts SET client = $2, board_url = $3 WHERE target_job_key = $1`,
				key, client, r.board.URL())
			return err
		}))
	}
	setClient("beta")
	as, err := r.store.ClientOf(ctx, r.tenant, key)
	require.NoError(t, err)
	require.Equal(t, claim.Client{Board: strings.TrimRight(r.board.URL(), "/"), Name: "beta"}, as, "the attempt's own client")

	r.reportUnknown(t, key, token, "HTTP 504")
	r.lookedUpAfter(t, r.dbNow(t).Add(r.engine.Config().Grace))
	require.Equal(t, claim.Unknown, r.state(t, key), "another client's answer decides nothing")
	require.Contains(t, r.logs.String(), "another platform client")

	setClient("acme")
	require.Eventually(t, func() bool { return r.state(t, key) == claim.Released }, 10*time.Second, 20*time.Millisecond,
		"its own client's complete answer after grace settles it")
	c, err := r.store.Get(ctx, r.tenant, key)
	require.NoError(t, err)
	require.Equal(t, "GIVEN_UP", c.Outcome)
}
