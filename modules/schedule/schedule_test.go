package schedule_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/factory"
	"github.com/fleetwright/fleetwright/modules/schedule"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var t0 = time.Date(2026, 6, 1, 10, 0, 30, 0, time.UTC)

type bundle struct {
	d     *testenv.Database
	clk   *clock.Fake
	s     *schedule.Scheduler
	mu    sync.Mutex
	calls []schedule.Run
}

func (b *bundle) ran() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, r := range b.calls {
		out = append(out, r.Name+"@"+r.ScheduledFor.UTC().Format("15:04")+"x"+itoa(r.Covers))
	}
	return out
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func setup(t *testing.T, handle schedule.Handler) *bundle {
	t.Helper()
	b := &bundle{d: testenv.DB(t), clk: clock.NewFake(t0)}
	b.s = schedule.New(b.d.App, schedule.Config{Clock: b.clk, Log: testenv.Logger(t), Owner: "test"})
	if handle == nil {
		handle = func(ctx context.Context, r schedule.Run) error {
			b.mu.Lock()
			b.calls = append(b.calls, r)
			b.mu.Unlock()
			return nil
		}
	}
	if err := b.s.Register(schedule.Kind{Name: "test.work", Handle: handle, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *bundle) tenant(t *testing.T, slug string) string {
	t.Helper()
	return factory.Tenant(t, b.d, slug, slug)
}

func (b *bundle) runAll(t *testing.T, tenant string) {
	t.Helper()
	list, err := b.s.List(context.Background(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range list {
		if err := b.s.RunPending(context.Background(), tenant, sc.ID); err != nil {
			t.Fatal(err)
		}
	}
}

func (b *bundle) statuses(t *testing.T, tenant, name string) string {
	t.Helper()
	ctx := context.Background()
	sc, err := b.s.Get(ctx, tenant, name)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := b.s.Runs(ctx, tenant, sc.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := len(runs) - 1; i >= 0; i-- {
		out = append(out, runs[i].ScheduledFor.UTC().Format("15:04")+" "+runs[i].Status+" x"+itoa(runs[i].Covers))
	}
	return strings.Join(out, "; ")
}

func TestCatchUpPoliciesAfterThePanelWasDown(t *testing.T) {
	b := setup(t, nil)
	ctx := context.Background()
	acme := b.tenant(t, "acme")
	for _, sp := range []schedule.Spec{
		{Name: "skipper", CatchUp: schedule.Skip},
		{Name: "once", CatchUp: schedule.One},
		{Name: "every", CatchUp: schedule.All, Cap: 3},
	} {
		sp.Kind, sp.Cron, sp.TimeZone, sp.Enabled = "test.work", "0 * * * *", "Europe/Berlin", true
		if _, err := b.s.Create(ctx, acme, "ops@example.com", sp); err != nil {
			t.Fatal(err)
		}
	}
	// The panel was down from 10:00:30 to 15:10: five hourly fire times missed.
	b.clk.Advance(5*time.Hour + 10*time.Minute)
	if err := b.s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"skipper": "15:00 skipped x5",
		"once":    "15:00 pending x5",
		"every":   "12:00 skipped x2; 13:00 pending x1; 14:00 pending x1; 15:00 pending x1",
	} {
		if got := b.statuses(t, acme, name); got != want {
			t.Errorf("%s after tick:\n got  %s\n want %s", name, got, want)
		}
	}
	// A second tick adds nothing: the stored state says those were handled.
	if err := b.s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	b.runAll(t, acme)
	got := strings.Join(b.ran(), " ")
	for _, want := range []string{"once@15:00x5", "every@13:00x1 every@14:00x1 every@15:00x1"} {
		if !strings.Contains(got, want) {
			t.Errorf("runs %q lack %q", got, want)
		}
	}
	if strings.Contains(got, "skipper") || len(b.ran()) != 4 {
		t.Errorf("runs: %q", got)
	}
	if got := b.statuses(t, acme, "every"); got != "12:00 skipped x2; 13:00 ok x1; 14:00 ok x1; 15:00 ok x1" {
		t.Errorf("every after runs: %s", got)
	}
	sc, _ := b.s.Get(ctx, acme, "skipper")
	if sc.NextRunAt == nil || !sc.NextRunAt.Equal(time.Date(2026, 6, 1, 16, 0, 0, 0, time.UTC)) || sc.LeaseOwner != "" {
		t.Errorf("skipper next run %v, lease %q", sc.NextRunAt, sc.LeaseOwner)
	}
	// On time (within the grace), a skip schedule runs.
	b.clk.Advance(51 * time.Minute) // 16:01
	if err := b.s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	b.runAll(t, acme)
	if got := b.statuses(t, acme, "skipper"); got != "15:00 skipped x5; 16:00 ok x1" {
		t.Errorf("skipper on time: %s", got)
	}
}

func TestRunsOfOneScheduleNeverOverlap(t *testing.T) {
	var running, most, calls atomic.Int32
	release := make(chan struct{})
	b := setup(t, func(ctx context.Context, r schedule.Run) error {
		n := running.Add(1)
		defer running.Add(-1)
		if n > most.Load() {
			most.Store(n)
		}
		calls.Add(1)
		<-release
		return nil
	})
	ctx := context.Background()
	sc, err := b.s.Create(ctx, "", "test", schedule.Spec{Name: "maint", Kind: "test.work", Cron: "*/5 * * * *",
		TimeZone: "UTC", CatchUp: schedule.All, Cap: 5, Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	b.clk.Advance(20 * time.Minute)
	if err := b.s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var returned atomic.Int32
	free := sync.OnceFunc(func() { close(release) })
	t.Cleanup(func() { free(); wg.Wait() })
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer returned.Add(1)
			if err := b.s.RunPending(ctx, "", sc.ID); err != nil {
				t.Error(err)
			}
		}()
	}
	// The lease holder starts its first run and the three others find the
	// lease held and return; then the holder is freed.
	require.Eventually(t, func() bool { return calls.Load() == 1 && returned.Load() == 3 }, 10*time.Second, 5*time.Millisecond,
		"one run started and the three other callers found the lease held")
	free()
	wg.Wait()
	if most.Load() != 1 || calls.Load() != 4 {
		t.Fatalf("at most %d at once (want 1), %d calls (want the 4 fire times)", most.Load(), calls.Load())
	}
}

func TestLeaseOfADeadOwnerExpiresAndItsRunIsLost(t *testing.T) {
	b := setup(t, nil)
	ctx := context.Background()
	sc, err := b.s.Create(ctx, "", "test", schedule.Spec{Name: "maint", Kind: "test.work", Cron: "0 * * * *",
		TimeZone: "UTC", CatchUp: schedule.All, Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	b.clk.Advance(2 * time.Hour)
	if err := b.s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	// Another replica took the lease and started the 11:00 run, then died.
	now := b.clk.Now()
	super, err := pgx.Connect(ctx, b.d.SuperURL)
	if err != nil {
		t.Fatal(err)
	}
	defer super.Close(ctx)
	if _, err := super.Exec(ctx, `UPDATE schedules SET lease_owner = 'replica-b/1', lease_expires_at = $2 WHERE id = $1`, sc.ID, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := super.Exec(ctx, `UPDATE schedule_runs SET status = 'running', owner = 'replica-b/1', started_at = $2
		WHERE schedule_id = $1 AND scheduled_for = '2026-06-01 11:00Z'`, sc.ID, now); err != nil {
		t.Fatal(err)
	}
	if err := b.s.RunPending(ctx, "", sc.ID); err != nil {
		t.Fatal(err)
	}
	if len(b.ran()) != 0 {
		t.Fatalf("ran while another owner's lease was live: %v", b.ran())
	}
	b.clk.Advance(61 * time.Second)
	if err := b.s.RunPending(ctx, "", sc.ID); err != nil {
		t.Fatal(err)
	}
	if got := b.statuses(t, "", "maint"); got != "11:00 lost x1; 12:00 ok x1" {
		t.Fatalf("after the lease expired: %s", got)
	}
	if open, _ := alarm.IsOpen(ctx, b.d.App, "", "schedule.lost", sc.ID); open {
		t.Fatal("a later successful run should resolve the lost-run alarm")
	}
	list, err := alarm.ListTenant(ctx, b.d.App, "", false, 0)
	if err != nil || len(list) != 1 || list[0].Kind != "schedule.lost" {
		t.Fatalf("lost-run alarm: %+v %v", list, err)
	}
}

func TestFailedRunRaisesAlarmAndLeaseIsRenewed(t *testing.T) {
	fail := true
	var b *bundle
	b = setup(t, func(ctx context.Context, r schedule.Run) error {
		// A long run: the clock moves past several lease periods while it
		// works, and the renewals keep the lease.
		for range 5 {
			// Advance only once the renewer sleeps on the clock.
			if !b.clk.BlockUntil(1, 10*time.Second) {
				return errors.New("the lease renewer never waited on the clock")
			}
			b.clk.Advance(30 * time.Second)
			want := b.clk.Now().Add(time.Minute)
			for deadline := time.Now().Add(10 * time.Second); ; {
				var exp time.Time
				err := db.InTenant(ctx, b.d.App, r.Tenant, func(tx pgx.Tx) error {
					return tx.QueryRow(ctx, `SELECT lease_expires_at FROM schedules WHERE id = $1`, r.ScheduleID).Scan(&exp)
				})
				if err != nil {
					return err
				}
				if !exp.Before(want) {
					break
				}
				if time.Now().After(deadline) {
					return errors.New("lease not renewed")
				}
				// A poll for the renewer's write; this runs in the
				// scheduled target's goroutine, where require cannot stop
				// the test, so it returns an error instead.
				time.Sleep(5 * time.Millisecond)
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if fail {
			return errors.New("target refused")
		}
		return nil
	})
	ctx := context.Background()
	acme := b.tenant(t, "acme")
	sc, err := b.s.Create(ctx, acme, "test", schedule.Spec{Name: "nightly", Kind: "test.work", Cron: "@daily",
		TimeZone: "UTC", CatchUp: schedule.One, Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	b.clk.Advance(24 * time.Hour)
	if err := b.s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.s.RunPending(ctx, acme, sc.ID); err != nil {
		t.Fatal(err)
	}
	runs, _ := b.s.Runs(ctx, acme, sc.ID, 0)
	if len(runs) != 1 || runs[0].Status != "failed" || runs[0].Error != "target refused" {
		t.Fatalf("runs: %+v", runs)
	}
	if open, _ := alarm.IsOpen(ctx, b.d.App, acme, "schedule.failed", sc.ID); !open {
		t.Fatal("a failed run must raise schedule.failed")
	}
	fail = false
	b.clk.Advance(24 * time.Hour)
	if err := b.s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.s.RunPending(ctx, acme, sc.ID); err != nil {
		t.Fatal(err)
	}
	if open, _ := alarm.IsOpen(ctx, b.d.App, acme, "schedule.failed", sc.ID); open {
		t.Fatal("a successful run must resolve schedule.failed")
	}
}

func TestBadSpecsAreRefusedClearly(t *testing.T) {
	b := setup(t, nil)
	ctx := context.Background()
	base := schedule.Spec{Name: "x", Kind: "test.work", Cron: "0 * * * *", TimeZone: "UTC", CatchUp: schedule.One}
	for _, c := range []struct {
		edit func(*schedule.Spec)
		want string
	}{
		{func(s *schedule.Spec) { s.Name = "Bad Name" }, "name"},
		{func(s *schedule.Spec) { s.Kind = "nope.kind" }, "not registered"},
		{func(s *schedule.Spec) { s.CatchUp = "" }, "catch-up policy is required"},
		{func(s *schedule.Spec) { s.CatchUp = "most" }, "not skip, one or all"},
		{func(s *schedule.Spec) { s.Cap = 5000 }, "cap"},
		{func(s *schedule.Spec) { s.TimeZone = "Nowhere/Town" }, "unknown time zone"},
	} {
		sp := base
		c.edit(&sp)
		if _, err := b.s.Create(ctx, "", "test", sp); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", sp, err, c.want)
		}
	}
	if _, err := b.s.Create(ctx, "", "test", base); err != nil {
		t.Fatal(err)
	}
	if _, err := b.s.Create(ctx, "", "test", base); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Errorf("duplicate: %v", err)
	}
	// Disabled schedules never tick; enabling counts from then on.
	b.clk.Advance(3 * time.Hour)
	if err := b.s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.statuses(t, "", "x"); got != "" {
		t.Fatalf("a disabled schedule ran: %s", got)
	}
	if err := b.s.SetEnabled(ctx, "", "x", true, "test"); err != nil {
		t.Fatal(err)
	}
	sc, _ := b.s.Get(ctx, "", "x")
	if sc.NextRunAt == nil || !sc.NextRunAt.Equal(time.Date(2026, 6, 1, 14, 0, 0, 0, time.UTC)) {
		t.Fatalf("next run after enabling at 13:00:30: %v", sc.NextRunAt)
	}
}

// Through River: the leader's periodic tick finds the due schedule and a
// run job carries it out.
func TestRiverTicksAndRunsSchedules(t *testing.T) {
	done := make(chan schedule.Run, 1)
	b := setup(t, func(ctx context.Context, r schedule.Run) error { done <- r; return nil })
	ctx := context.Background()
	b.s = schedule.New(b.d.App, schedule.Config{Clock: b.clk, Log: testenv.Logger(t), Owner: "test", Tick: 200 * time.Millisecond})
	if err := b.s.Register(schedule.Kind{Name: "test.work", Handle: func(ctx context.Context, r schedule.Run) error { done <- r; return nil }}); err != nil {
		t.Fatal(err)
	}
	workers := river.NewWorkers()
	b.s.AddWorkers(workers)
	queues := schedule.Queues()
	queues[river.QueueDefault] = river.QueueConfig{MaxWorkers: 2}
	rc, err := river.NewClient(riverpgxv5.New(b.d.App), &river.Config{Queues: queues, Workers: workers,
		PeriodicJobs: b.s.PeriodicJobs(), Logger: slog.New(slog.DiscardHandler), FetchPollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b.s.SetEnqueuer(rc)
	if _, err := b.s.Create(ctx, "", "test", schedule.Spec{Name: "maint", Kind: "test.work", Cron: "0 3 * * *",
		TimeZone: "Asia/Tokyo", CatchUp: schedule.One, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	b.clk.Advance(24 * time.Hour)
	if err := rc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Stop(context.Background()) }()
	select {
	case r := <-done:
		if want := time.Date(2026, 6, 2, 3, 0, 0, 0, time.FixedZone("JST", 9*3600)); !r.ScheduledFor.Equal(want) || r.Name != "maint" {
			t.Fatalf("run %+v, want maint for %s", r, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("River never ran the due schedule")
	}
}
