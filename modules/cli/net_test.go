package cli_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
)

// TestFetchThroughTheGuard: loopback is refused (exit 3) until allowed,
// then fetched; a redirect to a special-purpose address is refused.
func TestFetchThroughTheGuard(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/away" {
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
			return
		}
		_, _ = io.WriteString(w, "hello, fleet")
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	r := run(t, "", "fetch", srv.URL+"/", "--port="+port)
	require.Equal(t, 3, r.code, r)
	require.Contains(t, r.stdout, "refused: loopback")
	r = run(t, "", "fetch", srv.URL+"/")
	require.Equal(t, 3, r.code, r)
	require.Contains(t, r.stdout, "refused: port "+port+" is not allowed")
	r = run(t, "", "--allow=127.0.0.0/8", "fetch", srv.URL+"/", "--port="+port)
	require.Equal(t, 2, r.code, "the command's words come first: %s", r)
	r = run(t, "", "fetch", "--allow=127.0.0.0/8", srv.URL+"/", "--port="+port)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "status: 200 OK")
	require.Contains(t, r.stdout, "size: 12 bytes")
	r = run(t, "", "fetch", srv.URL+"/away", "--allow=127.0.0.0/8", "--port="+port, "--port=80")
	require.Equal(t, 3, r.code, r)
	require.Contains(t, r.stdout, "redirect: 302 → http://169.254.169.254/latest/meta-data/")
	require.Contains(t, r.stdout, "refused: link-local")
}

// TestUnitFailedTellsTheJournalAndTheSignedWebhook.
func TestUnitFailedTellsTheJournalAndTheSignedWebhook(t *testing.T) {
	r := run(t, "", "unit-failed", "--unit=fleetwright-agent.service")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stderr, "unit fleetwright-agent.service on ")
	require.Contains(t, r.stderr, "failed for good")

	got := make(chan map[string]any, 1)
	var sig string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sig = r.Header.Get("X-Fleetwright-Signature")
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		got <- body
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	args := []string{"unit-failed", "--unit=fleetwright-agent.service", "--webhook=" + srv.URL, "--allow=127.0.0.0/8", "--port=" + port}

	// No secret: the journal line is written, the webhook is not called.
	r = run(t, "", args...)
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "failed for good")
	require.Contains(t, r.stderr, "FLEET_NOTIFY_WEBHOOK_SECRET is not")

	const secret = "webhook-secret-9931"
	testenv.Secret(t, secret)
	t.Setenv("FLEET_NOTIFY_WEBHOOK_SECRET", secret)
	r = run(t, "", args...)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stderr, "webhook notified")
	require.NotContains(t, r.stderr, secret)
	body := <-got
	require.Equal(t, "unit_failed", body["event"])
	require.Equal(t, "fleetwright-agent.service", body["unit"])
	require.NotEmpty(t, sig)

	// A webhook the guard refuses (loopback not allowed) still leaves the
	// journal line, and fails.
	r = run(t, "", "unit-failed", "--unit=fleetwright-agent.service", "--webhook="+srv.URL, "--port="+port)
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "failed for good")
	require.Contains(t, r.stderr, "refused")

	// A token in the webhook's path or query is not repeated in the error.
	r = run(t, "", "unit-failed", "--unit=fleetwright-agent.service", "--webhook="+srv.URL+"/hooks/PathToken88213?token=QueryToken55107", "--port="+port)
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "refused")
	require.NotContains(t, r.stderr, "PathToken88213")
	require.NotContains(t, r.stderr, "QueryToken55107")
}

// serving runs a serving command until the test ends and returns the
// address it printed for what, and its output.
func serving(t *testing.T, what string, args ...string) (string, *testenv.SyncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errb := &testenv.SyncBuffer{}, &testenv.SyncBuffer{}
	done := make(chan int, 1)
	go func() { done <- table().Run(ctx, args, strings.NewReader(""), out, errb) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			require.Equal(t, 0, code, "stopped by its context: %s", errb.String())
		case <-time.After(10 * time.Second):
			t.Errorf("%v did not stop", args)
		}
	})
	re := regexp.MustCompile(regexp.QuoteMeta(what) + `: (http://\S+/)`)
	var addr string
	require.Eventually(t, func() bool {
		m := re.FindStringSubmatch(out.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, 10*time.Second, 10*time.Millisecond, "%v printed its address: %s %s", args, out.String(), errb.String())
	return addr, out
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

func TestAssistantModelStubAndStudioServeUntilStopped(t *testing.T) {
	base, _ := serving(t, "scripted model (ollama: /api/chat; openai: /v1)", "assistant", "model-stub", "--listen=127.0.0.1:0", "--script=injection")
	code, body := get(t, base+"api/version")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "version")

	studio, out := serving(t, "Demo Studio", "assistant", "studio", "--listen=127.0.0.1:0", "--outside=127.0.0.1:0")
	code, _ = get(t, studio)
	require.Equal(t, http.StatusOK, code)
	outside := regexp.MustCompile(`outside address \(logs every request\): (http://\S+/)`).FindStringSubmatch(out.String())
	require.NotNil(t, outside, out.String())
	get(t, outside[1]+"collect?x=1")
	require.Contains(t, out.String(), "OUTSIDE REQUEST: GET /collect?x=1", "the outside server logs every request")
}
