package loadtest

import (
	"bufio"
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// scrapeText is a replica's /metrics with n panel_in observations at or
// under 2 ms and m under 5 ms, from a process started at start.
func scrapeText(start float64, n, m int) []byte {
	return []byte(fmt.Sprintf(`# TYPE fleet_claim_panel_in_seconds histogram
fleet_claim_panel_in_seconds_bucket{le="0.001"} 0
fleet_claim_panel_in_seconds_bucket{le="0.002"} %d
fleet_claim_panel_in_seconds_bucket{le="0.005"} %d
fleet_claim_panel_in_seconds_bucket{le="+Inf"} %d
fleet_claim_panel_in_seconds_sum 0.1
fleet_claim_panel_in_seconds_count %d
fleet_claim_panel_seconds_bucket{step="lease",le="0.01"} %d
fleet_claim_panel_seconds_bucket{step="lease",le="+Inf"} %d
process_start_time_seconds %v
`, n, n+m, n+m, n+m, n, n, start))
}

func foldText(s *scraper, replica int, body []byte) {
	now := map[string]*histogram{}
	for _, m := range []struct{ metric, label string }{{metricPanelSteps, "step"}, {metricPanelIn, ""}} {
		hs := map[string]*histogram{}
		parseHistograms(bufio.NewScanner(bytes.NewReader(body)), m.metric, m.label, hs)
		for k, h := range hs {
			now[m.metric+"\x00"+k] = h
		}
	}
	s.fold(replica, processStart(body), now)
}

// TestScraperKeepsAKilledReplicasFigures: a replica killed and started
// again (a new process_start_time_seconds, counters from zero) keeps what
// its first process measured; scrapes of one process are not added twice;
// both replicas are merged.
func TestScraperKeepsAKilledReplicasFigures(t *testing.T) {
	s := newScraper()
	foldText(s, 0, scrapeText(100, 3, 1))
	foldText(s, 0, scrapeText(100, 6, 2)) // the same process, later: cumulative
	require.EqualValues(t, 8, s.merged(metricPanelIn)[""].total())
	foldText(s, 0, scrapeText(200, 1, 0)) // killed; its unit started a new one
	require.EqualValues(t, 9, s.merged(metricPanelIn)[""].total(), "the first process's 8 are kept")
	require.EqualValues(t, 7, s.merged(metricPanelSteps)["lease"].total())
	foldText(s, 1, scrapeText(150, 2, 0))
	h := s.merged(metricPanelIn)[""]
	require.EqualValues(t, 11, h.total(), "both replicas")
	require.EqualValues(t, 9, h.count[0.002])
	st := h.stage()
	require.Equal(t, 11, st.Count)
	require.Greater(t, st.P50, 1.0)
	require.LessOrEqual(t, st.P50, 2.0, "9 of 11 at or under 2 ms")
	require.LessOrEqual(t, st.P50, st.P99)

	// A counter that went down is a new process too, even without the
	// start time.
	s2 := newScraper()
	foldText(s2, 0, scrapeText(0, 5, 0))
	foldText(s2, 0, scrapeText(0, 2, 0))
	require.EqualValues(t, 7, s2.merged(metricPanelIn)[""].total())
}

func TestLogMeterBytesPerMinute(t *testing.T) {
	m := newLogMeter()
	var buf bytes.Buffer
	w := m.writer("panel-1", &buf)
	_, err := w.Write([]byte("a line\nanother\n"))
	require.NoError(t, err)
	require.Equal(t, "a line\nanother\n", buf.String(), "passed through unchanged")
	big := m.counter("agent-x")
	big.add(bytes.Repeat([]byte("x"), 200<<10))
	v := m.volume(big.since.Add(60e9))
	require.Len(t, v.Processes, 2)
	require.Equal(t, "agent-x", v.Top)
	require.InDelta(t, 200<<10, v.TopBytesPerMin, 1)
	require.Equal(t, []string{"agent-x"}, v.OverCeiling, "200 KiB in a minute is above 64 KiB/min")
	require.EqualValues(t, 2, v.Processes[1].Lines)
	_, err = w.Write([]byte(`time=x level=WARN msg="cell failing" repeated=41` + "\n"))
	require.NoError(t, err)
	m.counter("agent-x").countHeld([]byte(`{"level":"WARN","msg":"m","repeated":2}`))
	v = m.volume(big.since.Add(60e9))
	require.EqualValues(t, 41, v.Processes[1].RepeatsHeld, "text lines")
	require.EqualValues(t, 2, v.Processes[0].RepeatsHeld, "JSON lines")
	require.Len(t, v.warnings(), 1)
}
