package tenant_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/tenant"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestReadsFindWhatCreateStored: a created tenant is read back whole by
// slug, by id and in the list (by slug, on the pool and inside a
// transaction), and an unknown slug is an error that names it.
func TestReadsFindWhatCreateStored(t *testing.T) {
	ctx := context.Background()
	d := testenv.DB(t)
	by := audit.Entry{Actor: "test"}
	zeta, err := tenant.Create(ctx, d.App, "zeta", "Zeta Freight", by)
	require.NoError(t, err)
	alpha, err := tenant.Create(ctx, d.App, "alpha", "Alpha Freight", by)
	require.NoError(t, err)
	require.NotEmpty(t, alpha.ID)
	require.NotEmpty(t, alpha.Cell, "a new tenant is routed to a cell")
	require.NotEmpty(t, alpha.DispatchMode)

	got, err := tenant.BySlug(ctx, d.App, "alpha")
	require.NoError(t, err)
	require.Equal(t, alpha.ID, got.ID)
	require.Equal(t, "Alpha Freight", got.Name)
	require.Equal(t, alpha.Cell, got.Cell)
	require.False(t, got.Paused)
	require.Nil(t, got.DailyBookingCap)
	got, err = tenant.ByID(ctx, d.App, zeta.ID)
	require.NoError(t, err)
	require.Equal(t, "zeta", got.Slug)

	all, err := tenant.List(ctx, d.App)
	require.NoError(t, err)
	require.Len(t, all, 2)
	require.Equal(t, []string{"alpha", "zeta"}, []string{all[0].Slug, all[1].Slug})
	tx, err := d.App.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	inTx, err := tenant.List(ctx, tx)
	require.NoError(t, err)
	require.Equal(t, all, inTx)

	_, err = tenant.BySlug(ctx, d.App, "nope")
	require.ErrorContains(t, err, `tenant: no tenant "nope"`)
	_, err = tenant.Create(ctx, d.App, "alpha", "Again", by)
	var fe tenant.FieldErrors
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "this slug is taken", fe["slug"])
}

// TestSlugLabelsMetrics: the slug people know, read once and kept; an id
// not found stands for itself.
func TestSlugLabelsMetrics(t *testing.T) {
	d := testenv.DB(t)
	ctx := context.Background()
	acme, err := tenant.Create(ctx, d.App, "acme-labels", "Acme", audit.Entry{Actor: "test"})
	require.NoError(t, err)
	require.Equal(t, "acme-labels", tenant.Slug(ctx, d.App, acme.ID))
	d.App.Close()
	require.Equal(t, "acme-labels", tenant.Slug(ctx, d.App, acme.ID), "kept: no read needed")
	require.Equal(t, "00000000-0000-4000-8000-00000000dead", tenant.Slug(ctx, d.App, "00000000-0000-4000-8000-00000000dead"))
}
