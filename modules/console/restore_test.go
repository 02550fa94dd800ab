package console_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
)

// TestOverviewShowsARestoreUntilItsLookupIsApplied: on a restored database
// the sweep holds each tenant and raises the restore alarm, which the
// overview's attention strip names until the tenant's look-up is applied.
func TestOverviewShowsARestoreUntilItsLookupIsApplied(t *testing.T) {
	c := paneltest.New(t)
	ctx := context.Background()
	const pw = "correct horse battery"
	c.User(t, "admin@fleet.test", auth.Admin, pw)
	acme := c.Tenant(t, "acme")
	admin := paneltest.Browserless()
	c.Enrolled(t, admin, "admin@fleet.test", pw)
	_, err := c.DB.Owner.Exec(ctx, `INSERT INTO restores (backup_id, backup_started_at, backup_finished_at, tokens_before, tokens_from)
		VALUES ('b1', '2026-12-02 01:00:00Z', '2026-12-02 01:00:05Z', 10, 1000000010)`)
	require.NoError(t, err)
	require.NoError(t, c.Claims.SweepAll(ctx))
	h, held, err := c.Claims.Store().RestoreHold(ctx, acme.ID)
	require.NoError(t, err)
	require.True(t, held)

	res, body := paneltest.Do(t, admin, "GET", c.Server.URL+"/", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	l := find(t, strip(t, body), "Tenant held after a restore until its bookings are looked up: restored from a backup taken 2026-12-02T01:00:00Z")
	require.Equal(t, "warn", l.Severity)
	require.Equal(t, "/t/acme/claims", l.Href)

	require.NoError(t, c.Claims.Store().ClearRestore(ctx, acme.ID, h, "lookup-1", 0, 0))
	_, held, err = c.Claims.Store().RestoreHold(ctx, acme.ID)
	require.NoError(t, err)
	require.False(t, held)
	_, body = paneltest.Do(t, admin, "GET", c.Server.URL+"/", nil)
	require.NotContains(t, body, "held after a restore")
}
