package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/egress"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/modules/notify"
)

// runUnitFailed is `fleetwright unit-failed --unit NAME`, run by the
// fleetwright-failure@.service unit that OnFailure= starts: it tells the
// journal, and the webhook of /etc/fleetwright/notify.env if one is set,
// that a unit failed for good. The body is signed like the panel's webhook
// channels (X-Fleetwright-Signature), and the webhook is dialled through
// the egress guard.
func runUnitFailed(args []string, stdout, stderr io.Writer) int {
	var unit, hook string
	var allow, ports []string
	s := config.New("fleetwright unit-failed")
	s.String(&unit, "unit", "", "", "the unit that failed (systemd's %i)")
	s.String(&hook, "webhook", "FLEET_NOTIFY_WEBHOOK", "", "URL to post the signed notice to (empty: the journal only); its secret only in FLEET_NOTIFY_WEBHOOK_SECRET")
	s.List(&allow, "allow", "FLEET_NOTIFY_ALLOW", "admit this CIDR range or address for the webhook although it is special-purpose")
	s.List(&ports, "port", "FLEET_NOTIFY_PORTS", "ports the webhook may use (default 80 and 443)")
	rest, err := s.Parse(args, os.Getenv)
	if errors.Is(err, config.ErrHelp) {
		fmt.Fprintln(stdout, "Usage: fleetwright unit-failed --unit NAME [--webhook URL]")
		s.PrintDefaults(stdout)
		return 0
	}
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("unexpected argument %q", rest[0])
	}
	if err == nil && unit == "" {
		err = errors.New("--unit is required (the failed unit's name)")
	}
	if err != nil {
		fmt.Fprintf(stderr, "fleetwright unit-failed: %v (see fleetwright unit-failed --help)\n", err)
		return 2
	}
	host, _ := os.Hostname()
	now := time.Now()
	// The journal line is the notice even when no webhook is set.
	fmt.Fprintf(stderr, "fleetwright: unit %s on %s failed for good at %s; it is not restarted until a person acts (journalctl -u %s)\n",
		unit, host, now.UTC().Format(time.RFC3339), unit)
	if hook == "" {
		return 0
	}
	secret := os.Getenv("FLEET_NOTIFY_WEBHOOK_SECRET")
	if secret == "" {
		fmt.Fprintln(stderr, "fleetwright unit-failed: FLEET_NOTIFY_WEBHOOK is set but FLEET_NOTIFY_WEBHOOK_SECRET is not: the notice cannot be signed")
		return 1
	}
	logging.RegisterSecret(secret)
	prefixes, err := egress.ParseAllow(allow)
	if err != nil {
		fmt.Fprintf(stderr, "fleetwright unit-failed: --allow: %v\n", err)
		return 2
	}
	var portNums []int
	for _, p := range ports {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			fmt.Fprintf(stderr, "fleetwright unit-failed: --port: %q is not a port\n", p)
			return 2
		}
		portNums = append(portNums, n)
	}
	g, err := egress.New(egress.Config{Policy: egress.Policy{Allow: prefixes, Ports: portNums}})
	if err != nil {
		fmt.Fprintf(stderr, "fleetwright unit-failed: %v\n", err)
		return 1
	}
	body, _ := json.Marshal(map[string]any{"event": "unit_failed", "unit": unit, "host": host, "at": now.UTC().Format(time.RFC3339Nano),
		"summary": fmt.Sprintf("%s on %s failed for good: its restart limit is spent or its failure is not restarted", unit, host)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hook, bytes.NewReader(body))
	if err != nil {
		fmt.Fprintln(stderr, "fleetwright unit-failed: malformed --webhook URL")
		return 2
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Fleetwright-Signature", notify.Sign(secret, now, body))
	res, err := g.Client(egress.ClientOptions{Timeout: 30 * time.Second, MaxRedirects: -1}).Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "fleetwright unit-failed: webhook: %v\n", err)
		return 1
	}
	res.Body.Close()
	if res.StatusCode/100 != 2 {
		fmt.Fprintf(stderr, "fleetwright unit-failed: webhook answered %s\n", res.Status)
		return 1
	}
	fmt.Fprintln(stderr, "fleetwright unit-failed: webhook notified")
	return 0
}
