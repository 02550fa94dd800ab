package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/crawl"
)

// crawlProxyCommands are a tenant's proxy pools (docs/CRAWL.md, "Proxy pools").
func crawlProxyCommands() []Command {
	proxy := func(name, args, summary string, n int) Command {
		return Command{Name: "crawl proxy " + name, Args: args, Summary: summary, Roles: panelRole, DB: true, MinArgs: n, MaxArgs: n}
	}
	return []Command{
		define(proxy("pool", "NAME", "create a proxy pool or change its rules; --allow sets the internal ranges its proxies may sit in (admin; audited; none clears)", 1),
			func(s *config.Set, o *poolOptions) {
				tenantFlags(s, &o.tenantOption)
				s.String(&o.rotation, "rotation", "", "", "sticky (default), round_robin or on_failure")
				s.Int(&o.benchAfter, "bench-after", "", 0, "failures in a row that bench a proxy (default 3)")
				s.Int(&o.removeAfter, "remove-after", "", 0, "benches in a row that remove a proxy (default 5)")
				s.Duration(&o.cooldown, "cooldown", "", 0, "a bench's first cooldown, doubled for each bench in a row (default 30s)")
				s.List(&o.allow, "allow", "", "an internal CIDR range or address the pool's proxies may sit in (repeatable; none clears)")
			}, proxyPool),
		define(proxy("add", "POOL URL", "add a proxy (http://, https:// or socks5://host:port); its password is read from stdin, sealed at rest, never shown again", 2),
			func(s *config.Set, o *proxyAddOptions) {
				tenantFlags(s, &o.tenantOption)
				s.String(&o.username, "username", "", "", "the proxy's username")
				s.Bool(&o.passwordStdin, "password-stdin", "", false, "read the proxy's password from the first line of standard input")
				s.String(&o.secretKeyFile, "secret-key-file", "FLEET_SECRET_KEY_FILE", "", "the panel's secret key file that seals credentials (default DATA_DIR/secret.key; FLEET_SECRET_KEY wins)")
			}, proxyAdd),
		define(proxy("list", "", "the pools, their proxies and each proxy's health", 0), tenantFlags, proxyList),
		define(proxy("remove", "ID", "delete a proxy", 1), tenantFlags, proxyChange("removed", (*crawl.Store).RemoveProxy)),
		define(proxy("restore", "ID", "put a benched or removed proxy back into rotation, its health reset", 1), tenantFlags,
			proxyChange("restored: active, health reset", (*crawl.Store).RestoreProxy)),
	}
}

type poolOptions struct {
	tenantOption
	rotation                string
	benchAfter, removeAfter int
	cooldown                time.Duration
	allow                   []string
}

func proxyPool(ctx context.Context, c *Call, o *poolOptions) error {
	return withCrawl(ctx, c, o.tenant, func(svc *crawl.Service, tenant string) error {
		st, by := svc.Store, actor()
		p, err := st.SetPool(ctx, tenant, by, crawl.PoolInput{Name: c.Args[0], Rotation: o.rotation, BenchAfter: o.benchAfter,
			RemoveAfter: o.removeAfter, Cooldown: o.cooldown})
		if err != nil {
			return err
		}
		if len(o.allow) > 0 {
			allow := o.allow
			if len(allow) == 1 && allow[0] == "none" {
				allow = nil
			}
			if err := st.SetPoolAllow(ctx, tenant, by, p.Name, allow); err != nil {
				return err
			}
			p.Allow = allow
		}
		fmt.Fprintf(c.Stdout, "pool %q: rotation %s, bench after %d failures for %s (doubling), removed after %d benches, internal ranges allowed %v\n",
			p.Name, p.Rotation, p.BenchAfter, p.Cooldown, p.RemoveAfter, p.Allow)
		return nil
	})
}

type proxyAddOptions struct {
	tenantOption
	username, secretKeyFile string
	passwordStdin           bool
}

func proxyAdd(ctx context.Context, c *Call, o *proxyAddOptions) error {
	keyFile := o.secretKeyFile
	if keyFile == "" {
		keyFile = filepath.Join(c.Meta.DataDir, "secret.key")
	}
	// Without the key a proxy with no password can still be added; a
	// password is never stored unsealed.
	v, err := vault.LoadRing(os.Getenv("FLEET_SECRET_KEY"), keyFile, false)
	if err != nil && o.passwordStdin {
		return fmt.Errorf("%v: the panel's secret key seals the password at rest; run this where the panel's --data-dir or FLEET_SECRET_KEY is", err)
	}
	password := ""
	if o.passwordStdin {
		if password, err = secretLine(c, "the password"); err != nil {
			return err
		}
	}
	return withCrawl(ctx, c, o.tenant, func(svc *crawl.Service, tenant string) error {
		svc.Store.SetVault(v)
		p, err := svc.Store.AddProxy(ctx, tenant, actor(), c.Args[0], crawl.ProxyInput{URL: c.Args[1], Username: o.username, Password: password})
		if err != nil {
			return err
		}
		fmt.Fprintf(c.Stdout, "proxy %s added to pool %q as %s (password %s)\n", p.URL(), c.Args[0], p.ID,
			map[bool]string{true: "sealed", false: "none"}[p.HasPassword])
		return nil
	})
}

func proxyList(ctx context.Context, c *Call, o *tenantOption) error {
	return withCrawl(ctx, c, o.tenant, func(svc *crawl.Service, tenant string) error {
		pools, err := svc.Store.Pools(ctx, tenant)
		if err != nil {
			return err
		}
		w := c.Stdout
		for _, p := range pools {
			fmt.Fprintf(w, "pool %s  rotation %s  bench after %d for %s  remove after %d  allow %v\n",
				p.Name, p.Rotation, p.BenchAfter, p.Cooldown, p.RemoveAfter, p.Allow)
			for _, x := range p.Proxies {
				fmt.Fprintf(w, "  %s  %-36s %-8s score %.2f  failures %d  benches %d", x.ID, x.URL(), x.State, x.Score, x.Failures, x.Benches)
				if x.BenchedUntil != nil {
					fmt.Fprintf(w, "  benched until %s", x.BenchedUntil.UTC().Format(time.RFC3339))
				}
				if x.LastError != "" {
					fmt.Fprintf(w, "  last error: %s", x.LastError)
				}
				fmt.Fprintln(w)
			}
		}
		return nil
	})
}

// proxyChange is a command that changes the proxy its argument names.
func proxyChange(done string, change func(*crawl.Store, context.Context, string, audit.Entry, string) error) func(context.Context, *Call, *tenantOption) error {
	return func(ctx context.Context, c *Call, o *tenantOption) error {
		return withCrawl(ctx, c, o.tenant, func(svc *crawl.Service, tenant string) error {
			if err := change(svc.Store, ctx, tenant, actor(), c.Args[0]); err != nil {
				return err
			}
			fmt.Fprintf(c.Stdout, "proxy %s %s\n", c.Args[0], done)
			return nil
		})
	}
}
