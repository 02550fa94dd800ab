package board_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/board/boardtest"
)

// BenchmarkPoll100Sessions measures the JSON poll feed under 100 concurrent
// signed-in sessions, each polling back to back with its own cursor (the
// loads page's pattern) while the publisher adds 20 loads/s on top of 2,000
// live ones. Bounded by b.N requests in total; reports req/s and latency
// percentiles. Client and server share the machine.
func BenchmarkPoll100Sessions(b *testing.B) {
	const sessions = 100
	ctx := context.Background()
	s := boardtest.Start(b, func(c *board.Config) { c.Rate = 20; c.LoadTTL = time.Hour })
	_, err := s.Publish(ctx, 2000, nil)
	require.NoError(b, err)
	tr := &http.Transport{MaxIdleConnsPerHost: sessions, MaxConnsPerHost: sessions}
	defer tr.CloseIdleConnections()
	clients := make([]*boardtest.Client, sessions)
	for i := range clients {
		a, err := s.CreateAccount(ctx, board.AccountSpec{Username: fmt.Sprintf("bench-%d", i), Password: pw, Client: fmt.Sprintf("c%d", i%10)})
		require.NoError(b, err)
		c, err := boardtest.Login(ctx, s.URL(), a.Username, pw, a.TOTPSecret, nil)
		require.NoError(b, err)
		c.HTTP.Transport = tr
		clients[i] = c
	}
	// Each session first catches up with the backlog (500 loads per answer),
	// as an open loads page does once; the measured polls are the steady state.
	cursors := make([]int64, sessions)
	for i, c := range clients {
		for {
			var feed struct {
				Loads     []json.RawMessage `json:"loads"`
				NextAfter int64             `json:"next_after"`
			}
			require.NoError(b, c.GetJSON(ctx, fmt.Sprintf("/api/loads?after=%d", cursors[i]), &feed))
			cursors[i] = feed.NextAfter
			if len(feed.Loads) < 500 {
				break
			}
		}
	}
	var next atomic.Int64
	lat := make([][]time.Duration, sessions)
	var failures atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c := clients[i]
			for next.Add(1) <= int64(b.N) {
				t := time.Now()
				resp, err := c.HTTP.Get(fmt.Sprintf("%s/api/loads?after=%d", c.Base, cursors[i]))
				if err != nil {
					failures.Add(1)
					continue
				}
				var feed struct {
					NextAfter int64 `json:"next_after"`
				}
				err = json.NewDecoder(resp.Body).Decode(&feed)
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					failures.Add(1)
					continue
				}
				cursors[i] = feed.NextAfter
				lat[i] = append(lat[i], time.Since(t))
			}
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) == 0 {
		b.Fatal("no successful request")
	}
	pct := func(p float64) float64 { return float64(all[int(float64(len(all)-1)*p)].Microseconds()) / 1000 }
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "req/s")
	b.ReportMetric(pct(0.50), "p50_ms")
	b.ReportMetric(pct(0.99), "p99_ms")
	b.ReportMetric(float64(failures.Load()), "failures")
}
