package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/egress"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/modules/notify"
)

func unitFailedCommands() []Command {
	return []Command{
		define(Command{Name: "unit-failed",
			Summary: "tell the journal and a signed webhook (FLEET_NOTIFY_WEBHOOK) that a systemd unit failed for good (--unit NAME); run by fleetwright-failure@.service",
			Detail: "The webhook's body is signed like the panel's webhook channels (X-Fleetwright-Signature) with\n" +
				"FLEET_NOTIFY_WEBHOOK_SECRET (a variable only, never a flag) and sent through the egress guard."},
			func(s *config.Set, o *unitFailedOptions) {
				s.String(&o.unit, "unit", "", "", "the unit that failed (systemd's %i)")
				s.String(&o.hook, "webhook", "FLEET_NOTIFY_WEBHOOK", "", "URL to post the signed notice to (empty: the journal only); its secret only in FLEET_NOTIFY_WEBHOOK_SECRET")
				s.List(&o.allow, "allow", "FLEET_NOTIFY_ALLOW", "admit this CIDR range or address for the webhook although it is special-purpose")
				s.List(&o.ports, "port", "FLEET_NOTIFY_PORTS", "ports the webhook may use (default 80 and 443)")
			}, unitFailed),
	}
}

type unitFailedOptions struct {
	unit, hook   string
	allow, ports []string
}

// unitFailed is run by the fleetwright-failure@.service unit that
// OnFailure= starts: it tells the journal, and the webhook of
// /etc/fleetwright/notify.env if one is set, that a unit failed for good.
func unitFailed(ctx context.Context, c *Call, o *unitFailedOptions) error {
	if o.unit == "" {
		return usagef("--unit is required (the failed unit's name)")
	}
	host, _ := os.Hostname()
	now := time.Now()
	// The journal line is the notice even when no webhook is set, and it
	// is written before anything about the webhook can go wrong.
	fmt.Fprintf(c.Stderr, "fleetwright: unit %s on %s failed for good at %s; it is not restarted until a person acts (journalctl -u %s)\n",
		o.unit, host, now.UTC().Format(time.RFC3339), o.unit)
	if o.hook == "" {
		return nil
	}
	secret := os.Getenv("FLEET_NOTIFY_WEBHOOK_SECRET")
	if secret == "" {
		return errors.New("FLEET_NOTIFY_WEBHOOK is set but FLEET_NOTIFY_WEBHOOK_SECRET is not: the notice cannot be signed")
	}
	logging.RegisterSecret(secret)
	policy, err := guardPolicy(o.allow, o.ports)
	if err != nil {
		return err
	}
	g, err := egress.New(egress.Config{Policy: policy})
	if err != nil {
		return err
	}
	body, _ := json.Marshal(map[string]any{"event": "unit_failed", "unit": o.unit, "host": host, "at": now.UTC().Format(time.RFC3339Nano),
		"summary": fmt.Sprintf("%s on %s failed for good: its restart limit is spent or its failure is not restarted", o.unit, host)})
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.hook, bytes.NewReader(body))
	if err != nil {
		return usagef("malformed --webhook URL")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Fleetwright-Signature", notify.Sign(secret, now, body))
	res, err := g.Client(egress.ClientOptions{Timeout: 30 * time.Second, MaxRedirects: -1}).Do(req)
	if err != nil {
		return fmt.Errorf("webhook %s: %w", egress.RedactEndpoint(o.hook), egress.RedactError(err, o.hook))
	}
	res.Body.Close()
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("webhook answered %s", res.Status)
	}
	fmt.Fprintln(c.Stderr, "fleetwright unit-failed: webhook notified")
	return nil
}
