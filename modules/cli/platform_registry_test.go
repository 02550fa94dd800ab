package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/board/boardtest"
	"github.com/fleetwright/fleetwright/modules/factory"
	"github.com/fleetwright/fleetwright/modules/fleet"
)

// TestPlatformCommandsOnATenant: apply (versions, unchanged text, a bad
// spec with its line), list, versions with a diff, moving an account
// (audited) and the review that lifts its hold, on the real database.
func TestPlatformCommandsOnATenant(t *testing.T) {
	b := setup(t)
	fs := fleet.NewStore(b.d.App, testenv.Vault(t))
	factory.Account(t, fs, b.acme.ID, fleet.AccountInput{Key: "acct-1"})
	pf := func(args ...string) result {
		t.Helper()
		return b.run(t, "", append(append([]string{"platform"}, args...), "--tenant=acme")...)
	}
	src, err := os.ReadFile(platformExample)
	require.NoError(t, err)
	dir := t.TempDir()
	acme := filepath.Join(dir, "acme.yaml")
	text := strings.Replace(string(src), "name: sandbox", "name: acme-board", 1)
	require.NoError(t, os.WriteFile(acme, []byte(text), 0o600))

	r := pf("apply", acme)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, `platform "acme-board" is now at version 1`)
	require.Contains(t, r.stdout, "a real target: accounts on it claim nothing until a review is recorded")
	r = pf("apply", acme)
	require.Contains(t, r.stdout, `platform "acme-board" unchanged (version 1)`)
	require.NoError(t, os.WriteFile(acme, []byte(strings.Replace(text, "poll_interval: 1s", "poll_interval: 3s", 1)), 0o600))
	r = pf("apply", acme)
	require.Contains(t, r.stdout, `platform "acme-board" is now at version 2`)
	r = pf("apply", platformExample)
	require.Contains(t, r.stdout, "the text of a shipped sandbox: needs no review")

	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte(strings.Replace(text, "version: 1", "version: 3", 1)), 0o600))
	r = pf("apply", bad)
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, bad+":4: version: version 3 is not supported")
	r = pf("apply", filepath.Join(dir, "none.yaml"))
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "no such file")

	r = pf("versions", "acme-board")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^2\s+\S+\s+cli`, r.stdout)
	r = pf("versions", "acme-board", "--diff=2")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "-  poll_interval: 1s\n+  poll_interval: 3s\n")
	r = pf("versions", "nope")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, `no platform named "nope" in this tenant`)

	r = pf("use", "acct-1", "--platform=acme-board", "--version=1")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, `account acct-1 runs platform "acme-board" version 1; held: platform acme-board is not a shipped sandbox and has no recorded review`)
	r = pf("use", "acct-1", "--platform=acme-board", "--version=9")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, `platform "acme-board" has no version 9 (it has 1 to 2)`)
	r = pf("list")
	require.Regexp(t, `(?m)^acct-1\s+acme-board\s+1 \(latest 2\)\s+held:`, r.stdout)

	r = pf("review", "acme-board")
	require.Equal(t, 2, r.code, r)
	require.Contains(t, r.stderr, "--reference is required")
	r = pf("review", "acme-board", "--reference=Counsel's letter 2026-11-30 (ref LG-88)")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, `review of "acme-board" recorded by cli`)
	r = pf("list")
	require.Regexp(t, `(?m)^acct-1\s+acme-board\s+1 \(latest 2\)\s+yes`, r.stdout)
	r = pf("review", "acme-board", "--withdraw")
	require.Equal(t, 0, r.code, r)
	r = pf("use", "acct-1", "--builtin")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "runs the shipped sandbox")

	require.Equal(t, 7, b.count(t, `SELECT count(*) FROM audit_log WHERE action LIKE 'platform.%'`),
		"three applies, two moves, a review and its withdrawal")
}

// TestPlatformCheckAgainstABoard: the check signs in with the account
// file's test account, reads the feed, walks the bookings, books only the
// load --book names, and prints per field what it extracted; each wrong
// input is one clear line, and no secret is printed.
func TestPlatformCheckAgainstABoard(t *testing.T) {
	ctx := context.Background()
	bd := boardtest.Start(t)
	dir := t.TempDir()
	n := 0
	accountFile := func() (string, string) {
		n++
		user := "check-" + itoa(n)
		const pw = "Lantern-Harbour-Quiet-91"
		acct, err := bd.CreateAccount(ctx, board.AccountSpec{Username: user, Password: pw, Client: "acme"})
		require.NoError(t, err)
		f := filepath.Join(dir, user+".yaml")
		require.NoError(t, os.WriteFile(f, []byte("username: "+user+"\npassword: "+pw+"\ntotp_secret: "+acct.TOTPSecret+"\n"), 0o600))
		return f, acct.TOTPSecret
	}
	loads, err := bd.Publish(ctx, 2, nil)
	require.NoError(t, err)
	check := func(args ...string) result {
		t.Helper()
		return run(t, "", append([]string{"platform", "check"}, args...)...)
	}

	f, secret := accountFile()
	r := check(platformExample, "--base-url="+bd.URL(), "--account-file="+f)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "sign in: ok")
	require.Contains(t, r.stdout, "feed: ok: 2 item(s) at path loads on the first page")
	require.Regexp(t, `key\s+path id, required\s+"`+loads[0].ID+`"`, r.stdout)
	require.Contains(t, r.stdout, "bookings: ok: complete, 0 booking(s) on 1 page(s)")
	require.Contains(t, r.stdout, "book: not asked")
	require.Empty(t, bd.Bookings("acme"))
	for _, s := range []string{"Lantern-Harbour-Quiet-91", secret} {
		require.NotContains(t, r.stdout+r.stderr, s)
	}

	f, _ = accountFile()
	r = check(platformExample, "--base-url="+bd.URL(), "--account-file="+f, "--book="+loads[1].ID)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "book "+loads[1].ID+": HTTP 201, booking.results[0] (result: confirmed): CONFIRMED")
	require.Len(t, bd.Bookings("acme"), 1)

	// A path that never matches: the field that came back empty.
	src, err := os.ReadFile(platformExample)
	require.NoError(t, err)
	wrongPath := filepath.Join(dir, "wrong-path.yaml")
	require.NoError(t, os.WriteFile(wrongPath, []byte(strings.Replace(string(src), "key: {path: id, required: true}", "key: {path: load_ref, required: true}", 1)), 0o600))
	f, _ = accountFile()
	r = check(wrongPath, "--base-url="+bd.URL(), "--account-file="+f)
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stdout, "feed: FAILED: item 0: field key (path load_ref) came back empty: the answer's shape changed")
	require.Regexp(t, `key\s+path load_ref, required\s+\(empty\)`, r.stdout)
	require.NotContains(t, r.stderr, "goroutine", "no stack trace")

	// Wrong input: one clear line each.
	oneLine := func(r result, want string) {
		t.Helper()
		require.NotEqual(t, 0, r.code, r)
		require.Empty(t, r.stdout)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, r.stderr)
		require.Contains(t, r.stderr, want)
	}
	oneLine(check(filepath.Join(dir, "none.yaml"), "--base-url="+bd.URL(), "--account-file="+f), "none.yaml: no such file or directory")
	oneLine(check(platformExample, "--base-url=board.example.com", "--account-file="+f), `--base-url "board.example.com" is not an http(s) address`)
	oneLine(check(platformExample, "--account-file="+f), "--base-url is required")
	oneLine(check(platformExample, "--base-url="+bd.URL(), "--account-file="+filepath.Join(dir, "gone.yaml")), "gone.yaml: no such file or directory")
	oneLine(check(platformExample, "--base-url="+bd.URL()), "--account-file is required")
	open := filepath.Join(dir, "open.yaml")
	require.NoError(t, os.WriteFile(open, []byte("username: a\npassword: Secret-Word-55\ntotp_secret: JBSWY3DPEHPK3PXP\n"), 0o644))
	oneLine(check(platformExample, "--base-url="+bd.URL(), "--account-file="+open), "readable by others (mode 0644)")
	odd := filepath.Join(dir, "odd.yaml")
	require.NoError(t, os.WriteFile(odd, []byte("username: a\npasword: Secret-Word-55\n"), 0o600))
	r = check(platformExample, "--base-url="+bd.URL(), "--account-file="+odd)
	oneLine(r, `field pasword not found`)
	require.NotContains(t, r.stderr, "Secret-Word-55")
	half := filepath.Join(dir, "half.yaml")
	require.NoError(t, os.WriteFile(half, []byte("username: a\n"), 0o600))
	oneLine(check(platformExample, "--base-url="+bd.URL(), "--account-file="+half), "password, totp_secret missing")

	// A bad spec: its errors with their lines, as validate prints them.
	badSpec := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(badSpec, []byte(strings.Replace(string(src), "version: 1", "version: 2", 1)), 0o600))
	r = check(badSpec, "--base-url="+bd.URL(), "--account-file="+f)
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, badSpec+":4: version: version 2 is not supported")
}
