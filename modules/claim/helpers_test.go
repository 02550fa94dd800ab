package claim_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/factory"
	"github.com/fleetwright/fleetwright/modules/wire"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type bundle struct {
	db     *testenv.Database
	store  *claim.Store
	engine *claim.Engine
	river  *river.Client[pgx.Tx]
	tenant string
}

// setup returns a fresh database with one tenant that wants every job, an
// insert-only River client and an engine on them.
func setup(t *testing.T, mod ...func(*claim.Config)) *bundle { return setupTB(t, mod...) }

// setupB is setup for benchmarks.
func setupB(b *testing.B) *bundle { return setupTB(b) }

func setupTB(t testing.TB, mod ...func(*claim.Config)) *bundle {
	t.Helper()
	d := testenv.DB(t)
	rc, err := river.NewClient(riverpgxv5.New(d.App), &river.Config{})
	require.NoError(t, err)
	st := claim.NewStore(d.App, rc)
	cfg := claim.Config{Log: testenv.Logger(t)}
	for _, m := range mod {
		m(&cfg)
	}
	e, err := claim.NewEngine(st, cfg)
	require.NoError(t, err)
	b := &bundle{db: d, store: st, engine: e, river: rc}
	b.tenant = b.newTenant(t, "acme")
	return b
}

func (b *bundle) newTenant(t testing.TB, slug string) string {
	t.Helper()
	id := factory.Tenant(t, b.db, slug, slug)
	_, err := b.engine.PutFilter(context.Background(), testActor, id, claim.Filter{Name: "everything", Enabled: true})
	require.NoError(t, err)
	return id
}

// job records a queued job the way the dispatcher does.
func (b *bundle) job(t testing.TB, tenant, key string, mod ...func(*wire.Job)) {
	t.Helper()
	now := time.Now()
	j := wire.Job{Key: key, PublishedAt: now.Add(-300 * time.Millisecond), ExpiresAt: now.Add(10 * time.Minute),
		Origin: "Dallas, TX", Destination: "Atlanta, GA", Equipment: "Dry Van", WeightLbs: 40000, Miles: 780, RateCents: 235000}
	for _, m := range mod {
		m(&j)
	}
	_, err := b.store.RecordJob(context.Background(), claim.QueuedJob{Tenant: tenant, Cell: "default", Job: j,
		SeenAt: now.Add(-200 * time.Millisecond), QueuedAt: now.Add(-100 * time.Millisecond), ClockErrorMS: 3})
	require.NoError(t, err)
}

func uuid() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func holderN(agents []string, i int) claim.Holder {
	return claim.Holder{Agent: agents[i%len(agents)], Worker: fmt.Sprintf("actor-%02d", i)}
}

func reason(t *testing.T, err error) string {
	t.Helper()
	r, ok := err.(*claim.Refusal)
	require.Truef(t, ok, "want a refusal, got %v", err)
	return r.Reason
}

type wireJob = wire.Job

// newTenantBare makes a tenant with no filters (it wants nothing).
func (b *bundle) newTenantBare(t *testing.T, slug string) string {
	t.Helper()
	return factory.Tenant(t, b.db, slug, slug)
}

func actReq(key string, token int64) wire.ActRequest {
	return wire.ActRequest{RequestID: "r-" + key, Worker: "ignored", Key: key, Token: token}
}

func testenv_logger(t *testing.T) *slog.Logger {
	return logging.AtLeast(testenv.Logger(t), slog.LevelWarn)
}

// testActor is the audit actor of changes the tests make.
var testActor = audit.Entry{Actor: "test"}
