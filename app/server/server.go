// Package server is the HTTP kernel every role shares: a chi router with
// request ids, panic recovery that logs through the redacting logger, access
// logging, health and readiness endpoints, Prometheus metrics, and a server
// that drains gracefully.
package server

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check is one readiness probe. Critical checks fail /readyz; the others are
// reported on /readyz?verbose=1 and in metrics only (a failing cell's Redis
// must not take the whole panel out of its load balancer).
type Check struct {
	Name     string
	Critical bool
	Probe    func(ctx context.Context) error
}

// Health holds the readiness checks, which modules may add at any time.
type Health struct {
	mu       sync.RWMutex
	checks   []Check
	up       *prometheus.GaugeVec
	draining bool
}

// Drain makes /readyz fail from now on, whatever the checks say: a stopping
// server leaves its load balancer's rotation while it still serves what is
// sent to it meanwhile. It is not a dependency, so fleet_dependency_up is
// left alone.
func (h *Health) Drain() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.draining = true
}

// NewHealth registers the fleet_dependency_up gauge with reg.
func NewHealth(reg prometheus.Registerer) *Health {
	h := &Health{up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fleet_dependency_up",
		Help: "1 when the dependency answered its last readiness probe.",
	}, []string{"dependency"})}
	reg.MustRegister(h.up)
	return h
}

// Add registers a check.
func (h *Health) Add(c Check) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checks = append(h.checks, c)
}

// Remove drops the check named name.
func (h *Health) Remove(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	kept := h.checks[:0]
	for _, c := range h.checks {
		if c.Name != name {
			kept = append(kept, c)
		}
	}
	h.checks = kept
}

// Result is the outcome of one readiness check.
type Result struct {
	Name     string `json:"name"`
	OK       bool   `json:"ok"`
	Critical bool   `json:"critical"`
	Error    string `json:"error,omitempty"`
	Millis   int64  `json:"ms"`
}

// Run probes every check concurrently, each bounded by timeout.
func (h *Health) Run(ctx context.Context, timeout time.Duration) (ready bool, results []Result) {
	h.mu.RLock()
	checks := append([]Check(nil), h.checks...)
	draining := h.draining
	h.mu.RUnlock()
	results = make([]Result, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			start := time.Now()
			err := c.Probe(cctx)
			r := Result{Name: c.Name, OK: err == nil, Critical: c.Critical, Millis: time.Since(start).Milliseconds()}
			if err != nil {
				r.Error = err.Error()
				h.up.WithLabelValues(c.Name).Set(0)
			} else {
				h.up.WithLabelValues(c.Name).Set(1)
			}
			results[i] = r
		}()
	}
	wg.Wait()
	if draining {
		results = append(results, Result{Name: "draining", Critical: true, Error: "this server is stopping"})
	}
	sort.Slice(results, func(i, j int) bool { return results[i].Name < results[j].Name })
	ready = true
	for _, r := range results {
		if r.Critical && !r.OK {
			ready = false
		}
	}
	return ready, results
}

// Mount adds /healthz and /readyz to r. /metrics is served apart
// (MetricsHandler): on its own listener, or on r behind a bearer token.
func Mount(r chi.Router, h *Health) {
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	r.Get("/readyz", func(w http.ResponseWriter, req *http.Request) {
		ready, results := h.Run(req.Context(), 2*time.Second)
		status := http.StatusOK
		if !ready {
			status = http.StatusServiceUnavailable
		}
		if req.URL.Query().Get("verbose") == "" {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(status)
			if ready {
				_, _ = w.Write([]byte("ready\n"))
			} else {
				_, _ = w.Write([]byte("not ready\n"))
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"ready": ready, "checks": results})
	})
}

// MetricsHandler serves gather's metrics. With a token, a request must
// carry "Authorization: Bearer <token>" (compared in constant time) and is
// answered 401 without it: the figures name tenants, agents and spend.
func MetricsHandler(gather prometheus.Gatherer, token string) http.Handler {
	h := promhttp.HandlerFor(gather, promhttp.HandlerOpts{})
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
			http.Error(w, "metrics need the bearer token of --metrics-token-file", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// MetricsOnly is the handler of a metrics listener: /metrics and nothing
// else.
func MetricsOnly(gather prometheus.Gatherer, token string) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", MetricsHandler(gather, token))
	return mux
}

// NewRouter returns a router with request ids, panic recovery and access logs.
func NewRouter(log *slog.Logger, reg prometheus.Registerer) chi.Router {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_http_requests_total",
		Help: "HTTP requests served, by route pattern and status class.",
	}, []string{"route", "code"})
	reg.MustRegister(requests)
	r := chi.NewRouter()
	r.Use(middleware.RequestID)
	r.Use(recoverer(log))
	r.Use(accessLog(log, requests))
	return r
}

// recoverer turns a panic in a handler into a 500 and a log line with the
// stack; the logger's redaction keeps secrets in the panic value out of it.
func recoverer(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if rec := recover(); rec != nil {
					if rec == http.ErrAbortHandler {
						panic(rec)
					}
					log.Error("panic in handler", "panic", fmt.Sprint(rec), "method", r.Method,
						"path", r.URL.Path, "request_id", middleware.GetReqID(r.Context()),
						"stack", string(debug.Stack()))
					http.Error(w, "internal error (request "+middleware.GetReqID(r.Context())+")", http.StatusInternalServerError)
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
}

func accessLog(log *slog.Logger, requests *prometheus.CounterVec) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r)
			route := chi.RouteContext(r.Context()).RoutePattern()
			if route == "" {
				route = "unmatched"
			}
			requests.WithLabelValues(route, fmt.Sprintf("%dxx", ww.Status()/100)).Inc()
			// The path only: query strings may carry tokens.
			log.Debug("http", "method", r.Method, "path", r.URL.Path, "status", ww.Status(),
				"ms", time.Since(start).Milliseconds(), "request_id", middleware.GetReqID(r.Context()))
		})
	}
}

// Server is an http.Server bound to a listener it opened itself, so a busy
// port is reported before anything else starts.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Listen opens addr.
func Listen(addr string, h http.Handler, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("server: listen on %s: %w (is another process using it? choose another --listen)", addr, err)
	}
	return &Server{ln: ln, srv: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}}, nil
}

// Addr is the address actually bound (useful with port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve serves until Shutdown; it returns nil after a graceful shutdown.
func (s *Server) Serve() error {
	if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("server: %w", err)
	}
	return nil
}

// Shutdown drains in-flight requests until ctx ends, then closes the rest.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	return err
}
