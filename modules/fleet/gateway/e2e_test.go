package gateway_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-rod/rod"
	"github.com/jackc/pgx/v5"
	"github.com/pquerna/otp/totp"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/browser"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/fleet"
)

// TestConsoleSeesRealAgentsAndPausesOne is issue 4's end-to-end test: the
// panel binary, three agent processes of the same binary, the console in
// headless Chromium. An operator signs in, adds three accounts (each token
// shown once goes into an agent's token file), watches them come online
// without reloading, pauses one, and sees that agent report itself paused.
func TestConsoleSeesRealAgentsAndPausesOne(t *testing.T) {
	bin := testenv.Binary(t)
	dir, err := os.MkdirTemp(testenv.Dir(t), "e2e-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	panel := testenv.Start(t, bin, []string{"--role=panel", "--listen=127.0.0.1:0", "--data-dir=" + dir})
	base := panel.WaitFor(`panel ready" console=(http://127\.0\.0\.1:\d+)/`, time.Minute)

	admin := testenv.Start(t, bin, []string{"admin", "create-user", "--email=ops@fleet.test", "--role=admin", "--data-dir=" + dir})
	require.Equal(t, 0, admin.Wait(time.Minute), admin.Output())
	password := regexp.MustCompile(`one-time password: (\S+)`).FindStringSubmatch(admin.Output())[1]

	// One deadline for the whole flow, sign-in to pause: 38 s alone on a
	// loaded machine, past 3 min once while a whole suite ran beside it.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	b, err := browser.Launch(ctx, browser.Options{Width: 1440, Height: 900})
	require.NoError(t, err)
	defer b.Close()
	p, err := b.Page(ctx)
	require.NoError(t, err)

	nav := func(path string) {
		require.NoError(t, p.Navigate(base+path))
		p.MustWaitLoad()
	}
	submit := func(el *rod.Element) {
		wait := p.MustWaitNavigation()
		el.MustClick()
		wait()
	}
	nav("/signin")
	p.MustElement(`[data-testid="email"]`).MustInput("ops@fleet.test")
	p.MustElement(`[data-testid="password"]`).MustInput(password)
	submit(p.MustElement(`[data-testid="signin-submit"]`))
	secret := strings.ReplaceAll(p.MustElement(`[data-testid="totp-secret"]`).MustText(), " ", "")
	code, err := totp.GenerateCode(secret, time.Now())
	require.NoError(t, err)
	p.MustElement(`[data-testid="code"]`).MustInput(code)
	submit(p.MustElement(`[data-testid="mfa-submit"]`))
	// The CLI's password is one-time: the console asks for a new one first.
	require.True(t, strings.HasSuffix(p.MustInfo().URL, "/account"), p.MustInfo().URL)
	p.MustElement(`input[name="current"]`).MustInput(password)
	p.MustElement(`input[name="password"]`).MustInput("Quiet-Harbour-Lantern-42")
	submit(p.MustElement(`form[action="/account/password"] button[type="submit"]`))

	nav("/admin/tenants")
	p.MustElement(`input[name="name"]`).MustInput("Acme Freight")
	p.MustElement(`input[name="slug"]`).MustInput("acme")
	submit(p.MustElement(`main form button[type="submit"]`))

	var tokens []string
	for i := 1; i <= 3; i++ {
		nav("/t/acme/fleet/accounts")
		form := p.MustElement(`[data-testid="add-account"]`)
		form.MustElement(`input[name="key"]`).MustInput(fmt.Sprintf("acct-%d", i))
		form.MustElement(`input[name="board_url"]`).MustSelectAllText().MustInput("http://127.0.0.1:9")
		form.MustElement(`input[name="client"]`).MustSelectAllText().MustInput("acme")
		form.MustElement(`input[name="username"]`).MustInput(fmt.Sprintf("dispatch%d", i))
		form.MustElement(`input[name="password"]`).MustInput(boardPassword(i))
		form.MustElement(`input[name="totp_secret"]`).MustInput(boardTOTP(i))
		form.MustElement(`textarea[name="workers"]`).MustSelectAllText().MustInput("")
		submit(form.MustElement(`button[type="submit"]`))
		token := p.MustElement(`[data-testid="token-value"]`).MustText()
		require.True(t, strings.HasPrefix(token, "fwa_"), token)
		tokens = append(tokens, token)
	}

	// The page is open before any agent starts; they appear without a
	// reload (the rows poll).
	nav("/t/acme/fleet")
	require.Equal(t, "0 / 3", strings.TrimSpace(p.MustElement(`[data-testid="online"]`).MustText()))
	agentsDir := t.TempDir() // each agent's state dir is its own host's
	procs := []*testenv.Proc{panel, admin}
	for i, token := range tokens {
		state := filepath.Join(agentsDir, fmt.Sprintf("agent-%d", i+1))
		require.NoError(t, os.MkdirAll(state, 0o700))
		tok := filepath.Join(state, "token")
		require.NoError(t, os.WriteFile(tok, []byte(token+"\n"), 0o600))
		procs = append(procs, testenv.Start(t, bin, []string{"--role=agent", "--panel=" + base, "--token-file=" + tok, "--state-dir=" + state}))
	}
	require.Eventually(t, func() bool {
		return len(p.MustElements(`[data-testid="status"] .badge.ok`)) == 3
	}, time.Minute, 200*time.Millisecond, "three agents online in the live table")

	if dir := os.Getenv("FLEET_SCREENSHOTS"); dir != "" { // for people: FLEET_SCREENSHOTS=DIR
		data, err := p.Screenshot(true, nil)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "fleet.png"), data, 0o644))
	}
	// The actions are on the agent's own page, one click from its row.
	row := p.MustElement(`[data-testid="agent-agent-acct-2"]`)
	submit(row.MustElement(`[data-testid="agent-open"]`))
	submit(p.MustElement(`[data-testid="agent-actions"] [data-testid="pause"]`))
	require.Contains(t, p.MustElement(`[data-testid="flash"]`).MustText(), "Sent pause")
	nav("/t/acme/fleet")
	require.Eventually(t, func() bool {
		has, _, _ := p.Has(`[data-testid="agent-agent-acct-2"] [data-testid="paused"]`)
		return has
	}, time.Minute, 200*time.Millisecond, "the agent reports itself paused")
	has, _, err := p.Has(`[data-testid="agent-agent-acct-1"] [data-testid="paused"]`)
	require.NoError(t, err)
	require.False(t, has, "only that agent")

	nav("/audit")
	require.Contains(t, p.MustElement(`body`).MustText(), "fleet.agent.pause")

	// No known secret anywhere: not in any process's output, not in the
	// embedded Postgres and Redis logs, not in any file of the panel's data
	// dir (the database holds the sealed box and the tokens' hashes only).
	secrets := append([]string{}, tokens...)
	for i := 1; i <= 3; i++ {
		secrets = append(secrets, boardPassword(i), boardTOTP(i))
	}
	for _, pr := range procs {
		for _, sec := range secrets {
			require.NotContains(t, pr.Output(), sec)
		}
	}
	files := 0
	require.NoError(t, filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || !info.Mode().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		files++
		for _, sec := range secrets {
			require.False(t, bytes.Contains(data, []byte(sec)), "%s holds a secret", path)
		}
		return nil
	}))
	require.Greater(t, files, 100, "the scan read the cluster's files")

	// A new token from the command line, shown once; the fleet page shows
	// its hint, and the agent holding the old one is refused from now on.
	issue := testenv.Start(t, bin, []string{"admin", "issue-agent-token", "--tenant=acme", "--agent=agent-acct-3", "--data-dir=" + dir})
	require.Equal(t, 0, issue.Wait(time.Minute), issue.Output())
	m := regexp.MustCompile(`(fwa_\S+)`).FindStringSubmatch(issue.Output())
	require.NotNil(t, m, issue.Output())
	require.NotEqual(t, tokens[2], m[1])
	nav("/t/acme/fleet")
	submit(p.MustElement(`[data-testid="agent-agent-acct-3"] [data-testid="agent-open"]`))
	require.Contains(t, p.MustElement(`[data-testid="agent-detail"]`).MustText(), m[1][len(m[1])-4:])
}

func boardPassword(i int) string { return fmt.Sprintf("board-Password-%d-xq7", i) }

// boardTOTP returns distinct base32 TOTP secrets.
func boardTOTP(i int) string { return fmt.Sprintf("JBSWY3DPEHPK3PX%c", 'A'+i) + "MZXW6YTB" }

// TestCommandReachesAgentOnAnotherPanelProcess runs two panel processes on
// one database. The agent is connected to the first; a command persisted by
// someone else (here the test, as the second panel's console would) reaches
// it through NOTIFY — and still does after the first panel's LISTEN
// connection is killed behind its back.
func TestCommandReachesAgentOnAnotherPanelProcess(t *testing.T) {
	b := setup(t)
	bin := testenv.Binary(t)
	key := make([]byte, vault.KeySize) // the store in setup seals with the zero key
	env := []string{"FLEET_DATABASE_URL=" + b.db.OwnerURL, "FLEET_DATABASE_APP_URL=" + b.db.AppURL,
		"FLEET_REDIS_URL=" + testenv.RedisURL(t), "FLEET_SECRET_KEY=" + hex.EncodeToString(key)}
	var bases []string
	for i := 0; i < 2; i++ {
		dir, err := os.MkdirTemp(testenv.Dir(t), "replica-")
		require.NoError(t, err)
		p := testenv.Start(t, bin, []string{"--role=panel", "--listen=127.0.0.1:0", "--data-dir=" + dir}, env...)
		bases = append(bases, p.WaitFor(`panel ready" console=(http://127\.0\.0\.1:\d+)/`, time.Minute))
	}
	id, token := b.agent(t, "acct-x")
	state := t.TempDir()
	tok := filepath.Join(state, "token")
	require.NoError(t, os.WriteFile(tok, []byte(token), 0o600))
	testenv.Start(t, bin, []string{"--role=agent", "--panel=" + bases[0], "--token-file=" + tok, "--state-dir=" + state})
	require.Eventually(t, func() bool { return b.read(t, id).Connected }, time.Minute, 100*time.Millisecond)

	ctx := context.Background()
	_, err := b.store.Enqueue(ctx, b.tenant, id, fleet.CmdPause, fleet.CommandBody{Reason: "from replica b"}, ops)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return b.read(t, id).State.Paused }, 30*time.Second, 100*time.Millisecond)

	super, err := pgx.Connect(ctx, b.db.SuperURL)
	require.NoError(t, err)
	defer super.Close(ctx)
	var killed int
	require.NoError(t, super.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query = 'LISTEN fleet_agent_commands'`).Scan(&killed))
	require.Equal(t, 2, killed, "both replicas' LISTEN connections")
	_, err = b.store.Enqueue(ctx, b.tenant, id, fleet.CmdResume, fleet.CommandBody{}, ops)
	require.NoError(t, err)
	// Faster than the 10 s safety poll: the reconnect re-reads pending commands.
	require.Eventually(t, func() bool { return !b.read(t, id).State.Paused }, 9*time.Second, 100*time.Millisecond)
}
