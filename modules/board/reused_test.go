package board_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/board"
)

// The reused-connection switch answers a booking that opened its own
// connection and drops the answer of one that came on a connection which
// had carried an earlier request — after committing it. With either drop
// switch on, the board keeps connections alive like any real server: it
// never protects its callers with Connection: close.
func TestDropReusedDropsOnlyAReusedConnectionsAnswer(t *testing.T) {
	ctx := context.Background()
	tb := setup(t, false, func(c *board.Config) {
		c.Chaos.DropReusedResponseRate = 1
		c.Chaos.DropResponseRate = 1e-12 // on, but never rolled in this test
	})
	c := tb.login(t, "acme-1")
	ls := tb.publish(t, 2)

	// A fresh connection: its first request is the booking — answered.
	fresh := &http.Transport{DisableKeepAlives: true}
	defer fresh.CloseIdleConnections()
	c.HTTP.Transport = fresh
	status, _, err := c.Book(ctx, ls[0].ID, "")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)

	// One kept-alive connection: a read, then the booking on it.
	one := &http.Transport{MaxConnsPerHost: 1}
	defer one.CloseIdleConnections()
	c.HTTP.Transport = one
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Base+"/api/session", nil)
	require.NoError(t, err)
	resp, err := c.HTTP.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body) // read to the end, so the connection is kept
	_ = resp.Body.Close()
	require.False(t, resp.Close, "the board keeps the connection alive (no Connection: close) while drops are switched on")
	before := tb.s.Stats().BookingRequests
	// No Idempotency-Key: Go's client does not resend a POST without one.
	_, _, err = c.Book(ctx, ls[1].ID, "")
	require.Error(t, err, "the answer on the reused connection is lost")
	require.Equal(t, before+1, tb.s.Stats().BookingRequests, "one request reached the board")

	var dropped []*board.Event
	for _, e := range tb.s.Events(0, 0) {
		if e.Type == board.EvResponseDropped {
			dropped = append(dropped, e)
		}
	}
	require.Len(t, dropped, 1)
	require.Equal(t, ls[1].ID, dropped[0].LoadID)
	require.True(t, strings.HasSuffix(dropped[0].Detail, "reused connection"), dropped[0].Detail)
	require.NotZero(t, dropped[0].BookingID, "it was committed before the answer was dropped")
	require.EqualValues(t, 2, tb.s.Stats().ConfirmedBookings, "both bookings committed")
}
