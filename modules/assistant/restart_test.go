package assistant_test

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/assistant/eval"
	"github.com/fleetwright/fleetwright/modules/assistant/model/stub"
	"github.com/fleetwright/fleetwright/modules/assistant/store"
)

// The assistant is killed (SIGKILL) after its approved publish click
// reached the studio and before it recorded the outcome. After the
// restart the task is UNKNOWN and stopped for the person; nothing clicks
// again on its own, and resumed, it finishes without a second click: the
// studio shows one publication.
func TestKilledBetweenClickAndRecordPublishesOnce(t *testing.T) {
	bin := testenv.Binary(t)
	h, err := eval.StartStudio()
	require.NoError(t, err)
	defer h.Close()
	release := h.Studio.HoldPublish()
	defer release()
	m := stub.New(stub.Scripts["post"], nil)
	ms := httptest.NewServer(m.Handler())
	defer ms.Close()
	dir := testenv.SharedTempDir(t)
	args := []string{"--role=assistant", "--listen=127.0.0.1:0", "--state-dir=" + dir, "--model-url=" + ms.URL, "--model=stub",
		"--egress-allow=127.0.0.1/32", "--egress-port=" + eval.Port(h.StudioURL)}

	p := testenv.Start(t, bin, args)
	p.WaitFor(`assistant UI: http://\S+`, 90*time.Second)
	require.NoError(t, h.Connect(p.Output()))
	id, err := h.Submit(postGoal, []string{h.StudioURL + "/brief", h.StudioURL + "/drafts", h.StudioURL + "/calendar"}, nil)
	require.NoError(t, err)
	task, err := h.Wait(id, 90*time.Second, true)
	require.NoError(t, err)
	require.NoError(t, h.Decide(task.Pending[0], true))
	require.Eventually(t, func() bool { return len(h.Studio.Oracle().Publications) == 1 }, 30*time.Second, 20*time.Millisecond)
	// The click is out; its answer is held; the journal has no outcome.
	task, err = h.Task(id)
	require.NoError(t, err)
	require.Equal(t, store.StatusRunning, task.Status)
	p.Signal(syscall.SIGKILL)
	p.Wait(30 * time.Second)
	release()

	p2 := testenv.Start(t, bin, args)
	p2.WaitFor(`assistant UI: http://\S+`, 90*time.Second)
	require.NoError(t, h.Connect(p2.Output()))
	task, err = h.Task(id)
	require.NoError(t, err)
	require.Equal(t, store.StatusUnknown, task.Status)
	require.Contains(t, task.StopReason, "UNKNOWN")
	require.Contains(t, task.StopReason, "will not do it again on its own")
	require.Empty(t, task.Pending)
	// Real time, not an event: what is shown is that nothing happens — the
	// restarted process does not take the task up again on its own.
	time.Sleep(2 * time.Second)
	task, err = h.Task(id)
	require.NoError(t, err)
	require.Equal(t, store.StatusUnknown, task.Status, "it stays stopped for the person")
	_, page, err := h.Get("/tasks/" + itoa(id))
	require.NoError(t, err)
	require.Contains(t, page, "UNKNOWN")

	resp, _, err := h.Post("/tasks/"+itoa(id)+"/resume", url.Values{})
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	task, err = h.Wait(id, 60*time.Second, false, store.StatusDone)
	require.NoError(t, err)
	require.Len(t, h.Studio.Oracle().Publications, 1, "one publication, never two")
	sent := string(m.Requests()[len(m.Requests())-1])
	require.True(t, strings.Contains(sent, "UNKNOWN outcome"), "the model is told the outcome is unknown")
}
