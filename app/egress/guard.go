package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/proxy"
)

// Resolver answers a name with addresses; *net.Resolver is one. Tests
// inject their own so that no real DNS query is ever made.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// DialFunc opens a connection to a literal ip:port.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Config builds a Guard.
type Config struct {
	Policy
	// Resolver resolves names; nil means net.DefaultResolver.
	Resolver Resolver
	// Dial connects to the checked address; nil means a net.Dialer whose
	// Control hook checks the socket's address once more (a second line
	// should the code above it ever be wrong). Tests inject a dialer that
	// fails on any non-loopback address.
	Dial DialFunc
	// Upstream is an optional proxy every guarded connection goes through
	// (http://, https:// or socks5://, credentials in the URL's user
	// part). The guard still resolves and checks the target itself and asks
	// the upstream for the checked address, never for the name.
	Upstream *url.URL
	// DialUpstream connects to the upstream proxy itself; nil means a
	// net.Dialer (checked by UpstreamPolicy when that is set).
	DialUpstream DialFunc
	// UpstreamPolicy, when set, says the upstream proxy came from data (a
	// tenant's proxy pool, not an operator's flag): its host is resolved
	// and checked like any target before it is dialled, the checked
	// address is what is dialled, and its own port is admitted on top of
	// the policy's ports. Internal addresses pass only through its Allow
	// (a pool's admin-set allow list).
	UpstreamPolicy *Policy
	// Logger receives one warning per refusal; nil discards.
	Logger *slog.Logger
}

// Guard dials only what its policy admits.
type Guard struct {
	policy       Policy
	resolver     Resolver
	dial         DialFunc
	upstream     *url.URL
	dialUpstream DialFunc
	upPolicy     *Policy
	log          *slog.Logger
}

// New returns a guard. An upstream proxy with an unknown scheme is an error.
func New(c Config) (*Guard, error) {
	g := &Guard{policy: c.Policy, resolver: c.Resolver, dial: c.Dial, upstream: c.Upstream, dialUpstream: c.DialUpstream,
		upPolicy: c.UpstreamPolicy, log: c.Logger}
	if g.resolver == nil {
		g.resolver = net.DefaultResolver
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.dial == nil {
		d := &net.Dialer{Timeout: 15 * time.Second, KeepAlive: 30 * time.Second, Control: g.control}
		g.dial = d.DialContext
	}
	if g.dialUpstream == nil {
		d := &net.Dialer{Timeout: 15 * time.Second, KeepAlive: 30 * time.Second}
		if g.upPolicy != nil {
			d.Control = g.controlUpstream
		}
		g.dialUpstream = d.DialContext
	}
	if u := g.upstream; u != nil {
		switch u.Scheme {
		case "http", "https", "socks5", "socks5h":
		default:
			return nil, fmt.Errorf("egress: upstream proxy scheme %q is not one of http, https, socks5", u.Scheme)
		}
		if u.Host == "" {
			return nil, fmt.Errorf("egress: upstream proxy %q has no host", Redact(u))
		}
	}
	return g, nil
}

// Policy returns the guard's policy.
func (g *Guard) Policy() Policy { return g.policy }

// Redact prints a proxy URL without its password.
func Redact(u *url.URL) string {
	if u == nil {
		return ""
	}
	return u.Redacted()
}

// control runs on the raw socket just before connect(2): the address here
// is the one the kernel will connect to.
func (g *Guard) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &Refusal{Target: address, Reason: "unparsable socket address"}
	}
	if len(g.policy.Only) > 0 {
		// Check admitted the name, not a range: the address it resolved
		// to is what is dialled (checkOnly).
		return nil
	}
	return g.policy.CheckAddr(address, ap.Addr(), int(ap.Port()))
}

// upstreamPolicy is the policy the upstream proxy's own address is checked
// by: UpstreamPolicy with the upstream's port admitted.
func (g *Guard) upstreamPolicy() Policy {
	p := *g.upPolicy
	port, _ := strconv.Atoi(g.upstreamHostPort()[strings.LastIndexByte(g.upstreamHostPort(), ':')+1:])
	p.Ports = append(append([]int(nil), p.ports()...), port)
	return p
}

func (g *Guard) controlUpstream(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &Refusal{Target: address, Reason: "unparsable socket address"}
	}
	return g.upstreamPolicy().CheckAddr(address, ap.Addr(), int(ap.Port()))
}

// upstreamHostPort is the upstream's host:port with the scheme's default
// port filled in.
func (g *Guard) upstreamHostPort() string {
	u := g.upstream
	if u.Port() != "" {
		return u.Host
	}
	switch u.Scheme {
	case "https":
		return net.JoinHostPort(u.Hostname(), "443")
	case "socks5", "socks5h":
		return net.JoinHostPort(u.Hostname(), "1080")
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// UpstreamError is a failure of the upstream proxy itself (unreachable,
// refused by the guard, a failed handshake, a CONNECT it refused): the
// proxy's fault, not the target's. A caller with a pool of proxies counts
// it against the proxy.
type UpstreamError struct {
	// Proxy is the upstream, without its password.
	Proxy string
	Err   error
}

func (e *UpstreamError) Error() string {
	return fmt.Sprintf("egress: upstream proxy %s: %v", e.Proxy, e.Err)
}

func (e *UpstreamError) Unwrap() error { return e.Err }

// AsUpstreamError returns the upstream proxy failure inside err, if any.
func AsUpstreamError(err error) (*UpstreamError, bool) {
	var u *UpstreamError
	if errors.As(err, &u) {
		return u, true
	}
	return nil, false
}

// dialUpstreamChecked connects to the upstream proxy: directly when it is
// an operator's endpoint, or — when it came from data (UpstreamPolicy) —
// to an address of its name that the upstream policy admits.
func (g *Guard) dialUpstreamChecked(ctx context.Context) (net.Conn, error) {
	hostport := g.upstreamHostPort()
	if g.upPolicy == nil {
		return g.dialUpstream(ctx, "tcp", hostport)
	}
	addrs, err := (&Guard{policy: g.upstreamPolicy(), resolver: g.resolver, log: g.log}).Check(ctx, "tcp", hostport)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, ap := range addrs {
		conn, err := g.dialUpstream(ctx, "tcp", ap.String())
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// Check resolves host:port as a dial would and returns the addresses the
// policy admits, in resolver order, or the refusal of the first one when
// none is admitted.
func (g *Guard) Check(ctx context.Context, network, target string) ([]netip.AddrPort, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, g.refuse(&Refusal{Target: target, Reason: fmt.Sprintf("network %q is not allowed (TCP only)", network)})
	}
	host, portStr, err := net.SplitHostPort(target)
	if err != nil {
		return nil, g.refuse(&Refusal{Target: target, Reason: "no host:port: " + err.Error()})
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return nil, g.refuse(&Refusal{Target: target, Reason: fmt.Sprintf("port %q is not a number from 1 to 65535", portStr)})
	}
	if len(g.policy.Only) > 0 {
		return g.checkOnly(ctx, network, target, host, port)
	}
	if a, ok, err := ParseHost(host); err != nil {
		return nil, g.refuse(&Refusal{Target: target, Reason: strings.TrimPrefix(err.Error(), "egress: ")})
	} else if ok {
		if err := g.policy.CheckAddr(target, a, port); err != nil {
			return nil, g.refuse(err.(*Refusal))
		}
		return []netip.AddrPort{netip.AddrPortFrom(a, uint16(port))}, nil
	}
	// Refuse a port before asking DNS: no query for a target that could
	// not be dialled anyway.
	if !g.policy.portPossible(port) {
		return nil, g.refuse(g.policy.checkPort(target, port))
	}
	rnet := "ip"
	switch network {
	case "tcp4":
		rnet = "ip4"
	case "tcp6":
		rnet = "ip6"
	}
	addrs, err := g.resolver.LookupNetIP(ctx, rnet, host)
	if err != nil {
		return nil, g.refuse(&Refusal{Target: target, Reason: "name does not resolve: " + err.Error()})
	}
	if len(addrs) == 0 {
		return nil, g.refuse(&Refusal{Target: target, Reason: "name resolves to no address"})
	}
	var ok []netip.AddrPort
	var first error
	for _, a := range addrs {
		if err := g.policy.CheckAddr(target, a, port); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		ok = append(ok, netip.AddrPortFrom(a, uint16(port)))
	}
	if len(ok) == 0 {
		return nil, g.refuse(first.(*Refusal))
	}
	return ok, nil
}

func (g *Guard) refuse(r *Refusal) error {
	args := []any{"target", r.Target, "reason", r.Reason}
	if r.Addr.IsValid() {
		// A refusal before any name was resolved has no address to name.
		args = append(args, "addr", r.Addr)
	}
	g.log.Warn("egress refused", args...)
	return r
}

// DialContext is a net.Dialer-style dial that checks first and connects
// only to checked addresses (through the upstream proxy when one is set).
// Use it as http.Transport.DialContext.
func (g *Guard) DialContext(ctx context.Context, network, target string) (net.Conn, error) {
	addrs, err := g.Check(ctx, network, target)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, ap := range addrs {
		conn, err := g.connect(ctx, ap)
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("egress: dial %s: %w", target, errors.Join(errs...))
}

func (g *Guard) connect(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
	if g.upstream == nil {
		return g.dial(ctx, "tcp", ap.String())
	}
	var conn net.Conn
	var err error
	switch g.upstream.Scheme {
	case "socks5", "socks5h":
		var auth *proxy.Auth
		if u := g.upstream.User; u != nil {
			pw, _ := u.Password()
			auth = &proxy.Auth{User: u.Username(), Password: pw}
		}
		var d proxy.Dialer
		d, err = proxy.SOCKS5("tcp", g.upstreamHostPort(), auth, dialerFunc(func(ctx context.Context, _, _ string) (net.Conn, error) {
			return g.dialUpstreamChecked(ctx)
		}))
		if err == nil {
			conn, err = d.(proxy.ContextDialer).DialContext(ctx, "tcp", ap.String())
		}
	default:
		conn, err = g.connectHTTP(ctx, ap)
	}
	if err != nil {
		if r, ok := AsRefusal(err); ok {
			// The guard refused the proxy's own address: say so.
			r.Reason = "the upstream proxy's address: " + r.Reason
		}
		return nil, &UpstreamError{Proxy: Redact(g.upstream), Err: err}
	}
	return conn, nil
}

type dialerFunc DialFunc

func (f dialerFunc) Dial(network, addr string) (net.Conn, error) {
	return f(context.Background(), network, addr)
}

func (f dialerFunc) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return f(ctx, network, addr)
}

// connectHTTP asks an HTTP(S) upstream to CONNECT to the checked address.
func (g *Guard) connectHTTP(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
	u := g.upstream
	conn, err := g.dialUpstreamChecked(ctx)
	if err != nil {
		return nil, err
	}
	if u.Scheme == "https" {
		tc := tls.Client(conn, &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12})
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, fmt.Errorf("TLS: %w", err)
		}
		conn = tc
	}
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: ap.String()}, Host: ap.String(), Header: http.Header{}}
	if u.User != nil {
		pw, _ := u.User.Password()
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pw)))
	}
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		conn.Close()
		return nil, fmt.Errorf("refused CONNECT %s: %s", ap, resp.Status)
	}
	_ = conn.SetDeadline(time.Time{})
	if br.Buffered() > 0 {
		return &bufConn{Conn: conn, r: br}, nil
	}
	return conn, nil
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }
