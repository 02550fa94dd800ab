package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Proxy is a guarded forward proxy on a loopback port for a browser that
// cannot be given a dialer. It serves CONNECT (HTTPS, WebSocket) and plain
// HTTP requests with an absolute URL; each target is checked like any
// guarded dial, so a page's subresources, links and redirects are each
// judged on the address dialled. With an upstream proxy in the guard's
// Config it chains to it for the checked address. A refused target gets
// 403 with the reason in the X-Egress-Refused header.
type Proxy struct {
	g    *Guard
	ln   net.Listener
	srv  *http.Server
	tr   *http.Transport
	wg   sync.WaitGroup
	mu   sync.Mutex
	live map[net.Conn]struct{}
}

// RefusedHeader carries the reason of a proxy refusal.
const RefusedHeader = "X-Egress-Refused"

// UpstreamFailedHeader carries the failure of the upstream proxy (the
// pool's proxy, not the target, is at fault) on the guard proxy's 502.
const UpstreamFailedHeader = "X-Egress-Upstream-Failed"

// ListenProxy starts the guard proxy on addr, which must be a loopback
// address ("127.0.0.1:0" picks a free port).
func (g *Guard) ListenProxy(addr string) (*Proxy, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("egress: proxy address %q: %w", addr, err)
	}
	if a, err := netip.ParseAddr(host); err != nil || !a.IsLoopback() {
		return nil, fmt.Errorf("egress: the guard proxy listens on loopback only, not %q", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("egress: proxy: %w", err)
	}
	p := &Proxy{g: g, ln: ln, tr: g.Transport(nil), live: map[net.Conn]struct{}{}}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_ = p.srv.Serve(ln)
	}()
	g.log.Info("egress guard proxy listening", "addr", ln.Addr().String(), "upstream", Redact(g.upstream))
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is the proxy's URL for a browser's --proxy-server.
func (p *Proxy) URL() string { return "http://" + p.Addr() }

// ChromiumFlags make the proxy Chromium's only way out, loopback included
// (Chromium bypasses proxies for loopback unless told "<-loopback>").
// Switches are without their leading dashes, as browser.Options.ExtraFlags
// takes them.
func (p *Proxy) ChromiumFlags() []string {
	return []string{"proxy-server=" + p.URL(), "proxy-bypass-list=<-loopback>"}
}

// Close stops the proxy and every tunnel it holds.
func (p *Proxy) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := p.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = p.srv.Close()
	}
	p.mu.Lock()
	for c := range p.live {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	p.tr.CloseIdleConnections()
	return err
}

func (p *Proxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.live[c] = struct{}{}
	} else {
		delete(p.live, c)
	}
}

// ServeHTTP is the proxy.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.connect(w, r)
		return
	}
	if !r.URL.IsAbs() || (r.URL.Scheme != "http") {
		http.Error(w, "egress proxy: only CONNECT and absolute http:// URLs", http.StatusBadRequest)
		return
	}
	p.forward(w, r)
}

func refused(w http.ResponseWriter, err error) {
	if ue, ok := AsUpstreamError(err); ok {
		w.Header().Set(UpstreamFailedHeader, strings.ReplaceAll(ue.Error(), "\n", " "))
		http.Error(w, ue.Error(), http.StatusBadGateway)
		return
	}
	if rf, ok := AsRefusal(err); ok {
		w.Header().Set(RefusedHeader, rf.Reason)
		http.Error(w, rf.Error(), http.StatusForbidden)
		return
	}
	http.Error(w, "egress proxy: "+err.Error(), http.StatusBadGateway)
}

func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	target := r.Host
	if _, _, err := net.SplitHostPort(target); err != nil {
		target = net.JoinHostPort(target, "443")
	}
	up, err := p.g.DialContext(r.Context(), "tcp", target)
	if err != nil {
		refused(w, err)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "egress proxy: cannot tunnel", http.StatusInternalServerError)
		return
	}
	down, buf, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	p.track(down, true)
	p.track(up, true)
	defer func() {
		p.track(down, false)
		p.track(up, false)
		down.Close()
		up.Close()
	}()
	if _, err := io.WriteString(down, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() {
		if n := buf.Reader.Buffered(); n > 0 {
			b, _ := buf.Reader.Peek(n)
			_, _ = up.Write(b)
		}
		_, _ = io.Copy(up, down)
		closeWrite(up)
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(down, up)
		closeWrite(down)
		done <- struct{}{}
	}()
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	c.Close()
}

// hopHeaders are per-connection headers a proxy must not forward.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (p *Proxy) forward(w http.ResponseWriter, r *http.Request) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	for _, h := range strings.Split(r.Header.Get("Connection"), ",") {
		if h = strings.TrimSpace(h); h != "" {
			out.Header.Del(h)
		}
	}
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	resp, err := p.tr.RoundTrip(out)
	if err != nil {
		refused(w, err)
		return
	}
	defer resp.Body.Close()
	for _, h := range hopHeaders {
		resp.Header.Del(h)
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}
