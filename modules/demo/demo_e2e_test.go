package demo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/demo"
	"github.com/fleetwright/fleetwright/modules/tenant"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestDemoRunsClaimsStopsCleanAndRestarts is issue 8's demo test: the real
// binary with --role=demo on a fresh data dir. It reads the printed sign-in
// and demo.json, signs in to the console (TOTP enrolment included), sees
// every agent online on each tenant's fleet page and the board confirm
// claims with no duplicate, stops with SIGINT leaving no process behind, and
// starts again on the same data: nothing is created twice, tokens are
// reused, the admin signs in with the password they chose and the same
// authenticator and claims go on; a third start with --reset-admin prints a new password.
// Every console link the banner prints opens its page.
func TestDemoRunsClaimsStopsCleanAndRestarts(t *testing.T) {
	bin := testenv.Binary(t)
	dir, err := os.MkdirTemp(testenv.Dir(t), "demo-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755)) // the postgres user reaches its cluster
	data := filepath.Join(dir, "var")
	args := []string{"--role=demo", "--listen=127.0.0.1:0", "--board-listen=127.0.0.1:0", "--board-rate=1", "--catalog-port=0", "--data-dir=" + data}

	t.Cleanup(func() {
		if t.Failed() {
			agentLogs(t, data)
		}
	})

	// First start: everything is created.
	p := testenv.Start(t, bin, args)
	run := follow(t, p)
	info := readInfo(t, data)
	require.Equal(t, run.console+"/", info.ConsoleURL)
	require.Equal(t, run.board+"/", info.BoardURL)
	require.GreaterOrEqual(t, len(info.BoardAdminToken), 16)
	require.Equal(t, demo.AdminEmail, info.AdminEmail)
	require.Len(t, info.Agents, len(demo.Agents))
	require.GreaterOrEqual(t, len(info.Agents), 8)
	tokens := map[string]string{}
	for _, a := range demo.Agents {
		fi, err := os.Stat(demo.TokenFile(data, a))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "token file of %s", a.Name())
		b, err := os.ReadFile(demo.TokenFile(data, a))
		require.NoError(t, err)
		tokens[a.Name()] = strings.TrimSpace(string(b))
	}

	cl, secret := signIn(t, run.console, run.password)
	// Every link the banner prints opens the page it names.
	for _, l := range run.links {
		res, _ := do(t, cl, "GET", l, nil)
		require.Equal(t, http.StatusOK, res.StatusCode, "printed link %s", l)
	}
	require.GreaterOrEqual(t, len(run.links), 4)
	fleetOnline(t, cl, run.console)
	first := claimsConfirmed(t, run.board, info.BoardAdminToken, 0)
	panelConfirmed(t, data)
	crawlCaught(t, bin, data, cl, run.console, info)
	crash(t, data, cl, run.console)
	heal(t, data, run.console)

	// The one-time password is printed once and logged nowhere; no token
	// reaches the output.
	require.Equal(t, 1, strings.Count(p.Output(), run.password), "the password appears in the banner only")
	for name, tok := range tokens {
		require.NotContains(t, p.Output(), tok, "token of %s", name)
	}

	legacyModes(t, data)
	stop(t, p, data)

	// Second start on the same data: reused, not created again; the admin
	// keeps their password and authenticator (no new one-time password).
	p = testenv.Start(t, bin, args)
	run2 := follow(t, p)
	require.Empty(t, run2.password, "a later start prints no one-time password")
	require.NotContains(t, p.Output(), "one-time password")
	require.NotContains(t, p.Output(), "tenant created", "tenants are reused")
	for _, a := range demo.Agents {
		b, err := os.ReadFile(demo.TokenFile(data, a))
		require.NoError(t, err)
		require.Equal(t, tokens[a.Name()], strings.TrimSpace(string(b)), "the token file of %s is reused", a.Name())
	}
	require.Equal(t, map[string]string{"acme": "assign", "delta": "race", "north": "assign"}, dispatchModes(t, data),
		"a demo tenant whose mode was never chosen is moved to assign; one an admin set to race keeps it")
	require.Contains(t, p.Output(), "tenant moved to assign dispatch")
	info2 := readInfo(t, data)
	require.Equal(t, info.BoardAdminToken, info2.BoardAdminToken, "the board keeps its admin token")
	cl = signInEnrolled(t, run2.console, ownPassword, secret)
	fleetOnline(t, cl, run2.console)
	claimsConfirmed(t, run2.board, info2.BoardAdminToken, first)
	stop(t, p, data)

	// Third start with --reset-admin: a new one-time password, the old one
	// refused, and enrolment again at the next sign-in.
	p = testenv.Start(t, bin, append(args, "--reset-admin"))
	run3 := follow(t, p)
	require.NotEmpty(t, run3.password)
	require.NotEqual(t, run.password, run3.password)
	for _, old := range []string{run.password, ownPassword} {
		res, _ := do(t, browserless(), "POST", run3.console+"/signin", url.Values{"email": {demo.AdminEmail}, "password": {old}})
		require.Equal(t, http.StatusUnauthorized, res.StatusCode, "the reset password no longer works")
	}
	signIn(t, run3.console, run3.password)
	stop(t, p, data)
}

// crawlCaught runs the demo's crawl job through the CLI: every catalogue
// item once; after the layout switch the next run finds nothing and the
// console shows the zero-result alarm with its trace, marked on the chart.
func crawlCaught(t *testing.T, bin, data string, cl *http.Client, console string, info demo.Info) {
	t.Helper()
	run := func() string {
		out, err := exec.Command(bin, "crawl", "run", demo.CrawlJob, "--tenant", demo.CrawlTenant, "--data-dir", data, "--wait", "--timeout", "3m").CombinedOutput()
		require.NoError(t, err, string(out))
		return string(out)
	}
	require.Len(t, info.CatalogURLs, 3)
	require.Contains(t, run(), "items 900")
	req, err := http.NewRequest("POST", info.CatalogURLs[0]+"/_catalog/control?layout=2", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+info.BoardAdminToken)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, run(), "items 0 (new 0, changed 0)")

	_, body := do(t, cl, "GET", console+"/t/"+demo.CrawlTenant+"/crawl", nil)
	m := regexp.MustCompile(`/t/acme/crawl/jobs/[0-9a-f-]{36}`).FindString(body)
	require.NotEmpty(t, m, "the crawl page lists the demo's job")
	res, body = do(t, cl, "GET", console+m, nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="alarm-crawl.zero_results"`)
	require.Contains(t, body, "Zero-result anomaly in crawl catalogue-http — selector may have changed · Trace saved")
	require.Equal(t, 1, strings.Count(body, `data-testid="alarm-mark"`))
	tr := regexp.MustCompile(`/t/acme/crawl/traces/\d+`).FindString(body)
	require.NotEmpty(t, tr)
	res, body = do(t, cl, "GET", console+tr, nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, "pager-next", "the trace's body snapshot shows the new layout")
}

type started struct {
	console, board, password string
	// links are the console pages the banner names.
	links []string
}

var bannerLinkRe = regexp.MustCompile(`(?m)^  (?:Console|Claims|Alarms|Crawl):.*$`)
var urlRe = regexp.MustCompile(`http://127\.0\.0\.1:\d+/\S*`)

// follow waits for the banner and reads the URLs, the password (only on
// the start that sets one) and the console links from it.
func follow(t *testing.T, p *testenv.Proc) started {
	t.Helper()
	var s started
	s.console = p.WaitFor(`Console:\s+(http://127\.0\.0\.1:\d+)/`, 2*time.Minute)
	s.board = p.WaitFor(`Board:\s+(http://127\.0\.0\.1:\d+)/`, time.Second)
	p.WaitFor(`(Ctrl-C) stops everything`, 10*time.Second)
	if m := regexp.MustCompile(`one-time password: (\S+)`).FindStringSubmatch(p.Output()); m != nil {
		s.password = m[1]
	}
	for _, line := range bannerLinkRe.FindAllString(p.Output(), -1) {
		for _, u := range urlRe.FindAllString(line, -1) {
			if strings.HasPrefix(u, s.console) {
				s.links = append(s.links, u)
			}
		}
	}
	return s
}

func readInfo(t *testing.T, data string) demo.Info {
	t.Helper()
	fi, err := os.Stat(demo.InfoFile(data))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "demo.json is readable by its owner only")
	b, err := os.ReadFile(demo.InfoFile(data))
	require.NoError(t, err)
	var info demo.Info
	require.NoError(t, json.Unmarshal(b, &info))
	return info
}

// browserless is an HTTP client with a cookie jar that does not follow redirects.
func browserless() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func do(t *testing.T, c *http.Client, method, u string, form url.Values) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	require.NoError(t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	res, err := c.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

var secretRe = regexp.MustCompile(`data-testid="totp-secret">([A-Z2-7 ]+)<`)

// signIn signs the demo admin in with the printed password and enrols TOTP
// from the page, then replaces the one-time password with ownPassword, as a
// person would; it returns the enrolled secret.
func signIn(t *testing.T, console, password string) (*http.Client, string) {
	t.Helper()
	cl := browserless()
	res, _ := do(t, cl, "POST", console+"/signin", url.Values{"email": {demo.AdminEmail}, "password": {password}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "/signin/mfa", res.Header.Get("Location"))
	res, body := do(t, cl, "GET", console+"/signin/mfa", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	m := secretRe.FindStringSubmatch(body)
	require.NotNil(t, m, "the admin enrols TOTP at this sign-in")
	secret := strings.ReplaceAll(m[1], " ", "")
	code, err := totp.GenerateCode(secret, time.Now())
	require.NoError(t, err)
	res, _ = do(t, cl, "POST", console+"/signin/mfa", url.Values{"code": {code}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	// The printed password is one-time: nothing opens until the admin
	// chooses their own.
	res, _ = do(t, cl, "GET", console+"/t/acme/fleet", nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "/account", res.Header.Get("Location"))
	res, _ = do(t, cl, "POST", console+"/account/password", url.Values{"current": {password}, "password": {ownPassword}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	res, _ = do(t, cl, "GET", console+"/t/acme/fleet", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	return cl, secret
}

// ownPassword is the one the demo admin chooses at the first sign-in.
const ownPassword = "Quiet-Harbour-Lantern-42"

// signInEnrolled signs the admin in with the password and the
// authenticator enrolled before: no enrolment is offered again.
func signInEnrolled(t *testing.T, console, password, secret string) *http.Client {
	t.Helper()
	cl := browserless()
	res, _ := do(t, cl, "POST", console+"/signin", url.Values{"email": {demo.AdminEmail}, "password": {password}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	res, body := do(t, cl, "GET", console+"/signin/mfa", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.NotRegexp(t, secretRe, body, "the enrolment survived the restart")
	// The last code was used a restart ago, several TOTP steps back.
	code, err := totp.GenerateCode(secret, time.Now())
	require.NoError(t, err)
	res, _ = do(t, cl, "POST", console+"/signin/mfa", url.Values{"code": {code}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	return cl
}

var onlineRe = regexp.MustCompile(`data-testid="online">(\d+) / (\d+)<`)

// fleetOnline waits until every agent of every tenant shows online.
func fleetOnline(t *testing.T, cl *http.Client, console string) {
	t.Helper()
	for _, tn := range demo.Tenants {
		want := 0
		for _, a := range demo.Agents {
			if a.Tenant == tn.Slug {
				want++
			}
		}
		waitUntil(t, time.Minute, "all agents of "+tn.Slug+" online", func() (bool, string) {
			res, body := do(t, cl, "GET", console+"/t/"+tn.Slug+"/fleet", nil)
			if res.StatusCode != http.StatusOK {
				return false, res.Status
			}
			m := onlineRe.FindStringSubmatch(body)
			if m == nil {
				return false, "no online count on the page"
			}
			return m[1] == strconv.Itoa(want) && m[2] == strconv.Itoa(want), m[1] + " / " + m[2]
		})
	}
}

// claimsConfirmed waits until the board's oracle counts more confirmed
// bookings than before, with no duplicate, and returns the count.
func claimsConfirmed(t *testing.T, boardURL, token string, before int64) int64 {
	t.Helper()
	var st board.Stats
	require.Eventually(t, func() bool {
		req, _ := http.NewRequest("GET", boardURL+"/_sandbox/stats", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK || json.NewDecoder(res.Body).Decode(&st) != nil {
			return false
		}
		require.Zero(t, st.DuplicateConfirmations, "no load is ever booked twice by one client")
		return st.ConfirmedBookings > before
	}, time.Minute, 500*time.Millisecond, "claims confirmed on the board")
	require.Zero(t, st.DuplicateConfirmations)
	return st.ConfirmedBookings
}

// panelConfirmed finds CONFIRMED claims in the panel's own records, as the
// demo's application role sees them tenant by tenant.
func panelConfirmed(t *testing.T, data string) {
	t.Helper()
	ctx := context.Background()
	pg, err := embedded.Attach(ctx, filepath.Join(data, "postgres"))
	require.NoError(t, err)
	pool, err := db.Open(ctx, pg.AppURL(), 2)
	require.NoError(t, err)
	defer pool.Close()
	waitUntil(t, 30*time.Second, "the panel records a confirmed claim, granted in assign mode", func() (bool, string) {
		counts := map[string]int{}
		total, granted := 0, 0
		for _, tn := range demo.Tenants {
			var id string
			if err := pool.QueryRow(ctx, `SELECT id::text FROM tenants WHERE slug = $1`, tn.Slug).Scan(&id); err != nil {
				return false, err.Error()
			}
			var n int
			if err := db.TenantRow(ctx, pool, id, `SELECT count(*) FROM claims WHERE state = 'CONFIRMED'`).Scan(&n); err != nil {
				return false, err.Error()
			}
			counts[tn.Slug] = n
			total += n
			// A grant is a claim that starts ACTING (one commit).
			if err := db.TenantRow(ctx, pool, id, `SELECT count(*) FROM claims c WHERE state = 'CONFIRMED' AND EXISTS (
					SELECT 1 FROM claim_transitions x WHERE x.tenant_id = c.tenant_id AND x.target_job_key = c.target_job_key
					  AND x.from_state IS NULL AND x.to_state = 'ACTING')`).Scan(&n); err != nil {
				return false, err.Error()
			}
			granted += n
		}
		return total > 0 && granted > 0, fmt.Sprint(counts, " granted ", granted)
	})
}

// dispatchModes reads each demo tenant's dispatch mode.
func dispatchModes(t *testing.T, data string) map[string]string {
	t.Helper()
	ctx := context.Background()
	pg, err := embedded.Attach(ctx, filepath.Join(data, "postgres"))
	require.NoError(t, err)
	pool, err := db.Open(ctx, pg.AppURL(), 2)
	require.NoError(t, err)
	defer pool.Close()
	out := map[string]string{}
	for _, tn := range demo.Tenants {
		var mode string
		require.NoError(t, pool.QueryRow(ctx, `SELECT dispatch_mode FROM tenants WHERE slug = $1`, tn.Slug).Scan(&mode))
		out[tn.Slug] = mode
	}
	return out
}

// legacyModes checks that the demo's tenants dispatch in assign mode, then
// makes the data look like a demo from before assign was the default:
// acme in race with no entry saying anyone chose it (as migration 0100 left
// every tenant), delta set to race by an admin (audited). The next start
// moves acme only.
func legacyModes(t *testing.T, data string) {
	t.Helper()
	require.Equal(t, map[string]string{"acme": "assign", "delta": "assign", "north": "assign"}, dispatchModes(t, data),
		"the demo's tenants dispatch in assign mode")
	ctx := context.Background()
	pg, err := embedded.Attach(ctx, filepath.Join(data, "postgres"))
	require.NoError(t, err)
	owner, err := db.Open(ctx, pg.OwnerURL(), 2)
	require.NoError(t, err)
	defer owner.Close()
	_, err = owner.Exec(ctx, `UPDATE tenants SET dispatch_mode = 'race' WHERE slug = 'acme'`)
	require.NoError(t, err)
	app, err := db.Open(ctx, pg.AppURL(), 2)
	require.NoError(t, err)
	defer app.Close()
	st := claim.NewStore(app, nil)
	delta, err := tenant.BySlug(ctx, app, "delta")
	require.NoError(t, err)
	require.NoError(t, st.SetDispatchMode(ctx, audit.Entry{Actor: "admin@demo.test"}, delta.ID, claim.DispatchRace))
}

// crash SIGKILLs a browser watcher's agent: the browser it could not close
// is reaped at once, and its unit starts it again after RestartSec (10 s).
func crash(t *testing.T, data string, cl *http.Client, console string) {
	t.Helper()
	var a demo.Agent
	for _, x := range demo.Agents {
		if x.Kind == "watcher" {
			a = x
			break
		}
	}
	agentPid := func() int {
		for pid, cmd := range demo.Procs(demo.AgentDir(data, a)) {
			if strings.Contains(cmd, "--role=agent") && strings.Contains(cmd, "--state-dir="+demo.AgentDir(data, a)+" ") {
				return pid
			}
		}
		return 0
	}
	profiles := regexp.MustCompile(`fleet-chromium-[0-9]+`)
	var old []string
	waitUntil(t, 30*time.Second, a.Name()+"'s Chromium is up", func() (bool, string) {
		old = nil
		for _, cmd := range demo.Procs(demo.TmpDir(data, a)) {
			old = append(old, profiles.FindAllString(cmd, -1)...)
		}
		return len(old) > 0 && agentPid() > 0, ""
	})
	pid := agentPid()
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	waitUntil(t, 10*time.Second, "the killed agent's browser is reaped", func() (bool, string) {
		for p, cmd := range demo.Procs(demo.TmpDir(data, a)) {
			for _, o := range old {
				if strings.Contains(cmd, o) {
					return false, fmt.Sprint(p, " ", o)
				}
			}
		}
		return true, ""
	})
	waitUntil(t, 30*time.Second, "the unit restarts the agent", func() (bool, string) {
		n := agentPid()
		return n != 0 && n != pid, strconv.Itoa(n)
	})
	fleetOnline(t, cl, console)
}

// stop interrupts the demo like Ctrl-C and checks that nothing it started is
// left: no agent, Chromium, Postgres or Redis mentions the data dir.
func stop(t *testing.T, p *testenv.Proc, data string) {
	t.Helper()
	p.Signal(syscall.SIGINT)
	require.Equal(t, 0, p.Wait(90*time.Second), "the demo exits cleanly")
	waitUntil(t, 10*time.Second, "no process left behind", func() (bool, string) {
		for _, d := range demo.ProcessDirs(data) {
			if left := demo.Procs(d); len(left) > 0 {
				return false, fmt.Sprint(left)
			}
		}
		return true, ""
	})
}

// waitUntil polls cond until it holds, failing with its last word otherwise.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s (last: %s)", what, timeout, last)
		}
		time.Sleep(200 * time.Millisecond) // a poll for cond, as require.Eventually would, keeping cond's last word
	}
}

// agentLogs shows the end of every agent's log, for a failed run.
func agentLogs(t *testing.T, data string) {
	for _, a := range demo.Agents {
		b, err := os.ReadFile(demo.LogFile(data, a))
		if err != nil {
			t.Logf("%s: %v", a.Name(), err)
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		t.Logf("log of %s:\n%s", a.Name(), strings.Join(lines, "\n"))
	}
}

// heal plays the OOM killer on the demo's embedded services: SIGKILL the
// default cell's redis-server, then every process of the Postgres cluster.
// The panel starts each again, its cells reconnect on their own, claims of
// the default cell's tenants are confirmed again, and /metrics counts both
// restarts.
func heal(t *testing.T, data, console string) {
	t.Helper()
	ctx := context.Background()
	pg, err := embedded.Attach(ctx, filepath.Join(data, "postgres"))
	require.NoError(t, err)
	pool, err := db.Open(ctx, pg.AppURL(), 2)
	require.NoError(t, err)
	defer pool.Close()
	cellA := map[string]string{}
	for _, tn := range demo.Tenants {
		if tn.Cell == "default" {
			var id string
			require.NoError(t, pool.QueryRow(ctx, `SELECT id::text FROM tenants WHERE slug = $1`, tn.Slug).Scan(&id))
			cellA[tn.Slug] = id
		}
	}
	require.NotEmpty(t, cellA)
	// confirmedSince counts the default cell's claims confirmed after since.
	confirmedSince := func(since time.Time) (bool, string) {
		total := 0
		for slug, id := range cellA {
			var n int
			if err := db.TenantRow(ctx, pool, id, `SELECT count(*) FROM claims WHERE state = 'CONFIRMED' AND confirmed_at > $1`, since).Scan(&n); err != nil {
				return false, slug + ": " + err.Error()
			}
			total += n
		}
		return total > 0, strconv.Itoa(total)
	}
	pidOf := func(path string) int {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0
		}
		n, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
		return n
	}

	redisPid := pidOf(filepath.Join(data, "redis", "redis.pid"))
	require.NotZero(t, redisPid)
	require.NoError(t, syscall.Kill(redisPid, syscall.SIGKILL))
	killed := time.Now()
	waitUntil(t, 30*time.Second, "the panel starts its redis-server again", func() (bool, string) {
		n := pidOf(filepath.Join(data, "redis", "redis.pid"))
		return n != 0 && n != redisPid && syscall.Kill(n, 0) == nil, strconv.Itoa(n)
	})
	waitUntil(t, 90*time.Second, "the default cell claims again after its Redis came back", func() (bool, string) {
		return confirmedSince(killed)
	})

	procs := pg.Processes()
	require.GreaterOrEqual(t, len(procs), 3, "the cluster's processes: %v", procs)
	for _, pid := range procs {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	killed = time.Now()
	waitUntil(t, 60*time.Second, "the panel starts its Postgres again", func() (bool, string) {
		now := pg.Processes()
		for _, pid := range procs {
			if slices.Contains(now, pid) {
				return false, "old process still there"
			}
		}
		return len(now) >= 3, fmt.Sprint(now)
	})
	waitUntil(t, 2*time.Minute, "claims are confirmed again after Postgres came back", func() (bool, string) {
		return confirmedSince(killed)
	})
	res, err := http.Get(readInfo(t, data).MetricsURL)
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Contains(t, string(body), `fleet_embedded_restarts_total{service="redis:default"} 1`)
	require.Contains(t, string(body), `fleet_embedded_restarts_total{service="postgres"} 1`)
	require.Contains(t, string(body), `fleet_embedded_failed{service="redis:cell-b"} 0`)
}
