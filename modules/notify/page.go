package notify

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/views"
)

// Deps are what the channels page needs.
type Deps struct {
	Notifier *Notifier
	Shell    *auth.Shell
	Log      *slog.Logger
}

// Mount declares the notification channels page (admin): list, create
// (a webhook's secret is shown once), delete and send a test alarm; every
// change is audited on the system chain.
func Mount(r chi.Router, d Deps) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	r.Method(http.MethodGet, "/admin/notify", auth.Require(auth.SettingsManage, d.page))
	r.Method(http.MethodPost, "/admin/notify", auth.Require(auth.SettingsManage, d.create))
	r.Method(http.MethodPost, "/admin/notify/delete", auth.Require(auth.SettingsManage, d.delete))
	r.Method(http.MethodPost, "/admin/notify/test", auth.Require(auth.SettingsManage, d.test))
	d.Shell.AddNav(auth.NavItem{Section: "Administration", Label: "Notifications", Href: "/admin/notify", Perm: auth.SettingsManage, Order: 840})
}

type pageModel struct {
	Channels []Channel
	Secret   string
	For      string
	Error    string
	Form     Channel
}

func by(r *http.Request, action, target string, detail map[string]any) audit.Entry {
	u := auth.UserFrom(r.Context())
	return audit.Entry{ActorID: u.ID, Actor: u.Email, IP: r.RemoteAddr, Action: action, Target: target, Detail: detail}
}

func (d Deps) render(w http.ResponseWriter, r *http.Request, status int, m pageModel) {
	var err error
	if m.Channels, err = Channels(r.Context(), d.Notifier.pool); err != nil {
		d.Log.Error("notify page", "err", err)
		auth.ServerError(w, r)
		return
	}
	views.Render(w, r, status, channelsPage(d.Shell.Page(w, r, "Notifications"), m))
}

func (d Deps) page(w http.ResponseWriter, r *http.Request) {
	d.render(w, r, http.StatusOK, pageModel{})
}

func (d Deps) create(w http.ResponseWriter, r *http.Request) {
	c := Channel{Name: strings.TrimSpace(r.PostFormValue("name")), Kind: r.PostFormValue("kind"),
		Target: r.PostFormValue("target"), MinSeverity: alarm.Severity(r.PostFormValue("min_severity"))}
	var secret string
	err := audit.InSystem(r.Context(), d.Notifier.pool, func(tx pgx.Tx) error {
		var err error
		if secret, err = d.Notifier.Create(r.Context(), tx, c, auth.UserFrom(r.Context()).Email); err != nil {
			return err
		}
		return audit.Append(r.Context(), tx, by(r, "notify.channel.create", c.Name,
			map[string]any{"kind": c.Kind, "target": redactURL(c.Target), "min_severity": string(c.MinSeverity)}))
	})
	var inv Invalid
	if errors.As(err, &inv) {
		d.render(w, r, http.StatusUnprocessableEntity, pageModel{Error: inv.Error(), Form: c})
		return
	}
	if err != nil {
		d.Log.Error("create channel", "err", err)
		auth.ServerError(w, r)
		return
	}
	// The secret is in this response only: never in a redirect or a flash.
	d.render(w, r, http.StatusOK, pageModel{Secret: secret, For: c.Name})
}

func (d Deps) delete(w http.ResponseWriter, r *http.Request) {
	name := r.PostFormValue("name")
	err := audit.InSystem(r.Context(), d.Notifier.pool, func(tx pgx.Tx) error {
		if err := Delete(r.Context(), tx, name); err != nil {
			return err
		}
		return audit.Append(r.Context(), tx, by(r, "notify.channel.delete", name, nil))
	})
	if err != nil {
		auth.Flash(w, "bad", err.Error())
	} else {
		auth.Flash(w, "ok", "Channel "+name+" deleted.")
	}
	http.Redirect(w, r, "/admin/notify", http.StatusSeeOther)
}

// test raises (and at once resolves) a system alarm: every channel gets a
// raised and a resolved message at the next delivery.
func (d Deps) test(w http.ResponseWriter, r *http.Request) {
	u := auth.UserFrom(r.Context())
	ctx := r.Context()
	err := audit.InSystem(ctx, d.Notifier.pool, func(tx pgx.Tx) error {
		if _, err := alarm.Raise(ctx, tx, alarm.Alarm{Kind: "notify.test", Key: "test", Severity: alarm.Critical,
			Summary: "Test alarm from " + u.Email + ": the channels work", Link: "/admin/notify"}); err != nil {
			return err
		}
		if _, err := alarm.Resolve(ctx, tx, alarm.System, "notify.test", "test", u.Email); err != nil {
			return err
		}
		return audit.Append(ctx, tx, by(r, "notify.test", "channels", nil))
	})
	if err != nil {
		d.Log.Error("test alarm", "err", err)
		auth.ServerError(w, r)
		return
	}
	if err := d.Notifier.Deliver(context.WithoutCancel(ctx)); err != nil {
		auth.Flash(w, "warn", "Test alarm raised and resolved; a delivery failed: "+err.Error())
	} else {
		auth.Flash(w, "ok", "Test alarm raised and resolved: each channel got both messages.")
	}
	http.Redirect(w, r, "/admin/notify", http.StatusSeeOther)
}
