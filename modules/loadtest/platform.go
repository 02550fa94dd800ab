package loadtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/platform/engine"
	"github.com/fleetwright/fleetwright/modules/platform/spec"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// sandboxSpecs are the specs of the sandbox board's dialects the load test
// can run (examples/platforms): a spec is run on the dialect its name says.
var sandboxSpecs = map[string]string{
	"sandbox":    board.DialectClassic,
	"haulbridge": board.DialectHTML,
}

// readPlatform parses the --platform file and names the board dialect it
// describes.
func readPlatform(path string) (*spec.Spec, string, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("loadtest: --platform: %w", err)
	}
	s, err := spec.Parse(path, src)
	if err != nil {
		return nil, "", fmt.Errorf("loadtest: --platform: %w", err)
	}
	d, ok := sandboxSpecs[s.Name]
	if !ok {
		return nil, "", fmt.Errorf("loadtest: --platform %s describes platform %q: the load test's board speaks the sandbox's dialects only (name: sandbox for the classic dialect, haulbridge for the html one; examples/platforms)", path, s.Name)
	}
	return s, d, nil
}

// errAgentsBuiltIn: the agents of this build book through their built-in
// sandbox adapter (and watch the classic pages in Chromium), so only the
// classic dialect's spec runs the fleet.
var errAgentsBuiltIn = errors.New("the fleet's agents book through their built-in sandbox adapter and watch the classic dialect's pages; a run on another dialect needs agents that build their adapter from the account's platform spec")

// preflight signs a probe account in on the run's board through the spec,
// reads the feed and walks the bookings look-up to a complete end: a spec
// that does not describe the board fails here, before any fleet starts.
func (r *runner) preflight(ctx context.Context, s *spec.Spec) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	pw := "pw-" + randomHex(12)
	acct, err := r.board().CreateAccount(ctx, board.AccountSpec{Username: "preflight", Password: pw, Client: "preflight"})
	if err != nil {
		return fmt.Errorf("loadtest: preflight: %w", err)
	}
	r.addSecret(pw, "board_password", "preflight")
	r.addSecret(acct.TOTPSecret, "totp_secret", "preflight")
	ad, err := engine.New(s, r.board().URL())
	if err != nil {
		return fmt.Errorf("loadtest: preflight: %w", err)
	}
	sess, err := ad.NewSession(platform.SessionOptions{})
	if err != nil {
		return fmt.Errorf("loadtest: preflight: %w", err)
	}
	creds := wire.Credentials{Username: "preflight", Password: wire.NewSecret(pw), TOTPSecret: wire.NewSecret(acct.TOTPSecret),
		Origins: []string{r.board().URL()}}
	if err := sess.Login(ctx, creds, &platform.TOTP{Secret: creds.TOTPSecret}); err != nil {
		return fmt.Errorf("loadtest: preflight: the spec %s does not sign in on the %s board: %w", s.Name, r.bcfg.Dialect, err)
	}
	if _, err := sess.Jobs(ctx); err != nil {
		return fmt.Errorf("loadtest: preflight: the spec %s does not read the %s board's feed: %w", s.Name, r.bcfg.Dialect, err)
	}
	b, err := sess.Bookings(ctx, "")
	if err != nil {
		return fmt.Errorf("loadtest: preflight: the spec %s does not read the %s board's bookings: %w", s.Name, r.bcfg.Dialect, err)
	}
	if !b.Complete || b.Client != "preflight" {
		return fmt.Errorf("loadtest: preflight: the spec %s's bookings look-up on the %s board proves nothing (complete %v, client %q)", s.Name, r.bcfg.Dialect, b.Complete, b.Client)
	}
	if err := platform.CheckKeys(ctx, ad, r.bcfg.IdempotencyKeys); err != nil {
		return fmt.Errorf("loadtest: preflight: %w", err)
	}
	return nil
}
