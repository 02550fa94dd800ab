package browse

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/proto"

	"github.com/fleetwright/fleetwright/app/browser"
)

// maxWriteAnswer bounds an answer read back for the page (a confirmation
// page or a JSON result, not a download).
const maxWriteAnswer = 16 << 20

// writeTimeout bounds one write the session sends for the page.
const writeTimeout = 60 * time.Second

// safeMethod tells the methods that change nothing on a site: Chromium may
// resend them, as any client may.
func safeMethod(m string) bool {
	switch strings.ToUpper(m) {
	case "GET", "HEAD", "OPTIONS", "TRACE":
		return true
	}
	return false
}

// writeHold is how long ClickOnce keeps sending writes itself, after the
// click's requests went idle, while the click has made none yet: a page
// may post a moment after the click (its script awaits something first).
const writeHold = 5 * time.Second

// ClickOnce is Click for an approved action that changes something on a
// site (publish, send, buy): while it runs, every request the page makes
// with a method that may change something is sent by the session itself,
// once, on a connection of its own (Options.Writes), and the answer handed
// back to the page. Chromium's own network stack resends a request whose
// reused keep-alive connection closed before any answer — POSTs included,
// below CDP interception, with nothing told to the page or to us — so a
// publish whose answer a proxy or a restart lost could be published twice.
// A write whose answer was lost is reported as an error: it may or may not
// have happened, and is never sent again.
func (s *Session) ClickOnce(ctx context.Context, id string, n int, settle time.Duration) error {
	if s.writes == nil {
		return errors.New("browse: no transport for the page's writes (Options.Writes)")
	}
	seen := make(chan struct{})
	s.mu.Lock()
	s.writing, s.seen, s.lost = true, seen, nil
	s.mu.Unlock()
	err := s.Click(ctx, id, n, settle)
	if err == nil {
		hold := time.NewTimer(min(settle, writeHold))
		select {
		case <-seen:
		case <-hold.C:
		case <-ctx.Done():
		}
		hold.Stop()
	}
	s.mu.Lock()
	s.writing = false // no write is taken after this
	for s.inflight > 0 {
		s.idle.Wait()
	}
	lost := s.lost
	s.lost = nil
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if len(lost) > 0 {
		return fmt.Errorf("browse: the site's answer was lost, so it may or may not have done it (never sent again): %s", strings.Join(lost, "; "))
	}
	return nil
}

// inWrite tells the filter to send h itself: an approved action is running
// and h may change something.
func (s *Session) inWrite(h *rod.Hijack) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.writing || safeMethod(h.Request.Method()) {
		return false
	}
	if s.inflight == 0 && s.seen != nil {
		select {
		case <-s.seen:
		default:
			close(s.seen)
		}
	}
	s.inflight++
	return true
}

// writeDone ends one write sendOnce took.
func (s *Session) writeDone() {
	s.mu.Lock()
	s.inflight--
	if s.inflight == 0 {
		s.idle.Broadcast()
	}
	s.mu.Unlock()
}

// sendOnce sends a paused write of the page through Options.Writes with
// the browser's cookies for its URL, and fulfils the page's request with
// the answer (or fails it when the answer was lost).
func (s *Session) sendOnce(h *rod.Hijack) {
	defer s.writeDone()
	u := h.Request.URL()
	what := h.Request.Method() + " " + u.Scheme + "://" + u.Host + u.Path
	lose := func(why string) {
		s.mu.Lock()
		s.lost = append(s.lost, what+" ("+why+")")
		s.mu.Unlock()
		h.Response.Fail(proto.NetworkErrorReasonConnectionClosed)
	}
	body, ok := pausedBody(h)
	if !ok {
		// The browser did not hand the body over (a file upload, say):
		// rather than send something else, nothing is sent.
		s.mu.Lock()
		s.lost = append(s.lost, what+" (its body could not be read from the browser; not sent)")
		s.mu.Unlock()
		h.Response.Fail(proto.NetworkErrorReasonBlockedByClient)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	once := browser.Once{Send: s.writes.RoundTrip, MaxAnswer: maxWriteAnswer,
		Cookie: func(u *url.URL) (string, error) { return cookieHeader(s.rb, u), nil },
		// The transport asks for and decodes gzip itself.
		Prepare: func(req *http.Request) { req.Header.Del("Accept-Encoding") }}
	ans, err := once.Do(ctx, &proto.NetworkRequest{Method: h.Request.Method(), URL: u.String(), Headers: h.Request.Headers()}, body)
	var oe *browser.OnceError
	if errors.As(err, &oe) {
		switch oe.Stage {
		case browser.NotBuilt:
			lose("not sent: " + oe.Err.Error())
		case browser.CutOff:
			lose("answer cut off: " + oe.Err.Error())
		default:
			lose("no answer: " + oe.Err.Error())
		}
		return
	}
	cookies, fulfil := ans.Fulfil()
	if len(cookies) > 0 {
		_ = s.rb.SetCookies(cookies)
	}
	// The router fulfils the paused request with this payload (its
	// RequestID already set) once the filter returns.
	p := h.Response.Payload()
	p.ResponseCode, p.ResponsePhrase, p.ResponseHeaders, p.Body = fulfil.ResponseCode, fulfil.ResponsePhrase, fulfil.ResponseHeaders, fulfil.Body
}

// pausedBody is a paused request's body (the post data the browser hands
// over); false when the request declares a body the browser kept to
// itself (a file upload's bytes, say).
func pausedBody(h *rod.Hijack) ([]byte, bool) {
	if b := h.Request.Body(); b != "" {
		return []byte(b), true
	}
	declared := h.Request.Header("Content-Type") != "" ||
		(h.Request.Header("Content-Length") != "" && h.Request.Header("Content-Length") != "0")
	return nil, !declared
}

// cookieHeader is the Cookie header the browser would send to u: every
// stored cookie whose domain, path and secure flag match.
func cookieHeader(b *rod.Browser, u *url.URL) string {
	cs, err := b.GetCookies()
	if err != nil {
		return ""
	}
	host := strings.ToLower(u.Hostname())
	var out []*proto.NetworkCookie
	for _, c := range cs {
		d := strings.ToLower(strings.TrimPrefix(c.Domain, "."))
		if host != d && !(strings.HasPrefix(c.Domain, ".") && strings.HasSuffix(host, "."+d)) {
			continue
		}
		if c.Secure && u.Scheme != "https" {
			continue
		}
		p := c.Path
		if p == "" {
			p = "/"
		}
		if !strings.HasPrefix(u.Path+"/", strings.TrimSuffix(p, "/")+"/") && u.Path != p {
			continue
		}
		out = append(out, c)
	}
	return browser.JoinCookies(out)
}
