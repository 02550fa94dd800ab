package panel_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/modules/audit"
)

// fill writes zeros to path until the filesystem is full.
func fill(t *testing.T, path string) {
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			break
		}
	}
	// The last partial blocks too.
	for _, n := range []int{64 << 10, 4 << 10, 512} {
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				break
			}
		}
	}
	_ = f.Sync()
}

// TestFullDiskRefusesWritesCleanlyAndRecovers runs the panel binary with its
// embedded Postgres and Redis on a small filesystem of its own (a 160 MiB
// tmpfs mounted for the test; the suite runs as root) and fills it. The
// panel stays up, /readyz fails naming the full disk, a write that needs
// space is refused with Postgres's disk-full error and leaves nothing
// behind, what was written before is intact; once the space returns,
// readiness comes back by itself and the same write succeeds.
func TestFullDiskRefusesWritesCleanlyAndRecovers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatalf("this test mounts a small tmpfs and needs root (the suite runs as root)")
	}
	ctx := context.Background()
	dir := dataDir(t)
	require.NoError(t, syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=160m,mode=0755"))
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	p, url := startPanel(t, dir)

	pg, err := embedded.Attach(ctx, filepath.Join(dir, "postgres"))
	require.NoError(t, err)
	pool, err := db.Open(ctx, pg.AppURL(), 2)
	require.NoError(t, err)
	defer pool.Close()
	// An audit entry with an incompressible 256 KiB detail: it needs new
	// pages (the relation's file must grow), little WAL.
	blob := make([]byte, 128<<10)
	_, _ = rand.Read(blob)
	write := func(target string) error {
		return audit.InSystem(ctx, pool, func(tx pgx.Tx) error {
			return audit.Append(ctx, tx, audit.Entry{Actor: "disk-test", Action: "test.disk", Target: target,
				Detail: map[string]any{"blob": hex.EncodeToString(blob)}})
		})
	}
	// written counts the entries of a target. A pooled connection may have
	// died with a Postgres restart; the count is asked again until it
	// answers (within a few seconds).
	written := func(target string) int {
		t.Helper()
		n := -1
		require.Eventually(t, func() bool {
			return audit.InSystem(ctx, pool, func(tx pgx.Tx) error {
				return tx.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'test.disk' AND target = $1`, target).Scan(&n)
			}) == nil
		}, 30*time.Second, 200*time.Millisecond, "count %s", target)
		return n
	}
	require.NoError(t, write("before"))
	code, _ := httpGet(t, url+"/readyz")
	require.Equal(t, 200, code)
	// Start a fresh WAL segment while there is room: the refused write
	// below then meets the full disk in its data files, not in the WAL.
	super, err := pgx.Connect(ctx, pg.SuperURL(embedded.Database))
	require.NoError(t, err)
	_, err = super.Exec(ctx, `SELECT pg_switch_wal()`)
	require.NoError(t, err)
	super.Close(ctx)

	filler := filepath.Join(dir, "filler")
	fill(t, filler)

	// The panel is alive, not ready, and says why.
	code, _ = httpGet(t, url+"/healthz")
	require.Equal(t, 200, code)
	code, body := httpGet(t, url+"/readyz?verbose=1")
	require.Equal(t, 503, code)
	require.Contains(t, body, `"name":"disk","ok":false`)
	require.Contains(t, body, "is full")

	// A write that needs new space is refused with a clear error; the rows
	// before it are intact and the failed one left nothing. The write must
	// be answered by a Postgres that is up: on a busy machine a background
	// writer of the panel can meet the full disk in the WAL first, and the
	// cluster restarts (its supervisor brings it back). A Postgres still
	// starting (57P03) or shutting down (57P01, 57P02), or not yet
	// listening, has not looked at the write: it is sent again until
	// Postgres itself answers it.
	notAnswered := func(err error) bool {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			return strings.HasPrefix(pe.Code, "57")
		}
		var ce *pgconn.ConnectError
		return errors.As(err, &ce) || pgconn.SafeToRetry(err)
	}
	require.Eventually(t, func() bool {
		err = write("during")
		return !notAnswered(err)
	}, 2*time.Minute, 200*time.Millisecond, "Postgres answers the write")
	require.Error(t, err)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		require.Equal(t, "53100", pe.Code, "disk_full: %s", pe.Message)
	} else {
		require.ErrorContains(t, err, "No space left on device")
	}
	require.Equal(t, 1, written("before"), "what was written before is intact")
	require.Zero(t, written("during"), "the refused write left nothing")
	select {
	case <-p.Exited():
		t.Fatalf("the panel exited on a full disk:\n%s", p.Output())
	default:
	}

	// Space returns: ready again by itself, and the same write succeeds.
	require.NoError(t, os.Remove(filler))
	require.Eventually(t, func() bool {
		code, _ := httpGet(t, url+"/readyz")
		return code == 200
	}, 30*time.Second, 200*time.Millisecond, "ready again once space returns")
	require.Eventually(t, func() bool { return write("during") == nil }, 30*time.Second, 500*time.Millisecond,
		"the write succeeds once space returns")
	require.Equal(t, 1, written("during"))
	require.Equal(t, 1, written("before"))
}
