package agent

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-rod/rod/lib/proto"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// boardClock measures the platform's clock against the agent's from the
// jobs responses a watcher reads anyway, NTP-style: the platform stamped its
// answer somewhere between the moment the request left and the moment the
// answer's headers arrived, so its time minus the midpoint is the offset,
// and half that span bounds the error whatever the network did.
//
// The two moments come from Chromium's own resource timing (monotonic,
// measured in the network stack), never from when CDP events reach us: an
// event's delivery is late by an unknown amount, which would make the bound
// a guess. Chromium's monotonic clock is mapped to the wall clock by the
// requestWillBeSent event, which carries both for one instant, and the wall
// clock to the agent's clock by their difference now (zero unless the
// agent's clock is injected or skewed).
type boardClock struct {
	clk clock.Clock
	est *wire.Estimator

	mu sync.Mutex
	// marks: request id → the instant requestWillBeSent carried, in
	// Chromium's monotonic seconds and in wall-clock seconds.
	marks map[proto.NetworkRequestID][2]float64
	// resolution: the coarsest server time used so far (a Date header is
	// to the second; a body's time is exact).
	resolution time.Duration
}

func newBoardClock(clk clock.Clock) *boardClock {
	return &boardClock{clk: clk, est: wire.NewEstimator(0), marks: map[proto.NetworkRequestID][2]float64{}}
}

// willBeSent records the instant a jobs request was about to leave (a
// redirect repeats the event for the same id; the latest is the one whose
// response arrives).
func (b *boardClock) willBeSent(e *proto.NetworkRequestWillBeSent) {
	b.mu.Lock()
	if len(b.marks) > 256 {
		clear(b.marks) // answers that never came; a reading is only skipped
	}
	b.marks[e.RequestID] = [2]float64{float64(e.Timestamp), float64(e.WallTime)}
	b.mu.Unlock()
}

// span returns, on the agent's clock, when the request was sent and when its
// answer's headers were received; ok is false without timing (a cached or
// service-worker answer) or without the request's mark.
func (b *boardClock) span(id proto.NetworkRequestID, t *proto.NetworkResourceTiming) (sent, received time.Time, ok bool) {
	b.mu.Lock()
	m, found := b.marks[id]
	delete(b.marks, id)
	b.mu.Unlock()
	if !found || t == nil || t.RequestTime <= 0 || t.SendStart < 0 || t.ReceiveHeadersEnd < t.SendStart {
		return time.Time{}, time.Time{}, false
	}
	skew := b.clk.Now().Sub(time.Now())
	at := func(mono float64) time.Time {
		wall := m[1] + (mono - m[0])
		return time.Unix(0, int64(wall*float64(time.Second))).Add(skew)
	}
	return at(t.RequestTime + t.SendStart/1000), at(t.RequestTime + t.ReceiveHeadersEnd/1000), true
}

// serverTime reads the platform's time from a jobs answer: the adapter's
// reading of the body when it has one (exact), else the Date header every
// HTTP answer carries (to the second).
func serverTime(bside platform.Browser, body []byte, date string) (time.Time, time.Duration, bool) {
	if st, ok := bside.(platform.ServerTimer); ok {
		if t, ok := st.ServerTime(body); ok {
			return t, 0, true
		}
	}
	if date = strings.TrimSpace(date); date != "" {
		if t, err := http.ParseTime(date); err == nil {
			return t, time.Second, true
		}
	}
	return time.Time{}, 0, false
}

// observe adds one reading. A Date header's second is the platform's time
// rounded down, so the reading takes the middle of that second and its bound
// grows by half a second.
func (b *boardClock) observe(sent, server, received time.Time, resolution time.Duration) {
	server = server.Add(resolution / 2)
	if b.est.Add(wire.Sample{T0: sent, T1: server, T2: server, T3: received}) != nil {
		return
	}
	b.mu.Lock()
	b.resolution = max(b.resolution, resolution)
	b.mu.Unlock()
}

// reading is the best recent reading (nil before the first).
func (b *boardClock) reading() *wire.BoardClock {
	e, ok := b.est.Estimate()
	if !ok {
		return nil
	}
	b.mu.Lock()
	bound := e.ErrorBound + b.resolution/2
	b.mu.Unlock()
	return &wire.BoardClock{OffsetMicros: e.Offset.Microseconds(), ErrorMicros: (bound + time.Microsecond - 1).Microseconds(),
		MeasuredAt: e.MeasuredAt}
}

// headerValue reads a response header from CDP's map, whose names keep the
// case the server sent (HTTP/2 sends them lower-case).
func headerValue(h proto.NetworkHeaders, name string) string {
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v.Str()
		}
	}
	return ""
}
