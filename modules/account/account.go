// Package account is the operators' side of the console: users and their
// passwords (argon2id), TOTP enrolment and sign-in, server-side sessions,
// throttling of guessing, the users page for admins and each user's own
// account page. It authenticates; modules/auth authorises.
package account

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/auth"
)

// Config holds the session policy.
type Config struct {
	// SessionIdle ends a signed-in session unused for this long.
	SessionIdle time.Duration
	// SessionMax ends a signed-in session this long after sign-in, used or not.
	SessionMax time.Duration
	// PendingMax bounds a session between password and TOTP.
	PendingMax time.Duration
	// Issuer names the service in authenticator apps.
	Issuer string
}

// Deps are what the module needs from the panel.
type Deps struct {
	Config
	DB    *pgxpool.Pool
	Shell *auth.Shell
	Clock clock.Clock
	Log   *slog.Logger
	// Vault seals operators' TOTP seeds at rest (required).
	Vault *vault.Vault
}

// Service serves sign-in, sessions, the users page and the account page.
type Service struct{ d Deps }

// New returns the service, filling defaults for unset settings.
func New(d Deps) *Service {
	if d.SessionIdle <= 0 {
		d.SessionIdle = 30 * time.Minute
	}
	if d.SessionMax <= 0 {
		d.SessionMax = 12 * time.Hour
	}
	if d.PendingMax <= 0 {
		d.PendingMax = 10 * time.Minute
	}
	if d.Issuer == "" {
		d.Issuer = "Fleetwright"
	}
	if d.Clock == nil {
		d.Clock = clock.Real{}
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Vault == nil {
		panic("account: a vault is required: TOTP seeds are sealed at rest")
	}
	// The timing equaliser is made now, off the first sign-in's path.
	go dummyHash()
	return &Service{d: d}
}

// Mount declares the module's routes, each with its permission.
func (s *Service) Mount(r chi.Router) {
	r.Method(http.MethodGet, "/signin", auth.Require(auth.Public, s.signInForm))
	r.Method(http.MethodPost, "/signin", auth.Require(auth.Public, s.signIn))
	r.Method(http.MethodGet, auth.MFAPath, auth.Require(auth.MFA, s.mfaForm))
	r.Method(http.MethodPost, auth.MFAPath, auth.Require(auth.MFA, s.mfaSubmit))
	r.Method(http.MethodPost, "/signout", auth.Require(auth.MFA, s.signOut))

	r.Method(http.MethodGet, "/account", auth.Require(auth.Self, s.accountPage))
	r.Method(http.MethodPost, "/account/password", auth.Require(auth.Self, s.changePassword))
	r.Method(http.MethodPost, "/account/sessions/{id}/end", auth.Require(auth.Self, s.endSession))
	r.Method(http.MethodPost, "/account/sessions/end-all", auth.Require(auth.Self, s.endAllSessions))

	r.Method(http.MethodGet, "/admin/users", auth.Require(auth.UsersManage, s.usersPage))
	r.Method(http.MethodPost, "/admin/users", auth.Require(auth.UsersManage, s.createUser))
	r.Method(http.MethodPost, "/admin/users/{id}/disable", auth.Require(auth.UsersManage, s.disableUser))
	r.Method(http.MethodPost, "/admin/users/{id}/enable", auth.Require(auth.UsersManage, s.enableUser))
	r.Method(http.MethodPost, "/admin/users/{id}/reset-mfa", auth.Require(auth.UsersManage, s.resetMFA))
	r.Method(http.MethodPost, "/admin/users/{id}/grants", auth.Require(auth.UsersManage, s.setGrants))

	s.d.Shell.AddNav(
		auth.NavItem{Section: "Administration", Label: "Users", Href: "/admin/users", Perm: auth.UsersManage, Order: 800},
		auth.NavItem{Section: "You", Label: "Account & sessions", Href: "/account", Perm: auth.Self, Order: 900},
	)
}
