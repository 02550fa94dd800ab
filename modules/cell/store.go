package cell

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Def is a cell as stored.
type Def struct {
	Name      string
	RedisURL  string // empty: the panel's own Redis
	UpdatedAt time.Time
}

// Querier runs statements: a pool, or a transaction when the change is
// audited together with it.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ListCells reads every cell.
func ListCells(ctx context.Context, q Querier) ([]Def, error) {
	rows, err := q.Query(ctx, `SELECT name, redis_url, updated_at FROM cells ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("cell: list: %w", err)
	}
	defs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Def, error) {
		var d Def
		err := r.Scan(&d.Name, &d.RedisURL, &d.UpdatedAt)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("cell: list: %w", err)
	}
	return defs, nil
}

// Routes maps every tenant id to its cell.
func Routes(ctx context.Context, q Querier) (map[string]string, error) {
	rows, err := q.Query(ctx, `SELECT id::text, cell FROM tenants`)
	if err != nil {
		return nil, fmt.Errorf("cell: routes: %w", err)
	}
	out := map[string]string{}
	var id, name string
	_, err = pgx.ForEachRow(rows, []any{&id, &name}, func() error { out[id] = name; return nil })
	if err != nil {
		return nil, fmt.Errorf("cell: routes: %w", err)
	}
	return out, nil
}

// TenantCell names one tenant's cell.
func TenantCell(ctx context.Context, q Querier, tenant string) (string, error) {
	var name string
	err := q.QueryRow(ctx, `SELECT cell FROM tenants WHERE id = $1`, tenant).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("cell: no tenant %s", tenant)
	}
	if err != nil {
		return "", fmt.Errorf("cell: tenant cell: %w", err)
	}
	return name, nil
}

// CheckDef validates a cell definition: a name the table accepts and, when
// given, a Redis URL go-redis can parse.
func CheckDef(d Def) error {
	if !nameRE.MatchString(d.Name) {
		return fmt.Errorf("cell: name %q: use lowercase letters, digits and dashes (up to 63)", d.Name)
	}
	if d.RedisURL != "" {
		c, err := OpenRedis(d.RedisURL, Tuning{})
		if err != nil {
			return err
		}
		_ = c.Close()
	}
	return nil
}

// PutCell creates a cell or changes its Redis URL.
func PutCell(ctx context.Context, q Querier, d Def) error {
	if err := CheckDef(d); err != nil {
		return err
	}
	_, err := q.Exec(ctx, `INSERT INTO cells (name, redis_url) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET redis_url = EXCLUDED.redis_url, updated_at = now()`, d.Name, d.RedisURL)
	if err != nil {
		return fmt.Errorf("cell: put %s: %w", d.Name, err)
	}
	return nil
}

// ErrInUse refuses to delete a cell that tenants are routed to.
var ErrInUse = errors.New("cell: tenants are routed to this cell; move them first")

// DeleteCell removes a cell no tenant uses.
func DeleteCell(ctx context.Context, q Querier, name string) error {
	if name == DefaultCell {
		return errors.New("cell: the default cell cannot be deleted")
	}
	_, err := q.Exec(ctx, `DELETE FROM cells WHERE name = $1`, name)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23503" {
		return ErrInUse
	}
	if err != nil {
		return fmt.Errorf("cell: delete %s: %w", name, err)
	}
	return nil
}

// RouteTenant moves a tenant to a cell. Its claims in Postgres are untouched;
// its sightings go to the new cell from the next reload.
func RouteTenant(ctx context.Context, q Querier, tenant, name string) error {
	tag, err := q.Exec(ctx, `UPDATE tenants SET cell = $2 WHERE id = $1`, tenant, name)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23503" {
		return fmt.Errorf("cell: no cell %q", name)
	}
	if err != nil {
		return fmt.Errorf("cell: route: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("cell: no tenant %s", tenant)
	}
	return nil
}

// RedactURL removes the password from a Redis URL for display.
func RedactURL(s string) string {
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil {
		return "(malformed)"
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	if q := u.Query(); q.Get("password") != "" {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

func sortStatus(s []Status) {
	sort.Slice(s, func(i, j int) bool { return s[i].Name < s[j].Name })
}
