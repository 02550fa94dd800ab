package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coder/websocket"

	"github.com/fleetwright/fleetwright/modules/link"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// errPanelSilent ends a connection on which the panel said nothing for two
// ping intervals.
var errPanelSilent = errors.New("agent: the panel went silent")

// assumedPingEvery is the panel's ping interval (gateway.Config's
// default) that the agent assumes until two pings have measured it.
const assumedPingEvery = 15 * time.Second

// session is one welcomed (or about to be) connection.
type session struct {
	a       *agent
	c       *link.Conn
	agentID string // from welcome: sealed credentials are bound to it

	end          outcome
	retireReason string
	rctx         context.Context // ends with the connection
}

type received struct {
	frame wire.Frame
	at    time.Time
	err   error
}

func (s *session) send(ctx context.Context, m wire.Message) error {
	if err := s.c.Send(ctx, m); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	return nil
}

// read reads one message and when it arrived; a message that does not
// decode is answered with a protocol error (the connection then ends).
func (s *session) read(ctx context.Context) (wire.Frame, time.Time, error) {
	f, err := s.c.Read(ctx)
	at := s.a.cfg.Clock.Now()
	if err != nil {
		return wire.Frame{}, at, fmt.Errorf("agent: %w", err)
	}
	return f, at, nil
}

// serve reports state and answers the panel until the connection ends. The
// end outcome is left in s.end.
func (s *session) serve(ctx, workersCtx context.Context) error {
	s.end = outNetwork
	rctx, cancel := context.WithCancel(ctx)
	s.rctx = rctx
	in := make(chan received, 16)
	readerDone := make(chan struct{})
	defer func() {
		cancel()
		_ = s.c.CloseNow()
		<-readerDone
	}()
	go func() {
		defer close(readerDone)
		defer close(in)
		for {
			f, at, err := s.read(rctx)
			select {
			case in <- received{frame: f, at: at, err: err}:
			case <-rctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()

	if err := s.report(ctx); err != nil {
		return err
	}
	s.a.setCurrent(s)
	defer s.a.setCurrent(nil)
	if s.c.Version() >= wire.V3 {
		go func() {
			if err := s.a.claims.recover(rctx); err != nil && rctx.Err() == nil {
				s.a.log.Error("agent: reporting journaled actions", "err", err)
			}
		}()
	}
	tick := s.a.cfg.Clock.After(s.a.cfg.StateEvery)
	// The panel pings at a steady interval; once two pings showed it, two
	// intervals without a word from the panel mean the path is dead even if
	// no FIN or RST ever arrives (a partition, a frozen replica): drop the
	// connection and reconnect rather than wait on it forever.
	var silence <-chan time.Time
	var lastPing time.Time
	var pingEvery, silentFor time.Duration
	for {
		select {
		case <-ctx.Done():
			_ = s.c.Close(websocket.StatusGoingAway, "agent stopping")
			return ctx.Err()
		case <-silence:
			s.a.log.Warn("agent: the panel has been silent for two ping intervals; dropping the connection", "silent_for", silentFor)
			return errPanelSilent
		case <-tick:
			tick = s.a.cfg.Clock.After(s.a.cfg.StateEvery)
			if err := s.report(ctx); err != nil {
				return err
			}
		case <-s.a.changed:
			if err := s.report(ctx); err != nil {
				return err
			}
		case r, ok := <-in:
			if !ok {
				return errors.New("agent: connection closed")
			}
			if r.err != nil {
				return r.err
			}
			if _, ok := r.frame.Message.(wire.Ping); ok {
				if !lastPing.IsZero() {
					pingEvery = min(max(r.at.Sub(lastPing), time.Second), 10*time.Minute)
				}
				lastPing = r.at
			}
			if every := pingEvery; every > 0 || !lastPing.IsZero() {
				if every == 0 {
					// One ping says nothing about the interval yet: a
					// partition that starts before the second must still
					// end the connection, so assume the panel's default.
					every = assumedPingEvery
				}
				silentFor = 2 * every
				silence = s.a.cfg.Clock.After(silentFor)
			}
			done, err := s.handle(ctx, workersCtx, r)
			if err != nil || done {
				return err
			}
		}
	}
}

// report sends pending events, then the state report.
func (s *session) report(ctx context.Context) error {
	s.a.mu.Lock()
	events := s.a.events
	s.a.events = nil
	s.a.mu.Unlock()
	for i, e := range events {
		if err := s.send(ctx, e); err != nil {
			// Keep what was not sent for the next connection.
			s.a.mu.Lock()
			s.a.events = append(events[i:], s.a.events...)
			s.a.mu.Unlock()
			return err
		}
	}
	return s.send(ctx, s.a.stateReport())
}

// handle answers one message from the panel; done ends the session.
func (s *session) handle(ctx, workersCtx context.Context, r received) (done bool, err error) {
	switch m := r.frame.Message.(type) {
	case wire.Ping:
		s.a.panelClock.add(m.SentAt, r.at)
		return false, s.send(ctx, wire.Pong{CommandID: m.CommandID, PingSentAt: m.SentAt, ReceivedAt: r.at,
			SentAt: s.a.cfg.Clock.Now()})
	case wire.Error:
		s.a.log.Error("agent: the panel reported a protocol error", "code", m.Code, "message", m.Message)
		return true, errClosedByPanel
	case wire.Offer:
		s.a.claims.offer(m)
		return false, nil
	case wire.LeaseResult:
		s.a.claims.deliver(m.RequestID, m)
		return false, nil
	case wire.ActResult:
		s.a.claims.deliver(m.RequestID, m)
		return false, nil
	case wire.LeaseGrant:
		s.a.claims.grant(s.rctx, m)
		return false, nil
	case wire.GateResult:
		s.a.claims.deliver(m.RequestID, m)
		return false, nil
	case wire.OutcomeAck:
		s.a.claims.ack(ctx, m)
		return false, nil
	case wire.PageTask:
		// Fetched off the read loop; the crawler bounds its concurrency.
		go func() {
			res := s.a.crawl.handle(s.rctx, m, func(sc *wire.SealedCredentials) (wire.Credentials, error) {
				return sc.Open(s.a.installKey, s.agentID)
			})
			if err := s.send(s.rctx, res); err != nil {
				s.a.log.Warn("agent: could not answer a page task", "err", err)
			}
		}()
		return false, nil
	case wire.Lookup:
		// Answered off the read loop: a look-up may take seconds.
		go func() {
			res := s.a.lookup(s.rctx, m, s.c.Version())
			if err := s.send(s.rctx, res); err != nil {
				s.a.log.Warn("agent: could not answer a look-up", "err", err)
			}
		}()
		return false, nil
	}
	id, isCommand := wire.CommandID(r.frame.Message)
	if !isCommand {
		s.a.log.Warn("agent: ignoring a message the panel should not send", "type", r.frame.Type)
		return false, nil
	}
	if prev, ok := s.a.recentResult(id); ok {
		// A redelivered command (the panel keeps commands until acknowledged):
		// acknowledge again, do not act twice.
		return false, s.send(ctx, prev)
	}
	res := wire.CommandResult{CommandID: id, OK: true}
	retire := false
	switch m := r.frame.Message.(type) {
	case wire.Configure:
		s.a.budget.set(m.RequestLimit)
		s.a.configure(workersCtx, m.Config)
	case wire.Pause:
		s.a.setPaused(true)
		s.a.log.Info("agent: paused by the panel", "reason", m.Reason)
	case wire.Resume:
		s.a.setPaused(false)
		s.a.log.Info("agent: resumed by the panel")
	case wire.RestartWorker:
		if err := s.a.sup.Restart(workersCtx, m.Worker); err != nil {
			res = wire.CommandResult{CommandID: id, Error: err.Error()}
		} else {
			// Closes the "needs a person" request on the fleet page.
			s.a.event(wire.Event{Level: wire.LevelInfo, Kind: "worker_restarted", Worker: m.Worker,
				Message: "restarted by a person from the console", At: s.a.cfg.Clock.Now()})
		}
	case wire.RotateCredentials:
		if err := s.a.takeCredentials(ctx, s.agentID, m.Credentials, m.Sealed, m.Withheld, m.Origins); err != nil {
			res = wire.CommandResult{CommandID: id, Error: err.Error()}
			s.a.log.Error("agent: rotate credentials", "err", err)
		}
	case wire.Retire:
		retire = true
		s.retireReason = "the panel sent retire: " + m.Reason
	default:
		res = wire.CommandResult{CommandID: id, Error: fmt.Sprintf("agent: command %s not supported", r.frame.Type)}
	}
	s.a.keepResult(res)
	if err := s.send(ctx, res); err != nil {
		return true, err
	}
	if retire {
		s.end = outRetire
		_ = s.c.Close(websocket.StatusNormalClosure, "retired")
		return true, nil
	}
	return false, nil
}

func (a *agent) recentResult(id string) (wire.CommandResult, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.results[id]
	return r, ok
}

func (a *agent) keepResult(r wire.CommandResult) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.results[r.CommandID] = r
	a.resultOrder = append(a.resultOrder, r.CommandID)
	if len(a.resultOrder) > maxKeptResults {
		delete(a.results, a.resultOrder[0])
		a.resultOrder = a.resultOrder[1:]
	}
}
