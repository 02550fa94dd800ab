package account

import (
	"errors"
	"github.com/fleetwright/fleetwright/views"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
)

type sessionRow struct {
	ID        string
	Created   time.Time
	LastSeen  time.Time
	Expires   time.Time
	IP        string
	UserAgent string
	Current   bool
}

type accountModel struct {
	User     User
	Sessions []sessionRow
	Errors   FieldErrors
	Idle     time.Duration
	Max      time.Duration
	// MustChange: the password is one-time; nothing else is reachable.
	MustChange bool
}

func (s *Service) accountPage(w http.ResponseWriter, r *http.Request) {
	s.renderAccount(w, r, http.StatusOK, nil)
}

func (s *Service) renderAccount(w http.ResponseWriter, r *http.Request, status int, fe FieldErrors) {
	u := auth.UserFrom(r.Context())
	m := accountModel{Errors: fe, Idle: s.d.SessionIdle, Max: s.d.SessionMax}
	if se := sessionFrom(r.Context()); se != nil {
		m.MustChange = se.MustChange
	}
	var err error
	if m.User, err = UserByID(r.Context(), s.d.DB, u.ID); err != nil {
		s.fail(w, r, err)
		return
	}
	rows, err := s.d.DB.Query(r.Context(), `SELECT id::text, created_at, last_seen_at, expires_at, ip, user_agent FROM sessions
		WHERE user_id::text = $1 AND ended_at IS NULL AND mfa_ok AND expires_at > $2 ORDER BY last_seen_at DESC`, u.ID, s.d.Clock.Now())
	if err == nil {
		m.Sessions, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (sessionRow, error) {
			var sr sessionRow
			err := row.Scan(&sr.ID, &sr.Created, &sr.LastSeen, &sr.Expires, &sr.IP, &sr.UserAgent)
			sr.Current = sr.ID == u.SessionID
			return sr, err
		})
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	views.Render(w, r, status, accountPage(s.d.Shell.Page(w, r, "Account & sessions"), m))
}

func actor(r *http.Request) audit.Entry {
	u := auth.UserFrom(r.Context())
	return audit.Entry{ActorID: u.ID, Actor: u.Email, IP: clientIP(r)}
}

func (s *Service) changePassword(w http.ResponseWriter, r *http.Request) {
	u := auth.UserFrom(r.Context())
	// The current password is a guess like any other: the sign-in's rule,
	// on the sign-in's own key, so the two share one budget.
	acctKey, addrKey := "acct:"+strings.ToLower(u.Email), "addr:"+clientIP(r)
	wait, err := admit(r.Context(), s.d.DB, s.d.Clock.Now(), acctKey, addrKey)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if wait > 0 {
		retryAfter(w, wait)
		s.renderAccount(w, r, http.StatusTooManyRequests, FieldErrors{"current": "too many attempts; try again in " + waitText(wait)})
		return
	}
	err = ChangePassword(r.Context(), s.d.DB, u.ID, r.PostFormValue("current"), r.PostFormValue("password"), u.SessionID, actor(r))
	var fe FieldErrors
	if errors.As(err, &fe) {
		if _, wrong := fe["current"]; !wrong {
			_ = succeeded(r.Context(), s.d.DB, acctKey) // the current password was right
		}
		s.renderAccount(w, r, http.StatusUnprocessableEntity, fe)
		return
	}
	if errors.Is(err, errHashBusy) {
		retryAfter(w, hashBusyRetry)
		s.renderAccount(w, r, http.StatusServiceUnavailable, FieldErrors{"current": "the console is busy; try again in a few seconds"})
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := succeeded(r.Context(), s.d.DB, acctKey); err != nil {
		s.fail(w, r, err)
		return
	}
	auth.Flash(w, "ok", "Your password was changed. Your other sessions were signed out.")
	http.Redirect(w, r, "/account", http.StatusSeeOther)
}

func (s *Service) endSession(w http.ResponseWriter, r *http.Request) {
	u := auth.UserFrom(r.Context())
	id := chi.URLParam(r, "id")
	var n int64
	err := audit.InSystem(r.Context(), s.d.DB, func(tx pgx.Tx) error {
		tag, err := tx.Exec(r.Context(), `UPDATE sessions SET ended_at = now() WHERE id::text = $1 AND user_id::text = $2 AND ended_at IS NULL`, id, u.ID)
		if err != nil {
			return err
		}
		if n = tag.RowsAffected(); n == 0 {
			return nil
		}
		e := actor(r)
		e.Action, e.Target, e.Detail = "session.ended", u.Email, map[string]any{"session": id}
		return audit.Append(r.Context(), tx, e)
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if n == 0 {
		auth.NotFound(w, r)
		return
	}
	if id == u.SessionID {
		clearCookie(w)
		http.Redirect(w, r, "/signin", http.StatusSeeOther)
		return
	}
	auth.Flash(w, "ok", "The session was ended.")
	http.Redirect(w, r, "/account", http.StatusSeeOther)
}

// endAllSessions is "sign out everywhere", this browser included.
func (s *Service) endAllSessions(w http.ResponseWriter, r *http.Request) {
	u := auth.UserFrom(r.Context())
	err := audit.InSystem(r.Context(), s.d.DB, func(tx pgx.Tx) error {
		tag, err := tx.Exec(r.Context(), `UPDATE sessions SET ended_at = now() WHERE user_id::text = $1 AND ended_at IS NULL`, u.ID)
		if err != nil {
			return err
		}
		e := actor(r)
		e.Action, e.Target, e.Detail = "session.ended_all", u.Email, map[string]any{"sessions_ended": tag.RowsAffected()}
		return audit.Append(r.Context(), tx, e)
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	clearCookie(w)
	auth.Flash(w, "info", "You are signed out on every device.")
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}
