package account

import (
	"errors"
	"fmt"
	"github.com/fleetwright/fleetwright/views"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
)

type signInModel struct {
	Email string
	Next  string
	Error string
}

func (s *Service) signInForm(w http.ResponseWriter, r *http.Request) {
	if u := auth.UserFrom(r.Context()); u != nil && u.MFAOK {
		http.Redirect(w, r, auth.SafeNext(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	m := signInModel{Next: auth.SafeNext(r.URL.Query().Get("next"))}
	if _, dev := transport(r); !dev {
		if secure, _ := transport(r); !secure {
			m.Error = "Sign-in needs HTTPS. Open the console through its https:// address."
		}
	}
	views.Render(w, r, http.StatusOK, signInPage(m))
}

// attempt audits one step of a sign-in on the system chain and logs it.
func (s *Service) attempt(r *http.Request, action, actorID, email string, detail map[string]any) {
	ip := clientIP(r)
	err := audit.InSystem(r.Context(), s.d.DB, func(tx pgx.Tx) error {
		return audit.Append(r.Context(), tx, audit.Entry{ActorID: actorID, Actor: orUnknown(email), Action: action,
			Target: orUnknown(email), Detail: detail, IP: ip})
	})
	args := []any{"action", action, "email", email, "ip", ip}
	for k, v := range detail {
		args = append(args, k, v)
	}
	if err != nil {
		s.d.Log.Error("audit of sign-in failed", append(args, "err", err)...)
		return
	}
	s.d.Log.Info("sign-in", args...)
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

func waitText(d time.Duration) string {
	switch sec := int(math.Ceil(d.Seconds())); {
	case sec <= 1:
		return "a second"
	case sec < 60:
		return fmt.Sprintf("%d seconds", sec)
	case sec <= 60:
		return "a minute"
	default:
		return fmt.Sprintf("%d minutes", int(math.Ceil(d.Minutes())))
	}
}

// retryAfter sets the Retry-After header in whole seconds, at least one.
func retryAfter(w http.ResponseWriter, d time.Duration) {
	w.Header().Set("Retry-After", fmt.Sprint(max(1, int(math.Ceil(d.Seconds())))))
}

func (s *Service) signIn(w http.ResponseWriter, r *http.Request) {
	email := strings.TrimSpace(r.PostFormValue("email"))
	password := r.PostFormValue("password")
	next := auth.SafeNext(r.PostFormValue("next"))
	m := signInModel{Email: email, Next: next}
	if secure, dev := transport(r); !secure && !dev {
		m.Error = "Sign-in needs HTTPS. Open the console through its https:// address."
		views.Render(w, r, http.StatusBadRequest, signInPage(m))
		return
	}
	ip := clientIP(r)
	acctKey, addrKey := "acct:"+strings.ToLower(email), "addr:"+ip
	// The attempt is recorded before it is evaluated (see throttle.go).
	wait, err := admit(r.Context(), s.d.DB, s.d.Clock.Now(), acctKey, addrKey)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if wait > 0 {
		s.attempt(r, "signin.throttled", "", email, map[string]any{"step": "password", "retry_after_s": int(math.Ceil(wait.Seconds()))})
		m.Error = "Too many attempts. Try again in " + waitText(wait) + "."
		retryAfter(w, wait)
		views.Render(w, r, http.StatusTooManyRequests, signInPage(m))
		return
	}
	var id, hash, role string
	var disabled bool
	err = s.d.DB.QueryRow(r.Context(), `SELECT id::text, password_hash, role, disabled_at IS NOT NULL FROM users WHERE lower(email) = lower($1)`, email).
		Scan(&id, &hash, &role, &disabled)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		s.fail(w, r, err)
		return
	}
	ok, err := checkPassword(r.Context(), password, hash) // runs even for an unknown email: same timing
	if errors.Is(err, errHashBusy) {
		s.busy(w, r, func() { views.Render(w, r, http.StatusServiceUnavailable, signInPage(m)) }, &m.Error)
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	reason := ""
	switch {
	case id == "":
		reason = "unknown email"
	case !ok:
		reason = "wrong password"
	case disabled:
		reason = "user disabled"
	}
	if reason != "" {
		s.attempt(r, "signin.failed", id, email, map[string]any{"reason": reason, "step": "password"})
		m.Error = "The email or password is not right."
		views.Render(w, r, http.StatusUnauthorized, signInPage(m))
		return
	}
	if err := succeeded(r.Context(), s.d.DB, acctKey); err != nil {
		s.fail(w, r, err)
		return
	}
	// The pending session is new, whatever cookie came in: an id planted
	// before sign-in never becomes a signed-in one.
	var token string
	var exp time.Time
	err = pgx.BeginFunc(r.Context(), s.d.DB, func(tx pgx.Tx) error {
		if old := sessionFrom(r.Context()); old != nil {
			if _, err := tx.Exec(r.Context(), `UPDATE sessions SET ended_at = now() WHERE id::text = $1`, old.ID); err != nil {
				return err
			}
		}
		var err error
		token, exp, err = s.startSession(r.Context(), tx, id, false, "", r)
		return err
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.attempt(r, "signin.password_ok", id, email, map[string]any{"role": role})
	if err := setCookie(w, r, token, time.Until(exp)); err != nil {
		s.fail(w, r, err)
		return
	}
	to := auth.MFAPath
	if next != "/" {
		to += "?next=" + urlQueryEscape(next)
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

type mfaModel struct {
	Email  string
	Enrol  bool
	QR     string
	Secret string
	Next   string
	Error  string
}

func (s *Service) mfaForm(w http.ResponseWriter, r *http.Request) {
	u, se := auth.UserFrom(r.Context()), sessionFrom(r.Context())
	next := auth.SafeNext(r.URL.Query().Get("next"))
	if u.MFAOK {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	m, err := s.mfaModel(r, se, next)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	views.Render(w, r, http.StatusOK, mfaPage(m))
}

// mfaModel prepares the TOTP step: the code form, or, for a user without a
// confirmed secret, an enrolment with a secret bound to this session.
func (s *Service) mfaModel(r *http.Request, se *session, next string) (mfaModel, error) {
	m := mfaModel{Email: se.Email, Next: next}
	if se.TOTPSecret != "" {
		return m, nil
	}
	m.Enrol = true
	secret := se.EnrolSecret
	if secret == "" {
		k, err := newTOTPKey(s.d.Issuer, se.Email)
		if err != nil {
			return m, err
		}
		secret = k.Secret()
		if _, err := s.d.DB.Exec(r.Context(), `UPDATE sessions SET enrol_secret = $2 WHERE id::text = $1`, se.ID,
			sealSeed(s.d.Vault, secret, enrolContext(se.ID))); err != nil {
			return m, fmt.Errorf("account: enrol: %w", err)
		}
		se.EnrolSecret = secret
	}
	k, err := totpURL(s.d.Issuer, se.Email, secret)
	if err != nil {
		return m, err
	}
	if m.QR, err = qrDataURL(k); err != nil {
		return m, err
	}
	m.Secret = groupSecret(secret)
	return m, nil
}

// groupSecret spaces the secret in fours, as authenticator apps accept it.
func groupSecret(s string) string {
	var b strings.Builder
	for i, c := range s {
		if i > 0 && i%4 == 0 {
			b.WriteByte(' ')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func (s *Service) mfaSubmit(w http.ResponseWriter, r *http.Request) {
	u, se := auth.UserFrom(r.Context()), sessionFrom(r.Context())
	next := auth.SafeNext(r.PostFormValue("next"))
	if u.MFAOK {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	code := strings.Join(strings.Fields(r.PostFormValue("code")), "")
	mfaKey, addrKey := "mfa:"+se.UserID, "addr:"+clientIP(r)
	refuse := func(status int, msg string) {
		m, err := s.mfaModel(r, se, next)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		m.Error = msg
		views.Render(w, r, status, mfaPage(m))
	}
	wait, err := admit(r.Context(), s.d.DB, s.d.Clock.Now(), mfaKey, addrKey)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if wait > 0 {
		s.attempt(r, "signin.throttled", se.UserID, se.Email, map[string]any{"step": "totp", "retry_after_s": int(math.Ceil(wait.Seconds()))})
		retryAfter(w, wait)
		refuse(http.StatusTooManyRequests, "Too many attempts. Try again in "+waitText(wait)+".")
		return
	}
	enrol := se.TOTPSecret == ""
	secret := se.TOTPSecret
	if enrol {
		secret = se.EnrolSecret
	}
	step := int64(0)
	if secret != "" {
		step = matchStep(secret, code, s.d.Clock.Now())
	}
	reason := ""
	if step == 0 {
		reason = "wrong code"
	}
	var token string
	var exp time.Time
	if reason == "" {
		err = audit.InSystem(r.Context(), s.d.DB, func(tx pgx.Tx) error {
			// Accept a step only above the last one accepted: a code seen
			// over a shoulder or replayed from a log is refused.
			q := `UPDATE users SET totp_last_step = $2 WHERE id::text = $1 AND totp_last_step < $2 AND totp_secret = $3 AND disabled_at IS NULL`
			args := []any{se.UserID, step, se.totpStored}
			if enrol {
				q = `UPDATE users SET totp_last_step = GREATEST(totp_last_step, $2), totp_secret = $3, updated_at = now()
					WHERE id::text = $1 AND totp_secret IS NULL AND totp_last_step < $2 AND disabled_at IS NULL`
				args[2] = sealSeed(s.d.Vault, secret, totpContext(se.UserID))
			}
			tag, err := tx.Exec(r.Context(), q, args...)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				reason = "code already used"
				return nil
			}
			// A new session id for the signed-in session; the pending one ends.
			if _, err := tx.Exec(r.Context(), `UPDATE sessions SET ended_at = now() WHERE id::text = $1`, se.ID); err != nil {
				return err
			}
			if token, exp, err = s.startSession(r.Context(), tx, se.UserID, true, "", r); err != nil {
				return err
			}
			if enrol {
				if err := audit.Append(r.Context(), tx, audit.Entry{ActorID: se.UserID, Actor: se.Email, Action: "mfa.enrolled",
					Target: se.Email, IP: clientIP(r)}); err != nil {
					return err
				}
			}
			return audit.Append(r.Context(), tx, audit.Entry{ActorID: se.UserID, Actor: se.Email, Action: "signin.succeeded",
				Target: se.Email, IP: clientIP(r), Detail: map[string]any{"enrolled": enrol}})
		})
		if err != nil {
			s.fail(w, r, err)
			return
		}
	}
	if reason != "" {
		s.attempt(r, "signin.failed", se.UserID, se.Email, map[string]any{"reason": reason, "step": "totp", "enrolling": enrol})
		msg := "That code is not right. Check your device's clock and try the current code."
		if reason == "code already used" {
			msg = "That code was already used. Wait for the next one."
		}
		refuse(http.StatusUnauthorized, msg)
		return
	}
	if err := succeeded(r.Context(), s.d.DB, mfaKey); err != nil {
		s.fail(w, r, err)
		return
	}
	s.d.Log.Info("sign-in", "action", "signin.succeeded", "email", se.Email, "ip", clientIP(r), "enrolled", enrol)
	if err := setCookie(w, r, token, time.Until(exp)); err != nil {
		s.fail(w, r, err)
		return
	}
	if enrol {
		auth.Flash(w, "ok", "Two-factor authentication is set up. Keep your authenticator app: you need it at every sign-in.")
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Service) signOut(w http.ResponseWriter, r *http.Request) {
	u, se := auth.UserFrom(r.Context()), sessionFrom(r.Context())
	err := audit.InSystem(r.Context(), s.d.DB, func(tx pgx.Tx) error {
		if _, err := tx.Exec(r.Context(), `UPDATE sessions SET ended_at = now() WHERE id::text = $1`, se.ID); err != nil {
			return err
		}
		return audit.Append(r.Context(), tx, audit.Entry{ActorID: u.ID, Actor: u.Email, Action: "signout", Target: u.Email, IP: clientIP(r)})
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	clearCookie(w)
	auth.Flash(w, "info", "You are signed out.")
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

// busy answers 503 when no argon2id slot freed up in time: a burst of
// sign-ins waits its turn instead of exhausting memory.
func (s *Service) busy(w http.ResponseWriter, r *http.Request, render func(), msg *string) {
	s.d.Log.Warn("password hashing saturated", "path", r.URL.Path, "ip", clientIP(r))
	retryAfter(w, hashBusyRetry)
	*msg = "The console is busy. Try again in a few seconds."
	render()
}

func (s *Service) fail(w http.ResponseWriter, r *http.Request, err error) {
	s.d.Log.Error("console request failed", "err", err, "path", r.URL.Path)
	auth.ServerError(w, r)
}
