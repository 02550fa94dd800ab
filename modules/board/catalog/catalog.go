// Package catalog is the sandbox's catalogue site for the crawler to
// rehearse on: paginated HTML listings and item pages, the same catalogue as
// a JSON API with a cursor, a JavaScript-rendered variant only a browser
// sees, robots.txt with disallowed paths and a crawl-delay, a per-client rate
// limit answering 429 with Retry-After, several host names (one listener per
// 127.0.0.x address) and a layout-change switch.
//
// Its oracle (GET /_catalog/oracle on any host) is the ground truth a test
// or the demo compares a crawl with: the items published, the highest
// request count per host and per client in any 10 s window, robots
// violations, and requests made inside a Retry-After window.
package catalog

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetwright/fleetwright/app/clock"
)

// Window is the oracle's sliding window for request rates.
const Window = 10 * time.Second

// Config shapes the catalogue.
type Config struct {
	// Hosts are the loopback addresses to serve on, one listener each
	// (default 127.0.0.11, 127.0.0.12, 127.0.0.13).
	Hosts []string
	// Port is the port on every host; 0 picks a free one per host.
	Port int
	// Items per host (default 300) and PerPage per listing (default 20).
	Items, PerPage int
	// Rate and Burst are the per-client, per-host token bucket; beyond it
	// the answer is 429 with Retry-After: RetryAfter (default 20/s, 20, 2 s).
	Rate       float64
	Burst      int
	RetryAfter time.Duration
	// CrawlDelay is the robots.txt Crawl-delay in seconds (0: none).
	CrawlDelay float64
	// Layout is 1 or 2; 2 renames the classes a crawl job selects.
	Layout int
	// Latency is added to every answer (to exercise AutoThrottle).
	Latency time.Duration
	// AdminToken guards the control endpoint; empty leaves it open (tests).
	AdminToken string
	Clock      clock.Clock
	Logger     *slog.Logger
}

// DefaultHosts are the catalogue's host names.
var DefaultHosts = []string{"127.0.0.11", "127.0.0.12", "127.0.0.13"}

func (c *Config) defaults() {
	if len(c.Hosts) == 0 {
		c.Hosts = DefaultHosts
	}
	if c.Items == 0 {
		c.Items = 300
	}
	if c.PerPage == 0 {
		c.PerPage = 20
	}
	if c.Rate == 0 {
		c.Rate = 20
	}
	if c.Burst == 0 {
		c.Burst = 20
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = 2 * time.Second
	}
	if c.Layout == 0 {
		c.Layout = 1
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Server is a running catalogue.
type Server struct {
	cfg   Config
	log   *slog.Logger
	clk   clock.Clock
	hosts []*host
	srvs  []*http.Server
	wg    sync.WaitGroup

	mu       sync.Mutex
	layout   int
	items    int
	latency  time.Duration
	clients  map[string]*stats // by client address
	buckets  map[string]*bucket
	blocked  map[string]time.Time // client|host → end of its Retry-After window
	robots   []string             // "client host path" of each violation
	inWindow int
	thrott   int
}

type host struct {
	name  string // the address, as in URLs
	url   string // http://addr:port
	ln    net.Listener
	stats *stats
}

type stats struct {
	times    []time.Time
	requests int
}

type bucket struct {
	tokens float64
	at     time.Time
}

// Start listens on every host and serves until Close.
func Start(cfg Config) (*Server, error) {
	cfg.defaults()
	if cfg.Layout != 1 && cfg.Layout != 2 {
		return nil, fmt.Errorf("catalog: layout %d: use 1 or 2", cfg.Layout)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, clk: cfg.Clock, layout: cfg.Layout, items: cfg.Items, latency: cfg.Latency,
		clients: map[string]*stats{}, buckets: map[string]*bucket{}, blocked: map[string]time.Time{}}
	for _, h := range cfg.Hosts {
		if a, err := netip.ParseAddr(h); err != nil || !a.IsLoopback() {
			return nil, fmt.Errorf("catalog: host %q: the catalogue serves loopback addresses only", h)
		}
	}
	lns, err := listen(cfg.Hosts, cfg.Port)
	if err != nil {
		return nil, err
	}
	for i, h := range cfg.Hosts {
		ln := lns[i]
		hh := &host{name: h, url: "http://" + ln.Addr().String(), ln: ln, stats: &stats{}}
		s.hosts = append(s.hosts, hh)
		srv := &http.Server{Handler: s.handler(hh), ReadHeaderTimeout: 10 * time.Second}
		s.srvs = append(s.srvs, srv)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = srv.Serve(ln)
		}()
	}
	s.log.Info("catalog: serving", "hosts", s.URLs(), "items_per_host", cfg.Items, "rate", cfg.Rate, "burst", cfg.Burst, "crawl_delay", cfg.CrawlDelay)
	return s, nil
}

// listen opens one listener per host, all on one port: port, or with 0 a
// free port of the first host that the others have free too (a job's URLs
// then differ in the host alone, like real domains).
func listen(hosts []string, port int) ([]net.Listener, error) {
	for try := 0; ; try++ {
		var lns []net.Listener
		p := port
		var err error
		for _, h := range hosts {
			var ln net.Listener
			ln, err = net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(p)))
			if err != nil {
				break
			}
			p = ln.Addr().(*net.TCPAddr).Port
			lns = append(lns, ln)
		}
		if err == nil {
			return lns, nil
		}
		for _, ln := range lns {
			ln.Close()
		}
		if port != 0 || try >= 20 {
			return nil, fmt.Errorf("catalog: listen: %w", err)
		}
	}
}

// PortOf is the port of a catalogue URL (0 when it has none).
func PortOf(u string) int {
	i := strings.LastIndexByte(u, ':')
	if i < 0 {
		return 0
	}
	n, _ := strconv.Atoi(u[i+1:])
	return n
}

// URLs are the base URLs of the hosts, in configuration order.
func (s *Server) URLs() []string {
	out := make([]string, len(s.hosts))
	for i, h := range s.hosts {
		out[i] = h.url
	}
	return out
}

// Close stops every listener.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, srv := range s.srvs {
		_ = srv.Shutdown(ctx)
	}
	s.wg.Wait()
	return nil
}

// SetLayout flips the layout switch (1 or 2).
func (s *Server) SetLayout(v int) error {
	if v != 1 && v != 2 {
		return fmt.Errorf("catalog: layout %d: use 1 or 2", v)
	}
	s.mu.Lock()
	s.layout = v
	s.mu.Unlock()
	s.log.Info("catalog: layout switched", "layout", v)
	return nil
}

// SetItems changes how many items each host publishes.
func (s *Server) SetItems(n int) {
	s.mu.Lock()
	s.items = max(n, 0)
	s.mu.Unlock()
}

// SetLatency changes the delay added to every answer.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	s.latency = d
	s.mu.Unlock()
}

func clientOf(r *http.Request) string {
	h, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return h
}

// admit records a request and decides the rate limit. It returns the
// seconds to send in Retry-After, or 0 to serve.
func (s *Server) admit(h *host, r *http.Request) (retry int, path string) {
	now := s.clk.Now()
	client := clientOf(r)
	path = r.URL.Path
	s.mu.Lock()
	defer s.mu.Unlock()
	h.stats.times = append(h.stats.times, now)
	h.stats.requests++
	cs := s.clients[client]
	if cs == nil {
		cs = &stats{}
		s.clients[client] = cs
	}
	cs.times = append(cs.times, now)
	cs.requests++
	if disallowed(path) {
		s.robots = append(s.robots, client+" "+h.name+" "+path)
	}
	key := client + "|" + h.name
	if until, ok := s.blocked[key]; ok && now.Before(until) {
		s.inWindow++
		return int(math.Ceil(until.Sub(now).Seconds())), path
	}
	b := s.buckets[key]
	if b == nil {
		b = &bucket{tokens: float64(s.cfg.Burst), at: now}
		s.buckets[key] = b
	}
	b.tokens = math.Min(float64(s.cfg.Burst), b.tokens+now.Sub(b.at).Seconds()*s.cfg.Rate)
	b.at = now
	if b.tokens < 1 {
		s.thrott++
		s.blocked[key] = now.Add(s.cfg.RetryAfter)
		return int(math.Ceil(s.cfg.RetryAfter.Seconds())), path
	}
	b.tokens--
	return 0, path
}

// disallowed mirrors robots.txt.
func disallowed(path string) bool {
	return strings.HasPrefix(path, "/private/") || path == "/private" || strings.HasPrefix(path, "/cart")
}

func (s *Server) robotsTxt() string {
	var b strings.Builder
	b.WriteString("# The sandbox catalogue. Please crawl politely.\nUser-agent: *\nDisallow: /private/\nDisallow: /cart\nDisallow: /_catalog/\n")
	if s.cfg.CrawlDelay > 0 {
		fmt.Fprintf(&b, "Crawl-delay: %s\n", strconv.FormatFloat(s.cfg.CrawlDelay, 'f', -1, 64))
	}
	return b.String()
}

func (s *Server) handler(h *host) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_catalog/oracle", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, s.Oracle()) })
	mux.HandleFunc("GET /_catalog/items", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, s.Published()) })
	mux.HandleFunc("POST /_catalog/control", s.control)
	site := http.NewServeMux()
	site.HandleFunc("GET /robots.txt", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, s.robotsTxt())
	})
	site.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { s.home(w, h) })
	site.HandleFunc("GET /catalog", func(w http.ResponseWriter, r *http.Request) { s.listing(w, r, h, false) })
	site.HandleFunc("GET /js/catalog", func(w http.ResponseWriter, r *http.Request) { s.listing(w, r, h, true) })
	site.HandleFunc("GET /item/{id}", func(w http.ResponseWriter, r *http.Request) { s.item(w, r, h) })
	site.HandleFunc("GET /api/items", func(w http.ResponseWriter, r *http.Request) { s.api(w, r, h) })
	site.HandleFunc("GET /private/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "<html><body><h1>Staff only</h1><p>This part is disallowed by robots.txt.</p></body></html>")
	})
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		retry, _ := s.admit(h, r)
		s.mu.Lock()
		lat := s.latency
		s.mu.Unlock()
		if lat > 0 {
			select {
			case <-s.clk.After(lat):
			case <-r.Context().Done():
				return
			}
		}
		if retry > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(retry))
			http.Error(w, "429 too many requests: slow down", http.StatusTooManyRequests)
			return
		}
		site.ServeHTTP(w, r)
	}))
	return mux
}

func (s *Server) control(w http.ResponseWriter, r *http.Request) {
	if t := s.cfg.AdminToken; t != "" {
		got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if subtle.ConstantTimeCompare([]byte(got), []byte(t)) != 1 {
			http.Error(w, "catalog: the control endpoint needs the sandbox admin token", http.StatusUnauthorized)
			return
		}
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, "catalog: "+err.Error(), http.StatusBadRequest)
		return
	}
	if v := r.Form.Get("layout"); v != "" {
		n, _ := strconv.Atoi(v)
		if err := s.SetLayout(n); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	if v := r.Form.Get("items"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			http.Error(w, "catalog: items must be a count", http.StatusBadRequest)
			return
		}
		s.SetItems(n)
	}
	if v := r.Form.Get("latency"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			http.Error(w, "catalog: latency must be a duration", http.StatusBadRequest)
			return
		}
		s.SetLatency(d)
	}
	writeJSON(w, s.Oracle())
}

// Item is one published product.
type Item struct {
	ID    string   `json:"id"`
	Host  string   `json:"host"`
	URL   string   `json:"url"`
	Title string   `json:"title"`
	Price float64  `json:"price"`
	SKU   int      `json:"sku"`
	Tags  []string `json:"tags"`
}

var words = []string{"Amber", "Basalt", "Cedar", "Delta", "Ember", "Fjord", "Granite", "Harbor", "Indigo", "Juniper", "Kestrel", "Lumen", "Meadow", "Nimbus", "Onyx", "Prairie"}
var kinds = []string{"Lamp", "Chair", "Kettle", "Backpack", "Notebook", "Clock", "Mug", "Blanket"}
var tagSet = []string{"new", "sale", "eco", "classic", "limited"}

func (s *Server) itemAt(h *host, i int) Item {
	sku := 10000*(hostIndex(s, h)+1) + i
	return Item{
		ID:    fmt.Sprintf("p%04d", i),
		Host:  h.name,
		URL:   h.url + fmt.Sprintf("/item/p%04d", i),
		Title: fmt.Sprintf("%s %s %d", words[(i*7+hostIndex(s, h))%len(words)], kinds[i%len(kinds)], i),
		Price: float64(500+(i*733)%9500) / 100,
		SKU:   sku,
		Tags:  []string{tagSet[i%len(tagSet)], tagSet[(i/3)%len(tagSet)]},
	}
}

func hostIndex(s *Server, h *host) int {
	for i, x := range s.hosts {
		if x == h {
			return i
		}
	}
	return 0
}

func (s *Server) snapshot() (layout, items int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.layout, s.items
}

// Published lists every item every host publishes now.
func (s *Server) Published() []Item {
	_, n := s.snapshot()
	var out []Item
	for _, h := range s.hosts {
		for i := 1; i <= n; i++ {
			out = append(out, s.itemAt(h, i))
		}
	}
	return out
}

// HostFigures are the oracle's figures for one host or client.
type HostFigures struct {
	Requests       int `json:"requests"`
	MaxRequests10s int `json:"max_requests_10s"`
}

// Report is the oracle's answer.
type Report struct {
	Layout               int                    `json:"layout"`
	ItemsPerHost         int                    `json:"items_per_host"`
	ItemsPublished       int                    `json:"items_published"`
	Hosts                map[string]HostFigures `json:"hosts"`
	Clients              map[string]HostFigures `json:"clients"`
	RobotsViolations     int                    `json:"robots_violations"`
	RobotsViolationList  []string               `json:"robots_violation_list,omitempty"`
	RetryAfterViolations int                    `json:"retry_after_violations"`
	Throttled            int                    `json:"throttled"`
	Rate                 float64                `json:"rate"`
	Burst                int                    `json:"burst"`
	CrawlDelay           float64                `json:"crawl_delay"`
}

// Oracle reports the ground truth so far.
func (s *Server) Oracle() Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := Report{Layout: s.layout, ItemsPerHost: s.items, ItemsPublished: s.items * len(s.hosts),
		Hosts: map[string]HostFigures{}, Clients: map[string]HostFigures{},
		RobotsViolations: len(s.robots), RobotsViolationList: append([]string(nil), s.robots...),
		RetryAfterViolations: s.inWindow, Throttled: s.thrott, Rate: s.cfg.Rate, Burst: s.cfg.Burst, CrawlDelay: s.cfg.CrawlDelay}
	for _, h := range s.hosts {
		r.Hosts[h.name] = HostFigures{Requests: h.stats.requests, MaxRequests10s: maxInWindow(h.stats.times, Window)}
	}
	for c, st := range s.clients {
		r.Clients[c] = HostFigures{Requests: st.requests, MaxRequests10s: maxInWindow(st.times, Window)}
	}
	return r
}

// maxInWindow is the most timestamps inside any window [t, t+w).
func maxInWindow(ts []time.Time, w time.Duration) int {
	t := append([]time.Time(nil), ts...)
	sort.Slice(t, func(a, b int) bool { return t[a].Before(t[b]) })
	best, lo := 0, 0
	for hi := range t {
		for t[hi].Sub(t[lo]) >= w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// Bound is the oracle's limit for a crawler told to keep rate requests/s
// per host: rate × 10 s × 1.05 + burst requests in any 10 s window.
func Bound(rate float64, burst int) int {
	return int(math.Floor(rate*Window.Seconds()*1.05)) + burst
}

var errBadCursor = errors.New("bad cursor")
