package account

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/app/server"
	"github.com/fleetwright/fleetwright/modules/auth"
)

// Cookie names. __Host- makes the browser insist on Secure, Path=/ and no
// Domain; plain-HTTP development on loopback cannot be Secure, so there, and
// only there, the session rides in a cookie without the prefix.
const (
	CookieName    = "__Host-fleet_session"
	DevCookieName = "fleet_session"
)

// session is a stored session joined with its user.
type session struct {
	ID          string
	UserID      string
	Email       string
	Role        auth.Role
	MFAOK       bool
	EnrolSecret string // opened
	TOTPSecret  string // opened
	// totpStored is the seed as stored (sealed): what a conditional
	// UPDATE compares, so a seed changed meanwhile is not overwritten.
	totpStored string
	LastStep   int64
	MustChange bool
	CreatedAt  time.Time
	LastSeen   time.Time
	ExpiresAt  time.Time
	Disabled   bool
}

func newToken() (token string, hash []byte) {
	b := make([]byte, 32) // 256 bits
	_, _ = rand.Read(b)
	token = base64.RawURLEncoding.EncodeToString(b)
	return token, hashToken(token)
}

func hashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// transport classifies the request's connection for the cookie: secure
// (TLS here, or TLS at a trusted proxy: --trusted-proxies), dev (plain HTTP
// to a loopback address from loopback), or neither, where signing in is
// refused.
func transport(r *http.Request) (secure, dev bool) {
	if r.TLS != nil || server.ForwardedHTTPS(r) {
		return true, false
	}
	if !loopback(hostOnly(r.RemoteAddr)) {
		return false, false
	}
	return false, loopback(hostOnly(r.Host))
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// clientIP is the client's address: the peer's, or what a trusted proxy
// reports (server.RealIP).
func clientIP(r *http.Request) string { return server.ClientIP(r) }

func cookieToken(r *http.Request) string {
	secure, dev := transport(r)
	if c, err := r.Cookie(CookieName); err == nil && secure {
		return c.Value
	}
	if c, err := r.Cookie(DevCookieName); err == nil && dev {
		return c.Value
	}
	return ""
}

var errInsecure = errors.New("account: sign-in needs HTTPS (plain HTTP is accepted on loopback only)")

func setCookie(w http.ResponseWriter, r *http.Request, token string, maxAge time.Duration) error {
	secure, dev := transport(r)
	c := &http.Cookie{Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode, MaxAge: int(maxAge.Seconds())}
	switch {
	case secure:
		c.Name, c.Secure = CookieName, true
	case dev:
		c.Name = DevCookieName
	default:
		return errInsecure
	}
	http.SetCookie(w, c)
	return nil
}

func clearCookie(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1, Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	http.SetCookie(w, &http.Cookie{Name: DevCookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode})
}

// startSession stores a new session and returns its cookie token.
func (s *Service) startSession(ctx context.Context, tx pgx.Tx, userID string, mfaOK bool, enrolSecret string, r *http.Request) (string, time.Time, error) {
	token, hash := newToken()
	now := s.d.Clock.Now()
	life := s.d.SessionMax
	if !mfaOK {
		life = s.d.PendingMax
	}
	exp := now.Add(life)
	// Issued here: redacted from the logs for as long as it can be used.
	logging.RegisterSecretFor(life, token)
	_, err := tx.Exec(ctx, `INSERT INTO sessions (token_hash, user_id, mfa_ok, enrol_secret, created_at, last_seen_at, expires_at, ip, user_agent)
		VALUES ($1, $2::uuid, $3, NULLIF($4, ''), $5, $5, $6, $7, $8)`,
		hash, userID, mfaOK, enrolSecret, now, exp, clientIP(r), truncate(r.UserAgent(), 300))
	if err != nil {
		return "", time.Time{}, fmt.Errorf("account: start session: %w", err)
	}
	return token, exp, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// lookup returns the live session of a token; an expired or idle one is
// ended. active says whether the request counts as the user's activity
// (see background).
func (s *Service) lookup(ctx context.Context, token string, active bool) (*session, error) {
	if token == "" {
		return nil, nil
	}
	var se session
	var role string
	err := s.d.DB.QueryRow(ctx, `SELECT s.id::text, s.user_id::text, u.email, u.role, s.mfa_ok, COALESCE(s.enrol_secret, ''),
			COALESCE(u.totp_secret, ''), u.totp_last_step, u.must_change_password, s.created_at, s.last_seen_at, s.expires_at, u.disabled_at IS NOT NULL
		FROM sessions s JOIN users u ON u.id = s.user_id
		WHERE s.token_hash = $1 AND s.ended_at IS NULL`, hashToken(token)).
		Scan(&se.ID, &se.UserID, &se.Email, &role, &se.MFAOK, &se.EnrolSecret, &se.totpStored, &se.LastStep, &se.MustChange,
			&se.CreatedAt, &se.LastSeen, &se.ExpiresAt, &se.Disabled)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("account: session: %w", err)
	}
	se.Role = auth.Role(role)
	if se.TOTPSecret, err = openSeed(s.d.Vault, se.totpStored, totpContext(se.UserID)); err != nil {
		return nil, err
	}
	if se.EnrolSecret, err = openSeed(s.d.Vault, se.EnrolSecret, enrolContext(se.ID)); err != nil {
		return nil, err
	}
	now := s.d.Clock.Now()
	idle := s.d.SessionIdle
	if !se.MFAOK {
		idle = s.d.PendingMax
	}
	if se.Disabled || !now.Before(se.ExpiresAt) || now.Sub(se.LastSeen) >= idle {
		_, _ = s.d.DB.Exec(ctx, `UPDATE sessions SET ended_at = $2 WHERE id::text = $1 AND ended_at IS NULL`, se.ID, now)
		return nil, nil
	}
	// A write per request would be a write per page view; a minute's
	// resolution is plenty for an idle timeout counted in minutes.
	if active && now.Sub(se.LastSeen) >= time.Minute {
		if _, err := s.d.DB.Exec(ctx, `UPDATE sessions SET last_seen_at = $2 WHERE id::text = $1`, se.ID, now); err != nil {
			return nil, fmt.Errorf("account: touch session: %w", err)
		}
	}
	return &se, nil
}

// background reports whether a request is the page refreshing itself, not
// the user: htmx GETs are the console's polling (live rows and figures every
// few seconds) and load-time fragments; every click, form and navigation is
// a plain request or a POST. A tab left open must not keep a session alive
// past its idle timeout.
func background(r *http.Request) bool {
	return r.Header.Get("HX-Request") == "true" && (r.Method == http.MethodGet || r.Method == http.MethodHead)
}

// mustChangeAllowed lists what a user with a one-time password reaches:
// the account page to replace it, and signing out.
func mustChangeAllowed(r *http.Request) bool {
	switch r.URL.Path {
	case "/account", "/account/password", "/signout", auth.SignInPath, auth.MFAPath:
		return true
	}
	return false
}

// mustChangeFirst sends the user to the account page to choose a password.
func mustChangeFirst(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("HX-Request") == "true" {
		w.Header().Set("HX-Redirect", "/account")
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		http.Redirect(w, r, "/account", http.StatusSeeOther)
		return
	}
	auth.ErrorPage(w, r, http.StatusForbidden, "Choose your password first",
		"Your password was set by someone else. Choose your own on the Account page before doing anything else.")
}

type sessionKey struct{}

// Middleware puts the signed-in user (if any) in the request's context.
func (s *Service) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := cookieToken(r)
		if token == "" {
			next.ServeHTTP(w, r)
			return
		}
		// The cookie is not registered as a secret before it is verified:
		// anyone can send any value, and a registered value is blanked out
		// of every log line (an attacker would erase their address).
		se, err := s.lookup(r.Context(), token, !background(r))
		if err != nil {
			s.d.Log.Error("session lookup failed", "err", err, "path", r.URL.Path)
			auth.ServerError(w, r)
			return
		}
		if se == nil {
			clearCookie(w)
			next.ServeHTTP(w, r)
			return
		}
		// Verified: another replica may have issued it.
		logging.RegisterSecretFor(se.ExpiresAt.Sub(s.d.Clock.Now()), token)
		u := &auth.User{ID: se.UserID, Email: se.Email, Role: se.Role, MFAOK: se.MFAOK, SessionID: se.ID}
		if se.MFAOK {
			if u.Tenants, err = reach(r.Context(), s.d.DB, se.UserID, se.Role); err != nil {
				s.d.Log.Error("loading tenant grants failed", "err", err)
				auth.ServerError(w, r)
				return
			}
		}
		if se.MFAOK && se.MustChange && !mustChangeAllowed(r) {
			mustChangeFirst(w, r)
			return
		}
		ctx := auth.WithUser(r.Context(), u)
		ctx = context.WithValue(ctx, sessionKey{}, se)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func sessionFrom(ctx context.Context) *session {
	se, _ := ctx.Value(sessionKey{}).(*session)
	return se
}
