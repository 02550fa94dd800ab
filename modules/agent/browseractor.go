package agent

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/go-rod/rod/lib/proto"

	"github.com/fleetwright/fleetwright/modules/agent/supervisor"
	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// testHookPaused, when set by a test, runs when a booking request is paused
// in Chrome, before the deadline is checked.
var testHookPaused func(key string)

// bookingAction is the one booking a browser actor is making.
type bookingAction struct {
	ctx          context.Context // the action's: bounds the request it sends
	key, idemKey string          // idemKey: the Idempotency-Key the request gets
	gate         platform.Gate
	done         chan platform.BookResult // capacity 1

	mu     sync.Mutex
	closed bool // timed out: any request now paused is failed
	taken  bool // a request of this booking was taken to be sent
	sent   bool // its gate opened: bytes may have left
	sentAt time.Time
}

func (b *bookingAction) finish(r platform.BookResult) {
	select {
	case b.done <- r:
	default:
	}
}

// runBrowserActor is the browser actor: a warm signed-in page on the jobs
// view that acts by clicking the job's Book control. Every booking request
// the page makes is intercepted (CDP Fetch.requestPaused, request stage)
// and never continued into Chromium's network stack: the actor sends it
// itself, once, through the agent's own transport (bookOnce), with the
// page's headers and cookies and the booking key as the idempotency key,
// and hands the answer back to the page. Chromium resends a request whose
// reused connection closed before any answer; a request it never sends it
// cannot resend. A request that is not this action's job, or whose local
// lease deadline has passed when its first byte would leave, is failed in
// the browser and the outcome is NOT_SENT.
func runBrowserActor(ctx context.Context, h *supervisor.Handle, env WorkerEnv) error {
	ps, err := openPage(ctx, env)
	if err != nil {
		return err
	}
	defer ps.close()
	bside := ps.ad.Browser()
	t, err := env.traits()
	if err != nil {
		return err
	}
	// The actor's own connections to the platform: a booking is written
	// once and never replayed (platform.Transport has no retry), and
	// counted against the account's budget as it leaves — the claim is
	// ACTING: counted, never refused.
	tr := &platform.Transport{Order: t.Profile.HeaderOrder, Admit: func(*http.Request) error {
		_ = env.Budget.take(true)
		return nil
	}}
	defer tr.CloseIdle()
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	page := ps.page.Context(wctx)

	var mu sync.Mutex
	var cur *bookingAction
	current := func() *bookingAction {
		mu.Lock()
		defer mu.Unlock()
		return cur
	}
	fail := func(id proto.FetchRequestID) {
		_ = proto.FetchFailRequest{RequestID: id, ErrorReason: proto.NetworkErrorReasonBlockedByClient}.Call(page)
	}

	// The page's booking requests (the meter hands them here; every other
	// request to the platform it counts against the account's budget).
	bookPaused := func(e *proto.FetchRequestPaused) {
		body := requestBody(e.Request)
		act := current()
		if act == nil {
			fail(e.RequestID) // a booking nobody asked for never leaves
			return
		}
		if testHookPaused != nil {
			testHookPaused(act.key)
		}
		act.mu.Lock()
		if act.closed || act.taken || bside.BookRequestKey(parseURL(e.Request.URL), body) != act.key {
			// A second request of the same booking (the page's own retry)
			// never leaves either: one booking, one request.
			act.mu.Unlock()
			fail(e.RequestID)
			return
		}
		act.taken = true
		act.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			act.finish(bookOnce(page, tr, t, bside, act, e, body, env.Clock))
		}()
	}
	metered, err := ps.meter(wctx, page, bookPaused)
	if err != nil {
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		metered()
	}()

	if err := ps.signIn(ctx, "actor start"); err != nil {
		return err
	}
	if parseURL(pageURL(ps)).Path != parseURL(bside.JobsURL()).Path {
		if err := ps.open(ctx); err != nil {
			return err
		}
	}
	unregister := env.Sessions.Register(env.Spec.Name, ps.lookup)
	defer unregister()

	book := func(actx context.Context, key, idemKey string, gate platform.Gate) platform.BookResult {
		act := &bookingAction{ctx: actx, key: key, idemKey: idemKey, gate: gate, done: make(chan platform.BookResult, 1)}
		mu.Lock()
		cur = act
		mu.Unlock()
		defer func() {
			mu.Lock()
			cur = nil
			mu.Unlock()
		}()
		if err := bside.ClickBook(actx, ps.page, key); err != nil {
			act.finish(platform.BookResult{Result: wire.ResultNotSent, Detail: "could not click: " + err.Error()})
		}
		var r platform.BookResult
		select {
		case r = <-act.done:
		case <-actx.Done():
			r = platform.BookResult{Result: wire.ResultNotSent, Detail: "no booking request within the action timeout"}
		}
		act.mu.Lock()
		act.closed = true
		sent, sentAt := act.sent, act.sentAt
		act.mu.Unlock()
		if r.Result == wire.ResultNotSent && sent {
			// A request left after all (a click racing the timeout): the
			// answer is unknown, never NOT_SENT.
			select {
			case r = <-act.done:
			default:
				r = platform.BookResult{Result: wire.ResultUnknown, SentAt: sentAt, Detail: "no answer within the action timeout"}
			}
		}
		return r
	}

	grants := env.Claims.Grants(env.Spec.Name)
	every := settingMS(env.Spec, SettingKeepWarmMS, time.Second)
	tick := env.Clock.After(every)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
			tick = env.Clock.After(every)
		case o := <-env.Claims.Offers():
			res, acted := actOn(ctx, h, env, ps.ad, o, book)
			if acted && res.Captcha {
				return env.needsPerson(ctx, "the booking of "+o.Job.Key+" was answered with a captcha", ps.screenshot())
			}
			if !acted || !res.SignedOut {
				continue
			}
		case g := <-grants:
			res, acted := actOnGrant(ctx, h, env, ps.ad, g, book)
			if acted && res.Captcha {
				return env.needsPerson(ctx, "the booking of "+g.Job.Key+" was answered with a captcha", ps.screenshot())
			}
			if !acted || !res.SignedOut {
				continue
			}
		}
		if env.Budget.holding() {
			// The page's polls are failed in the browser until the window
			// frees; no sign-in or reload spends what is not there.
			continue
		}
		st, err := ps.state(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		switch st {
		case platform.PageCaptcha:
			return env.needsPerson(ctx, "the actor's page shows a captcha", ps.screenshot())
		case platform.PageSignedOut:
			if err := ps.signIn(ctx, "the session expired"); err != nil {
				return err
			}
		case platform.PageBroken:
			env.Log.Warn("agent: the jobs page is an error page; loading it again", "worker", env.Spec.Name)
			if err := ps.open(ctx); err != nil {
				return err
			}
		default:
			if parseURL(pageURL(ps)).Path != parseURL(bside.JobsURL()).Path {
				if err := ps.open(ctx); err != nil {
					return err
				}
			}
		}
	}
}
