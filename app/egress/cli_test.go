package egress_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
)

// TestFetchCommand runs `fleetwright fetch` against a loopback site: refused
// (exit 3, with the reason) without an allowlist, fetched with one, and a
// redirect out of the allowlist is refused at its hop.
func TestFetchCommand(t *testing.T) {
	bin := testenv.Binary(t)
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/away" {
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
			return
		}
		fmt.Fprint(w, "twelve bytes")
	}))
	defer srv.Close()
	port := strconv.Itoa(srv.Listener.Addr().(*net.TCPAddr).Port)
	run := func(args ...string) (string, int) {
		out, err := exec.Command(bin, append([]string{"fetch"}, args...)...).CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return string(out), code
	}

	out, code := run(srv.URL + "/")
	require.Equal(t, 3, code, out)
	require.Contains(t, out, "refused: port "+port+" is not allowed")
	out, code = run(srv.URL+"/", "--port", port)
	require.Equal(t, 3, code, out)
	require.Contains(t, out, "refused: loopback")
	require.Zero(t, hits.Load())

	out, code = run(srv.URL+"/", "--port", port, "--allow", "127.0.0.0/8")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "status: 200 OK")
	require.Contains(t, out, "final URL: "+srv.URL+"/")
	require.Contains(t, out, "size: 12 bytes")

	out, code = run("--allow=127.0.0.1", "--port="+port+",80", srv.URL+"/away")
	require.Equal(t, 3, code, out)
	require.Contains(t, out, "redirect: 302 → http://169.254.169.254/latest/meta-data/")
	require.Contains(t, out, "refused: link-local")

	out, code = run("--allow", "10.0.0.0/33", srv.URL)
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "not a CIDR range")
	out, code = run("ftp://example.com/")
	require.Equal(t, 2, code, out)
}
