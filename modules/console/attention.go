package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/views"
)

// AttentionPath is where the strip reloads itself from.
const AttentionPath = "/attention"

// agentsOneByOne is how many offline agents (or waiting approvals) are named
// one line each before they are summed up in one line.
const agentsOneByOne = 3

// attentionSQL are the strip's reads of one tenant, sent as one batch (one
// round trip, one implicit transaction in the tenant's scope): each is an
// indexed read of the tenant's rows.
var attentionSQL = []string{
	// Agents offline: not retired, and not connected to a live replica.
	`SELECT ag.id::text, ag.name, ag.last_seen FROM agents ag
	 WHERE ag.retired_at IS NULL AND NOT (ag.connected AND EXISTS (SELECT 1 FROM panel_replicas r
	       WHERE r.id = ag.replica_id AND r.last_seen > now() - make_interval(secs => $1)))
	 ORDER BY ag.last_seen NULLS FIRST, ag.name`,
	// Open alarms, worst first; a silenced one is not counted until its
	// silence ends ($1 is now, on the console's clock).
	`SELECT id, kind, key, severity, summary, link FROM alarms
	 WHERE tenant_id = app_tenant() AND resolved_at IS NULL AND NOT COALESCE(silenced_until > $1, false)
	 ORDER BY CASE severity WHEN 'critical' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END, raised_at DESC LIMIT 500`,
	// Claim reviews waiting for a person.
	`SELECT count(*), min(requested_at) FROM claim_reviews WHERE state = 'PENDING'`,
	// Enrolled assistants' tasks held for the person's approval.
	`SELECT ag.id::text, ag.name, COALESCE(t->>'goal', ''), t->>'pending_approval' FROM agents ag
	 CROSS JOIN LATERAL jsonb_array_elements(CASE jsonb_typeof(ag.assistant_report->'tasks') WHEN 'array'
	       THEN ag.assistant_report->'tasks' ELSE '[]'::jsonb END) t
	 WHERE ag.retired_at IS NULL AND ag.assistant_report IS NOT NULL AND COALESCE(t->>'pending_approval', '') <> ''
	 ORDER BY ag.name`,
	// The tenant's claims switch.
	`SELECT paused, paused_at, COALESCE(paused_by, '') FROM tenants WHERE id = app_tenant()`,
}

type offlineAgent struct {
	ID, Name string
	LastSeen *time.Time
}

type openAlarm struct {
	ID                                 int64
	Kind, Key, Severity, Summary, Link string
}

type approval struct{ AgentID, Agent, Goal, What string }

// tenantAttention is what one tenant's batch read.
type tenantAttention struct {
	Offline      []offlineAgent
	Alarms       []openAlarm
	Reviews      int
	ReviewsSince *time.Time
	Approvals    []approval
	ClaimsPaused bool
	PausedAt     *time.Time
	PausedBy     string
}

func readTenantAttention(ctx context.Context, src Sources, tenantID string, now time.Time) (tenantAttention, error) {
	var ta tenantAttention
	b := &pgx.Batch{}
	b.Queue("SELECT set_config('app.tenant_id', $1, true)", tenantID)
	b.Queue(attentionSQL[0], fleet.LiveWindow.Seconds())
	b.Queue(attentionSQL[1], now)
	for _, q := range attentionSQL[2:] {
		b.Queue(q)
	}
	br := src.DB.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return ta, err
	}
	rows, _ := br.Query()
	off, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (offlineAgent, error) {
		var a offlineAgent
		return a, r.Scan(&a.ID, &a.Name, &a.LastSeen)
	})
	if err != nil {
		return ta, err
	}
	ta.Offline = off
	rows, _ = br.Query()
	al, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (openAlarm, error) {
		var a openAlarm
		return a, r.Scan(&a.ID, &a.Kind, &a.Key, &a.Severity, &a.Summary, &a.Link)
	})
	if err != nil {
		return ta, err
	}
	ta.Alarms = al
	if err := br.QueryRow().Scan(&ta.Reviews, &ta.ReviewsSince); err != nil {
		return ta, err
	}
	rows, _ = br.Query()
	ap, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (approval, error) {
		var a approval
		return a, r.Scan(&a.AgentID, &a.Agent, &a.Goal, &a.What)
	})
	if err != nil {
		return ta, err
	}
	ta.Approvals = ap
	if err := br.QueryRow().Scan(&ta.ClaimsPaused, &ta.PausedAt, &ta.PausedBy); err != nil && err != pgx.ErrNoRows {
		return ta, err
	}
	return ta, nil
}

// BuildAttention reads what needs a person now in the tenants given (each
// in its own scope, one round trip each) and, with system, the
// installation's own (the fleet's pause, cells, system alarms): one line
// per thing to do, worst first, each linked to the page that puts it right.
func BuildAttention(ctx context.Context, src Sources, tenants []auth.Tenant, system bool) *views.Attention {
	now := time.Now()
	if src.Clock != nil {
		now = src.Clock.Now()
	}
	a := &views.Attention{Refresh: AttentionPath}
	add := func(sev, tenantName, text, href string) {
		a.Items = append(a.Items, views.AttentionItem{Severity: sev, Tenant: tenantName, Text: text, Href: href})
	}
	many := len(tenants) > 1 || system
	var fleetPaused bool
	var pausedAt *time.Time
	var pausedBy string
	if err := src.DB.QueryRow(ctx, `SELECT paused, paused_at, COALESCE(paused_by, '') FROM fleet_switches`).Scan(&fleetPaused, &pausedAt, &pausedBy); err != nil {
		a.Failed = true
	} else if fleetPaused {
		add("bad", "", "The whole fleet is paused: no tenant claims loads"+sinceBy(pausedAt, pausedBy), "/admin/settings")
	}
	cellsKnown := false
	if system && src.Claims != nil {
		if cm := src.Claims.Cells(); cm != nil {
			cellsKnown = true
			for _, c := range cm.Status() {
				if c.Failing {
					text := fmt.Sprintf("Cell %s is failing (for %s): its %d tenant(s) cannot claim", c.Name, Duration(now.Sub(c.Since)), c.Tenants)
					add("bad", "", text, "/admin/cells")
				}
			}
		}
	}
	for _, t := range tenants {
		name := ""
		if many {
			name = t.Name
		}
		ta, err := readTenantAttention(ctx, src, t.ID, now)
		if err != nil {
			a.Failed = true
			continue
		}
		base := "/t/" + t.Slug
		if ta.ClaimsPaused {
			add("warn", name, "Claims are paused"+sinceBy(ta.PausedAt, ta.PausedBy)+": this tenant books nothing until they are resumed", base+"/claims/settings")
		}
		addOffline(add, name, base, ta.Offline, now)
		offline := make(map[string]bool, len(ta.Offline))
		for _, o := range ta.Offline {
			offline[o.ID] = true
		}
		addAlarms(add, name, t.Slug, ta.Alarms, cellsKnown, offline)
		if ta.Reviews > 0 {
			text := fmt.Sprintf("%d load(s) wait for your review before they are claimed", ta.Reviews)
			if ta.ReviewsSince != nil {
				text += " (oldest " + Duration(now.Sub(*ta.ReviewsSince)) + ")"
			}
			add("warn", name, text, base+"/claims/settings#reviews")
		}
		if len(ta.Approvals) > agentsOneByOne {
			add("warn", name, fmt.Sprintf("%d assistant tasks wait for an approval", len(ta.Approvals)), base+"/fleet")
		} else {
			for _, ap := range ta.Approvals {
				add("warn", name, "Assistant "+ap.Agent+" waits for your approval: "+ap.What, base+"/fleet#assistant-"+ap.AgentID)
			}
		}
	}
	if system {
		if list, err := alarm.ListTenant(ctx, src.DB, alarm.System, true, 500); err != nil {
			a.Failed = true
		} else {
			var sys []openAlarm
			for _, o := range list {
				if o.Silenced(now) {
					continue
				}
				sys = append(sys, openAlarm{ID: o.ID, Kind: o.Kind, Key: o.Key, Severity: string(o.Severity), Summary: o.Summary, Link: o.Link})
			}
			addAlarms(add, "", "system", sys, cellsKnown, nil)
		}
	}
	sort.SliceStable(a.Items, func(i, j int) bool { return sevRank(a.Items[i].Severity) < sevRank(a.Items[j].Severity) })
	return a
}

func sevRank(s string) int {
	switch s {
	case "bad":
		return 0
	case "warn":
		return 1
	}
	return 2
}

func addOffline(add func(sev, tenant, text, href string), name, base string, off []offlineAgent, now time.Time) {
	if len(off) > agentsOneByOne {
		longest := ""
		for _, a := range off {
			if a.LastSeen != nil {
				longest = ", the longest for " + Duration(now.Sub(*a.LastSeen))
				break
			}
		}
		add("bad", name, fmt.Sprintf("%d agents are offline%s", len(off), longest), base+"/fleet")
		return
	}
	for _, a := range off {
		if a.LastSeen == nil {
			add("warn", name, "Agent "+a.Name+" has never connected: install it with its token", base+"/fleet")
			continue
		}
		add("bad", name, "Agent "+a.Name+" is offline for "+Duration(now.Sub(*a.LastSeen))+" (last seen "+stamp(*a.LastSeen)+")", base+"/fleet")
	}
}

// addAlarms adds one line per alarm kind: the alarm's own summary when it
// is the only one of its kind, else the kind in words and how many. An
// agent.offline alarm of an agent the strip already names as offline
// (offline, by agent id) adds nothing: the agent's own line says it.
func addAlarms(add func(sev, tenant, text, href string), name, slug string, list []openAlarm, cellsKnown bool, offline map[string]bool) {
	type group struct {
		kind  string
		sev   string
		items []openAlarm
	}
	var order []*group
	by := map[string]*group{}
	for _, o := range list {
		if cellsKnown && o.Kind == "cell.failing" {
			continue // the cells' own state says it (above)
		}
		if o.Kind == "agent.offline" && offline[o.Key] {
			continue
		}
		g := by[o.Kind]
		if g == nil {
			g = &group{kind: o.Kind, sev: o.Severity}
			by[o.Kind] = g
			order = append(order, g)
		}
		g.items = append(g.items, o)
	}
	for _, g := range order {
		sev := "info"
		switch g.sev {
		case string(alarm.Critical):
			sev = "bad"
		case string(alarm.Warning):
			sev = "warn"
		}
		list := "/alarms?" + url.Values{"tenant": {slug}, "kind": {g.kind}}.Encode()
		if len(g.items) == 1 {
			o := g.items[0]
			href := o.Link
			if href == "" {
				href = list
			}
			add(sev, name, upper(alarm.KindName(g.kind))+": "+o.Summary, href)
			continue
		}
		add(sev, name, upper(alarm.KindWords(g.kind, len(g.items))), list)
	}
}

func upper(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

// sinceBy is " since Jan 2 20:14 UTC by admin@…", as much as is known.
func sinceBy(at *time.Time, by string) string {
	s := ""
	if at != nil {
		s += " since " + stamp(*at)
	}
	if by != "" {
		s += " by " + by
	}
	return s
}

// stamp is an absolute time as the console writes it: UTC, said.
func stamp(t time.Time) string { return t.UTC().Format("Jan 2 15:04 UTC") }

// Duration is a duration in words a person reads at a glance (views.Duration).
func Duration(d time.Duration) string { return views.Duration(d) }

// attention is the strip of the signed-in user: the tenants they reach,
// and the installation's own for an admin.
func (d Deps) attention(r *http.Request, u *auth.User) *views.Attention {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	tenants := u.Tenants
	if !u.Has(auth.FleetRead) {
		tenants = nil
	}
	a := BuildAttention(ctx, d.sources(), tenants, u.Role == auth.Admin)
	a.AllClear = r.URL.Path == "/"
	return a
}

// attentionFragment is the strip's reload, with the tab's title.
func (d Deps) attentionFragment(w http.ResponseWriter, r *http.Request) {
	a := d.attention(r, auth.UserFrom(r.Context()))
	a.AllClear = r.URL.Query().Get("home") == "true"
	title := r.URL.Query().Get("title")
	if len(title) > 200 {
		title = title[:200]
	}
	views.Render(w, r, http.StatusOK, views.AttentionFragment(a, title))
}
