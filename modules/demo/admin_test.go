package demo

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/account"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/panel"
)

// The demo's administrator gets a generated password that is one-time:
// on the first start and on --reset-admin alike, the first sign-in with
// it must choose a new one (the whole path through the console is
// TestDemoRunsClaimsStopsCleanAndRestarts).
func TestDemoAdminPasswordIsOneTime(t *testing.T) {
	ctx := context.Background()
	d := testenv.DB(t)
	s := &seeder{p: &panel.Panel{DB: d.App}, log: testenv.Logger(t), by: audit.Entry{Actor: actor}}
	mustChange := func() bool {
		var v bool
		require.NoError(t, d.Owner.QueryRow(ctx, `SELECT must_change_password FROM users WHERE email = $1`, AdminEmail).Scan(&v))
		return v
	}
	pw, err := s.admin(ctx, false)
	require.NoError(t, err)
	require.NotEmpty(t, pw)
	require.True(t, mustChange(), "the first start's password is one-time")

	u, err := account.UserByEmail(ctx, d.App, AdminEmail)
	require.NoError(t, err)
	require.NoError(t, account.ChangePassword(ctx, d.App, u.ID, pw, "Quiet-Harbour-Lantern-42", "", audit.Entry{Actor: "test"}))
	require.False(t, mustChange())
	again, err := s.admin(ctx, false)
	require.NoError(t, err)
	require.Empty(t, again, "a later start keeps the admin's own password")
	require.False(t, mustChange())

	reset, err := s.admin(ctx, true)
	require.NoError(t, err)
	require.NotEmpty(t, reset)
	require.True(t, mustChange(), "--reset-admin's password is one-time too")
}
