package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/wire"
)

func sandboxSource(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "platforms", "sandbox.yaml"))
	require.NoError(t, err)
	return string(b)
}

func workerStates(p *claimPanel) map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]string{}
	for _, w := range p.state.Workers {
		out[w.Name] = w.State
	}
	return out
}

// The panel sends the account's own platform spec (config.account.platform)
// over the real protocol: the agent verifies its digest, parses and
// compiles it once for every worker, and books through it. A spec whose
// digest does not match its source, or that does not parse, is refused:
// each worker reports why (platform_refused, the reason naming the field
// and line) and stops as needs-person, and nothing is claimed — no
// sighting, no lease — until the panel sends a spec that builds.
func TestAccountPlatformSpec(t *testing.T) {
	ctx := context.Background()
	s, creds := boardAccount(t)
	own := strings.Replace(sandboxSource(t), "name: sandbox\n", "name: acme-board\n", 1)
	good := &wire.PlatformSpec{Name: "acme-board", Version: 3, Digest: Digest([]byte(own)), Source: own}
	actors := []wire.WorkerSpec{{Name: "h1", Kind: KindHTTPActor}, {Name: "h2", Kind: KindHTTPActor}}
	p := newClaimPanel(t, s.URL(), creds, actors...)
	p.welcome.Config.Account.Platform = good
	plats := NewPlatforms()
	runAgentWith(t, p, "", func(c *Config) { c.Platforms = plats; c.StateEvery = 200 * time.Millisecond })
	p.waitConnected(t)
	p.event(t, "session_refreshed", 30*time.Second)

	loads, err := s.Publish(ctx, 4, nil)
	require.NoError(t, err)
	p.offer(t, loads[0])
	o := p.outcome(t, 20*time.Second)
	require.Equal(t, wire.ResultConfirmed, o.Result, o.Detail)
	require.Equal(t, 1, plats.Compiled(good.Digest), "two workers, one compile of the account's spec")
	require.Equal(t, 0, plats.Compiled(Digest([]byte(sandboxSource(t)))), "the built-in sandbox spec is not used")

	configure := func(ps *wire.PlatformSpec, workers ...wire.WorkerSpec) {
		t.Helper()
		acct := p.welcome.Config.Account
		acct.Platform = ps
		id := uuid()
		p.command(t, wire.Configure{CommandID: id, Config: wire.Config{Account: acct, Workers: workers}}, id)
	}
	refused := func(n int, want ...string) {
		t.Helper()
		for i := 0; i < n; i++ {
			e := p.event(t, "platform_refused", 20*time.Second)
			for _, w := range want {
				require.Contains(t, e.Fields["reason"], w)
				require.Contains(t, e.Message, w)
			}
			require.Equal(t, "acme-board", e.Fields["platform"])
		}
		require.Eventually(t, func() bool {
			st := workerStates(p)
			for _, w := range []string{"h1", "h2", "w1"} {
				if st[w] != wire.WorkerNeedsPerson {
					return false
				}
			}
			return true
		}, 20*time.Second, 20*time.Millisecond, "every worker stops as needs-person")
	}
	nothingClaimed := func() {
		t.Helper()
		leases := p.leases.Load()
		p.offer(t, loads[1])
		select {
		case o := <-p.outcomes:
			t.Fatalf("a worker acted on a refused platform: %+v", o)
		case sg := <-p.detected:
			t.Fatalf("a worker reported a sighting on a refused platform: %+v", sg)
		case <-time.After(2 * time.Second):
		}
		require.Equal(t, leases, p.leases.Load(), "no lease was asked for")
	}
	// A watcher too: it is refused before it opens a browser.
	all := append(append([]wire.WorkerSpec{}, actors...), wire.WorkerSpec{Name: "w1", Kind: KindWatcher})

	// A digest that is not the source's.
	bad := *good
	bad.Version, bad.Digest = 4, strings.Repeat("0", 64)
	configure(&bad, all...)
	refused(3, "digest", "not the SHA-256 of its source")
	nothingClaimed()

	// A spec that does not parse: the reason names the field and line.
	broken := strings.Replace(own, "  items: loads\n", "  items: loads..x\n", 1)
	configure(&wire.PlatformSpec{Name: "acme-board", Version: 5, Digest: Digest([]byte(broken)), Source: broken}, all...)
	refused(3, "feed.items", "can never match")
	nothingClaimed()

	// The fixed spec starts the workers again.
	fixed := &wire.PlatformSpec{Name: "acme-board", Version: 6, Digest: good.Digest, Source: own}
	configure(fixed, actors...)
	p.offer(t, loads[2])
	for {
		// An offer that waited while the workers were stopped may be taken
		// first.
		o = p.outcome(t, 30*time.Second)
		if o.Key == loads[2].ID {
			break
		}
	}
	require.Equal(t, wire.ResultConfirmed, o.Result, o.Detail)
	require.Equal(t, 1, plats.Compiled(good.Digest), "the same spec is not compiled again")
}
