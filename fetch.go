package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/egress"
	"github.com/fleetwright/fleetwright/app/logging"
)

// Exit statuses of fetch: a refusal is told apart from a failed fetch.
const (
	fetchFailed  = 1
	fetchUsage   = 2
	fetchRefused = 3
)

// runFetch is `fleetwright fetch URL [--allow CIDR]…`: one fetch through the
// same egress guard the crawler and the assistant use, so a person can ask
// "would the crawler be allowed here?" without writing a job.
func runFetch(args []string, stdout, stderr io.Writer) int {
	var allow, ports []string
	var proxyURL, logLevel string
	var timeout time.Duration
	s := config.New("fleetwright fetch")
	s.List(&allow, "allow", "FLEET_EGRESS_ALLOW", "admit this CIDR range or address although it is special-purpose (repeatable, or comma-separated)")
	s.List(&ports, "port", "FLEET_EGRESS_PORTS", "allowed destination port (repeatable; default 80 and 443)")
	s.String(&proxyURL, "proxy", "FLEET_EGRESS_PROXY", "", "upstream proxy (http://, https:// or socks5://, credentials in the URL); the guard still checks the target")
	s.Duration(&timeout, "timeout", "", 30*time.Second, "bound on the whole fetch, redirects included")
	s.Enum(&logLevel, "log-level", "FLEET_LOG_LEVEL", "error", []string{"debug", "info", "warn", "error"}, "lowest level logged")
	// The URL may come before or after the flags.
	var pos []string
	for {
		rest, err := s.Parse(args, nil)
		if errors.Is(err, config.ErrHelp) {
			fmt.Fprintln(stdout, "Usage: fleetwright fetch URL [--allow CIDR]… [--port N]… [--proxy URL] [--timeout D]")
			fmt.Fprintln(stdout, "Fetches one URL through the egress guard and prints the status, final URL and size,")
			fmt.Fprintf(stdout, "or the refusal and its reason (exit %d; other failures exit %d).\n\nFlags:\n", fetchRefused, fetchFailed)
			s.PrintDefaults(stdout)
			return 0
		}
		if err != nil {
			fmt.Fprintf(stderr, "fleetwright fetch: %v (see fleetwright fetch --help)\n", err)
			return fetchUsage
		}
		if len(rest) == 0 {
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "fleetwright fetch: give exactly one URL (see fleetwright fetch --help)")
		return fetchUsage
	}
	target, err := url.Parse(pos[0])
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		fmt.Fprintf(stderr, "fleetwright fetch: %q is not an http:// or https:// URL\n", pos[0])
		return fetchUsage
	}
	prefixes, err := egress.ParseAllow(allow)
	if err != nil {
		fmt.Fprintf(stderr, "fleetwright fetch: --allow: %v\n", err)
		return fetchUsage
	}
	var portNums []int
	for _, p := range ports {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			fmt.Fprintf(stderr, "fleetwright fetch: --port %q is not a port number from 1 to 65535\n", p)
			return fetchUsage
		}
		portNums = append(portNums, n)
	}
	var upstream *url.URL
	if proxyURL != "" {
		if upstream, err = url.Parse(proxyURL); err != nil {
			fmt.Fprintf(stderr, "fleetwright fetch: --proxy is not a URL\n")
			return fetchUsage
		}
	}
	log := logging.New(stderr, logging.Options{Level: level(logLevel)})
	g, err := egress.New(egress.Config{Policy: egress.Policy{Ports: portNums, Allow: prefixes}, Upstream: upstream, Logger: log})
	if err != nil {
		fmt.Fprintf(stderr, "fleetwright fetch: %v\n", err)
		return fetchUsage
	}
	if upstream != nil {
		log.Info("fetch: upstream proxy", "proxy", egress.Redact(upstream))
	}
	return fetchOne(g, target, timeout, stdout, stderr, log)
}

func fetchOne(g *egress.Guard, target *url.URL, timeout time.Duration, stdout, stderr io.Writer, log *slog.Logger) int {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c := g.Client(egress.ClientOptions{Timeout: timeout})
	defer c.CloseIdleConnections()
	check := c.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		fmt.Fprintf(stdout, "redirect: %d → %s\n", req.Response.StatusCode, req.URL.Redacted())
		return check(req, via)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		fmt.Fprintf(stderr, "fleetwright fetch: %v\n", err)
		return fetchUsage
	}
	resp, err := c.Do(req)
	if err != nil {
		if r, ok := egress.AsRefusal(err); ok {
			fmt.Fprintf(stdout, "refused: %s\n", r.Reason)
			fmt.Fprintf(stdout, "target: %s\n", r.Target)
			if r.Addr.IsValid() {
				fmt.Fprintf(stdout, "address: %s\n", r.Addr)
			}
			return fetchRefused
		}
		fmt.Fprintf(stderr, "fleetwright fetch: %s\n", logging.Scrub(err.Error()))
		return fetchFailed
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	fmt.Fprintf(stdout, "status: %s\n", resp.Status)
	fmt.Fprintf(stdout, "final URL: %s\n", resp.Request.URL.Redacted())
	fmt.Fprintf(stdout, "size: %d bytes\n", n)
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		fmt.Fprintf(stdout, "content-type: %s\n", ct)
	}
	if err != nil {
		fmt.Fprintf(stderr, "fleetwright fetch: body cut short: %v\n", err)
		return fetchFailed
	}
	return 0
}
