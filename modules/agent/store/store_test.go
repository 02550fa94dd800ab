package store

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/wire"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(context.Background(), dir)
	require.NoError(t, err)
	return s
}

// scan returns the files under dir that contain needle.
func scan(t *testing.T, dir string, needle string) []string {
	t.Helper()
	var hits []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(data, []byte(needle)) {
			hits = append(hits, filepath.Base(p))
		}
		return nil
	}))
	return hits
}

func TestModesAreOwnerOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	require.NoError(t, os.MkdirAll(dir, 0o755)) // too wide: Open tightens it
	s := open(t, dir)
	ctx := context.Background()
	require.NoError(t, s.SaveCredentials(ctx, wire.Credentials{Username: "u", Password: wire.NewSecret("p")}, t0))
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, DirMode, fi.Mode().Perm())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	names := map[string]bool{}
	for _, e := range entries {
		info, err := e.Info()
		require.NoError(t, err)
		require.Equal(t, FileMode, info.Mode().Perm(), e.Name())
		names[e.Name()] = true
	}
	require.True(t, names[FileName+"-wal"], "WAL mode: %v", names)
	require.NoError(t, s.Close())
}

func TestStateSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := open(t, dir)
	creds := wire.Credentials{Username: "dispatch42", Password: wire.NewSecret("pw-1"), TOTPSecret: wire.NewSecret("TOTP1")}
	require.NoError(t, s.SaveCredentials(ctx, creds, t0))
	require.NoError(t, s.SaveCookies(ctx, []Cookie{{Domain: "board.test", Name: "sid", Path: "/", Value: wire.NewSecret("c00kie"), Expires: t0.Add(time.Hour), Secure: true, HTTPOnly: true}}))
	require.NoError(t, s.SetWelcomed(ctx, "inst_a", "ag_1"))
	require.NoError(t, s.SetUnknownTokenCount(ctx, 3))
	require.NoError(t, s.Begin(ctx, "op-1", "load-1", t0))
	require.NoError(t, s.Begin(ctx, "op-2", "load-2", t0.Add(time.Second)))
	require.NoError(t, s.Finish(ctx, "op-2", "confirmed", t0.Add(2*time.Second)))
	require.ErrorIs(t, s.Begin(ctx, "op-1", "load-1", t0), ErrJournal, "an operation id is journaled once")
	require.NoError(t, s.Close())

	s = open(t, dir)
	defer s.Close()
	got, ok, err := s.Credentials(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "dispatch42", got.Username)
	require.Equal(t, "pw-1", got.Password.Reveal())
	require.Equal(t, "TOTP1", got.TOTPSecret.Reveal())
	cookies, err := s.Cookies(ctx)
	require.NoError(t, err)
	require.Len(t, cookies, 1)
	require.Equal(t, "c00kie", cookies[0].Value.Reveal())
	require.True(t, cookies[0].Expires.Equal(t0.Add(time.Hour)))
	auth, err := s.Auth(ctx)
	require.NoError(t, err)
	require.Equal(t, Auth{InstallationID: "inst_a", AgentID: "ag_1", UnknownTokenCount: 3}, auth)
	inflight, err := s.InFlight(ctx)
	require.NoError(t, err)
	require.Len(t, inflight, 1, "a restart knows what it was doing")
	require.Equal(t, "op-1", inflight[0].OperationID)
	require.Equal(t, "load-1", inflight[0].JobKey)
	require.True(t, inflight[0].StartedAt.Equal(t0))

	require.NoError(t, s.SetWelcomed(ctx, "inst_a", "ag_1"))
	auth, _ = s.Auth(ctx)
	require.Equal(t, 0, auth.UnknownTokenCount, "a welcome resets the count")
}

func TestDoRecordsOutcomes(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()
	now := func() time.Time { return t0 }
	require.NoError(t, s.Do(ctx, "op-ok", "load-1", now, func(context.Context) (string, error) { return "confirmed", nil }))
	err := s.Do(ctx, "op-timeout", "load-2", now, func(context.Context) (string, error) { return "", context.DeadlineExceeded })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	j, err := s.Journal(ctx)
	require.NoError(t, err)
	require.Len(t, j, 2)
	require.Equal(t, "confirmed", j[0].Outcome)
	require.Equal(t, OutcomeUnknown, j[1].Outcome, "an uncertain action is recorded as unknown")
}

// A full disk is simulated by capping the database file with
// max_page_count at its current size: SQLite then fails writes that need a
// new page with SQLITE_FULL, exactly as on a full filesystem.
func TestFullDatabaseStopsNewActions(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()
	require.NoError(t, s.Begin(ctx, "op-before", "load-0", t0))
	var pages int
	require.NoError(t, s.db.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pages))
	// The pragma answers with a row; Exec would not run it to completion.
	var maxPages int
	require.NoError(t, s.db.QueryRowContext(ctx, fmt.Sprintf(`PRAGMA max_page_count = %d`, pages)).Scan(&maxPages))
	require.Equal(t, pages, maxPages)

	acted := 0
	var fullErr error
	for i := range 5000 {
		err := s.Do(ctx, fmt.Sprintf("op-%04d-%s", i, bytes.Repeat([]byte("x"), 200)), "load", func() time.Time { return t0 },
			func(context.Context) (string, error) { acted++; return "confirmed", nil })
		if err != nil {
			fullErr = err
			break
		}
	}
	require.ErrorIs(t, fullErr, ErrJournal, "the disk must fill up within the loop")
	require.Contains(t, fullErr.Error(), "full")
	before := acted
	err := s.Do(ctx, "op-after-"+string(bytes.Repeat([]byte("y"), 200)), "load-x", func() time.Time { return t0 }, func(context.Context) (string, error) {
		acted++
		return "confirmed", nil
	})
	require.ErrorIs(t, err, ErrJournal)
	require.Equal(t, before, acted, "no action runs unrecorded")
	j, err := s.Journal(ctx)
	require.NoError(t, err)
	require.Len(t, j, before+1, "what was recorded is intact")
	var inflight []string
	for _, e := range j {
		if e.Outcome == "" {
			inflight = append(inflight, e.OperationID)
		} else {
			require.Equal(t, "confirmed", e.Outcome)
		}
	}
	require.Equal(t, []string{"op-before"}, inflight)
}

func TestRetireLeavesNoSecretInAnyFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	secrets := []string{}
	// Several generations of secrets, so old page images exist in the WAL.
	for i := range 5 {
		pw, totp, cookie := fmt.Sprintf("pw-%d-Zq8!", i), fmt.Sprintf("JBSWY3DPEHPK%04d", i), fmt.Sprintf("sid-%d-9f8e7d6c", i)
		secrets = append(secrets, pw, totp, cookie)
		require.NoError(t, s.SaveCredentials(ctx, wire.Credentials{Username: "dispatch42", Password: wire.NewSecret(pw), TOTPSecret: wire.NewSecret(totp)}, t0))
		require.NoError(t, s.SaveCookies(ctx, []Cookie{{Domain: "board.test", Name: "sid", Path: "/", Value: wire.NewSecret(cookie)}}))
	}
	token := "fwa_0123456789abcdef0123456789abcdef"
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token+"\n"), 0o600))
	secrets = append(secrets, token)
	require.NoError(t, s.Begin(ctx, "op-in-flight", "load-7", t0))
	require.NoError(t, s.SetWelcomed(ctx, "inst_a", "ag_1"))

	// The scan does find them before: it is a real check.
	for _, sec := range secrets {
		require.NotEmpty(t, scan(t, dir, sec), "%s should be on disk before retirement", sec)
	}

	require.NoError(t, s.Retire(ctx, "unknown token 20 times", t0.Add(time.Hour)))
	require.NoError(t, ShredFile(tokenFile))
	// While the fresh database is open, and after it is closed.
	for _, sec := range secrets {
		require.Empty(t, scan(t, dir, sec), "%s survived retirement", sec)
	}
	mark, ok, err := s.Retired(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "unknown token 20 times", mark.Reason)
	_, ok, err = s.Credentials(ctx)
	require.NoError(t, err)
	require.False(t, ok)
	inflight, err := s.InFlight(ctx)
	require.NoError(t, err)
	require.Len(t, inflight, 1, "the journal is kept for whoever investigates")
	require.NoError(t, s.Close())
	for _, sec := range secrets {
		require.Empty(t, scan(t, dir, sec), "%s survived retirement", sec)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		info, _ := e.Info()
		require.Equal(t, FileMode, info.Mode().Perm(), e.Name())
	}

	// The mark survives a restart; only a deliberate reset removes it.
	s = open(t, dir)
	_, ok, err = s.Retired(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.Close())
	require.NoError(t, ResetState(dir))
	s = open(t, dir)
	defer s.Close()
	_, ok, err = s.Retired(ctx)
	require.NoError(t, err)
	require.False(t, ok)
}
