package tenant

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// slugs caches tenant ids' slugs for metric labels; a tenant's slug never
// changes and ids are never reused.
var slugs sync.Map // id → slug

// Slug returns the slug of tenant id, for a metric's tenant label: every
// per-tenant metric is labelled with the slug people know, not the id.
// Read once per tenant and kept; when it cannot be read (the database is
// away) the id stands in, and the next call tries again.
func Slug(ctx context.Context, pool *pgxpool.Pool, id string) string {
	if s, ok := slugs.Load(id); ok {
		return s.(string)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var slug string
	if err := pool.QueryRow(ctx, `SELECT slug FROM tenants WHERE id::text = $1`, id).Scan(&slug); err != nil {
		return id
	}
	slugs.Store(id, slug)
	return slug
}
