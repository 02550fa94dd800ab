package crawl

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/fleetwright/fleetwright/app/clock"
)

// itemWriter saves a run's items off its loop: pages' items queue up while
// a batch is written, and the next batch takes all of them in one
// transaction (the latest data of a key wins). The run waits for the
// last batch before it reports its figures, so every item it reports is
// durable.
type itemWriter struct {
	store                *Store
	clock                clock.Clock
	log                  *slog.Logger
	tenant, jobID, runID string

	pages chan pageItems
	done  chan struct{}

	mu             sync.Mutex
	added, changed int
	failed         int // batches not saved after every try
}

type pageItems struct {
	keyed map[string]map[string]any
	at    time.Time
}

// itemQueue is how many pages' items wait for the writer before a page's
// result waits for it in turn (a slow database slows the run, and loses
// nothing).
const itemQueue = 256

// itemTries is how often a batch is tried before its items count as an
// error of the run.
const itemTries = 3

func newItemWriter(ctx context.Context, s *Store, clk clock.Clock, log *slog.Logger, tenant, jobID, runID string) *itemWriter {
	w := &itemWriter{store: s, clock: clk, log: log, tenant: tenant, jobID: jobID, runID: runID,
		pages: make(chan pageItems, itemQueue), done: make(chan struct{})}
	// A panel shutting down still writes what its runs found.
	go w.run(context.WithoutCancel(ctx))
	return w
}

// add queues one page's items.
func (w *itemWriter) add(keyed map[string]map[string]any, at time.Time) {
	if len(keyed) > 0 {
		w.pages <- pageItems{keyed, at}
	}
}

// close waits for every queued item to be written and returns the
// figures: items added and changed, and batches that could not be saved.
func (w *itemWriter) close() (added, changed, failed int) {
	close(w.pages)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.added, w.changed, w.failed
}

func (w *itemWriter) run(ctx context.Context) {
	defer close(w.done)
	for first := range w.pages {
		batch, at := first.keyed, first.at
	drain:
		for {
			select {
			case p, ok := <-w.pages:
				if !ok {
					break drain
				}
				for k, v := range p.keyed {
					batch[k] = v
				}
				if p.at.After(at) {
					at = p.at
				}
			default:
				break drain
			}
		}
		w.save(ctx, batch, at)
	}
}

func (w *itemWriter) save(ctx context.Context, batch map[string]map[string]any, at time.Time) {
	for try := 1; ; try++ {
		added, changed, err := w.store.SaveItems(ctx, w.tenant, w.jobID, w.runID, batch, at)
		if err == nil {
			w.mu.Lock()
			w.added += added
			w.changed += changed
			w.mu.Unlock()
			return
		}
		if try >= itemTries {
			w.log.Error("crawl: save items", "items", len(batch), "err", err)
			w.mu.Lock()
			w.failed++
			w.mu.Unlock()
			return
		}
		w.log.Warn("crawl: save items, trying again", "items", len(batch), "try", try, "err", err)
		<-w.clock.After(time.Duration(try) * 200 * time.Millisecond)
	}
}
