package egress_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/browser"
	"github.com/fleetwright/fleetwright/app/egress"
)

func testNet(t *testing.T, s *site) *fakeNet {
	return &fakeNet{
		t: t,
		names: map[string][]netip.Addr{
			"public.test":   {pubA},
			"example.com":   {pubA},
			"internal.test": {netip.MustParseAddr("10.0.0.5")},
		},
		public: map[netip.AddrPort]string{
			netip.AddrPortFrom(pubA, 80):  s.plain.Listener.Addr().String(),
			netip.AddrPortFrom(pubA, 443): s.tls.Listener.Addr().String(),
		},
	}
}

func proxiedClient(p *egress.Proxy, s *site) *http.Client {
	pu, _ := url.Parse(p.URL())
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			Proxy:           http.ProxyURL(pu),
			TLSClientConfig: &tls.Config{RootCAs: s.roots},
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// TestProxy: CONNECT and plain HTTP through the guard proxy reach public
// addresses and are refused, with the reason, for special-purpose ones.
func TestProxy(t *testing.T) {
	s := newSite(t)
	fn := testNet(t, s)
	g, err := egress.New(egress.Config{Resolver: fn, Dial: fn.Dial})
	require.NoError(t, err)
	p, err := g.ListenProxy("127.0.0.1:0")
	require.NoError(t, err)
	defer p.Close()
	c := proxiedClient(p, s)
	defer c.CloseIdleConnections()

	for _, u := range []string{"http://public.test/", "https://example.com/"} {
		resp, err := c.Get(u)
		require.NoError(t, err, u)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, u)
		require.Contains(t, string(b), "hello from")
	}
	// Plain HTTP refusals come back as 403 with the reason.
	for u, reason := range map[string]string{
		"http://10.0.0.1/":         "private use",
		"http://internal.test/":    "private use",
		"http://127.1/":            "loopback",
		"http://public.test:8080/": "port 8080",
	} {
		resp, err := c.Get(u)
		require.NoError(t, err, u)
		resp.Body.Close()
		require.Equal(t, http.StatusForbidden, resp.StatusCode, u)
		require.Contains(t, resp.Header.Get(egress.RefusedHeader), reason, u)
	}
	// A redirect is passed to the browser, whose next request is checked.
	resp, err := c.Get("http://public.test/r?to=http://169.254.169.254/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusFound, resp.StatusCode)
	resp, err = c.Get(resp.Header.Get("Location"))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	// CONNECT refusals: the tunnel is never opened.
	for _, target := range []string{"127.0.0.1:443", "[::ffff:a9fe:a9fe]:443", "public.test:22"} {
		conn, err := net.Dial("tcp", p.Addr())
		require.NoError(t, err)
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, target)
		require.NotEmpty(t, resp.Header.Get(egress.RefusedHeader))
		conn.Close()
	}
	// The proxy listens on loopback only.
	_, err = g.ListenProxy("0.0.0.0:0")
	require.ErrorContains(t, err, "loopback only")
}

// upstreamProxy is a fake operator's proxy on loopback: it demands
// credentials, records what it was asked to CONNECT to and carries the
// fake public addresses to the test site.
type upstreamProxy struct {
	srv     *httptest.Server
	mu      sync.Mutex
	targets []string
	auth    []string
}

func newUpstream(t *testing.T, fn *fakeNet) *upstreamProxy {
	up := &upstreamProxy{}
	up.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up.mu.Lock()
		up.targets = append(up.targets, r.Host)
		up.auth = append(up.auth, r.Header.Get("Proxy-Authorization"))
		up.mu.Unlock()
		if r.Method != http.MethodConnect || r.Header.Get("Proxy-Authorization") != "Basic "+base64.StdEncoding.EncodeToString([]byte("fleet:s3cret")) {
			w.WriteHeader(http.StatusProxyAuthRequired)
			return
		}
		to, ok := fn.public[netip.MustParseAddrPort(r.Host)]
		if !ok {
			t.Errorf("upstream asked for %s", r.Host)
			w.WriteHeader(http.StatusForbidden)
			return
		}
		dst, err := net.Dial("tcp", to)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		conn, _, _ := w.(http.Hijacker).Hijack()
		io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n")
		go func() { io.Copy(dst, conn); dst.Close() }()
		io.Copy(conn, dst)
		conn.Close()
	}))
	t.Cleanup(up.srv.Close)
	return up
}

// TestUpstreamHTTP: with an upstream proxy the guard resolves and checks
// the target itself and asks the upstream to CONNECT to the checked
// address, never to the name, with the upstream's credentials.
func TestUpstreamHTTP(t *testing.T) {
	s := newSite(t)
	fn := testNet(t, s)
	up := newUpstream(t, fn)
	u, _ := url.Parse("http://fleet:s3cret@" + up.srv.Listener.Addr().String())
	g, err := egress.New(egress.Config{Resolver: fn, Dial: fn.Dial, Upstream: u})
	require.NoError(t, err)
	c := g.Client(egress.ClientOptions{TLS: &tls.Config{RootCAs: s.roots}})
	defer c.CloseIdleConnections()
	for _, target := range []string{"http://public.test/", "https://example.com/"} {
		resp, err := c.Get(target)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Contains(t, string(b), "hello from")
	}
	_, err = c.Get("http://internal.test/")
	require.ErrorIs(t, err, egress.ErrRefused)
	_, err = c.Get("http://public.test/r?to=http://127.0.0.1/")
	require.ErrorIs(t, err, egress.ErrRefused)

	// Chromium's path: the guard proxy chains to the upstream.
	p, err := g.ListenProxy("127.0.0.1:0")
	require.NoError(t, err)
	defer p.Close()
	pc := proxiedClient(p, s)
	resp, err := pc.Get("https://example.com/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	pc.CloseIdleConnections()

	up.mu.Lock()
	defer up.mu.Unlock()
	require.Equal(t, []string{"93.184.216.34:80", "93.184.216.34:443", "93.184.216.34:443"}, up.targets, "the upstream is asked for checked addresses only")
	require.Empty(t, fn.dials, "with an upstream, the guard never dials a target itself")
}

// socks5 is a minimal RFC 1928/1929 server: username/password, CONNECT.
func socks5(t *testing.T, fn *fakeNet, seen *[]string, mu *sync.Mutex) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				r := bufio.NewReader(c)
				h := make([]byte, 2)
				io.ReadFull(r, h)
				io.ReadFull(r, make([]byte, h[1]))
				c.Write([]byte{5, 2}) // username/password
				v := make([]byte, 2)
				io.ReadFull(r, v)
				user := make([]byte, v[1])
				io.ReadFull(r, user)
				pl, _ := r.ReadByte()
				pass := make([]byte, pl)
				io.ReadFull(r, pass)
				if string(user) != "fleet" || string(pass) != "s3cret" {
					c.Write([]byte{1, 1})
					return
				}
				c.Write([]byte{1, 0})
				req := make([]byte, 4)
				io.ReadFull(r, req)
				var ip net.IP
				switch req[3] {
				case 1:
					ip = make(net.IP, 4)
				case 4:
					ip = make(net.IP, 16)
				default:
					mu.Lock()
					*seen = append(*seen, "name")
					mu.Unlock()
					c.Write([]byte{5, 8, 0, 1, 0, 0, 0, 0, 0, 0})
					return
				}
				io.ReadFull(r, ip)
				pb := make([]byte, 2)
				io.ReadFull(r, pb)
				a, _ := netip.AddrFromSlice(ip)
				ap := netip.AddrPortFrom(a.Unmap(), binary.BigEndian.Uint16(pb))
				mu.Lock()
				*seen = append(*seen, ap.String())
				mu.Unlock()
				to, ok := fn.public[ap]
				if !ok {
					c.Write([]byte{5, 2, 0, 1, 0, 0, 0, 0, 0, 0})
					return
				}
				dst, err := net.Dial("tcp", to)
				if err != nil {
					c.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0})
					return
				}
				defer dst.Close()
				c.Write([]byte{5, 0, 0, 1, 127, 0, 0, 1, 0, 0})
				go io.Copy(dst, r)
				io.Copy(c, dst)
			}(c)
		}
	}()
	return ln
}

// TestUpstreamSOCKS5: the same chaining through a SOCKS5 upstream.
func TestUpstreamSOCKS5(t *testing.T) {
	s := newSite(t)
	fn := testNet(t, s)
	var seen []string
	var mu sync.Mutex
	ln := socks5(t, fn, &seen, &mu)
	u, _ := url.Parse("socks5://fleet:s3cret@" + ln.Addr().String())
	g, err := egress.New(egress.Config{Resolver: fn, Dial: fn.Dial, Upstream: u})
	require.NoError(t, err)
	c := g.Client(egress.ClientOptions{TLS: &tls.Config{RootCAs: s.roots}})
	defer c.CloseIdleConnections()
	resp, err := c.Get("https://example.com/")
	require.NoError(t, err)
	resp.Body.Close()
	_, err = c.Get("http://0x7f.1/")
	require.ErrorIs(t, err, egress.ErrRefused)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"93.184.216.34:443"}, seen)
	require.Empty(t, fn.dials)
}

// TestChromium: Chromium's only way out is the guard proxy, loopback
// included. A page on an allowlisted loopback site loads; its image on
// another loopback address, a link to it and a redirect to it never reach
// that server.
func TestChromium(t *testing.T) {
	var allowedHits, deniedHits atomic.Int64
	deniedLn, err := net.Listen("tcp", "127.0.0.3:0")
	require.NoError(t, err)
	denied := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deniedHits.Add(1)
		io.WriteString(w, "secret")
	})}
	go denied.Serve(deniedLn)
	defer denied.Close()
	deniedURL := "http://" + deniedLn.Addr().String()

	allowedLn, err := net.Listen("tcp", "127.0.0.2:0")
	require.NoError(t, err)
	allowed := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		allowedHits.Add(1)
		switch r.URL.Path {
		case "/r":
			http.Redirect(w, r, deniedURL+"/", http.StatusFound)
		default:
			fmt.Fprintf(w, `<html><body><h1 id="ok">allowed</h1><img src="%s/pixel.png"><script>fetch(%q).catch(()=>{}).finally(()=>{document.body.dataset.fetched="1"})</script></body></html>`, deniedURL, deniedURL+"/api")
		}
	})}
	go allowed.Serve(allowedLn)
	defer allowed.Close()
	allowedURL := "http://" + allowedLn.Addr().String()

	port := func(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }
	g, err := egress.New(egress.Config{Policy: egress.Policy{
		Ports: []int{port(allowedLn), port(deniedLn)},
		Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")},
	}})
	require.NoError(t, err)
	p, err := g.ListenProxy("127.0.0.1:0")
	require.NoError(t, err)
	defer p.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := browser.Launch(ctx, browser.Options{ExtraFlags: p.ChromiumFlags()})
	require.NoError(t, err)
	defer b.Close()
	page, err := b.Page(ctx)
	require.NoError(t, err)
	page = page.Context(ctx)
	require.NoError(t, page.Navigate(allowedURL+"/"))
	require.NoError(t, page.WaitLoad())
	txt, err := page.MustElement("#ok").Text()
	require.NoError(t, err)
	require.Equal(t, "allowed", txt)
	// The page's image (done at its load) and its fetch have been tried.
	require.Eventually(t, func() bool {
		v, err := page.Eval(`() => document.body.dataset.fetched === "1"`)
		return err == nil && v.Value.Bool()
	}, 30*time.Second, 20*time.Millisecond, "the page's fetch finished")
	_ = page.Navigate(deniedURL + "/")
	_ = page.WaitLoad()
	_ = page.Navigate(allowedURL + "/r")
	_ = page.WaitLoad()
	require.GreaterOrEqual(t, allowedHits.Load(), int64(2))
	require.Zero(t, deniedHits.Load(), "a loopback server outside the allowlist was reached through Chromium")
	body, err := page.HTML()
	require.NoError(t, err)
	require.NotContains(t, body, "secret")
}

// TestChromiumSendsNoUDP: WebRTC is the one path a page has around the
// guard proxy (STUN and TURN go over UDP, which no HTTP proxy carries).
// Every Chromium the product launches refuses UDP that does not go through
// the proxy, so a page's RTCPeerConnection aimed at a loopback UDP port
// outside the allowlist — with page-chosen data in the TURN username —
// sends that port nothing.
func TestChromiumSendsNoUDP(t *testing.T) {
	udp, err := net.ListenPacket("udp4", "127.0.0.3:0")
	require.NoError(t, err)
	defer udp.Close()
	var packets atomic.Int64
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := udp.ReadFrom(buf); err != nil {
				return
			}
			packets.Add(1)
		}
	}()
	udpAddr := udp.LocalAddr().String()

	ln, err := net.Listen("tcp", "127.0.0.2:0")
	require.NoError(t, err)
	site := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<html><body><h1>call</h1><script>
window.gathered = new Promise((resolve) => {
  const pc = new RTCPeerConnection({iceServers: [{urls: "stun:%[1]s"}, {urls: "turn:%[1]s?transport=udp", username: "exfiltrated-data", credential: "x"}]});
  const kinds = [];
  pc.onicecandidate = (e) => { if (e.candidate) kinds.push(e.candidate.type); else resolve(kinds.join(",") || "none"); };
  pc.onicegatheringstatechange = () => { if (pc.iceGatheringState === "complete") resolve(kinds.join(",") || "none"); };
  pc.createDataChannel("x");
  pc.createOffer().then((o) => pc.setLocalDescription(o)).catch((e) => resolve("error: " + e));
});
</script></body></html>`, udpAddr)
	})}
	go site.Serve(ln)
	defer site.Close()

	g, err := egress.New(egress.Config{Policy: egress.Policy{
		Ports: []int{ln.Addr().(*net.TCPAddr).Port},
		Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")},
	}})
	require.NoError(t, err)
	p, err := g.ListenProxy("127.0.0.1:0")
	require.NoError(t, err)
	defer p.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := browser.Launch(ctx, browser.Options{ExtraFlags: p.ChromiumFlags()})
	require.NoError(t, err)
	defer b.Close()
	page, err := b.Page(ctx)
	require.NoError(t, err)
	page = page.Context(ctx)
	require.NoError(t, page.Navigate("http://"+ln.Addr().String()+"/"))
	require.NoError(t, page.WaitLoad())
	// ICE gathering ends when every server was tried (or refused): after
	// that the page sends nothing more on its own.
	res, err := page.Eval(`() => window.gathered`)
	require.NoError(t, err)
	t.Logf("candidates gathered: %s", res.Value.Str())
	require.Zero(t, packets.Load(), "a page's WebRTC reached a UDP port outside the guard")
}

// TestUpstreamFromData: a proxy from a tenant's pool is data, so its own
// address goes through the guard too: a loopback proxy is refused unless
// the pool's allow list admits it, a proxy name resolving into private
// space is refused before any dial, and a proxy that fails is reported as
// the proxy's failure (UpstreamError), not the target's.
func TestUpstreamFromData(t *testing.T) {
	s := newSite(t)
	fn := testNet(t, s)
	fn.names["proxy.internal.test"] = []netip.Addr{netip.MustParseAddr("10.9.9.9")}
	up := newUpstream(t, fn)
	addr := up.srv.Listener.Addr().String()
	get := func(upstream string, pol egress.Policy) error {
		u, _ := url.Parse(upstream)
		g, err := egress.New(egress.Config{Resolver: fn, Dial: fn.Dial, Upstream: u, UpstreamPolicy: &pol})
		require.NoError(t, err)
		c := g.Client(egress.ClientOptions{Timeout: 5 * time.Second})
		defer c.CloseIdleConnections()
		resp, err := c.Get("http://public.test/")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Contains(t, string(b), "hello from")
		}
		return err
	}

	// A loopback proxy without the pool's allow list: refused, never reached.
	err := get("http://fleet:s3cret@"+addr, egress.Policy{})
	require.ErrorIs(t, err, egress.ErrRefused)
	ue, ok := egress.AsUpstreamError(err)
	require.True(t, ok, "the refusal is the proxy's: %v", err)
	require.NotContains(t, ue.Error(), "s3cret", "the proxy's password never reaches an error")
	r, _ := egress.AsRefusal(err)
	require.Contains(t, r.Reason, "the upstream proxy's address")
	require.Contains(t, r.Reason, "loopback")
	up.mu.Lock()
	require.Empty(t, up.targets)
	up.mu.Unlock()

	// A proxy name that resolves into private space: refused before a dial.
	err = get("http://fleet:s3cret@proxy.internal.test:3128", egress.Policy{})
	require.ErrorIs(t, err, egress.ErrRefused)
	r, _ = egress.AsRefusal(err)
	require.Contains(t, r.Reason, "private use")

	// The pool's allow list admits it; its port is admitted with it, the
	// target is still checked and asked for by its checked address.
	require.NoError(t, get("http://fleet:s3cret@"+addr, egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}))
	up.mu.Lock()
	require.Equal(t, []string{"93.184.216.34:80"}, up.targets)
	up.mu.Unlock()

	// Wrong credentials: the proxy refuses CONNECT — its failure, not a refusal.
	err = get("http://fleet:wrong@"+addr, egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	require.Error(t, err)
	require.NotErrorIs(t, err, egress.ErrRefused)
	_, ok = egress.AsUpstreamError(err)
	require.True(t, ok, "%v", err)
	require.Contains(t, err.Error(), "407")

	// A SOCKS5 proxy of a pool is checked the same way.
	var seen []string
	var smu sync.Mutex
	sln := socks5(t, fn, &seen, &smu)
	err = get("socks5://fleet:s3cret@"+sln.Addr().String(), egress.Policy{})
	require.ErrorIs(t, err, egress.ErrRefused)
	_, ok = egress.AsUpstreamError(err)
	require.True(t, ok)
	smu.Lock()
	require.Empty(t, seen, "the refused SOCKS5 proxy was never asked")
	smu.Unlock()
	require.NoError(t, get("socks5://fleet:s3cret@"+sln.Addr().String(), egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}))
	smu.Lock()
	require.Equal(t, []string{"93.184.216.34:80"}, seen)
	smu.Unlock()

	// A proxy that is down; and Chromium's path: the guard proxy answers
	// 502 naming the upstream's failure.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadAddr := dead.Addr().String()
	dead.Close()
	err = get("http://"+deadAddr, egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	_, ok = egress.AsUpstreamError(err)
	require.True(t, ok, "%v", err)
	u, _ := url.Parse("http://" + deadAddr)
	g, err := egress.New(egress.Config{Resolver: fn, Dial: fn.Dial, Upstream: u,
		UpstreamPolicy: &egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
	require.NoError(t, err)
	p, err := g.ListenProxy("127.0.0.1:0")
	require.NoError(t, err)
	defer p.Close()
	pc := proxiedClient(p, s)
	defer pc.CloseIdleConnections()
	resp, err := pc.Get("http://public.test/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadGateway, resp.StatusCode)
	require.Contains(t, resp.Header.Get(egress.UpstreamFailedHeader), "upstream proxy")
	require.Empty(t, resp.Header.Get(egress.RefusedHeader))
}
