package agent

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/wire"
)

func logins(s *board.Server) int {
	n := 0
	for _, e := range s.Events(0, 100000) {
		if e.Type == board.EvLogin {
			n++
		}
	}
	return n
}

// A session-expiry storm signs every session out. The agent's workers (a
// browser watcher and an HTTP actor sharing the account) sign in again with
// one fresh code — the board refuses a code's step twice, so the first
// login after a same-step storm waits for the next step — the sibling
// adopts the stored session, and the actor keeps claiming.
func TestSessionStormRelogin(t *testing.T) {
	ctx := context.Background()
	s, creds := boardAccount(t)
	p := newClaimPanel(t, s.URL(), creds,
		wire.WorkerSpec{Name: "h1", Kind: KindHTTPActor, Settings: map[string]string{SettingKeepWarmMS: "300"}},
		wire.WorkerSpec{Name: "w1", Kind: KindWatcher})
	stop, logs := runAgent(t, p, t.TempDir())
	p.waitConnected(t)
	p.event(t, "session_refreshed", signInWait)
	// The second worker adopts the first one's session: one login.
	loads, err := s.Publish(ctx, 1, nil)
	require.NoError(t, err)
	collect(t, p, map[string]*board.Load{loads[0].ID: loads[0]}, 20*time.Second)
	require.Equal(t, 1, logins(s), "one login serves both workers")

	var first time.Time
	for _, e := range s.Events(0, 100000) {
		if e.Type == board.EvLogin {
			first = e.At
		}
	}
	stormAt := time.Now()
	require.Equal(t, 1, s.SessionStorm(1))
	e := p.event(t, "session_refreshed", 60*time.Second)
	if first.Unix()/30 == stormAt.Unix()/30 && stormAt.Unix()%30 < 28 {
		require.Equal(t, "true", e.Fields["waited_for_next_code"], "the code's step was used: it waited for the next")
	}
	require.Eventually(t, func() bool { return logins(s) == 2 }, 10*time.Second, 50*time.Millisecond)

	// Both keep working on the new session: detection and claiming.
	loads, err = s.Publish(ctx, 1, nil)
	require.NoError(t, err)
	collect(t, p, map[string]*board.Load{loads[0].ID: loads[0]}, 30*time.Second)
	p.offer(t, loads[0])
	o := p.outcome(t, 20*time.Second)
	require.Equal(t, wire.ResultConfirmed, o.Result, o.Detail)
	require.Equal(t, 2, logins(s), "the sibling adopted the fresh session instead of logging in again")
	stop()
	noSecrets(t, logs, creds, "")
}
