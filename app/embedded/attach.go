package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/logging"
)

// Attach returns a handle on a cluster that another process (a running
// panel) started under dir, for one-shot commands that must work whether or
// not a panel runs. It reads the credentials and checks that the cluster
// answers; Stop on the handle does nothing: the cluster is not ours.
func Attach(ctx context.Context, dir string) (*Postgres, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	path := filepath.Join(abs, "credentials.json")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("embedded: no cluster under %s (no credentials.json)", abs)
	}
	creds, err := loadOrCreateCredentials(path)
	if err != nil {
		return nil, err
	}
	logging.RegisterSecret(creds.Super, creds.Owner, creds.App)
	p := &Postgres{cfg: PostgresConfig{Dir: abs}, creds: creds, data: filepath.Join(abs, "data"),
		socket: shortSocketDir(filepath.Join(abs, "run"), fmt.Sprintf(".s.PGSQL.%d", pgPort))}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(cctx, p.AppURL())
	if err != nil {
		return nil, fmt.Errorf("embedded: the cluster under %s does not answer: %w", abs, err)
	}
	_ = c.Close(cctx)
	return p, nil
}
