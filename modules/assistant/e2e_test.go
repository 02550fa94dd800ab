package assistant_test

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/assistant"
	"github.com/fleetwright/fleetwright/modules/assistant/eval"
	"github.com/fleetwright/fleetwright/modules/assistant/model/stub"
	"github.com/fleetwright/fleetwright/modules/assistant/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type fixture struct {
	*eval.Harness
	model *stub.Server
	log   *testenv.SyncBuffer
}

// start runs a Demo Studio, the outside server on 127.0.0.2, the scripted
// model and an assistant with Chromium, all real, over loopback.
func start(t *testing.T, sc stub.Script, mutate func(*assistant.Config)) *fixture {
	t.Helper()
	h, err := eval.StartStudio()
	require.NoError(t, err)
	t.Cleanup(h.Close)
	m := stub.New(sc, nil)
	ms := httptest.NewServer(m.Handler())
	t.Cleanup(ms.Close)
	cfg := assistant.Config{ModelURL: ms.URL, Model: "stub", StateDir: t.TempDir(),
		Limits: store.Limits{Steps: 40, Tokens: 1000000, WallTime: 5 * time.Minute, Tabs: 6}, RiskySettle: 10 * time.Second}
	if mutate != nil {
		mutate(&cfg)
	}
	f := &fixture{Harness: h, model: m, log: &testenv.SyncBuffer{}}
	log := testLogger(f.log)
	require.NoError(t, h.StartAssistant(context.Background(), cfg, log))
	return f
}

func (f *fixture) urls(paths ...string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = f.StudioURL + p
	}
	return out
}

const postGoal = "Draft the launch post from the brief in the drafts editor and publish it; check the calendar."

// The post task: three tabs (brief, drafts, calendar), a draft from the
// brief typed into the editor, and the publish click held for approval.
// Approved in the UI, the studio publishes it once, with the label.
func TestPostTaskAcrossThreeTabsPublishesOnlyAfterApproval(t *testing.T) {
	f := start(t, stub.Scripts["post"], nil)
	id, err := f.Submit(postGoal, f.urls("/brief", "/drafts", "/calendar"), nil)
	require.NoError(t, err)
	task, err := f.Wait(id, 90*time.Second, true)
	require.NoError(t, err)
	require.Equal(t, store.StatusWaiting, task.Status)
	require.ElementsMatch(t, []string{"brief", "drafts", "calendar"}, task.Tabs)
	require.Len(t, task.Pending, 1)
	require.Empty(t, f.Studio.Oracle().Publications, "held: nothing published yet")

	code, page, err := f.Get("/approvals/" + itoa(task.Pending[0]))
	require.NoError(t, err)
	require.Equal(t, 200, code)
	require.Contains(t, page, "its text says publish")
	require.Contains(t, page, f.StudioURL+"/publish")
	require.Contains(t, page, "POST")
	require.Contains(t, page, "Lumen Desk Lamp launches on 14 December")
	require.Contains(t, page, "AI-generated")
	require.Contains(t, page, "The text carries the AI-generated label.")
	code, _, err = f.Get("/approvals/" + itoa(task.Pending[0]) + "/screenshot.png")
	require.NoError(t, err)
	require.Equal(t, 200, code)

	require.NoError(t, f.Decide(task.Pending[0], true))
	task, err = f.Wait(id, 60*time.Second, false, store.StatusDone)
	require.NoError(t, err)
	pubs := f.Studio.Oracle().Publications
	require.Len(t, pubs, 1)
	require.True(t, pubs[0].Labelled)
	require.True(t, strings.HasPrefix(pubs[0].Text, stub.PostText), pubs[0].Text)
	require.Empty(t, f.Outside.Requests())
	require.Positive(t, task.Tokens)
	require.Equal(t, 11, task.Steps)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
