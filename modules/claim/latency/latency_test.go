package latency_test

import (
	"bytes"
	"encoding/csv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/claim/latency"
)

// publish → detect carries the platform clock's bounds: how many of its
// claims had a reading, the median and the worst bound; the CSV keeps each
// claim's (empty without a reading).
func TestPublishDetectKeepsThePlatformClocksBound(t *testing.T) {
	now := time.Now()
	at := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	ms := func(v int64) *int64 { return &v }
	claims := []claim.Claim{
		{Key: "LD-1", State: claim.Confirmed, PublishedAt: at(0), SeenAt: at(90 * time.Millisecond), BoardClockErrorMS: ms(2)},
		{Key: "LD-2", State: claim.Confirmed, PublishedAt: at(0), SeenAt: at(70 * time.Millisecond), BoardClockErrorMS: ms(9)},
		{Key: "LD-3", State: claim.Confirmed, PublishedAt: at(0), SeenAt: at(50 * time.Millisecond), BoardClockErrorMS: ms(4)},
		{Key: "LD-4", State: claim.Confirmed, PublishedAt: at(0), SeenAt: at(60 * time.Millisecond)},
	}
	g := latency.Summarize("tenant", claims)
	var pd latency.Percentiles
	for _, s := range g.Stages {
		if s.Stage == claim.StagePublishSeen {
			pd = s
		} else {
			require.Nil(t, s.Clock, s.Stage)
		}
	}
	require.Equal(t, 4, pd.N)
	require.NotNil(t, pd.Clock)
	require.Equal(t, latency.ClockBound{Measured: 3, P50: 4 * time.Millisecond, Max: 9 * time.Millisecond}, *pd.Clock)

	var buf bytes.Buffer
	require.NoError(t, latency.WriteCSV(&buf, claims))
	rows, err := csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	col := -1
	for i, h := range rows[0] {
		if h == "board_clock_error_ms" {
			col = i
		}
	}
	require.NotEqual(t, -1, col)
	require.Equal(t, "2", rows[1][col])
	require.Equal(t, "", rows[4][col])
	require.Len(t, rows[1], len(rows[0]))
}
