// Package web is the audit log's page: its route, handler, query and
// template; the log itself (append, chain, seals, verify) is modules/audit.
package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
)

// Deps are what the audit page needs.
type Deps struct {
	DB    *pgxpool.Pool
	Shell *auth.Shell
	Log   interface {
		Error(msg string, args ...any)
	}
}

// Mount declares the audit log page.
func Mount(r chi.Router, d Deps) {
	r.Method(http.MethodGet, "/audit", auth.Require(auth.AuditRead, d.page))
	d.Shell.AddNav(auth.NavItem{Section: "Activity", Label: "Audit log", Href: "/audit", Perm: auth.AuditRead, Order: 100})
}

// pageSize is how many entries one page shows.
const pageSize = 50

// Filter selects entries for the audit page.
type Filter struct {
	Actor  string
	Tenant string // a slug, "system", or "" for every chain the user reaches
	Action string
	Target string // a part of the target, any case
	From   string // YYYY-MM-DD
	To     string // YYYY-MM-DD, inclusive
	Before int64  // keyset cursor: entries with a smaller id
}

// Row is one entry on the page.
type Row struct {
	ID     int64
	At     time.Time
	Tenant string
	Actor  string
	Action string
	Target string
	Detail string
	// IP is the client's address while it is kept, else "expired" with
	// the start of its keyed hash (audit.ShownAddress).
	IP     string
	Sealed bool
}

type pageModel struct {
	Filter  Filter
	Rows    []Row
	Tenants []auth.Tenant
	Admin   bool
	Next    string
	First   string
	Error   string
}

func (d Deps) page(w http.ResponseWriter, r *http.Request) {
	u := auth.UserFrom(r.Context())
	q := r.URL.Query()
	f := Filter{Actor: strings.TrimSpace(q.Get("actor")), Tenant: q.Get("tenant"), Action: strings.TrimSpace(q.Get("action")),
		Target: strings.TrimSpace(q.Get("target")), From: q.Get("from"), To: q.Get("to")}
	f.Before, _ = strconv.ParseInt(q.Get("before"), 10, 64)
	m := pageModel{Filter: f, Tenants: u.Tenants, Admin: u.Role == auth.Admin}
	names := map[string]string{audit.System: "system"}
	for _, t := range u.Tenants {
		names[t.ID] = t.Slug
	}
	var err error
	if m.Admin {
		by := audit.Entry{ActorID: u.ID, Actor: u.Email, Target: "audit log", Detail: map[string]any{"reason": "audit page", "filter": q.Encode()}}
		err = audit.AcrossTenants(r.Context(), d.DB, by, func(tx pgx.Tx) error {
			m.Rows, err = list(r.Context(), tx, f, names)
			return err
		})
	} else {
		// Others read one of their own tenants at a time, in its scope.
		if f.Tenant == "" && len(u.Tenants) > 0 {
			f.Tenant, m.Filter.Tenant = u.Tenants[0].Slug, u.Tenants[0].Slug
		}
		t, ok := u.Tenant(f.Tenant)
		if ok {
			err = db.InTenant(r.Context(), d.DB, t.ID, func(tx pgx.Tx) error {
				m.Rows, err = list(r.Context(), tx, f, names)
				return err
			})
		} else if f.Tenant != "" {
			auth.Forbidden(w, r)
			return
		} else {
			m.Error = "You are not granted any tenant yet, so there is no audit log to show."
		}
	}
	if err != nil {
		if fe, ok := err.(filterError); ok {
			m.Error, m.Rows = string(fe), nil
		} else {
			d.Log.Error("audit page failed", "err", err)
			auth.ServerError(w, r)
			return
		}
	}
	if len(m.Rows) > pageSize {
		m.Rows = m.Rows[:pageSize]
		nq := url.Values{}
		for k, v := range q {
			nq[k] = v
		}
		nq.Set("before", strconv.FormatInt(m.Rows[len(m.Rows)-1].ID, 10))
		m.Next = "/audit?" + nq.Encode()
	}
	if f.Before > 0 {
		fq := url.Values{}
		for k, v := range q {
			fq[k] = v
		}
		fq.Del("before")
		m.First = "/audit?" + fq.Encode()
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_ = auditPage(d.Shell.Page(w, r, "Audit log"), m).Render(r.Context(), w)
}

type filterError string

func (e filterError) Error() string { return string(e) }

// list reads one page (plus one row, to know whether there is a next page)
// of the entries the transaction's scope shows.
func list(ctx context.Context, tx pgx.Tx, f Filter, names map[string]string) ([]Row, error) {
	where := []string{"true"}
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.Actor != "" {
		where = append(where, "a.actor ILIKE "+arg("%"+likeEscape(f.Actor)+"%"))
	}
	if f.Action != "" {
		where = append(where, "a.action LIKE "+arg(likeEscape(f.Action)+"%"))
	}
	if f.Target != "" {
		where = append(where, "a.target ILIKE "+arg("%"+likeEscape(f.Target)+"%"))
	}
	switch f.Tenant {
	case "":
	case "system":
		where = append(where, "a.tenant_id = "+arg(audit.System)+"::uuid")
	default:
		where = append(where, "a.tenant_id = (SELECT id FROM tenants WHERE slug = "+arg(f.Tenant)+")")
	}
	for _, d := range []struct {
		v, op string
		add   int
	}{{f.From, ">=", 0}, {f.To, "<", 1}} {
		if d.v == "" {
			continue
		}
		t, err := time.ParseInLocation("2006-01-02", d.v, time.UTC)
		if err != nil {
			return nil, filterError(fmt.Sprintf("%q is not a date: use YYYY-MM-DD.", d.v))
		}
		where = append(where, "a.at "+d.op+" "+arg(t.AddDate(0, 0, d.add)))
	}
	if f.Before > 0 {
		where = append(where, "a.id < "+arg(f.Before))
	}
	rows, err := tx.Query(ctx, `SELECT a.id, a.at, a.tenant_id::text, a.actor, a.action, a.target, a.detail::text,
			COALESCE(c.ip, ''), a.ip, a.ip_mac, EXISTS (SELECT 1 FROM audit_seals s WHERE s.entry_id = a.id)
		FROM audit_log a LEFT JOIN audit_addresses c ON c.entry_id = a.id
		WHERE `+strings.Join(where, " AND ")+` ORDER BY a.id DESC LIMIT `+strconv.Itoa(pageSize+1), args...)
	if err != nil {
		return nil, fmt.Errorf("audit: list: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Row, error) {
		var r Row
		var clear, legacy, mac string
		err := row.Scan(&r.ID, &r.At, &r.Tenant, &r.Actor, &r.Action, &r.Target, &r.Detail, &clear, &legacy, &mac, &r.Sealed)
		r.IP = audit.ShownAddress(clear, legacy, mac)
		if n, ok := names[r.Tenant]; ok {
			r.Tenant = n
		}
		r.Detail = compact(r.Detail)
		return r, err
	})
}

func likeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// summaryLen is how much of an entry's detail its row shows folded.
const summaryLen = 60

// summary is the start of a detail, cut at a word, for its folded row.
func summary(detail string) string {
	if len(detail) <= summaryLen {
		return detail
	}
	cut := strings.LastIndex(detail[:summaryLen], " ")
	if cut < summaryLen/2 {
		cut = summaryLen
	}
	return strings.TrimSpace(detail[:cut]) + " …"
}

// compact shows a detail object as "key: value" pairs, keys sorted.
func compact(detail string) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(detail), &m); err != nil || len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		v, _ := json.Marshal(m[k])
		parts[i] = k + ": " + strings.Trim(string(v), `"`)
	}
	return strings.Join(parts, " · ")
}
