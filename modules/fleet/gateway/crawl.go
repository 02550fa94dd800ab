package gateway

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/fleetwright/fleetwright/modules/wire"
)

// ErrAgentGone means the agent a page task was for is not connected.
var ErrAgentGone = errors.New("fleet: that agent is not connected to this panel replica")

// CrawlAgents lists the agents of tenant that speak the crawl protocol
// (v4), connected to this replica or to another live one (relayed, see
// relay.go). Whether one runs a crawler worker is its own answer to a page
// task. It implements crawl.Dispatcher.
func (g *Gateway) CrawlAgents(tenant string) []string {
	g.mu.Lock()
	var out []string
	local := map[string]bool{}
	for id, c := range g.byTenant[tenant] {
		if wire.InVersion(wire.TypePageTask, c.version) {
			out = append(out, id)
			local[id] = true
		}
	}
	g.mu.Unlock()
	for _, id := range g.remoteCrawlAgents(tenant) {
		if !local[id] {
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
		if g.store == nil || g.store.Pool() == nil {
			return wire.PageResult{}, ErrAgentGone
		}
		return g.relayTask(ctx, tenant, agentID, t)
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
	if t.Proxy != nil {
		// The proxy's credentials travel only sealed to this agent's
		// installation key, like the account's; never in the clear.
		px := *t.Proxy
		px.Sealed, px.Withheld = c.sealProxy(px.Credentials)
		px.Credentials = wire.Credentials{}
		t.Proxy = &px
	}
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

// sealProxy seals a proxy's credentials to the agent's pinned installation
// key, or says why it will not (the reasons of protect, without its event:
// a page task is not an occasion to fill the fleet page with warnings).
func (c *conn) sealProxy(creds wire.Credentials) (*wire.SealedCredentials, string) {
	if creds.Username == "" && creds.Password.IsZero() {
		return nil, ""
	}
	switch {
	case !c.secure:
		return nil, wire.WithheldCleartext
	case c.helloKey == "":
		return nil, wire.WithheldNoKey
	case c.pinnedKey != c.helloKey:
		return nil, wire.WithheldKeyMismatch
	}
	box, err := wire.SealCredentials(c.pinnedKey, c.agent.ID, creds)
	if err != nil {
		c.g.log.Error("seal proxy credentials", "agent", c.agent.ID, "err", err)
		return nil, wire.WithheldNoKey
	}
	return box, ""
}
