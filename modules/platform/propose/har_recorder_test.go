package propose_test

import (
	"context"

	"encoding/json"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/proto"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/platform/propose"
)

// recorder writes what DevTools' "Save all as HAR with content" would: the
// page's every request and answer from the CDP Network domain
// (requestWillBeSent, responseReceived, the extra-info events that carry
// the Cookie and Set-Cookie headers, Network.getResponseBody and
// Network.getRequestPostData), a redirect as its own entry.
type recorder struct {
	mu        sync.Mutex
	entries   []*hop
	current   map[proto.NetworkRequestID]*hop
	hops      map[proto.NetworkRequestID]int
	reqExtra  map[proto.NetworkRequestID][]proto.NetworkHeaders
	respExtra map[proto.NetworkRequestID][]*proto.NetworkResponseReceivedExtraInfo
}

type hop struct {
	id           proto.NetworkRequestID
	n            int
	started      time.Time
	method, url  string
	reqHeaders   map[string]string
	postData     string
	typ          string
	status       int
	respHeaders  map[string]string
	mime         string
	body         string
	base64, done bool
}

func headers(h proto.NetworkHeaders) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		out[k] = v.Str()
	}
	return out
}

func record(t *testing.T, ctx context.Context, p *rod.Page) *recorder {
	t.Helper()
	r := &recorder{current: map[proto.NetworkRequestID]*hop{}, hops: map[proto.NetworkRequestID]int{},
		reqExtra: map[proto.NetworkRequestID][]proto.NetworkHeaders{}, respExtra: map[proto.NetworkRequestID][]*proto.NetworkResponseReceivedExtraInfo{}}
	require.NoError(t, proto.NetworkEnable{}.Call(p))
	pc := p.Context(ctx)
	go pc.EachEvent(func(e *proto.NetworkRequestWillBeSent) {
		post := e.Request.PostData
		if post == "" && e.Request.HasPostData {
			if res, err := (proto.NetworkGetRequestPostData{RequestID: e.RequestID}).Call(pc); err == nil {
				post = res.PostData
			}
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if prev := r.current[e.RequestID]; prev != nil && e.RedirectResponse != nil {
			prev.status, prev.respHeaders, prev.mime, prev.done = e.RedirectResponse.Status, headers(e.RedirectResponse.Headers), e.RedirectResponse.MIMEType, true
		}
		h := &hop{id: e.RequestID, n: r.hops[e.RequestID], started: e.WallTime.Time(), method: e.Request.Method, url: e.Request.URL,
			reqHeaders: headers(e.Request.Headers), postData: post, typ: strings.ToLower(string(e.Type))}
		r.hops[e.RequestID]++
		r.current[e.RequestID] = h
		r.entries = append(r.entries, h)
	}, func(e *proto.NetworkRequestWillBeSentExtraInfo) {
		r.mu.Lock()
		r.reqExtra[e.RequestID] = append(r.reqExtra[e.RequestID], e.Headers)
		r.mu.Unlock()
	}, func(e *proto.NetworkResponseReceived) {
		r.mu.Lock()
		if h := r.current[e.RequestID]; h != nil {
			h.status, h.respHeaders, h.mime = e.Response.Status, headers(e.Response.Headers), e.Response.MIMEType
		}
		r.mu.Unlock()
	}, func(e *proto.NetworkResponseReceivedExtraInfo) {
		r.mu.Lock()
		r.respExtra[e.RequestID] = append(r.respExtra[e.RequestID], e)
		r.mu.Unlock()
	}, func(e *proto.NetworkLoadingFinished) {
		res, err := proto.NetworkGetResponseBody{RequestID: e.RequestID}.Call(pc)
		r.mu.Lock()
		defer r.mu.Unlock()
		h := r.current[e.RequestID]
		if h == nil {
			return
		}
		if err == nil {
			h.body, h.base64 = res.Body, res.Base64Encoded
		}
		h.done = true
	}, func(e *proto.NetworkLoadingFailed) {
		r.mu.Lock()
		if h := r.current[e.RequestID]; h != nil {
			h.done = true
		}
		r.mu.Unlock()
	})()
	return r
}

// answered counts the finished answers with status 200 to GETs of path.
func (r *recorder) answered(path string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, h := range r.entries {
		if u, err := url.Parse(h.url); err == nil && u.Path == path && h.done && h.status == 200 {
			n++
		}
	}
	return n
}

// HAR is the log so far, as HAR 1.2.
func (r *recorder) HAR(t *testing.T) []byte {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	nv := func(m map[string]string) []propose.NV {
		out := []propose.NV{}
		for k, v := range m {
			out = append(out, propose.NV{Name: k, Value: v})
		}
		return out
	}
	var h propose.HAR
	h.Log.Version = "1.2"
	for _, x := range r.entries {
		if !x.done {
			continue
		}
		rq := map[string]string{}
		for k, v := range x.reqHeaders {
			rq[k] = v
		}
		if ex := r.reqExtra[x.id]; x.n < len(ex) {
			for k, v := range headers(ex[x.n]) {
				rq[k] = v
			}
		}
		rs := map[string]string{}
		for k, v := range x.respHeaders {
			rs[k] = v
		}
		if ex := r.respExtra[x.id]; x.n < len(ex) && ex[x.n].StatusCode == x.status {
			for k, v := range headers(ex[x.n].Headers) {
				rs[k] = v
			}
		}
		e := propose.Entry{StartedDateTime: x.started.UTC().Format(time.RFC3339Nano), ResourceType: x.typ}
		e.Request = propose.Request{Method: x.method, URL: x.url, Headers: nv(rq), Cookies: []propose.NV{}}
		for k, v := range rq {
			if strings.EqualFold(k, "Cookie") {
				for _, c := range strings.Split(v, ";") {
					if n, val, ok := strings.Cut(strings.TrimSpace(c), "="); ok {
						e.Request.Cookies = append(e.Request.Cookies, propose.NV{Name: n, Value: val})
					}
				}
			}
		}
		if x.postData != "" {
			ct := ""
			for k, v := range rq {
				if strings.EqualFold(k, "Content-Type") {
					ct = v
				}
			}
			e.Request.PostData = &propose.PostData{MimeType: ct, Text: x.postData}
		}
		e.Response = propose.Response{Status: x.status, Headers: nv(rs), Cookies: []propose.NV{},
			Content: propose.Content{MimeType: x.mime, Text: x.body}}
		if x.base64 {
			e.Response.Content.Encoding = "base64"
		}
		for k, v := range rs {
			if strings.EqualFold(k, "Location") {
				if u, err := url.Parse(x.url); err == nil {
					if l, err := u.Parse(v); err == nil {
						e.Response.RedirectURL = l.String()
					}
				}
			}
		}
		h.Log.Entries = append(h.Log.Entries, e)
	}
	raw, err := json.MarshalIndent(h, "", " ")
	require.NoError(t, err)
	return raw
}
