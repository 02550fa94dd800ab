package account

import (
	"errors"
	"github.com/fleetwright/fleetwright/views"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
)

type usersModel struct {
	Users   []User
	Tenants []auth.Tenant
	Form    NewUser
	Errors  FieldErrors
}

func (s *Service) usersPage(w http.ResponseWriter, r *http.Request) {
	s.renderUsers(w, r, http.StatusOK, usersModel{Form: NewUser{Role: auth.Operator}})
}

// renderUsers lists users with their grants. Grants span tenants, so they
// are read through the audited cross-tenant path.
func (s *Service) renderUsers(w http.ResponseWriter, r *http.Request, status int, m usersModel) {
	by := actor(r)
	by.Target, by.Detail = "users page", map[string]any{"reason": "list users with their tenant grants"}
	err := audit.AcrossTenants(r.Context(), s.d.DB, by, func(tx pgx.Tx) error {
		rows, err := tx.Query(r.Context(), `SELECT u.id::text, u.email, u.role, u.totp_secret IS NOT NULL, u.disabled_at IS NOT NULL, u.created_at,
				COALESCE(array_agg(t.slug ORDER BY t.slug) FILTER (WHERE t.slug IS NOT NULL), '{}')
			FROM users u LEFT JOIN tenant_grants g ON g.user_id = u.id LEFT JOIN tenants t ON t.id = g.tenant_id
			GROUP BY u.id ORDER BY u.disabled_at IS NOT NULL, u.email`)
		if err != nil {
			return err
		}
		m.Users, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (User, error) {
			var u User
			var role string
			err := row.Scan(&u.ID, &u.Email, &role, &u.MFAEnrolled, &u.Disabled, &u.CreatedAt, &u.Tenants)
			u.Role = auth.Role(role)
			return u, err
		})
		return err
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	m.Tenants = auth.UserFrom(r.Context()).Tenants
	views.Render(w, r, status, usersPage(s.d.Shell.Page(w, r, "Users"), m))
}

func (s *Service) createUser(w http.ResponseWriter, r *http.Request) {
	// The admin typed it: a one-time password, replaced at first sign-in.
	in := NewUser{Email: r.PostFormValue("email"), Role: auth.Role(r.PostFormValue("role")), Password: r.PostFormValue("password"), MustChange: true}
	u, err := CreateUser(r.Context(), s.d.DB, in, actor(r))
	var fe FieldErrors
	if errors.As(err, &fe) {
		in.Password = ""
		s.renderUsers(w, r, http.StatusUnprocessableEntity, usersModel{Form: in, Errors: fe})
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	auth.Flash(w, "ok", "User "+u.Email+" was created. They set up two-factor authentication and choose their own password at their first sign-in.")
	http.Redirect(w, r, "/admin/users", http.StatusSeeOther)
}

func (s *Service) userAction(w http.ResponseWriter, r *http.Request, do func(id string) error, done string) {
	id := chi.URLParam(r, "id")
	if id == auth.UserFrom(r.Context()).ID && done != "grants" {
		auth.Flash(w, "warn", "You cannot do that to your own account here; ask another admin or use the fleetwright admin command.")
		http.Redirect(w, r, "/admin/users", http.StatusSeeOther)
		return
	}
	if (done == "disable" || done == "reset") && !views.Confirmed(r) {
		s.askUserAction(w, r, id, done)
		return
	}
	err := do(id)
	if errors.Is(err, ErrNoUser) {
		auth.NotFound(w, r)
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	u, _ := UserByID(r.Context(), s.d.DB, id)
	msgs := map[string]string{
		"disable": u.Email + " is disabled and signed out everywhere.",
		"enable":  u.Email + " can sign in again.",
		"reset":   u.Email + " will set up two-factor authentication again at the next sign-in.",
		"grants":  "The tenants of " + u.Email + " were saved.",
	}
	auth.Flash(w, "ok", msgs[done])
	http.Redirect(w, r, "/admin/users", http.StatusSeeOther)
}

func (s *Service) disableUser(w http.ResponseWriter, r *http.Request) {
	s.userAction(w, r, func(id string) error { return SetDisabled(r.Context(), s.d.DB, id, true, actor(r)) }, "disable")
}

func (s *Service) enableUser(w http.ResponseWriter, r *http.Request) {
	s.userAction(w, r, func(id string) error { return SetDisabled(r.Context(), s.d.DB, id, false, actor(r)) }, "enable")
}

func (s *Service) resetMFA(w http.ResponseWriter, r *http.Request) {
	s.userAction(w, r, func(id string) error { return ResetMFA(r.Context(), s.d.DB, id, actor(r)) }, "reset")
}

func (s *Service) setGrants(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	s.userAction(w, r, func(id string) error { return SetGrants(r.Context(), s.d.DB, id, r.PostForm["tenant"], actor(r)) }, "grants")
}

// askUserAction asks before an admin disables a user or resets their
// two-factor authentication, saying what it does to them; nothing changes.
func (s *Service) askUserAction(w http.ResponseWriter, r *http.Request, id, what string) {
	u, err := UserByID(r.Context(), s.d.DB, id)
	if errors.Is(err, ErrNoUser) {
		auth.NotFound(w, r)
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	c := views.Confirm{Action: r.URL.Path, Back: "/admin/users"}
	if what == "disable" {
		c.Question = "Disable " + u.Email + "?"
		c.What = []string{
			u.Email + " is signed out everywhere at once: every open console tab of theirs stops working.",
			"They cannot sign in until an admin enables them again; their tenants and role are kept.",
		}
		c.Button = "Disable " + u.Email
	} else {
		c.Question = "Reset the two-factor authentication of " + u.Email + "?"
		c.What = []string{
			"Their authenticator's codes stop working and their sessions end at once.",
			"At their next sign-in they set up two-factor authentication again with a new secret; tell them before, over a channel you trust.",
		}
		c.Button = "Reset 2FA of " + u.Email
	}
	views.Render(w, r, http.StatusOK, views.ConfirmPage(s.d.Shell.Page(w, r, "Users"), c))
}
