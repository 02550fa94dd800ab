package crawl_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/crawl"
	"github.com/fleetwright/fleetwright/modules/factory"
)

// TestStore: versions kept per tenant under row-level security, unchanged
// text changes nothing, runs never overlap, items are deduplicated with a
// change hash.
func TestStore(t *testing.T) {
	ctx := context.Background()
	d := testenv.DB(t)
	var t1, t2 string
	t1 = factory.Tenant(t, d, "one", "One")
	t2 = factory.Tenant(t, d, "two", "Two")
	rc, err := river.NewClient(riverpgxv5.New(d.App), &river.Config{})
	require.NoError(t, err)
	svc := crawl.NewService(d.App, rc, nil)
	by := audit.Entry{Actor: "test"}
	src, err := os.ReadFile("../../examples/crawl/catalogue-json.yaml")
	require.NoError(t, err)

	j, changed, err := svc.Apply(ctx, t1, by, "a.yaml", src)
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, 1, j.Version)
	_, changed, err = svc.Apply(ctx, t1, by, "a.yaml", src)
	require.NoError(t, err)
	require.False(t, changed, "the same text is no new version")
	j, changed, err = svc.Apply(ctx, t1, by, "a.yaml", []byte(strings.Replace(string(src), "pages: 50", "pages: 60", 1)))
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, 2, j.Version)
	require.Equal(t, 60, j.Spec.Limits.Pages)
	vs, err := svc.Store.Versions(ctx, t1, j.ID)
	require.NoError(t, err)
	require.Len(t, vs, 2)
	require.Contains(t, vs[1].Source, "pages: 50", "every version kept")

	other, err := svc.Store.Jobs(ctx, t2)
	require.NoError(t, err)
	require.Empty(t, other, "another tenant sees no job")
	_, err = svc.Store.JobByID(ctx, t2, j.ID)
	require.ErrorIs(t, err, crawl.ErrNoJob)
	_, err = svc.QueueRun(ctx, t2, j.ID, "test", by)
	require.ErrorIs(t, err, crawl.ErrNoJob)

	run1, err := svc.QueueRun(ctx, t1, j.ID, "test", by)
	require.NoError(t, err)
	_, err = svc.QueueRun(ctx, t1, j.ID, "test", by)
	require.ErrorIs(t, err, crawl.ErrRunActive, "runs of one job never overlap")
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	end := now.Add(time.Second)
	require.NoError(t, svc.Store.FinishRun(ctx, t1, crawl.Run{ID: run1, State: "succeeded", Reason: "done", FinishedAt: &end}, nil))
	run2, err := svc.QueueRun(ctx, t1, j.ID, "test", by)
	require.NoError(t, err)

	items := map[string]map[string]any{"a": {"url": "a", "price": 1.0}, "b": {"url": "b", "price": 2.0}}
	added, ch, err := svc.Store.SaveItems(ctx, t1, j.ID, run1, items, now)
	require.NoError(t, err)
	require.Equal(t, [2]int{2, 0}, [2]int{added, ch})
	items["b"] = map[string]any{"url": "b", "price": 2.5}
	added, ch, err = svc.Store.SaveItems(ctx, t1, j.ID, run2, items, now.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, [2]int{0, 1}, [2]int{added, ch}, "b changed, a did not")
	got, total, err := svc.Store.Items(ctx, t1, j.ID, crawl.ItemFilter{})
	require.NoError(t, err)
	require.Equal(t, 2, total)
	require.Equal(t, now, got[0].FirstSeen.UTC())
	require.Equal(t, now.Add(time.Hour), got[0].LastSeen.UTC())
	require.Equal(t, now, got[0].ChangedAt.UTC(), "a unchanged since first seen")
	require.Equal(t, now.Add(time.Hour), got[1].ChangedAt.UTC())
	_, total, err = svc.Store.Items(ctx, t2, j.ID, crawl.ItemFilter{})
	require.NoError(t, err)
	require.Zero(t, total, "row-level security: another tenant reads no item")

	require.NoError(t, svc.SetPaused(ctx, t1, by, j.ID, true))
	require.NoError(t, svc.Store.FinishRun(ctx, t1, crawl.Run{ID: run2, State: "stopped", Reason: "test", FinishedAt: &end}, nil))
	_, err = svc.QueueRun(ctx, t1, j.ID, "test", by)
	require.ErrorIs(t, err, crawl.ErrPaused)

	var actions []string
	require.NoError(t, db.InTenant(ctx, d.App, t1, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT action FROM audit_log ORDER BY id`)
		if err != nil {
			return err
		}
		actions, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}))
	require.Equal(t, []string{"crawl.job.apply", "crawl.job.apply", "crawl.run.queue", "crawl.run.queue", "crawl.job.pause"}, actions)
}
