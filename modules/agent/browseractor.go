package agent

import (
	"context"
	"encoding/base64"
	"fmt"
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
	key, idemKey string // idemKey: the Idempotency-Key the request gets
	gate         platform.Gate
	done         chan platform.BookResult // capacity 1

	mu        sync.Mutex
	closed    bool // timed out: any request now paused is failed
	sent      bool
	sentAt    time.Time
	networkID proto.NetworkRequestID
	status    int
}

func (b *bookingAction) finish(r platform.BookResult) {
	select {
	case b.done <- r:
	default:
	}
}

// runBrowserActor is the browser actor: a warm signed-in page on the jobs
// view that acts by clicking the job's Book control. Every booking request
// the page makes is intercepted (CDP Fetch.requestPaused): it is let go
// only if it is this action's job and the local lease deadline still holds
// at that moment — with the operation id added as the idempotency key —
// otherwise it is failed in the browser and the outcome is NOT_SENT.
func runBrowserActor(ctx context.Context, h *supervisor.Handle, env WorkerEnv) error {
	ps, err := openPage(ctx, env)
	if err != nil {
		return err
	}
	defer ps.close()
	bside := ps.ad.Browser()
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	page := ps.page.Context(wctx)
	if err := (proto.NetworkEnable{}).Call(page); err != nil {
		return fmt.Errorf("agent: enable network events: %w", err)
	}

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
		body := []byte(e.Request.PostData)
		if len(body) == 0 {
			for _, pe := range e.Request.PostDataEntries {
				body = append(body, pe.Bytes...)
			}
		}
		act := current()
		if act == nil {
			fail(e.RequestID) // a booking nobody asked for never leaves
			return
		}
		if testHookPaused != nil {
			testHookPaused(act.key)
		}
		act.mu.Lock()
		if act.closed || act.sent || bside.BookRequestKey(body) != act.key {
			act.mu.Unlock()
			fail(e.RequestID)
			return
		}
		if err := act.gate(); err != nil {
			act.closed = true
			act.mu.Unlock()
			fail(e.RequestID)
			act.finish(platform.BookResult{Result: wire.ResultNotSent, Detail: "local deadline passed while the request was paused"})
			return
		}
		act.sent, act.sentAt, act.networkID = true, env.Clock.Now(), e.NetworkID
		act.mu.Unlock()
		// The claim is ACTING: counted, never refused.
		_ = env.Budget.take(true)
		var headers []*proto.FetchHeaderEntry
		if hn := bside.IdempotencyHeader(); hn != "" {
			for k, v := range e.Request.Headers {
				headers = append(headers, &proto.FetchHeaderEntry{Name: k, Value: v.Str()})
			}
			headers = append(headers, &proto.FetchHeaderEntry{Name: hn, Value: act.idemKey})
		}
		if err := (proto.FetchContinueRequest{RequestID: e.RequestID, Headers: headers}).Call(page); err != nil {
			act.finish(platform.BookResult{Result: wire.ResultUnknown, SentAt: act.sentAt,
				Detail: "the browser did not confirm it let the request go: " + err.Error()})
		}
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

	wg.Add(1)
	go func() {
		defer wg.Done()
		page.EachEvent(func(e *proto.NetworkResponseReceived) {
			act := current()
			if act == nil || e.Response == nil {
				return
			}
			act.mu.Lock()
			if act.sent && e.RequestID == act.networkID {
				act.status = e.Response.Status
			}
			act.mu.Unlock()
		}, func(e *proto.NetworkLoadingFinished) {
			act := current()
			if act == nil {
				return
			}
			act.mu.Lock()
			mine, status, sentAt := act.sent && e.RequestID == act.networkID, act.status, act.sentAt
			act.mu.Unlock()
			if !mine {
				return
			}
			go func() {
				res, err := proto.NetworkGetResponseBody{RequestID: e.RequestID}.Call(page)
				if err != nil {
					act.finish(platform.BookResult{Result: wire.ResultUnknown, SentAt: sentAt, Detail: "answer unreadable in the browser"})
					return
				}
				body := []byte(res.Body)
				if res.Base64Encoded {
					body, _ = base64.StdEncoding.DecodeString(res.Body)
				}
				r := bside.ParseBookResponse(status, body)
				r.SentAt = sentAt
				if r.Result == wire.ResultConfirmed {
					r.ConfirmedAt = env.Clock.Now()
				}
				act.finish(r)
			}()
		}, func(e *proto.NetworkLoadingFailed) {
			act := current()
			if act == nil {
				return
			}
			act.mu.Lock()
			mine, sentAt := act.sent && e.RequestID == act.networkID, act.sentAt
			act.mu.Unlock()
			if mine {
				act.finish(platform.BookResult{Result: wire.ResultUnknown, SentAt: sentAt, Detail: "connection lost: " + e.ErrorText})
			}
		})()
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
		act := &bookingAction{key: key, idemKey: idemKey, gate: gate, done: make(chan platform.BookResult, 1)}
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
