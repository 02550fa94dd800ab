package cli_test

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/app/vault"
)

var example = filepath.Join("..", "..", "examples", "crawl", "catalogue-http.yaml")

func TestCrawlValidate(t *testing.T) {
	r := run(t, "", "crawl", "validate", example)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, `ok: job "catalogue-http"`)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("version: 1\nname: x\nrender: chrome\n"), 0o600))
	r = run(t, "", "crawl", "validate", example, bad, filepath.Join(t.TempDir(), "none.yaml"))
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stdout, `ok: job "catalogue-http"`, "the good file is still checked")
	require.Contains(t, r.stderr, bad+" line 3: render: \"chrome\": use http or browser")
	require.Contains(t, r.stderr, "none.yaml: no such file")
}

// TestCrawlCommandsOnATenant walks a job's commands, its proxies and its
// captcha authorisation on the real database.
func TestCrawlCommandsOnATenant(t *testing.T) {
	b := setup(t)
	crawl := func(stdin string, args ...string) result {
		t.Helper()
		return b.run(t, stdin, append(append([]string{"crawl"}, args...), "--tenant=acme")...)
	}
	r := crawl("", "apply", example)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, `job "catalogue-http" is now at version 1`)
	r = crawl("", "apply", example)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, `job "catalogue-http" unchanged (version 1)`)
	r = crawl("", "list")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^catalogue-http\s+1\s+http\s+false\s+never`, r.stdout)

	r = crawl("", "run", "catalogue-http")
	require.Equal(t, 0, r.code, r)
	m := regexp.MustCompile(`run (\S+) of job "catalogue-http" \(version 1\) queued`).FindStringSubmatch(r.stdout)
	require.NotNil(t, m, r)
	r = crawl("", "runs", "catalogue-http")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "run "+m[1]+": queued")
	r = crawl("", "runs", "no-such-job")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, `no job named "no-such-job" in this tenant`)
	r = crawl("", "items", "catalogue-http", "--format=csv")
	require.Equal(t, 0, r.code, r)
	require.Equal(t, "key,first_seen,last_seen,changed_at,url,title,price,sku\n", r.stdout)

	r = crawl("", "pause", "catalogue-http")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, `job "catalogue-http" paused`)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM crawl_jobs WHERE name = 'catalogue-http' AND paused`))
	r = crawl("", "resume", "catalogue-http")
	require.Equal(t, 0, r.code, r)
	require.Zero(t, b.count(t, `SELECT count(*) FROM crawl_jobs WHERE name = 'catalogue-http' AND paused`))

	r = crawl("", "egress", "--allow=10.0.0.0/8:8091", "--port=8443")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "allow [10.0.0.0/8:8091], extra ports of public addresses [8443]")
	r = crawl("", "egress", "--allow=10.0.0.0/8:http")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "not a number from 1 to 65535")

	// Proxies: a pool, a proxy with a sealed password, list, remove, restore.
	r = crawl("", "proxy", "pool", "p1", "--rotation=round_robin", "--bench-after=2")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, `pool "p1": rotation round_robin, bench after 2 failures`)
	const password = "Proxy-Password-3310"
	testenv.Secret(t, password)
	r = crawl(password+"\n", "proxy", "add", "p1", "http://127.0.0.1:3128", "--username=u", "--password-stdin")
	require.Equal(t, 1, r.code, "no secret key to seal it with: %s", r)
	require.Contains(t, r.stderr, "the panel's secret key seals the password at rest")
	key := make([]byte, vault.KeySize)
	key[0] = 7
	t.Setenv("FLEET_SECRET_KEY", hex.EncodeToString(key))
	r = crawl(password+"\n", "proxy", "add", "p1", "http://127.0.0.1:3128", "--username=u", "--password-stdin")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "(password sealed)")
	require.NotContains(t, r.stdout+r.stderr, password)
	id := regexp.MustCompile(`added to pool "p1" as (\S+) `).FindStringSubmatch(r.stdout)
	require.NotNil(t, id, r)
	r = crawl("", "proxy", "list")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "pool p1  rotation round_robin")
	require.Contains(t, r.stdout, id[1])
	r = crawl("", "proxy", "restore", id[1])
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "restored: active, health reset")
	r = crawl("", "proxy", "remove", id[1])
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "proxy "+id[1]+" removed")
	r = crawl("", "proxy", "restore", id[1])
	require.Equal(t, 1, r.code, "a deleted proxy is gone: %s", r)
	require.Contains(t, r.stderr, "no such proxy")

	// Captchas: none is authorised, and no solver ships to authorise.
	r = crawl("", "captcha", "show")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "no captcha solver is authorised for this tenant")
	r = crawl("", "captcha", "authorise", "--solver=anysolver", "--endpoint=https://solver.example/", "--reference=contract 7")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "anysolver")
	r = crawl("", "captcha", "show")
	require.Contains(t, r.stdout, "no captcha solver is authorised", "a refused authorisation records nothing")
}
