package claim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Filter is one of a tenant's job filters. A job is wanted when at least one
// enabled filter matches it; a tenant without filters wants nothing. Empty
// lists match anything. The same rule runs in Postgres
// (claim_filter_matches in migrations/0031_claim_engine.sql) when a lease is
// granted; a test checks the two agree.
type Filter struct {
	ID      int64  `json:"id"`
	Name    string `json:"name"`
	Enabled bool   `json:"enabled"`
	// Origins and Destinations match a whole place ("dallas, tx") or its
	// region, the part after the last comma ("tx"); case-insensitive.
	Origins      []string `json:"origins"`
	Destinations []string `json:"destinations"`
	Equipment    []string `json:"equipment"`
	// MinRatePerMileCents: the job's rate ÷ miles must reach it (0: any).
	MinRatePerMileCents int       `json:"min_rate_per_mile_cents"`
	MaxWeightLbs        *int      `json:"max_weight_lbs"`
	MinMiles            *int      `json:"min_miles"`
	MaxMiles            *int      `json:"max_miles"`
	UpdatedAt           time.Time `json:"-"`
}

func region(s string) string {
	if i := strings.LastIndexByte(s, ','); i >= 0 {
		s = s[i+1:]
	}
	return strings.ToLower(strings.TrimSpace(s))
}

func placeMatches(list []string, place string) bool {
	if len(list) == 0 {
		return true
	}
	whole := strings.ToLower(strings.TrimSpace(place))
	r := region(place)
	return slices.Contains(list, whole) || slices.Contains(list, r)
}

// Match reports whether f wants job j.
func (f Filter) Match(j wire.Job) bool {
	if !f.Enabled || !placeMatches(f.Origins, j.Origin) || !placeMatches(f.Destinations, j.Destination) {
		return false
	}
	if len(f.Equipment) > 0 && !slices.Contains(f.Equipment, strings.ToLower(strings.TrimSpace(j.Equipment))) {
		return false
	}
	if f.MinRatePerMileCents > 0 && (j.Miles <= 0 || j.RateCents < int64(f.MinRatePerMileCents)*int64(j.Miles)) {
		return false
	}
	if f.MaxWeightLbs != nil && j.WeightLbs > *f.MaxWeightLbs {
		return false
	}
	if f.MinMiles != nil && j.Miles < *f.MinMiles {
		return false
	}
	if f.MaxMiles != nil && j.Miles > *f.MaxMiles {
		return false
	}
	return true
}

// Wanted reports whether any of filters wants j.
func Wanted(filters []Filter, j wire.Job) bool {
	for _, f := range filters {
		if f.Match(j) {
			return true
		}
	}
	return false
}

func normList(in []string) []string {
	out := []string{}
	for _, s := range in {
		s = strings.ToLower(strings.TrimSpace(s))
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// Normalize lowercases and trims the lists and checks the numbers, so what is
// stored is what both Match and the database compare.
func (f *Filter) Normalize() error {
	f.Name = strings.TrimSpace(f.Name)
	if f.Name == "" || len(f.Name) > 100 {
		return Invalid("a filter needs a name (up to 100 characters)")
	}
	f.Origins, f.Destinations, f.Equipment = normList(f.Origins), normList(f.Destinations), normList(f.Equipment)
	for _, p := range []*int{f.MaxWeightLbs, f.MinMiles, f.MaxMiles} {
		if p != nil && *p < 0 {
			return Invalid("filter limits cannot be negative")
		}
	}
	if f.MinRatePerMileCents < 0 {
		return Invalid("the minimum rate per mile cannot be negative")
	}
	if f.MinMiles != nil && f.MaxMiles != nil && *f.MinMiles > *f.MaxMiles {
		return Invalid("minimum miles is above maximum miles")
	}
	return nil
}

const filterCols = `id, name, enabled, origins, destinations, equipment, min_rate_per_mile_cents,
	max_weight_lbs, min_miles, max_miles, updated_at`

func scanFilter(r pgx.CollectableRow) (Filter, error) {
	var f Filter
	err := r.Scan(&f.ID, &f.Name, &f.Enabled, &f.Origins, &f.Destinations, &f.Equipment, &f.MinRatePerMileCents,
		&f.MaxWeightLbs, &f.MinMiles, &f.MaxMiles, &f.UpdatedAt)
	return f, err
}

// Filters lists a tenant's filters.
func (s *Store) Filters(ctx context.Context, tenant string) ([]Filter, error) {
	var out []Filter
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+filterCols+` FROM claim_filters WHERE tenant_id = $1 ORDER BY id`, tenant)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, scanFilter)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim: filters: %w", err)
	}
	return out, nil
}

// PutFilter creates (ID 0) or replaces a filter, audited in the tenant's
// chain. Bad input is an Invalid error and changes nothing.
func (s *Store) PutFilter(ctx context.Context, by audit.Entry, tenant string, f Filter) (int64, error) {
	if err := f.Normalize(); err != nil {
		return 0, err
	}
	id := f.ID
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		var err error
		if f.ID == 0 {
			err = tx.QueryRow(ctx, `INSERT INTO claim_filters (tenant_id, name, enabled, origins, destinations, equipment,
				min_rate_per_mile_cents, max_weight_lbs, min_miles, max_miles)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id`,
				tenant, f.Name, f.Enabled, f.Origins, f.Destinations, f.Equipment, f.MinRatePerMileCents,
				f.MaxWeightLbs, f.MinMiles, f.MaxMiles).Scan(&id)
		} else {
			var tag pgconn.CommandTag
			tag, err = tx.Exec(ctx, `UPDATE claim_filters SET name = $3, enabled = $4, origins = $5, destinations = $6,
				equipment = $7, min_rate_per_mile_cents = $8, max_weight_lbs = $9, min_miles = $10, max_miles = $11,
				updated_at = now() WHERE tenant_id = $1 AND id = $2`,
				tenant, f.ID, f.Name, f.Enabled, f.Origins, f.Destinations, f.Equipment, f.MinRatePerMileCents,
				f.MaxWeightLbs, f.MinMiles, f.MaxMiles)
			if err == nil && tag.RowsAffected() == 0 {
				err = Invalid(fmt.Sprintf("there is no filter %d", f.ID))
			}
		}
		if err != nil {
			return err
		}
		f.ID = id
		return appendAudit(ctx, tx, by, "claim.filter.put", "filter "+fmt.Sprint(id), f)
	})
	var inv Invalid
	if errors.As(err, &inv) {
		return 0, inv
	}
	if err != nil {
		return 0, fmt.Errorf("claim: put filter: %w", err)
	}
	return id, nil
}

// DeleteFilter removes a filter, audited in the tenant's chain.
func (s *Store) DeleteFilter(ctx context.Context, by audit.Entry, tenant string, id int64) error {
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM claim_filters WHERE tenant_id = $1 AND id = $2`, tenant, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return Invalid(fmt.Sprintf("there is no filter %d", id))
		}
		return appendAudit(ctx, tx, by, "claim.filter.delete", "filter "+fmt.Sprint(id), nil)
	})
	var inv Invalid
	if errors.As(err, &inv) {
		return inv
	}
	if err != nil {
		return fmt.Errorf("claim: delete filter: %w", err)
	}
	return nil
}
