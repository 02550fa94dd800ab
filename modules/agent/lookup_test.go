package agent

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/agent/store"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// lookupOnce sends one look-up and waits for its answer.
func (p *claimPanel) lookupOnce(t *testing.T, l wire.Lookup) wire.LookupResult {
	t.Helper()
	require.NoError(t, p.send(l))
	select {
	case lr := <-p.lookups:
		require.Equal(t, l.RequestID, lr.RequestID)
		return lr
	case <-time.After(20 * time.Second):
		t.Fatal("no look-up result")
	}
	return wire.LookupResult{}
}

// lookupPanel runs an HTTP actor of acme-1 against a panel capped at
// version maxVer, with n bookings of the client on the board.
func lookupPanel(t *testing.T, maxVer, n int) (*board.Server, *claimPanel, []*board.Load) {
	t.Helper()
	ctx := context.Background()
	s, creds := boardAccount(t)
	p := newClaimPanel(t, s.URL(), creds, wire.WorkerSpec{Name: "h1", Kind: KindHTTPActor})
	p.maxVer = maxVer
	loads, err := s.Publish(ctx, n, nil)
	require.NoError(t, err)
	for _, l := range loads {
		_, err := s.InjectBooking(ctx, "acme-1", l.ID)
		require.NoError(t, err)
	}
	stateDir := ""
	if maxVer < wire.V5 {
		// A panel before v5 cannot say which board credentials belong to,
		// so the agent sends none it delivers: this one holds credentials a
		// v5 panel delivered earlier, bound to the board, and the old
		// panel's welcome carries none.
		stateDir = filepath.Join(t.TempDir(), "state")
		st, err := store.Open(ctx, stateDir)
		require.NoError(t, err)
		bound := creds
		bound.Origins = []string{s.URL()}
		require.NoError(t, st.SaveCredentials(ctx, bound, time.Now()))
		require.NoError(t, st.Close())
		p.welcome.Credentials = wire.Credentials{}
	}
	runAgent(t, p, stateDir)
	p.waitConnected(t)
	p.event(t, "session_refreshed", 20*time.Second)
	return s, p, loads
}

// To a v4 panel the agent pages its answer: 900 bookings (about 110 KB of
// JSON) come in answers under the codec's limit, each naming where to ask
// next, and the pages hold every booking once; a page starts where the
// panel's cursor says.
func TestLookupIsPagedForAV4Panel(t *testing.T) {
	_, p, loads := lookupPanel(t, wire.V4, 900)
	seen := map[string]bool{}
	cursor, answers := "", 0
	for {
		lr := p.lookupOnce(t, wire.Lookup{RequestID: wire.NewID(), Cursor: cursor})
		require.True(t, lr.Complete, lr.Error)
		require.Equal(t, "acme", lr.Client)
		raw, err := wire.Encode(wire.V4, wire.Frame{Time: time.Now(), Message: lr})
		require.NoError(t, err)
		require.LessOrEqual(t, len(raw), wire.MaxMessageBytes)
		for _, b := range lr.Bookings {
			require.False(t, seen[b.BookingID], "booking %s twice", b.BookingID)
			seen[b.BookingID] = true
		}
		answers++
		if lr.Next == "" {
			break
		}
		cursor = lr.Next
	}
	require.Len(t, seen, len(loads))
	require.GreaterOrEqual(t, answers, 2)

	// A bad cursor is an incomplete answer with the reason, never an
	// empty complete list.
	lr := p.lookupOnce(t, wire.Lookup{RequestID: wire.NewID(), Cursor: "not-a-cursor"})
	require.False(t, lr.Complete)
	require.Contains(t, lr.Error, `cursor "not-a-cursor" is not one this adapter gave`)
}

// A v3 panel cannot ask for a next page: the agent answers with the whole
// list in one message, as before paging.
func TestLookupForAV3PanelIsOneAnswer(t *testing.T) {
	_, p, loads := lookupPanel(t, wire.V3, 300)
	lr := p.lookupOnce(t, wire.Lookup{RequestID: wire.NewID()})
	require.True(t, lr.Complete, lr.Error)
	require.Empty(t, lr.Next)
	require.Empty(t, lr.Client, "a v3 answer carries no v4 field")
	require.Len(t, lr.Bookings, len(loads))
}
