package agent

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/wire"
)

// A panel that goes silent without closing (a partition without FIN or
// RST, a frozen replica) is dropped after two of its ping intervals, and
// the agent dials again.
func TestSilentPanelIsDroppedAfterTwoPingIntervals(t *testing.T) {
	cfg := wire.Config{Account: wire.Account{Key: "acct-0042"}, Workers: []wire.WorkerSpec{{Name: "w1", Kind: "idle"}}}
	p := newFakePanel(t, func(int) action { return welcome("inst_a", cfg) })
	h := newHarness(t, p)
	h.start(t)
	p.hello(t)
	pc := p.session(t)

	// One ping says nothing about the interval; the second one does.
	pc.send(t, wire.Ping{CommandID: "p1", SentAt: time.Now()})
	next[wire.Pong](t, pc, nil)
	h.clk.Advance(10 * time.Second)
	pc.send(t, wire.Ping{CommandID: "p2", SentAt: time.Now()})
	next[wire.Pong](t, pc, nil)

	h.clk.Advance(19 * time.Second)
	select {
	case <-pc.closed:
		t.Fatal("dropped before two intervals of silence")
	case <-time.After(200 * time.Millisecond):
	}
	sleeps := len(h.clk.Sleeps())
	h.clk.Advance(2 * time.Second)
	select {
	case <-pc.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the agent kept a silent connection")
	}
	require.Contains(t, h.logs.String(), "the panel has been silent for two ping intervals")
	h.clk.Advance(h.nextSleep(t, sleeps))
	p.hello(t)
	p.session(t)
}

// A partition that starts after the first ping, before a second one could
// show the interval, still ends the connection: the agent assumes the
// panel's default interval until it has measured one.
func TestSilentPanelAfterOnePingIsDropped(t *testing.T) {
	cfg := wire.Config{Account: wire.Account{Key: "acct-0042"}, Workers: []wire.WorkerSpec{{Name: "w1", Kind: "idle"}}}
	p := newFakePanel(t, func(int) action { return welcome("inst_a", cfg) })
	h := newHarness(t, p)
	h.start(t)
	p.hello(t)
	pc := p.session(t)

	pc.send(t, wire.Ping{CommandID: "p1", SentAt: time.Now()})
	next[wire.Pong](t, pc, nil)
	h.clk.Advance(2*assumedPingEvery - time.Second)
	select {
	case <-pc.closed:
		t.Fatal("dropped before two assumed intervals of silence")
	case <-time.After(200 * time.Millisecond):
	}
	h.clk.Advance(2 * time.Second)
	select {
	case <-pc.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the agent kept a silent connection after one ping")
	}
	require.Contains(t, h.logs.String(), "the panel has been silent for two ping intervals")
}
