package web

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/crawl"
	"github.com/fleetwright/fleetwright/views"
)

// mountProxies declares the proxy pool pages: reading needs fleet.read,
// pools and proxies fleet.steer, a pool's internal ranges fleet.secrets
// (admins: they open the SSRF guard for the pool's proxies).
func mountProxies(r chi.Router, d Deps) {
	r.Method(http.MethodGet, "/t/{tenant}/crawl/proxies", auth.Require(auth.FleetRead, d.proxies))
	r.Method(http.MethodPost, "/t/{tenant}/crawl/proxies", auth.Require(auth.FleetSteer, d.addProxy))
	r.Method(http.MethodPost, "/t/{tenant}/crawl/proxies/pools", auth.Require(auth.FleetSteer, d.setPool))
	r.Method(http.MethodPost, "/t/{tenant}/crawl/proxies/pools/{pool}/allow", auth.Require(auth.FleetSecrets, d.setPoolAllow))
	r.Method(http.MethodPost, "/t/{tenant}/crawl/proxies/{proxy}/restore", auth.Require(auth.FleetSteer, d.proxyAction("restore")))
	r.Method(http.MethodPost, "/t/{tenant}/crawl/proxies/{proxy}/remove", auth.Require(auth.FleetSteer, d.proxyAction("remove")))
}

type proxiesModel struct {
	Slug       string
	Pools      []crawl.Pool
	Now        time.Time
	CanSteer   bool
	CanSecrets bool
}

func proxiesURL(slug string) string { return "/t/" + slug + "/crawl/proxies" }

func (d Deps) proxies(w http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	pools, err := d.Service.Store.Pools(r.Context(), t.ID)
	if err != nil {
		d.Log.Error("crawl proxies page", "err", err)
		auth.ServerError(w, r)
		return
	}
	u := auth.UserFrom(r.Context())
	m := proxiesModel{Slug: t.Slug, Pools: pools, Now: time.Now(), CanSteer: u.Has(auth.FleetSteer), CanSecrets: u.Has(auth.FleetSecrets)}
	views.Render(w, r, http.StatusOK, ProxiesPage(d.Shell.Page(w, r, t.Name+" · Proxy pools"), m))
}

func (d Deps) setPool(w http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	in := crawl.PoolInput{Name: strings.TrimSpace(r.FormValue("name")), Rotation: r.FormValue("rotation")}
	var err error
	if v := r.FormValue("bench_after"); v != "" {
		in.BenchAfter, err = strconv.Atoi(v)
	}
	if v := r.FormValue("remove_after"); v != "" && err == nil {
		in.RemoveAfter, err = strconv.Atoi(v)
	}
	if v := r.FormValue("cooldown"); v != "" && err == nil {
		in.Cooldown, err = time.ParseDuration(v)
	}
	if err == nil {
		_, err = d.Service.Store.SetPool(r.Context(), t.ID, actor(r), in)
	}
	if err != nil {
		d.back(w, r, proxiesURL(t.Slug), "error", "Pool not saved: "+err.Error())
		return
	}
	d.back(w, r, proxiesURL(t.Slug), "ok", "Pool "+in.Name+" saved.")
}

func (d Deps) setPoolAllow(w http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	pool := chi.URLParam(r, "pool")
	allow := strings.Fields(strings.ReplaceAll(r.FormValue("allow"), ",", " "))
	if err := d.Service.Store.SetPoolAllow(r.Context(), t.ID, actor(r), pool, allow); err != nil {
		if errors.Is(err, crawl.ErrNoPool) {
			auth.NotFound(w, r)
			return
		}
		d.back(w, r, proxiesURL(t.Slug), "error", "Allow list not saved: "+err.Error())
		return
	}
	d.back(w, r, proxiesURL(t.Slug), "ok", fmt.Sprintf("Pool %s: its proxies may sit in %v.", pool, allow))
}

func (d Deps) addProxy(w http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	pw := r.FormValue("password")
	if pw != "" {
		logging.RegisterSecret(pw)
	}
	p, err := d.Service.Store.AddProxy(r.Context(), t.ID, actor(r), r.FormValue("pool"),
		crawl.ProxyInput{URL: r.FormValue("url"), Username: strings.TrimSpace(r.FormValue("username")), Password: pw})
	if err != nil {
		d.back(w, r, proxiesURL(t.Slug), "error", "Proxy not added: "+logging.Scrub(err.Error()))
		return
	}
	d.back(w, r, proxiesURL(t.Slug), "ok", "Proxy "+p.URL()+" added; its password is sealed and will not be shown again.")
}

func (d Deps) proxyAction(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t, _ := auth.TenantFrom(r.Context())
		id := chi.URLParam(r, "proxy")
		var err error
		if action == "restore" {
			err = d.Service.Store.RestoreProxy(r.Context(), t.ID, actor(r), id)
		} else {
			err = d.Service.Store.RemoveProxy(r.Context(), t.ID, actor(r), id)
		}
		if errors.Is(err, crawl.ErrNoProxy) || (err != nil && strings.Contains(err.Error(), "invalid input syntax")) {
			auth.NotFound(w, r)
			return
		}
		if err != nil {
			d.Log.Error("crawl proxy "+action, "err", err)
			auth.ServerError(w, r)
			return
		}
		d.back(w, r, proxiesURL(t.Slug), "ok", "Proxy "+action+"d.")
	}
}
