package gateway

import (
	"fmt"
	"time"
)

// An idle agent connection holds one goroutine (its reader). What used to
// be a second goroutine per connection — a writer waiting on its ping,
// poll and silence timers — is one sweeper per replica that looks at
// every connection a few times per ping interval and starts a short-lived
// goroutine for what is due. Ten thousand idle agents then cost ten
// thousand blocked readers, not twenty thousand goroutines and thirty
// thousand timers (docs/BENCHMARKS.md, "Agent connections").

// sweepTick is how often the sweeper looks: at most a second, and a
// quarter of the ping and poll intervals, so a ping leaves at most a
// quarter interval late and a silent agent is dropped at most a quarter
// interval past its two.
func (g *Gateway) sweepTick() time.Duration {
	return min(time.Second, g.cfg.PingEvery/4, g.cfg.PollEvery/4)
}

// watch schedules a welcomed connection's pings and command polls, and
// starts the sweeper if it is not running. Called with g.mu held.
func (g *Gateway) watch(c *conn) {
	now := g.cfg.Clock.Now()
	c.mu.Lock()
	c.nextPing, c.nextPoll = now.Add(g.cfg.PingEvery), now.Add(g.cfg.PollEvery)
	c.mu.Unlock()
	if !g.sweeping {
		g.sweeping = true
		go g.sweep()
	}
}

// sweep runs while the replica holds connections.
func (g *Gateway) sweep() {
	tick := g.sweepTick()
	for {
		<-g.cfg.Clock.After(tick)
		g.mu.Lock()
		if len(g.conns) == 0 {
			g.sweeping = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		now := g.cfg.Clock.Now()
		for _, c := range g.local() {
			c.due(now)
		}
	}
}

// due starts what is due on c at now: a ping, a command poll, or the end of
// a connection whose agent has been silent for two ping intervals.
func (c *conn) due(now time.Time) {
	g := c.g
	if c.ctx.Err() != nil {
		return // ended; its reader's goroutine is settling it
	}
	// An agent answers every ping; two ping intervals without a word from
	// it mean the path is dead even if no FIN or RST ever arrives (a
	// partition, a frozen host): drop the connection, so its claims are
	// handled as a lost connection's and the agent's reconnect is not
	// mistaken for a second connection of a live one. While the reader
	// waits for a frame's handling (a slow database) the panel is not
	// listening: that is not the agent's silence (handling is read first:
	// the reader moves heard on before it clears handling).
	if !c.handling.Load() && now.Sub(time.Unix(0, c.heard.Load())) >= 2*g.cfg.PingEvery {
		c.mu.Lock()
		ending := c.ending
		c.ending = true // dropped once
		c.mu.Unlock()
		if !ending {
			g.log.Warn("agent silent for two ping intervals; dropping its connection", "agent", c.agent.ID, "silent_for", 2*g.cfg.PingEvery, "remote", c.remote)
			g.silentDrops.Inc()
			_ = c.ws.CloseNow()
		}
		return
	}
	c.mu.Lock()
	ping, poll := !now.Before(c.nextPing), !now.Before(c.nextPoll)
	if ping {
		c.nextPing = now.Add(g.cfg.PingEvery)
	}
	if poll {
		c.nextPoll = now.Add(g.cfg.PollEvery)
	}
	c.mu.Unlock()
	if ping {
		c.spawn(func() { c.ping(c.ctx) })
	}
	if poll {
		c.kick()
	}
}

// spawn runs f on a short-lived goroutine of the connection, unless the
// connection has ended (run waits for every one before its bookkeeping).
func (c *conn) spawn(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ending {
		return false
	}
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		defer c.recoverPanic()
		f()
	}()
	return true
}

// kick delivers the agent's pending commands now: one delivery at a time
// per connection, and one more after it when a wake-up came meanwhile.
func (c *conn) kick() {
	c.again.Store(true)
	if !c.delivering.CompareAndSwap(false, true) {
		return
	}
	if !c.spawn(c.deliverLoop) {
		c.delivering.Store(false)
	}
}

func (c *conn) deliverLoop() {
	for {
		c.again.Store(false)
		c.deliver(c.ctx)
		c.delivering.Store(false)
		// A kick that came after the read above either saw delivering
		// still true (and left again set) or started its own loop.
		if !c.again.Load() || !c.delivering.CompareAndSwap(false, true) {
			return
		}
	}
}

// offload runs f on a fresh goroutine and waits for it: the caller's stack
// stays as shallow as it is, and f's is freed when f returns.
func (c *conn) offload(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer c.recoverPanic()
		f()
	}()
	<-done
}

// recoverPanic keeps a bug in one connection's handling from taking the
// replica down with every other agent's connection: the connection ends.
func (c *conn) recoverPanic() {
	if v := recover(); v != nil {
		c.g.log.Error("agent connection failed", "agent", c.agent.ID, "panic", fmt.Sprint(v))
		_ = c.ws.CloseNow()
	}
}
