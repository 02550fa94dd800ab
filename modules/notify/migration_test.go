package notify_test

import (
	"context"
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/migrations"
	"github.com/fleetwright/fleetwright/modules/alarm"
)

// Migration 0205 removes the tokens that delivery errors stored before
// webhook URLs were redacted: every quoted URL keeps its scheme and host.
func TestMigrationRedactsStoredDeliveryErrors(t *testing.T) {
	d := testenv.EmptyDB(t)
	ctx := context.Background()
	log := testenv.Logger(t)
	before := fstest.MapFS{}
	names, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	for _, n := range names {
		if n < "0205" {
			b, err := fs.ReadFile(migrations.FS, n)
			require.NoError(t, err)
			before[n] = &fstest.MapFile{Data: b}
		}
	}
	require.NoError(t, db.Migrate(ctx, d.Owner, before, embedded.AppRole, "test", log))
	old := `notify: webhook https://hooks.example.com/…: Post "https://hooks.example.com/services/T0kenInPath42/x?token=Qu3ryT0ken17": ` +
		`egress: dial 203.0.113.9:443: i/o timeout`
	require.NoError(t, db.InTenant(ctx, d.Owner, alarm.System, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `WITH c AS (INSERT INTO notify_channels (name, kind, target) VALUES ('ops', 'webhook', 'https://hooks.example.com/services/T0kenInPath42/x?token=Qu3ryT0ken17') RETURNING id),
			a AS (INSERT INTO alarms (kind, key, severity, summary, raised_at, last_seen_at) VALUES ('cell.failing', 'eu', 'critical', 'eu failing', now(), now()) RETURNING id),
			e AS (INSERT INTO alarm_events (alarm_id, event, at) SELECT id, 'raised', now() FROM a RETURNING id)
			INSERT INTO notify_deliveries (channel_id, event_id, status, attempts, last_error)
			SELECT c.id, e.id, 'retrying', 1, $1 FROM c, e`, old)
		return err
	}))
	require.NoError(t, db.Migrate(ctx, d.Owner, migrations.FS, embedded.AppRole, "test", log))
	var got string
	require.NoError(t, db.InTenant(ctx, d.Owner, alarm.System, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT last_error FROM notify_deliveries`).Scan(&got)
	}))
	require.Equal(t, `notify: webhook https://hooks.example.com/…: Post "https://hooks.example.com/…": egress: dial 203.0.113.9:443: i/o timeout`, got)
}
