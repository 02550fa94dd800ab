package panel

import (
	"log/slog"
	"net/http"
	"net/netip"

	"github.com/fleetwright/fleetwright/app/vault"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/server"
	"github.com/fleetwright/fleetwright/modules/account"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/audit"
	auditweb "github.com/fleetwright/fleetwright/modules/audit/web"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/claim"
	claimweb "github.com/fleetwright/fleetwright/modules/claim/web"
	"github.com/fleetwright/fleetwright/modules/console"
	"github.com/fleetwright/fleetwright/modules/crawl"
	crawlweb "github.com/fleetwright/fleetwright/modules/crawl/web"
	"github.com/fleetwright/fleetwright/modules/fleet"
	fleetweb "github.com/fleetwright/fleetwright/modules/fleet/web"
	"github.com/fleetwright/fleetwright/modules/limit"
	"github.com/fleetwright/fleetwright/modules/notify"
	"github.com/fleetwright/fleetwright/modules/platform/registry"
	platformweb "github.com/fleetwright/fleetwright/modules/platform/web"
	"github.com/fleetwright/fleetwright/modules/retention"
	"github.com/fleetwright/fleetwright/modules/schedule"
	tenantweb "github.com/fleetwright/fleetwright/modules/tenant/web"
	"github.com/fleetwright/fleetwright/static"
	"github.com/fleetwright/fleetwright/views"
)

// HTTPDeps are what the panel's HTTP side is built from.
type HTTPDeps struct {
	DB     *pgxpool.Pool
	Health *server.Health
	Reg    *prometheus.Registry
	// MetricsToken, when set, serves /metrics on this router behind
	// "Authorization: Bearer <token>".
	MetricsToken string
	Log          *slog.Logger
	Version      string
	Clock        clock.Clock
	Session      account.Config
	// AgentGateway serves /agent/ws; agents authenticate inside its
	// handshake with their own tokens, not with console sessions.
	AgentGateway http.Handler
	// Fleet is the fleet store behind the fleet pages (nil: no fleet pages).
	Fleet *fleet.Store
	// Claims is the claim engine behind the claim, latency, claim settings,
	// cells and settings pages (nil: no claim pages).
	Claims *claim.Engine
	// TrustedProxies are the peers whose X-Real-IP, X-Forwarded-For and
	// X-Forwarded-Proto are believed (--trusted-proxies); none by default.
	TrustedProxies []netip.Prefix
	// Vault seals operators' TOTP seeds (the panel's secret key).
	Vault *vault.Vault
	// Schedules is the scheduler behind the schedules page and the
	// overview's audit figure (nil: left out).
	Schedules *schedule.Scheduler
	// Notifier is behind the notification channels page (nil: no page).
	Notifier *notify.Notifier
	// Crawl is the crawler behind the crawl pages (nil: no crawl pages).
	Crawl *crawl.Service
}

// HTTP is the panel's router (for route walks) and the handler served.
type HTTP struct {
	Router  chi.Router
	Handler http.Handler
	Shell   *auth.Shell
	Account *account.Service
}

// KernelRoutes are the routes mounted by app/ packages, which cannot import
// modules/auth to declare a permission: all public by design (health and
// readiness for load balancers, metrics for the scraper — on the console's
// port only with --metrics-token-file, and then behind its bearer token —
// and cache-busted assets). The route-walk test accepts
// these and nothing else without a declared permission.
var KernelRoutes = map[string]bool{
	"GET /healthz": true, "GET /readyz": true, "GET /metrics": true,
	"GET /static/{sum}/{name}": true,
	// chi registers r.Handle for every method; /metrics is read-only.
	"HEAD /metrics": true, "POST /metrics": true, "PUT /metrics": true, "PATCH /metrics": true, "DELETE /metrics": true,
	"CONNECT /metrics": true, "OPTIONS /metrics": true, "TRACE /metrics": true, "QUERY /metrics": true,
}

// NewHTTP builds the router exactly as the panel serves it: kernel routes,
// then every console module behind the session middleware, all wrapped in
// cross-origin protection and security headers.
func NewHTTP(d HTTPDeps) *HTTP {
	r := server.NewRouter(d.Log, d.Reg)
	r.Use(server.RealIP(d.TrustedProxies))
	// Error pages render in the console's layout; auth only calls it.
	r.Use(auth.Pages(views.RenderError))
	if d.Vault != nil {
		// Audit entries made under these routes (the agent gateway's
		// included) hash the client's address with keys sealed by the
		// same vault.
		r.Use(audit.NewAddressKeys(d.DB, d.Vault, d.Clock).Middleware)
	}
	server.Mount(r, d.Health)
	if d.MetricsToken != "" {
		// On the console's port only behind the token; without one,
		// metrics live on their own listener (--metrics-listen).
		r.Handle("/metrics", server.MetricsHandler(d.Reg, d.MetricsToken))
	}
	static.Mount(r)
	if d.AgentGateway != nil {
		r.Method(http.MethodGet, "/agent/ws", auth.Require(auth.Public, d.AgentGateway.ServeHTTP))
	}
	shell := auth.NewShell()
	acct := account.New(account.Deps{Config: d.Session, DB: d.DB, Shell: shell, Clock: d.Clock, Log: d.Log, Vault: d.Vault})
	r.Group(func(r chi.Router) {
		r.Use(acct.Middleware)
		console.Mount(r, console.Deps{DB: d.DB, Health: d.Health, Version: d.Version, Shell: shell,
			Claims: d.Claims, Fleet: d.Fleet, Schedules: d.Schedules, Clock: d.Clock})
		alarm.Mount(r, alarm.Deps{DB: d.DB, Shell: shell, Log: d.Log, Clock: d.Clock})
		limit.Mount(r, limit.Deps{DB: d.DB, Shell: shell, Log: d.Log, Notify: fleet.LimitNotifier{}})
		retention.Mount(r, retention.Deps{DB: d.DB, Schedules: d.Schedules, Shell: shell, Log: d.Log, Clock: d.Clock})
		if d.Schedules != nil {
			schedule.Mount(r, schedule.Deps{Scheduler: d.Schedules, DB: d.DB, Shell: shell, Log: d.Log})
		}
		if d.Notifier != nil {
			notify.Mount(r, notify.Deps{Notifier: d.Notifier, Shell: shell, Log: d.Log})
		}
		acct.Mount(r)
		auditweb.Mount(r, auditweb.Deps{DB: d.DB, Shell: shell, Log: d.Log})
		tenantweb.Mount(r, tenantweb.Deps{DB: d.DB, Shell: shell, Log: d.Log})
		if d.Fleet != nil {
			fleetweb.Mount(r, fleetweb.Deps{Store: d.Fleet, Shell: shell, Log: d.Log})
			platformweb.Mount(r, platformweb.Deps{Registry: registry.New(d.DB), Fleet: d.Fleet, Shell: shell, Log: d.Log})
		}
		if d.Claims != nil {
			claimweb.Mount(r, claimweb.Deps{Engine: d.Claims, Shell: shell, Log: d.Log})
		}
		if d.Crawl != nil {
			crawlweb.Mount(r, crawlweb.Deps{Service: d.Crawl, Shell: shell, Log: d.Log})
		}
	})
	r.NotFound(func(w http.ResponseWriter, req *http.Request) { auth.NotFound(w, req) })
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		auth.ErrorPage(w, req, http.StatusMethodNotAllowed, "Not allowed", "This address does not take that kind of request.")
	})
	// CSRF: browsers send Sec-Fetch-Site / Origin; a cross-origin POST is
	// refused here, before any handler. GETs change nothing anywhere.
	cop := http.NewCrossOriginProtection()
	return &HTTP{Router: r, Handler: securityHeaders(cop.Handler(r)), Shell: shell, Account: acct}
}

func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}
