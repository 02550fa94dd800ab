package egress_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/egress"
)

// Fake public addresses: the test dialer carries them to loopback servers,
// so the guard sees ordinary global addresses while only loopback is ever
// dialled.
var (
	pubA  = netip.MustParseAddr("93.184.216.34")
	pubB  = netip.MustParseAddr("93.184.216.35")
	pubV6 = netip.MustParseAddr("2606:2800:220:1:248:1893:25c8:1946")
)

// fakeNet is the injected resolver and dialer. It never opens a socket to
// a non-loopback address: a dial to one that is not a fake public address
// fails the test before any connect(2), and so does a dial to loopback
// unless the case allowlisted it.
type fakeNet struct {
	t       *testing.T
	mu      sync.Mutex
	names   map[string][]netip.Addr
	seq     map[string][][]netip.Addr // answers that change per query
	public  map[netip.AddrPort]string // fake public address → loopback listener
	loopOK  bool
	dials   []string
	lookups []string
}

func (f *fakeNet) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	f.lookups = append(f.lookups, h)
	if s, ok := f.seq[h]; ok && len(s) > 0 {
		ans := s[0]
		if len(s) > 1 {
			f.seq[h] = s[1:]
		}
		return ans, nil
	}
	a, ok := f.names[h]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, x := range a {
		if network == "ip4" && !x.Is4() || network == "ip6" && x.Is4() {
			continue
		}
		out = append(out, x)
	}
	return out, nil
}

func (f *fakeNet) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	f.mu.Lock()
	f.dials = append(f.dials, addr)
	f.mu.Unlock()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		f.t.Errorf("dial of a non-literal address %q", addr)
		return nil, errors.New("test dialer: not a literal address")
	}
	if to, ok := f.public[ap]; ok {
		var d net.Dialer
		return d.DialContext(ctx, network, to)
	}
	if ap.Addr().Unmap().IsLoopback() && f.loopOK {
		var d net.Dialer
		return d.DialContext(ctx, network, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String())
	}
	f.t.Errorf("the guard let a dial through to %s", addr)
	return nil, fmt.Errorf("test dialer: %s is not a test address; not dialled", addr)
}

type site struct {
	plain, tls *httptest.Server
	port       int
	roots      *x509.CertPool
}

func newSite(t *testing.T) *site {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", r.Host)
	})
	mux.HandleFunc("/r", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	s := &site{plain: httptest.NewServer(mux), tls: httptest.NewTLSServer(mux)}
	t.Cleanup(s.plain.Close)
	t.Cleanup(s.tls.Close)
	s.port = s.plain.Listener.Addr().(*net.TCPAddr).Port
	s.roots = x509.NewCertPool()
	s.roots.AddCert(s.tls.Certificate())
	return s
}

type corpusCase struct {
	url      string
	allow    []string
	ports    []int
	want     string // "ok:<body substring>" or "refused:<reason substring>"
	precheck bool   // call Check once first (the answer changes before the dial)
}

func corpus() []corpusCase {
	var cs []corpusCase
	refuse := func(reason string, urls ...string) {
		for _, u := range urls {
			cs = append(cs, corpusCase{url: u, want: "refused:" + reason})
		}
	}
	// Loopback in every spelling a URL parser or inet_aton accepts.
	refuse("loopback",
		"http://127.0.0.1/", "http://127.1/", "http://127.0.1/", "http://2130706433/",
		"http://0x7f000001/", "http://0X7F000001/", "http://0x7f.1/", "http://0x7f.0.0.1/",
		"http://0177.0.0.1/", "http://0177.1/", "http://017700000001/", "http://00000177.0.0.1/",
		"http://127.000.000.001/", "http://127.0.0.1./", "http://127.255.255.254/",
		"http://0x7f.0x0.0x0.0x1/", "http://127.0.0.1:80/", "https://127.0.0.1/",
		"http://[::1]/", "http://[0:0:0:0:0:0:0:1]/", "http://[::ffff:127.0.0.1]/",
		"http://[::ffff:7f00:1]/", "http://[0:0:0:0:0:ffff:127.0.0.1]/",
		"http://[64:ff9b::127.0.0.1]/", "http://[2002:7f00:1::1]/",
		"http://localhost/", "http://LOCALHOST./", "http://localhost.localdomain/",
	)
	refuse("IPv4-compatible", "http://[::127.0.0.1]/", "http://[::7f00:1]/")
	refuse("this network", "http://0.0.0.0/", "http://0/", "http://0x0/", "http://0.0.0.0./", "http://[::ffff:0.0.0.0]/")
	refuse("unspecified", "http://[::]/", "http://[0:0:0:0:0:0:0:0]/")
	refuse("private use",
		"http://10.0.0.1/", "http://10.255.255.255/", "http://012.0.0.1/", "http://0xa.0.0.1/",
		"http://167772161/", "http://172.16.0.1/", "http://172.31.255.254/", "http://0xac100001/",
		"http://192.168.0.1/", "http://192.168.1.1/", "http://3232235777/", "http://0300.0250.0.1/",
		"http://[::ffff:10.0.0.1]/", "http://[::ffff:c0a8:101]/", "http://[64:ff9b::10.1.2.3]/",
		"http://internal.test/", "http://corp.test/",
	)
	refuse("unique local", "http://[fd00::1]/", "http://[fc00::1]/", "http://[fd12:3456:789a:1::1]/", "http://[fd00:ec2::254]/", "http://v6local.test/")
	refuse("link-local",
		"http://169.254.169.254/", "http://169.254.169.254/latest/meta-data/", "http://2852039166/",
		"http://0xa9fea9fe/", "http://0251.0376.0251.0376/", "http://[::ffff:169.254.169.254]/",
		"http://[fe80::a9fe:a9fe]/", "http://[fe80::1]/", "http://metadata.google.internal/", "http://meta.test/",
	)
	refuse("zone", "http://[fe80::1%25eth0]/", "http://[fe80::1%25lo]/", "http://[ff02::1%25lo]/")
	refuse("CGNAT", "http://100.64.0.1/", "http://100.127.255.254/", "http://100.100.100.200/")
	refuse("documentation", "http://192.0.2.1/", "http://198.51.100.7/", "http://203.0.113.9/", "http://[2001:db8::1]/", "http://[3fff::1]/")
	refuse("benchmarking", "http://198.18.0.1/", "http://198.19.255.255/")
	refuse("multicast", "http://224.0.0.1/", "http://239.255.255.250/", "http://[ff02::1]/", "http://[ff05::1:3]/")
	refuse("reserved", "http://240.0.0.1/", "http://255.255.255.255/", "http://4294967295/")
	refuse("IETF protocol assignments", "http://192.0.0.8/", "http://[2001::1]/", "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/")
	refuse("6to4 relay", "http://192.88.99.1/")
	refuse("discard-only", "http://[100::1]/")
	refuse("local-use", "http://[64:ff9b:1::1]/")
	refuse("AS112", "http://192.31.196.1/", "http://192.175.48.1/")
	// Hosts that end in a number but are no address: a browser refuses them.
	refuse("ends in a number", "http://256.0.0.1/", "http://1.2.3.4.5/", "http://0x100000000/",
		"http://4294967296/", "http://1.2.3.08/", "http://99999999999/", "http://1.2.3.0x100/")
	// Names: private answers, mixed private answers, no answer.
	refuse("loopback", "http://mapped.test/", "http://mixed-bad.test/")
	refuse("does not resolve", "http://nxdomain.test/")
	refuse("no address", "http://empty.test/")
	// Ports other than 80 and 443.
	refuse("port 22 is not allowed", "http://public.test:22/", "http://93.184.216.34:22/")
	refuse("port 8080 is not allowed", "http://public.test:8080/")
	refuse("port 6379 is not allowed", "http://[2606:2800:220:1:248:1893:25c8:1946]:6379/")
	refuse("port 8443 is not allowed", "https://example.com:8443/")
	refuse("65536", "http://public.test:65536/")
	// Redirects: every hop is checked.
	for _, to := range []struct{ to, reason string }{
		{"http://127.0.0.1/", "loopback"},
		{"http://127.1/", "loopback"},
		{"http://[::1]/", "loopback"},
		{"http://[::ffff:127.0.0.1]/", "loopback"},
		{"http://0x7f000001/", "loopback"},
		{"http://2130706433/", "loopback"},
		{"http://localhost/", "loopback"},
		{"http://10.0.0.1/", "private use"},
		{"http://internal.test/", "private use"},
		{"http://169.254.169.254/latest/meta-data/iam/", "link-local"},
		{"http://[fd00:ec2::254]/", "unique local"},
		{"http://public.test:22/", "port 22"},
		{"file:///etc/passwd", "scheme \"file\""},
		{"gopher://public.test/", "scheme \"gopher\""},
		{"ftp://public.test/", "scheme \"ftp\""},
		{"http://public2.test/r?to=http://192.168.0.1/", "private use"},
	} {
		cs = append(cs, corpusCase{url: "http://public.test/r?to=" + to.to, want: "refused:" + to.reason})
	}
	cs = append(cs, corpusCase{url: "https://example.com/r?to=http://127.0.0.1/", want: "refused:loopback"})
	// The DNS answer changes between a check and the dial (rebinding).
	cs = append(cs, corpusCase{url: "http://rebind.test/", precheck: true, want: "refused:loopback"})
	cs = append(cs, corpusCase{url: "http://rebind6.test/", precheck: true, want: "refused:unique local"})
	// What must still work.
	ok := func(body string, urls ...string) {
		for _, u := range urls {
			cs = append(cs, corpusCase{url: u, want: "ok:" + body})
		}
	}
	ok("hello from public.test", "http://public.test/")
	ok("hello from PUBLIC.TEST.", "http://PUBLIC.TEST./")
	ok("hello from 93.184.216.34", "http://93.184.216.34/")
	ok("hello from [2606:2800:220:1:248:1893:25c8:1946]", "http://[2606:2800:220:1:248:1893:25c8:1946]/")
	ok("hello from example.com", "https://example.com/")
	ok("hello from mixed.test", "http://mixed.test/")
	ok("hello from public2.test", "http://public.test/r?to=http://public2.test/", "https://example.com/r?to=http://public2.test/")
	ok("hello from [::ffff:93.184.216.34]", "http://[::ffff:93.184.216.34]/")
	ok("hello from [64:ff9b::5db8:d822]", "http://[64:ff9b::5db8:d822]/")
	// The allowlist admits internal ranges, and only those.
	cs = append(cs,
		corpusCase{url: "http://127.0.0.1:{port}/", allow: []string{"127.0.0.0/8"}, ports: []int{-1}, want: "ok:hello from 127.0.0.1"},
		corpusCase{url: "http://127.1:{port}/", allow: []string{"127.0.0.1"}, ports: []int{-1}, want: "ok:hello from 127.1"},
		corpusCase{url: "http://[::ffff:127.0.0.1]:{port}/", allow: []string{"127.0.0.1/32"}, ports: []int{-1}, want: "ok:hello from"},
		corpusCase{url: "http://localhost:{port}/", allow: []string{"127.0.0.0/8"}, ports: []int{-1}, want: "ok:hello from localhost"},
		corpusCase{url: "http://127.0.0.2:{port}/", allow: []string{"127.0.0.1/32"}, ports: []int{-1}, want: "refused:loopback"},
		corpusCase{url: "http://127.0.0.1:{port}/", allow: []string{"127.0.0.0/8"}, want: "refused:is not allowed"},
		corpusCase{url: "http://169.254.169.254/", allow: []string{"10.0.0.0/8"}, want: "refused:link-local"},
		corpusCase{url: "http://public.test/r?to=http://127.0.0.1:{port}/", allow: []string{"127.0.0.0/8"}, ports: []int{80, -1}, want: "ok:hello from 127.0.0.1"},
	)
	return cs
}

func TestCorpus(t *testing.T) {
	s := newSite(t)
	cases := corpus()
	require.GreaterOrEqual(t, len(cases), 100, "the issue asks for a corpus of at least 100 cases")
	passed := 0
	for i, c := range cases {
		c.url = strings.ReplaceAll(c.url, "{port}", strconv.Itoa(s.port))
		if !t.Run(fmt.Sprintf("%03d %s", i, c.url), func(t *testing.T) { runCase(t, s, c) }) {
			continue
		}
		passed++
	}
	t.Logf("SSRF corpus: %d of %d cases pass (%.0f %%)", passed, len(cases), 100*float64(passed)/float64(len(cases)))
	require.Equal(t, len(cases), passed)
}

func runCase(t *testing.T, s *site, c corpusCase) {
	plainAddr := s.plain.Listener.Addr().String()
	tlsAddr := s.tls.Listener.Addr().String()
	fn := &fakeNet{
		t: t,
		names: map[string][]netip.Addr{
			"public.test":              {pubA},
			"public2.test":             {pubB},
			"example.com":              {pubA},
			"mixed.test":               {netip.MustParseAddr("10.0.0.1"), pubA, netip.MustParseAddr("fd00::1")},
			"mixed-bad.test":           {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("10.0.0.1")},
			"internal.test":            {netip.MustParseAddr("10.0.0.5")},
			"corp.test":                {netip.MustParseAddr("192.168.1.10")},
			"meta.test":                {netip.MustParseAddr("169.254.169.254")},
			"metadata.google.internal": {netip.MustParseAddr("169.254.169.254")},
			"v6local.test":             {netip.MustParseAddr("fd00::1")},
			"mapped.test":              {netip.MustParseAddr("::ffff:127.0.0.1")},
			"localhost":                {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")},
			"localhost.localdomain":    {netip.MustParseAddr("127.0.0.1")},
			"empty.test":               {},
		},
		seq: map[string][][]netip.Addr{
			"rebind.test":  {{pubA}, {netip.MustParseAddr("127.0.0.1")}},
			"rebind6.test": {{pubV6}, {netip.MustParseAddr("fd00::2")}},
		},
		public: map[netip.AddrPort]string{
			netip.AddrPortFrom(pubA, 80):                                        plainAddr,
			netip.AddrPortFrom(pubB, 80):                                        plainAddr,
			netip.AddrPortFrom(pubV6, 80):                                       plainAddr,
			netip.AddrPortFrom(pubA, 443):                                       tlsAddr,
			netip.AddrPortFrom(netip.MustParseAddr("::ffff:93.184.216.34"), 80): plainAddr,
			netip.AddrPortFrom(netip.MustParseAddr("64:ff9b::5db8:d822"), 80):   plainAddr,
		},
		loopOK: len(c.allow) > 0,
	}
	allow, err := egress.ParseAllow(c.allow)
	require.NoError(t, err)
	var ports []int
	for _, p := range c.ports {
		if p == -1 {
			p = s.port
		}
		ports = append(ports, p)
	}
	g, err := egress.New(egress.Config{Policy: egress.Policy{Ports: ports, Allow: allow}, Resolver: fn, Dial: fn.Dial})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c.precheck {
		u := strings.TrimSuffix(strings.TrimPrefix(c.url, "http://"), "/")
		_, err := g.Check(ctx, "tcp", u+":80")
		require.NoError(t, err, "the first answer is public and passes")
	}
	client := g.Client(egress.ClientOptions{Timeout: 10 * time.Second, TLS: &tls.Config{RootCAs: s.roots}})
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	require.NoError(t, err)
	resp, err := client.Do(req)
	kind, detail, _ := strings.Cut(c.want, ":")
	switch kind {
	case "ok":
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, string(b), detail)
	case "refused":
		if err == nil {
			resp.Body.Close()
			t.Fatalf("fetched %s (status %d); want refused (%s)", c.url, resp.StatusCode, detail)
		}
		require.ErrorIs(t, err, egress.ErrRefused, "want a refusal, got %v", err)
		require.Contains(t, err.Error(), detail)
	}
	for _, d := range fn.dials {
		ap := netip.MustParseAddrPort(d)
		if _, ok := fn.public[ap]; !ok && !fn.loopOK {
			t.Errorf("dialled %s", d)
		}
	}
}
