package account

import (
	"context"
	"errors"
	"fmt"
	"net/mail"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
)

// User is an operator account as stored.
type User struct {
	ID          string
	Email       string
	Role        auth.Role
	MFAEnrolled bool
	Disabled    bool
	CreatedAt   time.Time
	// Tenants is filled by the users page only.
	Tenants []string
}

// ErrNoUser is returned for an unknown email or id.
var ErrNoUser = errors.New("account: no such user")

// FieldErrors are validation messages by form field.
type FieldErrors map[string]string

func (f FieldErrors) Error() string {
	var parts []string
	for k, v := range f {
		parts = append(parts, k+": "+v)
	}
	return "account: " + strings.Join(parts, "; ")
}

// NewUser is what creating a user needs.
type NewUser struct {
	Email    string
	Role     auth.Role
	Password string
	// MustChange makes the password one-time: someone else chose it (the
	// CLI, an admin), so the user must replace it at the first sign-in.
	MustChange bool
}

// normaliseEmail returns the address alone, trimmed, or "" when invalid.
func normaliseEmail(s string) string {
	s = strings.TrimSpace(s)
	a, err := mail.ParseAddress(s)
	if err != nil || a.Address != s || len(s) > 254 {
		return ""
	}
	return s
}

// CreateUser validates, hashes and stores a user, audited on the system
// chain in the same transaction. Validation failures are FieldErrors.
func CreateUser(ctx context.Context, pool *pgxpool.Pool, in NewUser, by audit.Entry) (User, error) {
	fe := FieldErrors{}
	email := normaliseEmail(in.Email)
	if email == "" {
		fe["email"] = "enter an email address such as ops@example.com"
	}
	if !in.Role.Valid() {
		fe["role"] = "choose admin, operator or viewer"
	}
	if err := CheckPasswordRules(in.Password, in.Email); err != nil {
		fe["password"] = err.Error()
	}
	if len(fe) > 0 {
		return User{}, fe
	}
	hash, err := hashPassword(in.Password)
	if err != nil {
		return User{}, err
	}
	u := User{Email: email, Role: in.Role}
	err = audit.InSystem(ctx, pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO users (email, role, password_hash, must_change_password) VALUES ($1, $2, $3, $4)
			RETURNING id::text, created_at`, email, string(in.Role), hash, in.MustChange).Scan(&u.ID, &u.CreatedAt)
		if err != nil {
			return err
		}
		by.Action, by.Target, by.Detail = "user.created", email, map[string]any{"user_id": u.ID, "role": in.Role}
		return audit.Append(ctx, tx, by)
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return User{}, FieldErrors{"email": "a user with this email already exists"}
	}
	if err != nil {
		return User{}, fmt.Errorf("account: create user: %w", err)
	}
	return u, nil
}

// UserByEmail looks a user up by email, case-insensitively.
func UserByEmail(ctx context.Context, pool *pgxpool.Pool, email string) (User, error) {
	return scanUser(pool.QueryRow(ctx, userQuery+` WHERE lower(email) = lower($1)`, strings.TrimSpace(email)))
}

// UserByID looks a user up by id.
func UserByID(ctx context.Context, pool *pgxpool.Pool, id string) (User, error) {
	return scanUser(pool.QueryRow(ctx, userQuery+` WHERE id::text = $1`, id))
}

const userQuery = `SELECT id::text, email, role, totp_secret IS NOT NULL, disabled_at IS NOT NULL, created_at FROM users`

func scanUser(row pgx.Row) (User, error) {
	var u User
	var role string
	err := row.Scan(&u.ID, &u.Email, &role, &u.MFAEnrolled, &u.Disabled, &u.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return User{}, ErrNoUser
	}
	if err != nil {
		return User{}, fmt.Errorf("account: load user: %w", err)
	}
	u.Role = auth.Role(role)
	return u, nil
}

// SetDisabled disables (ending every session of the user) or re-enables a user.
func SetDisabled(ctx context.Context, pool *pgxpool.Pool, userID string, disabled bool, by audit.Entry) error {
	return audit.InSystem(ctx, pool, func(tx pgx.Tx) error {
		var email string
		q := `UPDATE users SET disabled_at = NULL, updated_at = now() WHERE id::text = $1 RETURNING email`
		by.Action = "user.enabled"
		if disabled {
			q = `UPDATE users SET disabled_at = COALESCE(disabled_at, now()), updated_at = now() WHERE id::text = $1 RETURNING email`
			by.Action = "user.disabled"
		}
		if err := tx.QueryRow(ctx, q, userID).Scan(&email); errors.Is(err, pgx.ErrNoRows) {
			return ErrNoUser
		} else if err != nil {
			return fmt.Errorf("account: %s: %w", by.Action, err)
		}
		n := int64(0)
		if disabled {
			tag, err := tx.Exec(ctx, `UPDATE sessions SET ended_at = now() WHERE user_id::text = $1 AND ended_at IS NULL`, userID)
			if err != nil {
				return fmt.Errorf("account: end sessions: %w", err)
			}
			n = tag.RowsAffected()
		}
		by.Target, by.Detail = email, map[string]any{"user_id": userID, "sessions_ended": n}
		return audit.Append(ctx, tx, by)
	})
}

// ResetMFA removes a user's TOTP secret and ends their sessions: their next
// sign-in enrols again.
func ResetMFA(ctx context.Context, pool *pgxpool.Pool, userID string, by audit.Entry) error {
	return audit.InSystem(ctx, pool, func(tx pgx.Tx) error {
		var email string
		// The replay guard belongs to the old secret: a new enrolment inside
		// the same 30 s step as the last accepted code must not be refused.
		err := tx.QueryRow(ctx, `UPDATE users SET totp_secret = NULL, totp_last_step = 0, updated_at = now() WHERE id::text = $1 RETURNING email`, userID).Scan(&email)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNoUser
		} else if err != nil {
			return fmt.Errorf("account: reset mfa: %w", err)
		}
		tag, err := tx.Exec(ctx, `UPDATE sessions SET ended_at = now() WHERE user_id::text = $1 AND ended_at IS NULL`, userID)
		if err != nil {
			return fmt.Errorf("account: end sessions: %w", err)
		}
		by.Action, by.Target, by.Detail = "user.mfa_reset", email, map[string]any{"user_id": userID, "sessions_ended": tag.RowsAffected()}
		return audit.Append(ctx, tx, by)
	})
}

// ChangePassword replaces a user's password after checking the current one,
// and ends every other session of the user (whoever knew the old password
// is signed out); keepSession, the session making the change, stays. The
// caller throttles the check (admit) like a sign-in.
func ChangePassword(ctx context.Context, pool *pgxpool.Pool, userID, current, next, keepSession string, by audit.Entry) error {
	var email, hash string
	if err := pool.QueryRow(ctx, `SELECT email, password_hash FROM users WHERE id::text = $1`, userID).Scan(&email, &hash); err != nil {
		return fmt.Errorf("account: change password: %w", err)
	}
	ok, err := checkPassword(ctx, current, hash)
	if err != nil {
		return err
	}
	if !ok {
		return FieldErrors{"current": "the current password is not right"}
	}
	if err := CheckPasswordRules(next, email); err != nil {
		return FieldErrors{"password": err.Error()}
	}
	h, err := hashPassword(next)
	if err != nil {
		return err
	}
	return audit.InSystem(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE users SET password_hash = $2, must_change_password = false, updated_at = now() WHERE id::text = $1`, userID, h); err != nil {
			return fmt.Errorf("account: change password: %w", err)
		}
		tag, err := tx.Exec(ctx, `UPDATE sessions SET ended_at = now() WHERE user_id::text = $1 AND id::text <> $2 AND ended_at IS NULL`, userID, keepSession)
		if err != nil {
			return fmt.Errorf("account: change password: %w", err)
		}
		by.Action, by.Target, by.Detail = "user.password_changed", email, map[string]any{"other_sessions_ended": tag.RowsAffected()}
		return audit.Append(ctx, tx, by)
	})
}

// SetGrants makes tenantIDs exactly the tenants an operator or viewer
// reaches. Each change is made and audited in that tenant's own scope.
func SetGrants(ctx context.Context, pool *pgxpool.Pool, userID string, tenantIDs []string, by audit.Entry) error {
	u, err := UserByID(ctx, pool, userID)
	if err != nil {
		return err
	}
	rows, err := pool.Query(ctx, `SELECT id::text FROM tenants`)
	if err != nil {
		return fmt.Errorf("account: grants: %w", err)
	}
	all, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("account: grants: %w", err)
	}
	want := map[string]bool{}
	for _, id := range tenantIDs {
		want[id] = true
	}
	for _, t := range all {
		err := inTenant(ctx, pool, t, func(tx pgx.Tx) error {
			var has bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenant_grants WHERE user_id::text = $1)`, userID).Scan(&has); err != nil {
				return err
			}
			e := by
			e.Target, e.Detail = u.Email, map[string]any{"user_id": userID}
			switch {
			case want[t] && !has:
				if _, err := tx.Exec(ctx, `INSERT INTO tenant_grants (tenant_id, user_id) VALUES (app_tenant(), $1::uuid)`, userID); err != nil {
					return err
				}
				e.Action = "tenant.grant_added"
			case !want[t] && has:
				if _, err := tx.Exec(ctx, `DELETE FROM tenant_grants WHERE user_id::text = $1`, userID); err != nil {
					return err
				}
				e.Action = "tenant.grant_removed"
			default:
				return nil
			}
			return audit.Append(ctx, tx, e)
		})
		if err != nil {
			return fmt.Errorf("account: grants: %w", err)
		}
	}
	return nil
}

// ResetPassword sets a new password without the current one (an
// administrator's reset, or the demo's fresh one-time sign-in), enables the
// user again and is audited; the caller shows the password once. With
// mustChange (an admin's reset), the user must replace it at the next
// sign-in; the user's sessions end either way.
func ResetPassword(ctx context.Context, pool *pgxpool.Pool, userID, password string, mustChange bool, by audit.Entry) error {
	h, err := hashPassword(password)
	if err != nil {
		return err
	}
	return audit.InSystem(ctx, pool, func(tx pgx.Tx) error {
		var email string
		if err := tx.QueryRow(ctx, `UPDATE users SET password_hash = $2, must_change_password = $3, disabled_at = NULL, updated_at = now()
			WHERE id::text = $1 RETURNING email`, userID, h, mustChange).Scan(&email); err != nil {
			return fmt.Errorf("account: reset password: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE sessions SET ended_at = now() WHERE user_id::text = $1 AND ended_at IS NULL`, userID); err != nil {
			return fmt.Errorf("account: reset password: %w", err)
		}
		by.Action, by.Target = "user.password_reset", email
		if by.Detail == nil {
			by.Detail = map[string]any{"user_id": userID}
		}
		return audit.Append(ctx, tx, by)
	})
}
