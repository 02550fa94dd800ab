package assistant

import (
	"context"
	"log/slog"
	"time"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/modules/assistant/store"
)

// pruneEvery is how often the assistant applies its retention settings.
const pruneEvery = time.Hour

// pruneLoop applies the retention settings of the assistant's own data
// (store.RetentionDefs) at start and every pruneEvery until ctx ends.
func pruneLoop(ctx context.Context, st *store.Store, clk clock.Clock, log *slog.Logger) {
	for {
		n, err := st.Prune(ctx, clk.Now())
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("assistant: retention prune failed", "err", err)
		case len(n) > 0:
			log.Info("assistant: retention pruned", "counts", map[string]int64(n))
		}
		select {
		case <-ctx.Done():
			return
		case <-clk.After(pruneEvery):
		}
	}
}
