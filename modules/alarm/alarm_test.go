package alarm_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/factory"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestRaiseDeduplicatesAndResolveReopens(t *testing.T) {
	d := testenv.DB(t)
	ctx := context.Background()
	acme := factory.Tenant(t, d, "acme", "acme")
	a := alarm.Alarm{Kind: "worker.hung", Key: "agent-1/watcher", Tenant: acme, Severity: alarm.Critical,
		Summary: "watcher on agent-1 completed nothing for 5m", Link: "/t/acme/fleet"}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	a.At = t0
	opened, err := alarm.Raise(ctx, d.App, a)
	if err != nil || !opened {
		t.Fatalf("first raise: opened=%v err=%v", opened, err)
	}
	a.At = t0.Add(time.Minute)
	a.Summary = "watcher on agent-1 completed nothing for 6m"
	opened, err = alarm.Raise(ctx, d.App, a)
	if err != nil || opened {
		t.Fatalf("second raise must refresh, not open: opened=%v err=%v", opened, err)
	}
	list, err := alarm.ListTenant(ctx, d.App, acme, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Count != 2 || list[0].Summary != a.Summary || !list[0].RaisedAt.Equal(t0) || !list[0].LastSeenAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("one refreshed alarm expected, got %+v", list)
	}
	// The system and other tenants do not see it.
	sys, err := alarm.ListTenant(ctx, d.App, "", true, 0)
	if err != nil || len(sys) != 0 {
		t.Fatalf("system sees a tenant's alarm: %v %v", sys, err)
	}
	closed, err := alarm.Resolve(ctx, d.App, acme, "worker.hung", "agent-1/watcher", "ops@example.com")
	if err != nil || !closed {
		t.Fatalf("resolve: closed=%v err=%v", closed, err)
	}
	closed, err = alarm.Resolve(ctx, d.App, acme, "worker.hung", "agent-1/watcher", "ops@example.com")
	if err != nil || closed {
		t.Fatalf("second resolve must be a no-op: closed=%v err=%v", closed, err)
	}
	if open, _ := alarm.IsOpen(ctx, d.App, acme, "worker.hung", "agent-1/watcher"); open {
		t.Fatal("resolved alarm still open")
	}
	a.At = time.Time{}
	if opened, err = alarm.Raise(ctx, d.App, a); err != nil || !opened {
		t.Fatalf("raise after resolve must open a new alarm: opened=%v err=%v", opened, err)
	}
	all, err := alarm.ListTenant(ctx, d.App, acme, false, 0)
	if err != nil || len(all) != 2 || all[0].ResolvedAt != nil || all[1].ResolvedAt == nil || all[1].ResolvedBy != "ops@example.com" {
		t.Fatalf("open alarm first, then the resolved one: %+v %v", all, err)
	}
	var events []string
	err = db.InTenant(ctx, d.App, acme, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT event FROM alarm_events ORDER BY id`)
		if err != nil {
			return err
		}
		events, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil || strings.Join(events, ",") != "raised,resolved,raised" {
		t.Fatalf("events: %v %v", events, err)
	}
}

func TestRaiseInCallersTransactionRollsBackWithIt(t *testing.T) {
	d := testenv.DB(t)
	ctx := context.Background()
	acme := factory.Tenant(t, d, "acme", "acme")
	other := factory.Tenant(t, d, "other", "other")
	a := alarm.Alarm{Kind: "claim.conflict", Key: "job-7", Tenant: acme, Severity: alarm.Critical, Summary: "two leases acted on job-7"}
	err := db.InTenant(ctx, d.App, acme, func(tx pgx.Tx) error {
		if _, err := alarm.Raise(ctx, tx, a); err != nil {
			return err
		}
		return errRollback
	})
	if err != errRollback {
		t.Fatal(err)
	}
	if open, _ := alarm.IsOpen(ctx, d.App, acme, a.Kind, a.Key); open {
		t.Fatal("alarm survived the caller's rollback")
	}
	// A transaction of another tenant is refused, not re-scoped.
	err = db.InTenant(ctx, d.App, other, func(tx pgx.Tx) error {
		_, err := alarm.Raise(ctx, tx, a)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "scoped to tenant") {
		t.Fatalf("raise in another tenant's transaction: %v", err)
	}
}

var errRollback = &rollback{}

type rollback struct{}

func (*rollback) Error() string { return "rollback" }

func TestBadAlarmsAreRefusedClearly(t *testing.T) {
	d := testenv.DB(t)
	ctx := context.Background()
	for _, c := range []struct {
		a    alarm.Alarm
		want string
	}{
		{alarm.Alarm{Kind: "Worker Hung", Key: "k", Summary: "s"}, "dotted lower case"},
		{alarm.Alarm{Kind: "worker.hung", Summary: "s"}, "key must be"},
		{alarm.Alarm{Kind: "worker.hung", Key: "k", Summary: "s", Severity: "panic"}, "severity"},
		{alarm.Alarm{Kind: "worker.hung", Key: "k"}, "summary is required"},
	} {
		if _, err := alarm.Raise(ctx, d.App, c.a); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", c.a, err, c.want)
		}
	}
}

func TestGaugeCountsOpenAlarmsOfEveryTenant(t *testing.T) {
	d := testenv.DB(t)
	ctx := context.Background()
	acme := factory.Tenant(t, d, "acme", "acme")
	beta := factory.Tenant(t, d, "beta", "beta")
	for _, a := range []alarm.Alarm{
		{Kind: "worker.hung", Key: "a1", Tenant: acme, Severity: alarm.Critical, Summary: "x"},
		{Kind: "worker.hung", Key: "b1", Tenant: beta, Severity: alarm.Critical, Summary: "x"},
		{Kind: "cell.failing", Key: "eu", Severity: alarm.Critical, Summary: "cell eu: redis refused"},
		{Kind: "worker.hung", Key: "b2", Tenant: beta, Severity: alarm.Critical, Summary: "x"},
	} {
		if _, err := alarm.Raise(ctx, d.App, a); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := alarm.Resolve(ctx, d.App, beta, "worker.hung", "b2", "test"); err != nil {
		t.Fatal(err)
	}
	// A pool of its own, which the outage below closes.
	pool, err := db.Open(ctx, d.AppURL, 2)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(alarm.Collector(pool, testenv.Logger(t)))
	gather := func() map[string]float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				labels := ""
				for _, l := range m.GetLabel() {
					labels += l.GetName() + "=" + l.GetValue() + " "
				}
				got[mf.GetName()+" "+labels] = m.GetGauge().GetValue()
			}
		}
		return got
	}
	check := func(got map[string]float64, up float64) {
		t.Helper()
		want := map[string]float64{
			"fleet_alarms_open kind=cell.failing severity=critical ": 1,
			"fleet_alarms_open kind=worker.hung severity=critical ":  2,
			"fleet_db_gauges_up source=alarms ":                      up,
		}
		for k, v := range want {
			if g, ok := got[k]; !ok || g != v {
				t.Fatalf("gauge %s: got %v, want %v", k, got, want)
			}
		}
		if ts := got["fleet_db_gauges_last_success_timestamp_seconds source=alarms "]; time.Since(time.Unix(int64(ts), 0)) > time.Minute {
			t.Fatalf("last success %v", got)
		}
		if len(got) != len(want)+1 {
			t.Fatalf("gauge: got %v, want %v and the timestamp", got, want)
		}
	}
	check(gather(), 1)
	// The database out of reach: the figures stay (an alert on them keeps
	// firing) and say they are stale, instead of vanishing.
	pool.Close()
	check(gather(), 0)
}
