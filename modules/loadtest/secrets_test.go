package loadtest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/board/boardtest"
)

// TestSecretScanKnowsBoardSessionCookies: a board session cookie in a log
// is a leak; in its own agent's agent.db it is not.
func TestSecretScanKnowsBoardSessionCookies(t *testing.T) {
	ctx := context.Background()
	brd := boardtest.Start(t)
	acct, err := brd.CreateAccount(ctx, board.AccountSpec{Username: "agent-a1", Password: "pw-0c1f9e07a2b4", Client: "acme"})
	require.NoError(t, err)
	_, err = boardtest.Login(ctx, brd.URL(), "agent-a1", "pw-0c1f9e07a2b4", acct.TOTPSecret, time.Now)
	require.NoError(t, err)
	issued := brd.IssuedSessions()
	require.Len(t, issued, 1)
	cookie := issued[0].Token

	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "agents", "agent-a1"), 0o700))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "logs"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "agents", "agent-a1", "agent.db"), []byte("cookies "+cookie), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "logs", "agent-a1.log"), []byte(`msg="request" cookie=`+cookie+"\n"), 0o600))
	r := &runner{dir: dir, brd: brd}
	var rep Report
	r.scanSecrets(&rep)
	require.Equal(t, 1, rep.SecretsLeaked, "%+v", rep.Leaks)
	require.Equal(t, Leak{Kind: "board_session", Where: filepath.Join("logs", "agent-a1.log")}, rep.Leaks[0])
}
