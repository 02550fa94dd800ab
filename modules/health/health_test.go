package health_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/cell"
	"github.com/fleetwright/fleetwright/modules/factory"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/health"
	"github.com/fleetwright/fleetwright/modules/wire"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type bundle struct {
	d      *testenv.Database
	clk    *clock.Fake
	fl     *fleet.Store
	s      *health.Sweeper
	tenant string
	agent  fleet.Agent
	mu     sync.Mutex
	cells  []cell.Status
}

var by = audit.Entry{Actor: "test"}

func setup(t *testing.T) *bundle {
	t.Helper()
	ctx := context.Background()
	b := &bundle{d: testenv.DB(t), clk: clock.NewFake(time.Now())}
	v := testenv.Vault(t)
	b.fl = fleet.NewStore(b.d.App, v)
	b.tenant = factory.Tenant(t, b.d, "acme", "Acme")
	acct := factory.Account(t, b.fl, b.tenant, fleet.AccountInput{Key: "acct-1",
		Workers: []wire.WorkerSpec{{Name: "watcher-1", Kind: "watcher"}, {Name: "actor-1", Kind: "http_actor"}}})
	id, _ := factory.Agent(t, b.fl, b.tenant, acct, "agent-1")
	b.agent = fleet.Agent{ID: id, Tenant: b.tenant, AccountID: acct, Name: "agent-1"}
	// Connected through a live replica, as the gateway records it.
	replica := "00000000-0000-4000-8000-0000000000f1"
	_, err := b.d.App.Exec(ctx, `INSERT INTO panel_replicas (id, host, listen, version, pid, started_at, last_seen)
		VALUES ($1, 'h', 'l', 'v', 1, now(), now() + interval '1 hour')`, replica)
	require.NoError(t, err)
	require.NoError(t, db.InTenant(ctx, b.d.App, b.tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE agents SET connected = true, replica_id = $2 WHERE id = $1`, id, replica)
		return err
	}))
	b.s = health.New(b.d.App, health.Config{Clock: b.clk, Log: testenv.Logger(t), Cells: func() []cell.Status {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.cells
	}})
	return b
}

func ms(d time.Duration) *int64 { v := d.Milliseconds(); return &v }

// report stores a state report as the gateway does when the agent sends one.
func (b *bundle) report(t *testing.T, started time.Time, ws ...wire.WorkerState) {
	t.Helper()
	require.NoError(t, b.fl.SaveState(context.Background(), b.agent, wire.State{Workers: ws, StartedAt: &started}))
}

// aged moves the agent's last report d into the past: the time since it
// arrived, which the sweep adds to the age the report gave.
func (b *bundle) aged(t *testing.T, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, db.InTenant(ctx, b.d.App, b.tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE agents SET state_at = state_at - make_interval(secs => $1)`, d.Seconds())
		return err
	}))
}

func (b *bundle) sweep(t *testing.T) {
	t.Helper()
	require.NoError(t, b.s.Sweep(context.Background()))
}

func (b *bundle) open(t *testing.T, tenant string) map[string]alarm.Open {
	t.Helper()
	list, err := alarm.ListTenant(context.Background(), b.d.App, tenant, true, 0)
	require.NoError(t, err)
	out := map[string]alarm.Open{}
	for _, a := range list {
		out[a.Kind+" "+a.Key] = a
	}
	return out
}

func TestHungWorkerIsAlarmedShownAndResolvedWhenItProgresses(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	started := b.clk.Now().Add(-time.Hour)
	watcher := wire.WorkerState{Name: "watcher-1", Kind: "watcher", State: wire.WorkerRunning, OldestTaskAgeMillis: ms(time.Second)}
	idle := wire.WorkerState{Name: "actor-1", Kind: "http_actor", State: wire.WorkerRunning, OldestTaskAgeMillis: ms(0)}
	b.report(t, started, watcher, idle)
	b.sweep(t)
	require.Empty(t, b.open(t, b.tenant))

	// The watcher stops progressing: its agent keeps reporting (alive), its
	// task gets older, nothing completes. Within its 2-minute threshold it
	// is not hung; past it, it is — the idle actor (no work) never is.
	b.clk.Advance(90 * time.Second)
	watcher.OldestTaskAgeMillis = ms(91 * time.Second)
	b.report(t, started, watcher, idle)
	b.aged(t, 20*time.Second)
	b.sweep(t)
	require.Empty(t, b.open(t, b.tenant), "a report on time is the newest word: its age is not extrapolated")
	b.clk.Advance(40 * time.Second)
	watcher.OldestTaskAgeMillis = ms(131 * time.Second)
	b.report(t, started, watcher, idle)
	b.sweep(t)
	open := b.open(t, b.tenant)
	require.Len(t, open, 1)
	a, ok := open["worker.hung "+b.agent.ID+"/watcher-1"]
	require.True(t, ok, "%v", open)
	require.Equal(t, alarm.Critical, a.Severity)
	require.Contains(t, a.Summary, "watcher-1 on agent-1 is hung: alive with work, nothing completed for 2 min", "a duration in words, not Go's 2m0s")
	require.Contains(t, a.Detail, "threshold for watcher workers 2 min.")
	require.Equal(t, "/t/acme/fleet", a.Link)
	f, err := b.fl.List(ctx, b.tenant)
	require.NoError(t, err)
	require.Equal(t, "hung", f.Agents[0].Health["watcher-1"])
	require.Empty(t, f.Agents[0].Health["actor-1"])

	// A later sweep refreshes the same alarm; progress resolves it.
	b.sweep(t)
	require.Len(t, b.open(t, b.tenant), 1)
	watcher.OldestTaskAgeMillis = ms(500 * time.Millisecond)
	b.report(t, started, watcher, idle)
	b.sweep(t)
	require.Empty(t, b.open(t, b.tenant))

	// An agent alive whose reports stopped: the time its report is overdue
	// counts (31 s of the report's age + 95 s past the grace > 2 m).
	watcher.OldestTaskAgeMillis = ms(31 * time.Second)
	b.report(t, started, watcher, idle)
	b.aged(t, health.ReportGrace+60*time.Second)
	b.sweep(t)
	require.Empty(t, b.open(t, b.tenant), "31 s + 60 s overdue is under 2 m")
	b.aged(t, 35*time.Second)
	b.sweep(t)
	require.Len(t, b.open(t, b.tenant), 1, "31 s + 95 s overdue is past 2 m")
	watcher.OldestTaskAgeMillis = ms(500 * time.Millisecond)
	b.report(t, started, watcher, idle)
	b.sweep(t)
	require.Empty(t, b.open(t, b.tenant))

	// An agent that is not connected is not judged hung (it is not alive).
	b.clk.Advance(10 * time.Minute)
	b.aged(t, 10*time.Minute)
	require.NoError(t, db.InTenant(ctx, b.d.App, b.tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE agents SET connected = false`)
		return err
	}))
	b.sweep(t)
	require.Empty(t, b.open(t, b.tenant))
}

func TestCrashLoopIsASpentBudgetOrThreeRestartsInFifteenMinutes(t *testing.T) {
	b := setup(t)
	started := b.clk.Now().Add(-time.Hour)
	w := wire.WorkerState{Name: "actor-1", Kind: "http_actor", State: wire.WorkerRunning, OldestTaskAgeMillis: ms(0)}
	b.report(t, started, w)
	b.sweep(t)
	// A worker failing every 70 s: never five within 300 s, so its budget
	// is never spent — but three restarts within 15 minutes are a loop.
	for i := 1; i <= 3; i++ {
		b.clk.Advance(70 * time.Second)
		w.Restarts = i
		b.report(t, started, w)
		b.sweep(t)
		if i < 3 {
			require.Empty(t, b.open(t, b.tenant), "after %d restarts", i)
		}
	}
	a, ok := b.open(t, b.tenant)["worker.crash_loop "+b.agent.ID+"/actor-1"]
	require.True(t, ok)
	require.Contains(t, a.Summary, "3 restarts within 15 min (crash loop)")
	f, err := b.fl.List(context.Background(), b.tenant)
	require.NoError(t, err)
	require.Equal(t, "crash loop", f.Agents[0].Health["actor-1"])
	// Fifteen quiet minutes later it is over.
	b.clk.Advance(16 * time.Minute)
	b.sweep(t)
	require.Empty(t, b.open(t, b.tenant))

	// A spent budget (needs_person) is a crash loop at once.
	w.State = wire.WorkerNeedsPerson
	b.report(t, started, w)
	b.sweep(t)
	a, ok = b.open(t, b.tenant)["worker.crash_loop "+b.agent.ID+"/actor-1"]
	require.True(t, ok)
	require.Contains(t, a.Summary, "restart budget spent")

	// The agent process itself: three new starts within 15 minutes (its
	// workers' counters begin again at 0 with each process).
	w = wire.WorkerState{Name: "actor-1", Kind: "http_actor", State: wire.WorkerRunning, OldestTaskAgeMillis: ms(0)}
	for i := 1; i <= 3; i++ {
		b.clk.Advance(time.Minute)
		b.report(t, b.clk.Now(), w)
		b.sweep(t)
	}
	open := b.open(t, b.tenant)
	require.Contains(t, open, "agent.crash_loop "+b.agent.ID)
	require.NotContains(t, open, "worker.crash_loop "+b.agent.ID+"/actor-1", "a running worker with a fresh counter is not looping")
	f, err = b.fl.List(context.Background(), b.tenant)
	require.NoError(t, err)
	require.True(t, f.Agents[0].CrashLoop)
}

func TestQueuesAndCellsAreWatched(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	rc, err := river.NewClient(riverpgxv5.New(b.d.App), &river.Config{})
	require.NoError(t, err)
	_, err = rc.Insert(ctx, stuckArgs{}, &river.InsertOpts{Queue: "claim_reconcile", ScheduledAt: time.Now().Add(-10 * time.Minute)})
	require.NoError(t, err)
	b.mu.Lock()
	b.cells = []cell.Status{{Name: "default"}, {Name: "eu", Failing: true, Since: time.Now(), LastError: "dial unix: connection refused"}}
	b.mu.Unlock()
	b.sweep(t)
	open := b.open(t, alarm.System)
	require.Contains(t, open, "queue.stuck claim_reconcile/available")
	require.Contains(t, open["queue.stuck claim_reconcile/available"].Summary, "has waited 10 min to start")
	require.Contains(t, open, "cell.failing eu")
	require.NotContains(t, open, "cell.failing default")

	b.mu.Lock()
	b.cells[1].Failing = false
	b.mu.Unlock()
	_, err = b.d.App.Exec(ctx, `DELETE FROM river_job`)
	require.NoError(t, err)
	b.sweep(t)
	require.Empty(t, b.open(t, alarm.System))
}

type stuckArgs struct{}

func (stuckArgs) Kind() string { return "test.stuck" }

func TestWorkerMetricsAreExported(t *testing.T) {
	b := setup(t)
	op := wire.Operation{ID: "op-1", JobKey: "LD-1", Outcome: "CONFIRMED", FinishedAt: time.Unix(1_800_000_000, 0)}
	b.report(t, time.Now(), wire.WorkerState{Name: "actor-1", Kind: "http_actor", State: wire.WorkerRunning, Restarts: 2,
		OldestTaskAgeMillis: ms(4 * time.Second), LastOperation: &op})
	pool, err := db.Open(context.Background(), b.d.AppURL, 2)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	reg.MustRegister(health.Collector(pool, testenv.Logger(t)))
	gather := func() map[string]float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		got := map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				var l []string
				for _, p := range m.GetLabel() {
					l = append(l, p.GetName()+"="+p.GetValue())
				}
				got[mf.GetName()+"{"+strings.Join(l, ",")+"}"] = m.GetGauge().GetValue()
			}
		}
		return got
	}
	check := func(got map[string]float64, up float64) {
		t.Helper()
		labels := "{agent=agent-1,kind=http_actor,tenant=acme,worker=actor-1}"
		require.InDelta(t, 4, got["fleet_worker_oldest_task_seconds"+labels], 2)
		require.Equal(t, 1_800_000_000.0, got["fleet_worker_last_operation_timestamp_seconds"+labels])
		require.Equal(t, 2.0, got["fleet_worker_restarts"+labels])
		require.Equal(t, 1.0, got["fleet_worker_running"+labels])
		for _, src := range []string{"workers", "queues"} {
			require.Equal(t, up, got["fleet_db_gauges_up{source="+src+"}"], src)
			require.InDelta(t, float64(time.Now().Unix()), got["fleet_db_gauges_last_success_timestamp_seconds{source="+src+"}"], 60, src)
		}
	}
	check(gather(), 1)
	// The database out of reach: the last figures stay, marked stale.
	pool.Close()
	check(gather(), 0)
}

func TestParseHungAfter(t *testing.T) {
	m, err := health.ParseHungAfter("watcher=3m, crawler=20m,*=7m")
	require.NoError(t, err)
	require.Equal(t, 3*time.Minute, m["watcher"])
	s := health.New(nil, health.Config{HungAfter: m})
	require.Equal(t, 3*time.Minute, s.HungAfter("watcher"))
	require.Equal(t, 5*time.Minute, s.HungAfter("actor"))
	require.Equal(t, 7*time.Minute, s.HungAfter("mystery"))
	for _, bad := range []string{"watcher", "watcher=soon", "=2m", "actor=1s"} {
		_, err := health.ParseHungAfter(bad)
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "kind=duration")
	}
}

// TestSilentAgentIsOfflineItsWorkersUnknownAndItsOutageKept: an agent whose
// connection stays open but that sends nothing (a frozen process) raises
// agent.offline once it is silent past its allowance; the fleet page shows
// its workers unknown with when and why, never running; the alarm resolves
// when it is heard from again, and both ends of the outage stay in its
// events and in the alarm's history.
func TestSilentAgentIsOfflineItsWorkersUnknownAndItsOutageKept(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	started := b.clk.Now().Add(-time.Hour)
	watcher := wire.WorkerState{Name: "watcher-1", Kind: "watcher", State: wire.WorkerRunning, OldestTaskAgeMillis: ms(0)}
	b.report(t, started, watcher)
	b.sweep(t)
	require.Empty(t, b.open(t, b.tenant))

	silence := func(d time.Duration) {
		require.NoError(t, db.InTenant(ctx, b.d.App, b.tenant, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE agents SET last_seen = now() - make_interval(secs => $1), state_at = now() - make_interval(secs => $1)`, d.Seconds())
			return err
		}))
	}
	// Within its allowance it is not offline.
	silence(80 * time.Second)
	b.sweep(t)
	require.Empty(t, b.open(t, b.tenant))

	silence(4*time.Minute + 59*time.Second)
	b.sweep(t)
	b.sweep(t)
	open := b.open(t, b.tenant)
	require.Len(t, open, 1)
	off := open["agent.offline "+b.agent.ID]
	require.Equal(t, alarm.Critical, off.Severity)
	require.Contains(t, off.Summary, "agent agent-1 is offline: not heard from since ")
	require.Contains(t, off.Summary, "(4 min 59 s ago; allowance 1 min 30 s); its workers are unknown")
	require.Contains(t, off.Detail, "its connection is still open but it has sent nothing")

	fl, err := b.fl.List(ctx, b.tenant)
	require.NoError(t, err)
	a := fl.Agents[0]
	require.Equal(t, off.Summary, a.Offline)
	state, detail := a.WorkerShown(a.State.Workers[0])
	require.Equal(t, fleet.WorkerUnknown, state, "a silent agent's worker is never shown running")
	require.Contains(t, detail, "last heard from "+a.LastSeen.UTC().Format("2006-01-02 15:04:05 UTC"))
	require.Contains(t, detail, "reporting running")
	require.Contains(t, detail, "not heard from since")
	counts, err := alarm.Counts(ctx, b.d.App)
	require.NoError(t, err)
	require.Contains(t, counts, alarm.Count{Kind: "agent.offline", Severity: alarm.Critical, Open: 1})
	kinds, err := b.fl.WorkerCounts(ctx, b.tenant)
	require.NoError(t, err)
	require.Contains(t, kinds, fleet.KindCount{Kind: "watcher", Online: 0, Total: 1}, "the overview does not count a silent agent's worker online")

	// It comes back: the alarm resolves, the outage stays in its history.
	b.report(t, started, watcher)
	b.sweep(t)
	require.Empty(t, b.open(t, b.tenant))
	fl, err = b.fl.List(ctx, b.tenant)
	require.NoError(t, err)
	a = fl.Agents[0]
	require.Empty(t, a.Offline)
	state, _ = a.WorkerShown(a.State.Workers[0])
	require.Equal(t, wire.WorkerRunning, state)
	kinds, err = b.fl.WorkerCounts(ctx, b.tenant)
	require.NoError(t, err)
	require.Contains(t, kinds, fleet.KindCount{Kind: "watcher", Online: 1, Total: 1})
	var events, msgs []string
	for _, e := range a.Events {
		events, msgs = append(events, e.Kind), append(msgs, e.Message)
	}
	require.Equal(t, []string{"agent.back", "agent.offline"}, events, "one event each way, newest first")
	// From its last word before the silence to its first after: at least
	// the 4m59s of silence, plus the test's own time, in words.
	require.Regexp(t, `^back online after (4 min 5[89] s|5 min( [0-9] s)?) without a word \(\d\d:\d\d:\d\d to \d\d:\d\d:\d\d UTC\)$`, msgs[0])
	require.Regexp(t, `^offline: not heard from since \d\d:\d\d:\d\d UTC$`, msgs[1])
	var history []string
	require.NoError(t, db.InTenant(ctx, b.d.App, b.tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT e.event FROM alarm_events e JOIN alarms a ON a.id = e.alarm_id WHERE a.kind = 'agent.offline' ORDER BY e.id`)
		if err != nil {
			return err
		}
		history, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}))
	require.Equal(t, []string{"raised", "resolved"}, history)

	// Disconnected and silent: the reason says so.
	require.NoError(t, db.InTenant(ctx, b.d.App, b.tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE agents SET connected = false`)
		return err
	}))
	silence(2 * time.Minute)
	b.sweep(t)
	off = b.open(t, b.tenant)["agent.offline "+b.agent.ID]
	require.Contains(t, off.Detail, "it disconnected and has not come back")
}
