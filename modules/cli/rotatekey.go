package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/rekey"
)

func keyCommands() []Command {
	keyFile := func(s *config.Set, f *string) {
		s.String(f, "secret-key-file", "FLEET_SECRET_KEY_FILE", "", "the panel's secret key file (default DATA_DIR/secret.key); the new key is written beside it as FILE.next until the rotation is done")
	}
	return []Command{
		define(Command{Name: "admin rotate-key", Roles: panelRole, DB: true,
			Summary: "re-seal every sealed value (credentials, proxy passwords, TOTP seeds, …) under a new secret key and retire the old one; resumable; audited",
			Detail: "Writes the new key to FILE.next, waits until every live panel replica holds it (they read it without a restart), " +
				"re-seals in small transactions, then replaces FILE with the new key. Stopped or killed at any point, every value still opens; " +
				"run it again to resume. See docs/OPERATIONS.md, \"Rotating the secret key\"."},
			func(s *config.Set, o *rotateOptions) {
				keyFile(s, &o.keyFile)
				s.Int(&o.batch, "batch", "", 100, "values re-sealed per transaction")
				s.Duration(&o.pace, "pace", "", 0, "pause between transactions, to go easy on a busy database")
				s.Duration(&o.wait, "wait", "", time.Minute, "how long live panel replicas get to pick up the new key")
			}, rotateKey),
		define(Command{Name: "admin key-status", Roles: panelRole, DB: true,
			Summary: "count the sealed values of each column by the secret key that sealed them, and show the key files' keys"},
			func(s *config.Set, o *rotateOptions) { keyFile(s, &o.keyFile) }, keyStatus),
	}
}

type rotateOptions struct {
	keyFile    string
	batch      int
	pace, wait time.Duration
}

func (o *rotateOptions) file(c *Call) (string, error) {
	if os.Getenv("FLEET_SECRET_KEY") != "" {
		return "", usagef("FLEET_SECRET_KEY is set: a key given in the environment cannot be rotated in place. Write it to a file (mode 0600), start the panels with --secret-key-file pointing at it, unset FLEET_SECRET_KEY, then run rotate-key with the same --secret-key-file")
	}
	if o.keyFile != "" {
		return o.keyFile, nil
	}
	return filepath.Join(c.Meta.DataDir, "secret.key"), nil
}

func rotateKey(ctx context.Context, c *Call, o *rotateOptions) error {
	file, err := o.file(c)
	if err != nil {
		return err
	}
	if o.batch <= 0 {
		return usagef("--batch must be at least 1")
	}
	// Refused before the database is touched: without the current key
	// nothing could be re-sealed.
	if _, _, err := vault.ReadRing(file); err != nil {
		return fmt.Errorf("%w: rotate-key re-seals every value with the key it was sealed with, so it needs the panel's current key in %s: restore it from your backup there (mode 0600), or pass the file the panels run with (--secret-key-file); nothing was changed", err, file)
	}
	return c.Meta.AppAndOwner(ctx, func(app, owner *pgxpool.Pool) error {
		_, err := rekey.Rotate(ctx, app, owner, rekey.Columns(), rekey.Options{KeyFile: file, Batch: o.batch, Pace: o.pace, Wait: o.wait, Out: c.Stdout, By: actor()})
		return err
	})
}

func keyStatus(ctx context.Context, c *Call, o *rotateOptions) error {
	file, err := o.file(c)
	if err != nil {
		return err
	}
	cur, next, err := vault.ReadRing(file)
	switch {
	case errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(c.Stdout, "%s: missing\n", file)
	case err != nil:
		return err
	default:
		fmt.Fprintf(c.Stdout, "%s: key %s\n", file, vault.KeyID(cur))
		if next != nil {
			fmt.Fprintf(c.Stdout, "%s: key %s (a rotation is under way: run rotate-key to finish it)\n", vault.NextFile(file), vault.KeyID(next))
		}
	}
	return c.Meta.AppAndOwner(ctx, func(_, owner *pgxpool.Pool) error {
		st, err := rekey.Census(ctx, owner, rekey.Columns())
		if err != nil {
			return err
		}
		names := make([]string, 0, len(st))
		for n := range st {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			var parts []string
			for id, k := range st[n] {
				parts = append(parts, fmt.Sprintf("%s: %d", id, k))
			}
			sort.Strings(parts)
			if len(parts) == 0 {
				parts = []string{"none"}
			}
			fmt.Fprintf(c.Stdout, "  %-28s %s\n", n, strings.Join(parts, ", "))
		}
		return nil
	})
}
