package fleet

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/fleetwright/fleetwright/modules/wire"
)

// ErrAgentGone means the agent a page task was for is not connected here.
var ErrAgentGone = errors.New("fleet: that agent is not connected to this panel replica")

// CrawlAgents lists the agents of tenant connected to this replica that
// speak the crawl protocol (v4). Whether one runs a crawler worker is its
// own answer to a page task. It implements crawl.Dispatcher.
func (g *Gateway) CrawlAgents(tenant string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for id, c := range g.byTenant[tenant] {
		if wire.InVersion(wire.TypePageTask, c.version) {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// Crawl sends a page task to one agent and waits for its result. It
// implements crawl.Dispatcher.
func (g *Gateway) Crawl(ctx context.Context, tenant, agentID string, t wire.PageTask) (wire.PageResult, error) {
	g.mu.Lock()
	c := g.byTenant[tenant][agentID]
	g.mu.Unlock()
	if c == nil {
		return wire.PageResult{}, ErrAgentGone
	}
	// The agent bounds a fetch by the task's timeout; past it and a margin
	// the agent is taken as gone (a dropped connection answers nothing).
	ctx, cancel := context.WithTimeout(ctx, time.Duration(t.TimeoutMS)*time.Millisecond+15*time.Second)
	defer cancel()
	ch := make(chan wire.PageResult, 1)
	c.mu.Lock()
	c.pages[t.TaskID] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pages, t.TaskID)
		c.mu.Unlock()
	}()
	if err := c.send(ctx, t); err != nil {
		return wire.PageResult{}, fmt.Errorf("fleet: page task: %w", err)
	}
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		return wire.PageResult{}, fmt.Errorf("fleet: page task: %w", ctx.Err())
	}
}

func (c *conn) pageResult(r wire.PageResult) {
	outcome := "ok"
	if r.Error != "" {
		outcome = "error"
	}
	c.g.completions.WithLabelValues("crawler", outcome).Inc()
	c.mu.Lock()
	ch := c.pages[r.TaskID]
	delete(c.pages, r.TaskID)
	c.mu.Unlock()
	if ch != nil {
		ch <- r
	}
}
