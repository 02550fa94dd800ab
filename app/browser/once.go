package browser

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-rod/rod/lib/proto"
)

// Once sends a request the page made, paused by CDP interception at the
// request stage (Fetch.requestPaused, before Chromium's network stack has
// seen it), through the caller's own transport, once. Chromium's HTTP stack
// resends a request whose reused keep-alive connection closed before any
// answer (POSTs included, below interception, with nothing told to the page
// or to CDP); a request sent this way is written once and never again, and
// the caller answers the page with what came back (Answer.Fulfil).
type Once struct {
	// Send writes the request (the caller's transport; it must never
	// resend it). Required.
	Send func(*http.Request) (*http.Response, error)
	// Cookie is the Cookie header the browser would have added to a
	// request to u below interception ("" for none). Nil: none.
	Cookie func(u *url.URL) (string, error)
	// Prepare changes the rebuilt request before it is sent: headers
	// Chromium would add, an idempotency key. Nil: none.
	Prepare func(*http.Request)
	// MaxAnswer bounds the answer read back (default 1 MiB).
	MaxAnswer int64
}

// Stage says how far a request sent once came before it failed, so the
// caller can tell what the site may have seen.
type Stage int

const (
	// NotBuilt: the request could not be rebuilt (no http(s) URL, the
	// cookies unreadable); Send was not called.
	NotBuilt Stage = iota + 1
	// NoAnswer: Send failed. Whether the request left is Send's to say
	// (a gate that refused before the first byte, or a lost answer).
	NoAnswer
	// CutOff: an answer began and was cut off: the request left.
	CutOff
)

// OnceError is a failed Once.Do: its stage and the cause.
type OnceError struct {
	Stage Stage
	Err   error
}

func (e *OnceError) Error() string { return e.Err.Error() }
func (e *OnceError) Unwrap() error { return e.Err }

// Answer is the site's answer to a request sent once, read in full.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
	// url is the request's, for the cookies the answer set.
	url     string
	cookies []*http.Cookie
}

// hopHeaders are answer headers that describe the connection the answer
// was read on, not the answer handed to the page (Set-Cookie goes into the
// browser's store instead).
var hopHeaders = map[string]bool{"Connection": true, "Keep-Alive": true, "Transfer-Encoding": true,
	"Content-Length": true, "Content-Encoding": true, "Proxy-Connection": true, "Trailer": true, "Upgrade": true,
	"Set-Cookie": true}

// Do rebuilds the paused request r (the event's Request) with body, sends
// it once on ctx and reads the answer. The request keeps the page's
// method, URL, headers and body and gets the Cookie header; it has no
// GetBody, so no transport can rewind and resend it. An error is an
// *OnceError.
func (o Once) Do(ctx context.Context, r *proto.NetworkRequest, body []byte) (*Answer, error) {
	notBuilt := func(err error) (*Answer, error) { return nil, &OnceError{Stage: NotBuilt, Err: err} }
	u, err := url.Parse(r.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return notBuilt(errors.New("browser: the request's URL is not http(s)"))
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return notBuilt(fmt.Errorf("browser: rebuild the page's request: %w", err))
	}
	req.GetBody = nil
	for k, v := range r.Headers {
		req.Header.Set(k, v.Str())
	}
	if o.Cookie != nil {
		c, err := o.Cookie(u)
		if err != nil {
			return notBuilt(fmt.Errorf("browser: read the page's cookies: %w", err))
		}
		if c != "" {
			req.Header.Set("Cookie", c)
		}
	}
	if o.Prepare != nil {
		o.Prepare(req)
	}
	resp, err := o.Send(req)
	if err != nil {
		return nil, &OnceError{Stage: NoAnswer, Err: err}
	}
	limit := o.MaxAnswer
	if limit <= 0 {
		limit = 1 << 20
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	_ = resp.Body.Close()
	if err != nil {
		return nil, &OnceError{Stage: CutOff, Err: err}
	}
	return &Answer{Status: resp.StatusCode, Header: resp.Header, Body: raw, url: r.URL, cookies: resp.Cookies()}, nil
}

// Fulfil is how the page gets the answer as if its own request had
// received it: the cookies the answer set, to store in the browser first
// (Network.setCookies or Storage.setCookies), and the Fetch.fulfillRequest
// for the paused request (without its RequestID, which the caller sets or
// its hijack router does), hop-by-hop headers stripped.
func (a *Answer) Fulfil() ([]*proto.NetworkCookieParam, *proto.FetchFulfillRequest) {
	var set []*proto.NetworkCookieParam
	for _, c := range a.cookies {
		p := &proto.NetworkCookieParam{Name: c.Name, Value: c.Value, URL: a.url, Path: c.Path,
			Domain: c.Domain, Secure: c.Secure, HTTPOnly: c.HttpOnly}
		if !c.Expires.IsZero() {
			p.Expires = proto.TimeSinceEpoch(c.Expires.Unix())
		}
		set = append(set, p)
	}
	var headers []*proto.FetchHeaderEntry
	for k, vs := range a.Header {
		if hopHeaders[http.CanonicalHeaderKey(k)] {
			continue
		}
		for _, v := range vs {
			headers = append(headers, &proto.FetchHeaderEntry{Name: k, Value: v})
		}
	}
	return set, &proto.FetchFulfillRequest{ResponseCode: a.Status, ResponseHeaders: headers, Body: a.Body,
		ResponsePhrase: http.StatusText(a.Status)}
}

// JoinCookies is a Cookie header of cookies (as Network.getCookies
// returns them for a URL).
func JoinCookies(cs []*proto.NetworkCookie) string {
	var jar []string
	for _, c := range cs {
		jar = append(jar, c.Name+"="+c.Value)
	}
	return strings.Join(jar, "; ")
}
