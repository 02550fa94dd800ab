package agent

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/proto"

	"github.com/fleetwright/fleetwright/app/browser"
	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/traits"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// maxBookAnswer bounds the booking answer read back (a confirmation, not a
// page of data).
const maxBookAnswer = 1 << 20

// bookOnce sends one booking request the page made — paused by CDP
// interception at the request stage, before Chromium's network stack has
// seen it — through the actor's own transport, and answers the page with
// what came back. Chromium's HTTP stack resends a request whose reused
// connection closed before any answer (HttpNetworkTransaction's retry on a
// reused socket, POSTs included) and nothing above it is told; this path
// writes the request once and never again: a lost answer is UNKNOWN and the
// reconciler reads the outcome from the platform. The request keeps the
// page's method, URL, headers and body, gets the page's cookies for that
// URL (Chromium adds them below interception) and the booking key as the
// platform's idempotency header. The action's gate runs right before the
// first byte leaves; if it refuses, nothing is sent and the result is
// NOT_SENT.
func bookOnce(page *rod.Page, tr *platform.Transport, t traits.Traits, bside platform.Browser, act *bookingAction,
	e *proto.FetchRequestPaused, body []byte, clk clock.Clock) platform.BookResult {
	failPage := func(reason proto.NetworkErrorReason) {
		_ = proto.FetchFailRequest{RequestID: e.RequestID, ErrorReason: reason}.Call(page)
	}
	gate := func() error {
		act.mu.Lock()
		defer act.mu.Unlock()
		if act.closed {
			return errors.New("the action timed out before the request left")
		}
		if err := act.gate(); err != nil {
			act.closed = true
			return err
		}
		act.sent, act.sentAt = true, clk.Now()
		return nil
	}
	once := browser.Once{Send: tr.RoundTrip, MaxAnswer: maxBookAnswer,
		// The page's cookies for that URL, as Chromium adds them below
		// interception.
		Cookie: func(u *url.URL) (string, error) {
			res, err := proto.NetworkGetCookies{Urls: []string{u.String()}}.Call(page)
			if err != nil {
				return "", err
			}
			return browser.JoinCookies(res.Cookies), nil
		},
		Prepare: func(req *http.Request) {
			addBrowserHeaders(req, t)
			if hn := bside.IdempotencyHeader(); hn != "" && act.idemKey != "" {
				req.Header.Set(hn, act.idemKey)
			}
		}}
	ans, err := once.Do(platform.WithGate(act.ctx, gate), e.Request, body)
	act.mu.Lock()
	sent, sentAt := act.sent, act.sentAt
	act.mu.Unlock()
	var oe *browser.OnceError
	if errors.As(err, &oe) {
		switch {
		case oe.Stage == browser.NotBuilt:
			failPage(proto.NetworkErrorReasonBlockedByClient)
			return platform.BookResult{Result: wire.ResultNotSent, Detail: "not sent: " + oe.Err.Error()}
		case oe.Stage == browser.CutOff:
			failPage(proto.NetworkErrorReasonConnectionClosed)
			return platform.BookResult{Result: wire.ResultUnknown, SentAt: sentAt, Detail: "answer cut off: " + platform.ShortErr(oe.Err)}
		case !sent:
			failPage(proto.NetworkErrorReasonBlockedByClient)
			if errors.Is(oe.Err, platform.ErrNotSent) {
				return platform.BookResult{Result: wire.ResultNotSent, Detail: "local deadline passed before sending"}
			}
			return platform.BookResult{Result: wire.ResultNotSent, Detail: "not sent: " + platform.ShortErr(oe.Err)}
		default:
			failPage(proto.NetworkErrorReasonConnectionClosed)
			return platform.BookResult{Result: wire.ResultUnknown, SentAt: sentAt, Detail: "no answer: " + platform.ShortErr(oe.Err)}
		}
	}
	r := bside.ParseBookResponse(ans.Status, ans.Header, ans.Body)
	r.SentAt = sentAt
	if r.Result == wire.ResultConfirmed {
		r.ConfirmedAt = clk.Now()
	}
	// The page gets the answer as if its own request had received it:
	// cookies the platform set are stored in the browser first.
	cookies, fulfil := ans.Fulfil()
	if len(cookies) > 0 {
		_ = proto.NetworkSetCookies{Cookies: cookies}.Call(page)
	}
	fulfil.RequestID = e.RequestID
	_ = fulfil.Call(page)
	return r
}

// addBrowserHeaders adds what Chromium adds below interception, as the
// page would have sent it.
func addBrowserHeaders(req *http.Request, t traits.Traits) {
	if req.Header.Get("User-Agent") == "" && t.UserAgent != "" {
		req.Header.Set("User-Agent", t.UserAgent)
	}
	if req.Header.Get("Accept-Language") == "" && t.Language.AcceptLanguage != "" {
		req.Header.Set("Accept-Language", t.Language.AcceptLanguage)
	}
	req.Header.Set("Accept-Encoding", "gzip, deflate")
	if req.Header.Get("Origin") == "" && req.Method != http.MethodGet && req.Method != http.MethodHead {
		req.Header.Set("Origin", req.URL.Scheme+"://"+req.URL.Host)
	}
}
