package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/egress"
	"github.com/fleetwright/fleetwright/app/logging"
)

// ExitRefused is fetch's status when the egress guard refused the fetch,
// told apart from a fetch that failed (1).
const ExitRefused = 3

func fetchCommands() []Command {
	return []Command{
		define(Command{Name: "fetch", Args: "URL", MinArgs: 1, MaxArgs: 1,
			Summary: "fetch one URL through the egress (SSRF) guard and print the status, final URL and size, or the refusal and its reason (exit 3)",
			Detail:  fmt.Sprintf("The guard is the one every crawl and assistant fetch uses (docs/EGRESS.md): it checks the\naddress dialled, each redirect and the port. A refusal exits %d; other failures exit %d.", ExitRefused, ExitFailed)},
			func(s *config.Set, o *fetchOptions) {
				s.List(&o.allow, "allow", "FLEET_EGRESS_ALLOW", "admit this CIDR range or address although it is special-purpose (repeatable, or comma-separated)")
				s.List(&o.ports, "port", "FLEET_EGRESS_PORTS", "allowed destination port (repeatable; default 80 and 443)")
				s.String(&o.proxy, "proxy", "FLEET_EGRESS_PROXY", "", "upstream proxy (http://, https:// or socks5://, credentials in the URL); the guard still checks the target")
				s.Duration(&o.timeout, "timeout", "", 30*time.Second, "bound on the whole fetch, redirects included")
				s.Enum(&o.logLevel, "log-level", "FLEET_LOG_LEVEL", "error", []string{"debug", "info", "warn", "error"}, "lowest level logged")
			}, fetch),
	}
}

type fetchOptions struct {
	allow, ports    []string
	proxy, logLevel string
	timeout         time.Duration
}

// fetch is one fetch through the same egress guard the crawler and the
// assistant use, so a person can ask "would the crawler be allowed here?"
// without writing a job.
func fetch(ctx context.Context, c *Call, o *fetchOptions) error {
	target, err := url.Parse(c.Args[0])
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		return usagef("%q is not an http:// or https:// URL", c.Args[0])
	}
	policy, err := guardPolicy(o.allow, o.ports)
	if err != nil {
		return err
	}
	var upstream *url.URL
	if o.proxy != "" {
		if upstream, err = url.Parse(o.proxy); err != nil {
			return usagef("--proxy is not a URL")
		}
	}
	log := logging.New(c.Stderr, logging.Options{Level: Level(o.logLevel)})
	g, err := egress.New(egress.Config{Policy: policy, Upstream: upstream, Logger: log})
	if err != nil {
		return usage(err)
	}
	if upstream != nil {
		log.Info("fetch: upstream proxy", "proxy", egress.Redact(upstream))
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	cl := g.Client(egress.ClientOptions{Timeout: o.timeout})
	defer cl.CloseIdleConnections()
	check := cl.CheckRedirect
	cl.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		fmt.Fprintf(c.Stdout, "redirect: %d → %s\n", req.Response.StatusCode, req.URL.Redacted())
		return check(req, via)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		return usage(err)
	}
	resp, err := cl.Do(req)
	if err != nil {
		if r, ok := egress.AsRefusal(err); ok {
			fmt.Fprintf(c.Stdout, "refused: %s\n", r.Reason)
			fmt.Fprintf(c.Stdout, "target: %s\n", r.Target)
			if r.Addr.IsValid() {
				fmt.Fprintf(c.Stdout, "address: %s\n", r.Addr)
			}
			return exit(ExitRefused)
		}
		return err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	fmt.Fprintf(c.Stdout, "status: %s\n", resp.Status)
	fmt.Fprintf(c.Stdout, "final URL: %s\n", resp.Request.URL.Redacted())
	fmt.Fprintf(c.Stdout, "size: %d bytes\n", n)
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		fmt.Fprintf(c.Stdout, "content-type: %s\n", ct)
	}
	if err != nil {
		return fmt.Errorf("body cut short: %w", err)
	}
	return nil
}

// guardPolicy reads --allow and --port into an egress policy; a bad value
// is wrong input.
func guardPolicy(allow, ports []string) (egress.Policy, error) {
	prefixes, err := egress.ParseAllow(allow)
	if err != nil {
		return egress.Policy{}, usagef("--allow: %v", err)
	}
	var nums []int
	for _, p := range ports {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return egress.Policy{}, usagef("--port %q is not a port number from 1 to 65535", p)
		}
		nums = append(nums, n)
	}
	return egress.Policy{Allow: prefixes, Ports: nums}, nil
}
