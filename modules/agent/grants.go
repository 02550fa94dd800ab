package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleetwright/fleetwright/modules/agent/supervisor"
	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Assignment dispatch on the agent's side (protocol v4; docs/CLAIMS.md,
// "Dispatch modes"). A lease_grant names one of this agent's actors; the
// claim is already ACTING. The actor converts the grant's send-by time to
// its own clock (the panel's measured offset, minus the error bound and its
// margin), journals the operation, and books; its gate asks the panel for a
// read-only fenced check just before the request leaves. It answers
// NOT_SENT whenever it cannot act in time, is paused, or is refused.

// grantBuffer bounds the grants waiting for one actor; a grant that finds
// it full is answered NOT_SENT at once, so the panel grants it to another.
const grantBuffer = 64

// grantsFor returns the actor's grant channel (made on first use).
func (c *Claims) grantsFor(worker string) chan wire.LeaseGrant {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.grants == nil {
		c.grants = map[string]chan wire.LeaseGrant{}
	}
	ch, ok := c.grants[worker]
	if !ok {
		ch = make(chan wire.LeaseGrant, grantBuffer)
		c.grants[worker] = ch
	}
	return ch
}

// Grants delivers the panel's grants for one actor.
func (c *Claims) Grants(worker string) <-chan wire.LeaseGrant { return c.grantsFor(worker) }

// grant queues a grant for its actor. An actor that is not running here,
// or whose queue is full, cannot act on it: NOT_SENT at once (nothing was
// journaled, nothing left), so the panel releases it and grants again.
func (c *Claims) grant(ctx context.Context, g wire.LeaseGrant) {
	running := false
	for _, s := range c.a.sup.States() {
		if s.Name == g.Worker && s.State == wire.WorkerRunning && (s.Kind == KindActor || s.Kind == KindHTTPActor) {
			running = true
		}
	}
	if running {
		select {
		case c.grantsFor(g.Worker) <- g:
			return
		default:
		}
	}
	why := "the actor is not running on this agent"
	if running {
		why = "the actor has too many grants waiting"
	}
	c.notSent(ctx, g, why)
}

// notSent answers a grant that was never acted on.
func (c *Claims) notSent(ctx context.Context, g wire.LeaseGrant, why string) {
	o := wire.Outcome{Worker: g.Worker, Key: g.Job.Key, Token: g.Token, OperationID: g.OperationID,
		Result: wire.ResultNotSent, Detail: why}
	if err := c.reportUnjournaled(ctx, o); err != nil {
		c.a.log.Warn("agent: could not answer a grant NOT_SENT; the panel settles it by its deadline", "key", g.Job.Key, "err", err)
	}
}

// GateCheck asks the panel for the fenced read-only check of a grant.
func (c *Claims) GateCheck(ctx context.Context, worker, key string, token int64) (wire.GateResult, error) {
	id := newID()
	r, err := c.request(ctx, id, wire.GateCheck{RequestID: id, Worker: worker, Key: key, Token: token})
	if err != nil {
		return wire.GateResult{}, err
	}
	gr, ok := r.(wire.GateResult)
	if !ok {
		return wire.GateResult{}, fmt.Errorf("agent: gate check answered with %s", r.MessageType())
	}
	return gr, nil
}

// errGateRefused: the panel's fenced check refused the action.
var errGateRefused = errors.New("agent: the panel's gate check refused the action")

// errPaused: the agent was paused between the grant and the send.
var errPaused = errors.New("agent: paused")

// actOnGrant runs one grant (the claim is ACTING already):
//  1. NOT_SENT at once if paused, if the idempotency setting and the
//     platform disagree, or if the send-by time (on the agent's clock,
//     minus the clock's error bound and the margin) has passed;
//  2. journal the operation id (failure: NOT_SENT, not acting);
//  3. book; right before the request's bytes leave, the gate checks the
//     local deadline and the pause, then asks the panel's fenced read-only
//     check (token, holder, state, pause switches, send-by by the database
//     clock) — a refusal is NOT_SENT;
//  4. journal and report the outcome (UNKNOWN for anything uncertain).
func actOnGrant(ctx context.Context, h *supervisor.Handle, env WorkerEnv, ad platform.Adapter, g wire.LeaseGrant, book booker) (platform.BookResult, bool) {
	worker := env.Spec.Name
	log := env.Log.With("key", g.Job.Key, "token", g.Token)
	h.OldestTask(env.Clock.Now())
	defer h.OldestTask(time.Time{})
	g.Worker = worker
	margin := settingMS(env.Spec, SettingMarginMS, 500*time.Millisecond)
	deadline := g.Deadline(margin)
	held := env.Budget.reason()
	switch {
	case env.Paused():
		env.Claims.notSent(ctx, g, "the agent is paused")
		return platform.BookResult{}, false
	case held != "":
		env.Claims.notSent(ctx, g, held)
		return platform.BookResult{}, false
	case !env.keysAgree(ctx, ad, g.KeysHonoured):
		env.Claims.notSent(ctx, g, "the tenant's idempotency setting and the platform disagree")
		return platform.BookResult{}, false
	case !env.Clock.Now().Before(deadline):
		log.Info("agent: grant past its send-by time; answering NOT_SENT")
		env.Claims.notSent(ctx, g, "granted too late to act: past its send-by time")
		return platform.BookResult{}, false
	}
	out := wire.Outcome{Worker: worker, Key: g.Job.Key, Token: g.Token, OperationID: g.OperationID}
	if err := env.Claims.begin(ctx, g.OperationID, g.Job.Key, worker, g.Token); err != nil {
		log.Error("agent: the journal cannot be written; not acting", "err", err)
		env.Claims.notSent(ctx, g, "the agent's journal cannot be written (disk full?); not acting")
		return platform.BookResult{}, false
	}
	checked := false
	gate := func() error {
		if !env.Clock.Now().Before(deadline) {
			return errDeadline
		}
		if env.Paused() {
			return errPaused
		}
		if checked {
			return nil
		}
		cctx, cancel := context.WithDeadline(ctx, deadline)
		gr, err := env.Claims.GateCheck(cctx, worker, g.Job.Key, g.Token)
		cancel()
		if err != nil {
			return fmt.Errorf("%w: %v", errGateRefused, err)
		}
		if !gr.OK {
			return fmt.Errorf("%w (%s)", errGateRefused, gr.Reason)
		}
		checked = true
		return nil
	}
	idem := g.BookingKey
	if idem == "" {
		idem = g.OperationID
	}
	res := bookAndReport(ctx, h, env, log, out, int64(g.HardTimeoutMillis), idem, gate, book)
	log.Info("agent: acted on a grant", "result", res.Result, "detail", res.Detail)
	return res, true
}
