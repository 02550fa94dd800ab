package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/proto"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/traits"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// maxBookAnswer bounds the booking answer read back (a confirmation, not a
// page of data).
const maxBookAnswer = 1 << 20

// hopHeaders are answer headers that describe the connection the actor
// read the answer on, not the answer handed to the page.
var hopHeaders = map[string]bool{"Connection": true, "Keep-Alive": true, "Transfer-Encoding": true,
	"Content-Length": true, "Content-Encoding": true, "Proxy-Connection": true, "Trailer": true, "Upgrade": true}

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
	req, err := pausedRequest(page, t, e, body)
	if err != nil {
		failPage(proto.NetworkErrorReasonBlockedByClient)
		return platform.BookResult{Result: wire.ResultNotSent, Detail: "not sent: " + err.Error()}
	}
	if hn := bside.IdempotencyHeader(); hn != "" && act.idemKey != "" {
		req.Header.Set(hn, act.idemKey)
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
	resp, err := tr.RoundTrip(req.WithContext(platform.WithGate(act.ctx, gate)))
	act.mu.Lock()
	sent, sentAt := act.sent, act.sentAt
	act.mu.Unlock()
	if err != nil {
		if !sent {
			failPage(proto.NetworkErrorReasonBlockedByClient)
			if errors.Is(err, platform.ErrNotSent) {
				return platform.BookResult{Result: wire.ResultNotSent, Detail: "local deadline passed before sending"}
			}
			return platform.BookResult{Result: wire.ResultNotSent, Detail: "not sent: " + shortErr(err)}
		}
		failPage(proto.NetworkErrorReasonConnectionClosed)
		return platform.BookResult{Result: wire.ResultUnknown, SentAt: sentAt, Detail: "no answer: " + shortErr(err)}
	}
	raw, rerr := io.ReadAll(io.LimitReader(resp.Body, maxBookAnswer))
	_ = resp.Body.Close()
	if rerr != nil {
		failPage(proto.NetworkErrorReasonConnectionClosed)
		return platform.BookResult{Result: wire.ResultUnknown, SentAt: sentAt, Detail: "answer cut off: " + shortErr(rerr)}
	}
	r := bside.ParseBookResponse(resp.StatusCode, raw)
	r.SentAt = sentAt
	if r.Result == wire.ResultConfirmed {
		r.ConfirmedAt = clk.Now()
	}
	answerPage(page, e, resp, raw)
	return r
}

// pausedRequest rebuilds a paused page request for the actor's transport.
func pausedRequest(page *rod.Page, t traits.Traits, e *proto.FetchRequestPaused, body []byte) (*http.Request, error) {
	u, err := url.Parse(e.Request.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("agent: the booking request's URL is not http(s)")
	}
	req, err := http.NewRequest(e.Request.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("agent: booking request: %w", err)
	}
	for k, v := range e.Request.Headers {
		req.Header.Set(k, v.Str())
	}
	// What Chromium adds below interception, as the page would have sent it.
	if req.Header.Get("User-Agent") == "" && t.UserAgent != "" {
		req.Header.Set("User-Agent", t.UserAgent)
	}
	if req.Header.Get("Accept-Language") == "" && t.Language.AcceptLanguage != "" {
		req.Header.Set("Accept-Language", t.Language.AcceptLanguage)
	}
	req.Header.Set("Accept-Encoding", "gzip, deflate")
	if req.Header.Get("Origin") == "" && e.Request.Method != http.MethodGet && e.Request.Method != http.MethodHead {
		req.Header.Set("Origin", u.Scheme+"://"+u.Host)
	}
	res, err := proto.NetworkGetCookies{Urls: []string{u.String()}}.Call(page)
	if err != nil {
		return nil, fmt.Errorf("agent: read the page's cookies: %w", err)
	}
	var jar []string
	for _, c := range res.Cookies {
		jar = append(jar, c.Name+"="+c.Value)
	}
	if len(jar) > 0 {
		req.Header.Set("Cookie", strings.Join(jar, "; "))
	}
	return req, nil
}

// answerPage hands the answer to the page as if its own request had
// received it: cookies the platform set are stored in the browser first,
// then the paused request is fulfilled with the status, headers and body.
func answerPage(page *rod.Page, e *proto.FetchRequestPaused, resp *http.Response, raw []byte) {
	var set []*proto.NetworkCookieParam
	for _, c := range resp.Cookies() {
		p := &proto.NetworkCookieParam{Name: c.Name, Value: c.Value, URL: e.Request.URL, Path: c.Path,
			Domain: c.Domain, Secure: c.Secure, HTTPOnly: c.HttpOnly}
		if !c.Expires.IsZero() {
			p.Expires = proto.TimeSinceEpoch(c.Expires.Unix())
		}
		set = append(set, p)
	}
	if len(set) > 0 {
		_ = proto.NetworkSetCookies{Cookies: set}.Call(page)
	}
	var headers []*proto.FetchHeaderEntry
	for k, vs := range resp.Header {
		if hopHeaders[http.CanonicalHeaderKey(k)] || strings.EqualFold(k, "Set-Cookie") {
			continue
		}
		for _, v := range vs {
			headers = append(headers, &proto.FetchHeaderEntry{Name: k, Value: v})
		}
	}
	_ = proto.FetchFulfillRequest{RequestID: e.RequestID, ResponseCode: resp.StatusCode, ResponseHeaders: headers,
		Body: raw, ResponsePhrase: http.StatusText(resp.StatusCode)}.Call(page)
}

// shortErr is an error's text cut to 200 bytes, for an outcome's detail.
func shortErr(err error) string {
	m := err.Error()
	if len(m) > 200 {
		m = m[:200]
	}
	return m
}
