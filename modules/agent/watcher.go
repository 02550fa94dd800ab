package agent

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/go-rod/rod/lib/proto"

	"github.com/fleetwright/fleetwright/modules/agent/supervisor"
	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// runWatcher is the browser watcher: the platform listener.
//
// It is deliberately NOT supervised (ARCHITECTURE.md §4): it recovers on its
// own — a signed-out page signs in again, a dead browser is relaunched with
// a capped backoff, a panic is caught here — and it never returns an error,
// so the supervisor that hosts it (only so the state report lists it) never
// restarts it. A second supervisor racing its own recovery is what the
// design forbids. It returns only when the agent stops it, and parks on a
// captcha until a person restarts it.
func runWatcher(ctx context.Context, h *supervisor.Handle, env WorkerEnv) error {
	backoff := time.Second
	// A watcher's task is the board's next jobs response: the age of its
	// oldest task is the time since it last read one. A watcher alive but
	// reading nothing for its threshold is hung (the panel decides).
	h.OldestTask(env.Clock.Now())
	for ctx.Err() == nil {
		started := env.Clock.Now()
		err := watchOnceSafe(ctx, h, env)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errCaptcha) {
			// Parked for a person: no task, so never "hung".
			h.OldestTask(time.Time{})
			<-ctx.Done()
			return nil
		}
		if errors.Is(err, supervisor.ErrNeedsPerson) {
			// Its platform cannot be built: no retry can help.
			h.OldestTask(time.Time{})
			return err
		}
		if env.Clock.Since(started) > time.Minute {
			backoff = time.Second
		}
		env.Log.Warn("agent: watcher lost its page; recovering", "err", err, "retry_in", backoff)
		select {
		case <-env.Clock.After(backoff):
		case <-ctx.Done():
			return nil
		}
		backoff = min(backoff*2, 30*time.Second)
	}
	return nil
}

func watchOnceSafe(ctx context.Context, h *supervisor.Handle, env WorkerEnv) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("agent: watcher panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return watchOnce(ctx, h, env)
}

// watchOnce runs one browser until it fails: a warm signed-in page on the
// jobs view whose own JSON responses are read through CDP network events
// (Network.responseReceived, then Network.getResponseBody once loading
// finished) — never the DOM, so a layout change does not blind it.
func watchOnce(ctx context.Context, h *supervisor.Handle, env WorkerEnv) error {
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
	metered, err := ps.meter(wctx, page, nil)
	if err != nil {
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		metered()
	}()

	// pending is a jobs response waiting for its body: when it was seen,
	// and what it says of the platform's clock (sent and received on the
	// agent's clock, from Chromium's timing, and its Date header).
	type pending struct {
		seenAt         time.Time
		sent, received time.Time
		timed          bool
		date           string
	}
	type body struct {
		id proto.NetworkRequestID
		pending
	}
	var mu sync.Mutex
	responses := map[proto.NetworkRequestID]pending{}
	bodies := make(chan body, 64)
	bclock := newBoardClock(env.Clock)
	signedOut := make(chan struct{}, 1)

	// jobsReqs are the page's requests whose answers carry jobs (told by
	// their method, URL and body when they leave).
	jobsReqs := map[proto.NetworkRequestID]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		page.EachEvent(func(e *proto.NetworkRequestWillBeSent) {
			if e.Request == nil {
				return
			}
			body := requestBody(e.Request)
			if len(body) == 0 && e.Request.HasPostData {
				// A large body is not in the event; ask for it.
				if res, err := (proto.NetworkGetRequestPostData{RequestID: e.RequestID}).Call(page); err == nil {
					body = []byte(res.PostData)
				}
			}
			if bside.IsJobsRequest(e.Request.Method, parseURL(e.Request.URL), body) {
				mu.Lock()
				jobsReqs[e.RequestID] = true
				mu.Unlock()
				bclock.willBeSent(e)
			}
		}, func(e *proto.NetworkResponseReceived) {
			mu.Lock()
			jobs := jobsReqs[e.RequestID]
			mu.Unlock()
			if e.Response == nil || !jobs {
				return
			}
			sent, received, timed := bclock.span(e.RequestID, e.Response.Timing)
			if bside.IsSignedOutResponse(e.Response.Status) {
				select {
				case signedOut <- struct{}{}:
				default:
				}
				return
			}
			if e.Response.Status != 200 {
				return
			}
			mu.Lock()
			responses[e.RequestID] = pending{seenAt: env.Clock.Now(), sent: sent, received: received, timed: timed,
				date: headerValue(e.Response.Headers, "Date")}
			mu.Unlock()
		}, func(e *proto.NetworkLoadingFinished) {
			mu.Lock()
			p, ok := responses[e.RequestID]
			delete(responses, e.RequestID)
			delete(jobsReqs, e.RequestID)
			mu.Unlock()
			if !ok {
				return
			}
			select {
			case bodies <- body{e.RequestID, p}:
			default:
				env.Log.Warn("agent: watcher falling behind; a response was skipped (the next poll repeats nothing, a reload repeats all)")
			}
		}, func(e *proto.NetworkLoadingFailed) {
			mu.Lock()
			delete(responses, e.RequestID)
			delete(jobsReqs, e.RequestID)
			mu.Unlock()
		})()
	}()

	// Bodies are fetched off the event loop.
	seen := map[string]time.Time{} // key → expires
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			var b body
			select {
			case b = <-bodies:
			case <-wctx.Done():
				return
			}
			res, err := proto.NetworkGetResponseBody{RequestID: b.id}.Call(page)
			if err != nil {
				continue
			}
			raw := []byte(res.Body)
			if res.Base64Encoded {
				if raw, err = base64.StdEncoding.DecodeString(res.Body); err != nil {
					continue
				}
			}
			jobs, err := bside.ParseJobs(raw)
			if err != nil {
				env.Log.Warn("agent: watcher could not read a jobs response", "err", err)
				continue
			}
			if b.timed {
				if st, res, ok := serverTime(bside, raw, b.date); ok {
					bclock.observe(b.sent, st, b.received, res)
				}
			}
			now := env.Clock.Now()
			h.OldestTask(now)
			for k, exp := range seen {
				if !exp.IsZero() && now.After(exp) {
					delete(seen, k)
				}
			}
			var sightings []wire.Sighting
			for _, j := range jobs {
				if _, dup := seen[j.Key]; dup {
					continue
				}
				seen[j.Key] = j.ExpiresAt
				sightings = append(sightings, wire.Sighting{Job: j, SeenAt: b.seenAt})
			}
			if err := env.Claims.Detected(wctx, env.Spec.Name, sightings, bclock.reading()); err != nil {
				// Lost sightings are seen again after the next reload, or
				// by the tenant's other watcher.
				for _, s := range sightings {
					delete(seen, s.Job.Key)
				}
				env.Log.Debug("agent: detected not sent", "err", err, "jobs", len(sightings))
			}
		}
	}()

	// A watcher waiting for the account's request budget has no task: it
	// is held, not hung.
	if env.Budget.holding() {
		h.OldestTask(time.Time{})
		if err := env.Budget.wait(ctx); err != nil {
			return nil
		}
		h.OldestTask(env.Clock.Now())
	}
	if err := ps.signIn(ctx, "watcher start"); err != nil {
		return err
	}
	if path := parseURL(pageURL(ps)).Path; path != parseURL(bside.JobsURL()).Path {
		if err := ps.open(ctx); err != nil {
			return err
		}
	}
	unregister := env.Sessions.Register(env.Spec.Name, ps.lookup)
	defer unregister()

	every := settingMS(env.Spec, SettingKeepWarmMS, time.Second)
	tick := env.Clock.After(every)
	held := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-signedOut:
		case <-tick:
			tick = env.Clock.After(every)
		}
		// While the account's request budget is spent the page's polls are
		// failed in the browser (meter) and the page keeps its cursor: the
		// first poll after the hold reads what was published meanwhile.
		// The watcher is held, not hung, and it signs nothing in.
		if env.Budget.holding() {
			if !held {
				held = true
				h.OldestTask(time.Time{})
			}
			continue
		}
		if held {
			held = false
			h.OldestTask(env.Clock.Now())
		}
		st, err := ps.state(ctx)
		if err != nil {
			return err
		}
		switch st {
		case platform.PageCaptcha:
			shot := ps.screenshot()
			env.reportCaptcha("the watcher's page shows a captcha", shot)
			return errCaptcha
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

func pageURL(ps *pageSession) string {
	info, err := ps.page.Info()
	if err != nil {
		return ""
	}
	return info.URL
}
