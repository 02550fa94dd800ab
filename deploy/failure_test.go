package deploy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/notify"
)

// TestUnitFailedNotifiesTheJournalAndASignedWebhook runs what the failure
// unit runs: the real binary posts a signed notice to a webhook on a real
// socket (admitted by --allow, since loopback is refused by default).
func TestUnitFailedNotifiesTheJournalAndASignedWebhook(t *testing.T) {
	bin := testenv.Binary(t)
	const secret = "whsec_0123456789abcdef"
	var mu sync.Mutex
	var got map[string]any
	var sig string
	var raw []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		raw, sig = b, r.Header.Get("X-Fleetwright-Signature")
		_ = json.Unmarshal(raw, &got)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)

	run := func(env []string, args ...string) (int, string) {
		cmd := exec.Command(bin, append([]string{"unit-failed"}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return code, string(out)
	}
	code, out := run(nil, "--unit=fleetwright-agent.service")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "unit fleetwright-agent.service on")
	require.Contains(t, out, "failed for good")

	env := []string{"FLEET_NOTIFY_WEBHOOK=" + srv.URL + "/hook", "FLEET_NOTIFY_WEBHOOK_SECRET=" + secret}
	// Loopback is refused unless admitted: the guard is in the path.
	code, out = run(env, "--unit=fleetwright-agent.service")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "refused")
	mu.Lock()
	require.Nil(t, got)
	mu.Unlock()

	code, out = run(env, "--unit=fleetwright-agent.service", "--allow=127.0.0.1/32", "--port="+u.Port())
	require.Equal(t, 0, code, out)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, "unit_failed", got["event"])
	require.Equal(t, "fleetwright-agent.service", got["unit"])
	require.NoError(t, notify.Verify(secret, sig, raw, time.Now(), time.Minute))
	require.False(t, strings.Contains(out, secret), "the secret is not printed")

}

func TestUnitFailedRefusesAMissingUnit(t *testing.T) {
	out, err := exec.Command(testenv.Binary(t), "unit-failed").CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 2, ee.ExitCode())
	require.Contains(t, string(out), "--unit is required")
}
