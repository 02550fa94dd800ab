package agent

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/proto"

	"github.com/fleetwright/fleetwright/app/browser"
	"github.com/fleetwright/fleetwright/app/egress"
	"github.com/fleetwright/fleetwright/modules/agent/store"
	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// pageSession is a browser worker's Chromium and its one warm page, with
// the account's traits applied (user agent, language and Accept-Language,
// timezone from the region, viewport from the profile).
type pageSession struct {
	env  WorkerEnv
	ad   platform.Adapter
	br   *browser.Browser
	page *rod.Page
	gen  int
	slot bool
	w, h float64
	// lookups counts the look-ups running in the page (meter lets their
	// requests pass the budget).
	lookups atomic.Int32
	// timed stops counting the browser's open seconds.
	timed func()
	// proxy is the browser's guard proxy (the board's origins only).
	proxy *egress.Proxy
}

// BrowserOptions are the Chromium options of an account's traits.
func BrowserOptions(env WorkerEnv) (browser.Options, error) {
	t, err := env.traits()
	if err != nil {
		return browser.Options{}, err
	}
	// Chromium wants the bare list; it adds the q-values itself.
	var langs []string
	for _, part := range strings.Split(t.Language.AcceptLanguage, ",") {
		if l, _, _ := strings.Cut(strings.TrimSpace(part), ";"); l != "" {
			langs = append(langs, l)
		}
	}
	return browser.Options{UserAgent: t.UserAgent, Language: t.Language.Tag, AcceptLanguage: strings.Join(langs, ","),
		Timezone: t.Timezone, Width: t.Profile.ViewportWidth, Height: t.Profile.ViewportHeight,
		User: env.BrowserUser, NoSandbox: env.BrowserNoSandbox, Log: env.Log}, nil
}

// openPage takes a browser slot (waiting for one), launches Chromium and
// opens the page.
func openPage(ctx context.Context, env WorkerEnv) (*pageSession, error) {
	ad, guard, err := env.adapter(ctx)
	if err != nil {
		return nil, err
	}
	opts, err := BrowserOptions(env)
	if err != nil {
		return nil, err
	}
	// Chromium's only way out is the guard proxy, which dials the
	// platform's origins and nothing else (loopback included).
	gp, err := guard.ListenProxy("127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	opts.ExtraFlags = append(opts.ExtraFlags, gp.ChromiumFlags()...)
	select {
	case env.Browsers <- struct{}{}:
	case <-ctx.Done():
		_ = gp.Close()
		return nil, ctx.Err()
	}
	ps := &pageSession{env: env, ad: ad, slot: true, proxy: gp, w: float64(opts.Width), h: float64(opts.Height)}
	if ps.w <= 0 || ps.h <= 0 {
		ps.w, ps.h = 1280, 800
	}
	if ps.br, err = browser.Launch(ctx, opts); err != nil {
		ps.close()
		return nil, fmt.Errorf("agent: %w", err)
	}
	ps.timed = env.BrowserTime.opened(env.Spec.Kind)
	if ps.page, err = ps.br.Page(ctx); err != nil {
		ps.close()
		return nil, fmt.Errorf("agent: %w", err)
	}
	return ps, nil
}

func (ps *pageSession) close() {
	if ps.br != nil {
		_ = ps.br.Close()
		ps.br = nil
	}
	if ps.proxy != nil {
		_ = ps.proxy.Close()
		ps.proxy = nil
	}
	if ps.timed != nil {
		ps.timed()
		ps.timed = nil
	}
	if ps.slot {
		<-ps.env.Browsers
		ps.slot = false
	}
}

func (ps *pageSession) base() string { return ps.env.Account.BoardURL }

func (ps *pageSession) cookies() ([]store.Cookie, error) {
	cs, err := ps.page.Cookies([]string{ps.base()})
	if err != nil {
		return nil, fmt.Errorf("agent: read page cookies: %w", err)
	}
	out := make([]store.Cookie, 0, len(cs))
	for _, c := range cs {
		sc := store.Cookie{Domain: c.Domain, Name: c.Name, Path: c.Path, Value: wire.NewSecret(c.Value),
			Secure: c.Secure, HTTPOnly: c.HTTPOnly}
		if c.Expires > 0 {
			sc.Expires = time.Unix(int64(c.Expires), 0)
		}
		out = append(out, sc)
	}
	return out, nil
}

func (ps *pageSession) setCookies(cs []store.Cookie) error {
	params := make([]*proto.NetworkCookieParam, 0, len(cs))
	for _, c := range cs {
		p := &proto.NetworkCookieParam{Name: c.Name, Value: c.Value.Reveal(), URL: ps.base(), Path: c.Path,
			Secure: c.Secure, HTTPOnly: c.HTTPOnly}
		if !c.Expires.IsZero() && c.Expires.Year() > 1970 {
			p.Expires = proto.TimeSinceEpoch(c.Expires.Unix())
		}
		params = append(params, p)
	}
	if err := ps.page.SetCookies(params); err != nil {
		return fmt.Errorf("agent: set page cookies: %w", err)
	}
	return nil
}

// open navigates the page to the platform's jobs view.
func (ps *pageSession) open(ctx context.Context) error {
	p := ps.page.Context(ctx)
	if err := p.Navigate(ps.ad.Browser().JobsURL()); err != nil {
		return fmt.Errorf("%w: open jobs page: %v", platform.ErrUnavailable, err)
	}
	if err := p.WaitLoad(); err != nil {
		return fmt.Errorf("%w: jobs page: %v", platform.ErrUnavailable, err)
	}
	return nil
}

// signIn leaves the page signed in on the jobs view: it adopts a sibling's
// newer session when there is one, otherwise logs in in the page with a
// fresh one-time code; within the login retry cap.
func (ps *pageSession) signIn(ctx context.Context, why string) error {
	tries := settingInt(ps.env.Spec, SettingLoginTries, 3)
	bside := ps.ad.Browser()
	var last error
	for i := 0; i < tries; i++ {
		var codes *platform.TOTP
		cs, gen, fresh, err := ps.env.Sessions.Login(ctx, ps.gen, ps.env.Account.BoardURL, func(ctx context.Context, creds platform.Credentials) ([]store.Cookie, error) {
			codes = ps.env.codes(creds)
			if err := bside.Login(ctx, ps.page, creds, codes); err != nil {
				return nil, err
			}
			return ps.cookies()
		})
		if err == nil {
			ps.gen = gen
			if fresh {
				ps.env.signedIn(codes, why)
				return nil
			}
			if err = ps.setCookies(cs); err == nil {
				if err = ps.open(ctx); err == nil {
					st, serr := bside.State(ctx, ps.page)
					if serr == nil && st == platform.PageOK {
						return nil
					}
					err = fmt.Errorf("agent: adopted session is %s", st)
				}
			}
		}
		last = err
		if errors.Is(err, errBoardNotBound) {
			// Nothing was sent; only a person (or the panel) can fix it.
			if err := ps.env.credentialsNotSent(ctx, err); err != nil {
				return err
			}
			i = -1 // new credentials: a fresh round of tries
			continue
		}
		if ctx.Err() != nil || errors.Is(err, platform.ErrCredentials) {
			break
		}
		select {
		case <-ps.env.Clock.After(time.Duration(i) * time.Second):
		case <-ctx.Done():
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("agent: sign in failed %d times: %w", tries, last)
}

// screenshot is a small JPEG of the page, base64, sized to fit a message.
func (ps *pageSession) screenshot() string {
	budget := wire.MaxMessageBytes / 2
	for _, q := range []struct {
		quality int
		scale   float64
	}{{50, 0.5}, {35, 0.35}, {25, 0.25}} {
		w, h := ps.w, ps.h
		q0 := q.quality
		raw, err := ps.page.Screenshot(false, &proto.PageCaptureScreenshot{Format: proto.PageCaptureScreenshotFormatJpeg,
			Quality: &q0, Clip: &proto.PageViewport{X: 0, Y: 0, Width: w, Height: h, Scale: q.scale}})
		if err != nil {
			return ""
		}
		s := base64.StdEncoding.EncodeToString(raw)
		if len(s) < budget {
			return s
		}
	}
	return ""
}

// state reads the page's state (captcha, signed out).
func (ps *pageSession) state(ctx context.Context) (platform.PageState, error) {
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return ps.ad.Browser().State(c, ps.page)
}

// requestBody is a request's body as CDP reports it (its data, or its
// entries).
func requestBody(r *proto.NetworkRequest) []byte {
	body := []byte(r.PostData)
	if len(body) == 0 {
		for _, pe := range r.PostDataEntries {
			body = append(body, pe.Bytes...)
		}
	}
	return body
}

func parseURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		return &url.URL{}
	}
	return u
}

// meter routes every request the page sends to the platform's origin
// through the account's request budget (budget.go), with CDP request
// interception (Fetch.requestPaused at the request stage): each is counted
// before it leaves, or failed in the browser while the budget is spent, so
// nothing over the budget reaches the platform. Requests elsewhere are let
// go untouched. book, when set (the browser actor), takes the booking
// requests instead: it decides them and counts them itself. The page has
// one interception (a second Fetch.enable would replace the first), so a
// worker that needs the booking request gets it through here.
func (ps *pageSession) meter(ctx context.Context, page *rod.Page, book func(e *proto.FetchRequestPaused)) (wait func(), err error) {
	bside := ps.ad.Browser()
	origin := parseURL(ps.base())
	patterns := []*proto.FetchRequestPattern{{URLPattern: origin.Scheme + "://" + origin.Host + "/*", RequestStage: proto.FetchRequestStageRequest}}
	if book != nil {
		patterns = append(patterns, &proto.FetchRequestPattern{URLPattern: bside.BookRequestPattern(), RequestStage: proto.FetchRequestStageRequest})
	}
	// Subscribed before interception starts, so no paused request is
	// missed (one nobody continues would hang the page).
	events := page.Context(ctx).EachEvent(func(e *proto.FetchRequestPaused) {
		u := parseURL(e.Request.URL)
		if book != nil && bside.IsBookRequest(e.Request.Method, u, requestBody(e.Request)) {
			book(e)
			return
		}
		if u.Host != origin.Host {
			_ = proto.FetchContinueRequest{RequestID: e.RequestID}.Call(page)
			return
		}
		if err := ps.env.Budget.take(ps.lookups.Load() > 0); err != nil {
			_ = proto.FetchFailRequest{RequestID: e.RequestID, ErrorReason: proto.NetworkErrorReasonBlockedByClient}.Call(page)
			return
		}
		_ = proto.FetchContinueRequest{RequestID: e.RequestID}.Call(page)
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		events()
	}()
	if err := (proto.FetchEnable{Patterns: patterns}).Call(page); err != nil {
		return func() { <-done }, fmt.Errorf("agent: enable request interception: %w", err)
	}
	return func() { <-done }, nil
}

// lookup runs a look-up in the page: its requests pass the budget (they
// settle claims whose outcome is unknown).
func (ps *pageSession) lookup(ctx context.Context, cursor string) (platform.Bookings, error) {
	ps.lookups.Add(1)
	defer ps.lookups.Add(-1)
	return ps.ad.Browser().Bookings(ctx, ps.page, cursor)
}
