package agent

import (
	"context"
	"testing"
	"time"

	"github.com/go-rod/rod/lib/proto"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// aheadClock is a clock running ahead of the wall clock by a fixed amount:
// a platform whose server clock is wrong.
type aheadClock struct{ by time.Duration }

func (c aheadClock) Now() time.Time                         { return time.Now().Add(c.by) }
func (c aheadClock) Since(t time.Time) time.Duration        { return c.Now().Sub(t) }
func (c aheadClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

var _ clock.Clock = aheadClock{}

// A watcher reads the board's clock from the jobs responses it reads anyway:
// a board whose clock runs 7 s ahead is measured 7 s ahead, within the
// reading's own bound, and the bound is the request's span, not seconds.
func TestWatcherReadsTheBoardsClock(t *testing.T) {
	ctx := context.Background()
	const ahead = 7 * time.Second
	s, creds := boardAccount(t, func(c *board.Config) { c.Clock = aheadClock{by: ahead} })
	p := newClaimPanel(t, s.URL(), creds, wire.WorkerSpec{Name: "w1", Kind: KindWatcher})
	stop, _ := runAgent(t, p, "")
	defer stop()
	p.waitConnected(t)
	p.event(t, "session_refreshed", signInWait)
	loads, err := s.Publish(ctx, 2, nil)
	require.NoError(t, err)
	want := map[string]*board.Load{}
	for _, l := range loads {
		want[l.ID] = l
	}
	collect(t, p, want, 20*time.Second)
	p.mu.Lock()
	bc := p.boardClock
	p.mu.Unlock()
	require.NotNil(t, bc, "the detected messages carried no reading of the board's clock")
	off, bound := bc.Offset(), bc.ErrorBound()
	require.Positive(t, bound)
	require.Less(t, bound, 500*time.Millisecond, "a body's server time bounds the reading by the request's span")
	require.LessOrEqual(t, (off - ahead).Abs(), bound+time.Millisecond,
		"the board runs %v ahead; the reading says %v ± %v", ahead, off, bound)
}

// The span comes from Chromium's timing mapped through the instant
// requestWillBeSent carried; a Date header to the second widens the bound
// by half a second and reads the middle of its second.
func TestBoardClockReading(t *testing.T) {
	b := newBoardClock(clock.Real{})
	wall := time.Now()
	mono := 1000.0
	id := proto.NetworkRequestID("r1")
	b.willBeSent(&proto.NetworkRequestWillBeSent{RequestID: id, Timestamp: proto.MonotonicTime(mono),
		WallTime: proto.TimeSinceEpoch(float64(wall.UnixNano()) / 1e9)})
	// Sent 2 ms after the mark, headers back 12 ms after it.
	sent, received, ok := b.span(id, &proto.NetworkResourceTiming{RequestTime: mono, SendStart: 2, ReceiveHeadersEnd: 12})
	require.True(t, ok)
	require.InDelta(t, 2, float64(sent.Sub(wall).Microseconds())/1000, 0.05)
	require.InDelta(t, 12, float64(received.Sub(wall).Microseconds())/1000, 0.05)
	_, _, ok = b.span(id, &proto.NetworkResourceTiming{RequestTime: mono})
	require.False(t, ok, "a mark is used once")

	require.Nil(t, b.reading())
	server := sent.Add(5 * time.Millisecond).Add(3 * time.Second) // platform 3 s ahead
	b.observe(sent, server, received, 0)
	r := b.reading()
	require.NotNil(t, r)
	require.InDelta(t, 3000, float64(r.Offset().Microseconds())/1000, 0.05)
	require.InDelta(t, 5, float64(r.ErrorBound().Microseconds())/1000, 0.05)

	st, res, ok := serverTime(nil, nil, "Mon, 30 Nov 2026 10:00:03 GMT")
	require.True(t, ok)
	require.Equal(t, time.Second, res)
	d := newBoardClock(clock.Real{})
	d.observe(st.Add(-1500*time.Millisecond), st, st.Add(-1400*time.Millisecond), res)
	r = d.reading()
	require.NotNil(t, r)
	require.InDelta(t, 1950, float64(r.Offset().Microseconds())/1000, 0.05, "the middle of the header's second")
	require.InDelta(t, 550, float64(r.ErrorBound().Microseconds())/1000, 0.05)
}
