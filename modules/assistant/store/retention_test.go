package store_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/assistant/store"
)

// task records a task settled (or not) at the given time, with a read_page
// step holding page text and a screenshot, its conversation (the page text
// again, as the tool's answer), a draft and a decided approval with a
// screenshot.
func task(t *testing.T, st *store.Store, status string, at time.Time) int64 {
	t.Helper()
	ctx := context.Background()
	id, err := st.CreateTask(ctx, "book the room", []string{"http://127.0.0.1:8075/"}, "stub", store.Limits{}, at)
	require.NoError(t, err)
	require.NoError(t, st.AddStep(ctx, store.Step{TaskID: id, N: 1, Tool: "read_page", Args: "{}", Result: "Room 4 is free at 10:00, ask Dana Smith",
		Screenshot: []byte("PNG-1"), CreatedAt: at}))
	require.NoError(t, st.AddStep(ctx, store.Step{TaskID: id, N: 2, Tool: "click", Args: `{"element":3}`, Result: "clicked", CreatedAt: at}))
	require.NoError(t, st.SaveMessages(ctx, id, []string{`{"role":"user","content":"book the room"}`,
		`{"role":"tool","tool_name":"read_page","content":"Room 4 is free at 10:00, ask Dana Smith"}`}))
	require.NoError(t, st.SaveDraft(ctx, id, "note", "Dear Dana"))
	ap, err := st.AddApproval(ctx, id, `{"what":"submit"}`, []byte("PNG-A"), at)
	require.NoError(t, err)
	require.NoError(t, st.Decide(ctx, ap, "approved", nil, at))
	require.NoError(t, st.SetStatus(ctx, id, status, "", at))
	return id
}

// TestRetentionPrunesSettledTasks: screenshots go after 7 days, page text
// after 30 (in the steps and in the saved conversation), the whole task
// after 90 — only for settled tasks; a task still waiting keeps everything;
// settings change the periods and forever keeps a kind.
func TestRetentionPrunesSettledTasks(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	require.NoError(t, err)
	defer st.Close()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	week := task(t, st, store.StatusDone, now.Add(-8*day))        // past screenshots only
	month := task(t, st, store.StatusFailed, now.Add(-31*day))    // past screenshots and page text
	old := task(t, st, store.StatusStopped, now.Add(-91*day))     // past everything
	waiting := task(t, st, store.StatusWaiting, now.Add(-91*day)) // not settled
	fresh := task(t, st, store.StatusDone, now.Add(-time.Hour))

	days, err := st.Retention(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{store.RetainConversations: 90, store.RetainPageText: 30, store.RetainScreenshots: 7}, days)

	n, err := st.Prune(ctx, now)
	require.NoError(t, err)
	require.Equal(t, int64(1), n[store.RetainConversations])
	require.Equal(t, int64(2), n[store.RetainPageText]/2, "one step and one message each of two tasks: %v", n)
	require.Equal(t, int64(6), n[store.RetainScreenshots], "a step's and an approval's of three tasks: %v", n)

	shot := func(id int64) []byte {
		b, err := st.StepScreenshot(ctx, id, 1)
		require.NoError(t, err)
		return b
	}
	text := func(id int64) (step, msg string) {
		steps, err := st.Steps(ctx, id)
		require.NoError(t, err)
		msgs, err := st.Messages(ctx, id)
		require.NoError(t, err)
		var m map[string]string
		require.NoError(t, json.Unmarshal([]byte(msgs[1]), &m))
		return steps[0].Result, m["content"]
	}
	require.Nil(t, shot(week))
	s, m := text(week)
	require.Equal(t, "Room 4 is free at 10:00, ask Dana Smith", s)
	require.Equal(t, s, m)
	require.Nil(t, shot(month))
	s, m = text(month)
	require.Equal(t, store.PageTextPruned, s)
	require.Equal(t, store.PageTextPruned, m)
	steps, err := st.Steps(ctx, month)
	require.NoError(t, err)
	require.Equal(t, "clicked", steps[1].Result, "only page text goes")

	_, err = st.Task(ctx, old)
	require.ErrorIs(t, err, store.ErrNotFound)
	steps, err = st.Steps(ctx, old)
	require.NoError(t, err)
	require.Empty(t, steps)
	drafts, err := st.Drafts(ctx, old)
	require.NoError(t, err)
	require.Empty(t, drafts)

	require.Equal(t, []byte("PNG-1"), shot(waiting), "a task not settled keeps everything")
	s, _ = text(waiting)
	require.Equal(t, "Room 4 is free at 10:00, ask Dana Smith", s)
	require.Equal(t, []byte("PNG-1"), shot(fresh))

	// Idempotent; forever keeps a kind; a shorter period takes more.
	n, err = st.Prune(ctx, now)
	require.NoError(t, err)
	require.Empty(t, n)
	require.NoError(t, st.SetRetention(ctx, store.RetainScreenshots, 0, true))
	require.NoError(t, st.SetRetention(ctx, store.RetainConversations, 1, true))
	require.ErrorIs(t, st.SetRetention(ctx, "assistant_everything", 3, true), store.ErrUnknownKind)
	n, err = st.Prune(ctx, now.Add(2*day))
	require.NoError(t, err)
	require.Equal(t, int64(3), n[store.RetainConversations], "week, month and fresh: %v", n)
	require.Zero(t, n[store.RetainScreenshots])
	_, err = st.Task(ctx, waiting)
	require.NoError(t, err)
	require.NoError(t, st.SetRetention(ctx, store.RetainConversations, 0, false))
	days, err = st.Retention(ctx)
	require.NoError(t, err)
	require.Equal(t, 90, days[store.RetainConversations], "back to the default")
	require.Equal(t, 0, days[store.RetainScreenshots])
}

// TestExportAndErase: the export holds every task's rows, screenshots
// included, and names stored secrets without their sealed values; erase
// is refused while a task waits and then leaves nothing of the person.
func TestExportAndErase(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	require.NoError(t, err)
	defer st.Close()
	now := time.Now()
	done := task(t, st, store.StatusDone, now)
	waiting := task(t, st, store.StatusWaiting, now)
	require.NoError(t, st.PutSecret(ctx, store.Secret{Name: "studio-password", Sealed: []byte("SEALED-BYTES-xyz"), Origins: []string{"http://127.0.0.1:8075"}}))

	var buf bytes.Buffer
	counts, err := st.Export(ctx, &buf)
	require.NoError(t, err)
	require.Equal(t, 2, counts["tasks"])
	require.Equal(t, 4, counts["steps"])
	require.Equal(t, 4, counts["messages"])
	require.Equal(t, 1, counts["secrets"])
	require.NotContains(t, buf.String(), "SEALED-BYTES")
	tables := map[string]int{}
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	var sawShot bool
	for sc.Scan() {
		var line struct {
			Table string         `json:"table"`
			Row   map[string]any `json:"row"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line))
		tables[line.Table]++
		if line.Table == "steps" && line.Row["screenshot"] != nil {
			sawShot = true
		}
		if line.Table == "secrets" {
			require.Equal(t, "studio-password", line.Row["name"])
			require.NotContains(t, line.Row, "sealed")
		}
	}
	require.True(t, sawShot, "screenshots are exported")
	require.Equal(t, counts, tables)

	_, err = st.Erase(ctx)
	require.ErrorIs(t, err, store.ErrTaskActive)
	_, err = st.Task(ctx, done)
	require.NoError(t, err, "a refused erase deletes nothing")
	require.NoError(t, st.SetStatus(ctx, waiting, store.StatusStopped, "the person stopped it", now))
	n, err := st.Erase(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), n["tasks"])
	require.Equal(t, int64(1), n["secrets"])
	buf.Reset()
	counts, err = st.Export(ctx, &buf)
	require.NoError(t, err)
	for table, c := range counts {
		if table != "settings" {
			require.Zero(t, c, table)
		}
	}
}
