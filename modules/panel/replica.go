package panel

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
)

// replicaHeartbeat is how often a replica refreshes its row; a replica is
// shown as live while its row is younger than three heartbeats.
const replicaHeartbeat = 10 * time.Second

// replicaRetention is how long a stopped replica's row is kept for the record.
const replicaRetention = 24 * time.Hour

func newReplicaID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// heartbeat keeps this replica's row fresh until ctx ends, then removes it.
// Each beat also reports the ids of the secret keys the replica holds (keys
// looks at the key files first), which a key rotation waits for.
func heartbeat(ctx context.Context, db *pgxpool.Pool, id, listen, version string, keys func() []string, log *slog.Logger) {
	host, _ := os.Hostname()
	started := time.Now()
	beat := func(ctx context.Context) {
		_, err := db.Exec(ctx, `INSERT INTO panel_replicas (id, host, listen, version, pid, started_at, last_seen, key_ids)
			VALUES ($1, $2, $3, $4, $5, $6, now(), $7)
			ON CONFLICT (id) DO UPDATE SET last_seen = now(), key_ids = $7`, id, host, listen, version, os.Getpid(), started, keys())
		if err != nil && ctx.Err() == nil {
			log.Warn("replica heartbeat failed", "err", err)
		}
	}
	beat(ctx)
	t := time.NewTicker(replicaHeartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, _ = db.Exec(cctx, `DELETE FROM panel_replicas WHERE id = $1`, id)
			cancel()
			return
		case <-t.C:
			beat(ctx)
		}
	}
}

// pruneReplicasArgs is the periodic job that forgets replicas gone for a day.
type pruneReplicasArgs struct{}

// Kind implements river.JobArgs.
func (pruneReplicasArgs) Kind() string { return "panel.prune_replicas" }

type pruneReplicasWorker struct {
	river.WorkerDefaults[pruneReplicasArgs]
	db *pgxpool.Pool
}

// Work deletes replica rows not refreshed within the retention.
func (w *pruneReplicasWorker) Work(ctx context.Context, _ *river.Job[pruneReplicasArgs]) error {
	_, err := w.db.Exec(ctx, `DELETE FROM panel_replicas WHERE last_seen < now() - $1::interval`,
		fmt.Sprintf("%d seconds", int(replicaRetention.Seconds())))
	if err != nil {
		return fmt.Errorf("panel: prune replicas: %w", err)
	}
	return nil
}
