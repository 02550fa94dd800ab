package registry_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/factory"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/platform/registry"
	"github.com/fleetwright/fleetwright/modules/platform/spec"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func sandboxSource(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../../examples/platforms/sandbox.yaml")
	require.NoError(t, err)
	return string(b)
}

// realSource is the sandbox spec under another name: not a shipped text,
// so it stands for a real target.
func realSource(t *testing.T) string {
	return strings.Replace(sandboxSource(t), "name: sandbox", "name: acme-board", 1)
}

func actions(t *testing.T, d *testenv.Database, tenant string) []string {
	t.Helper()
	var out []string
	err := db.InTenant(context.Background(), d.App, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(context.Background(), `SELECT action FROM audit_log WHERE action LIKE 'platform.%' ORDER BY id`)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	require.NoError(t, err)
	return out
}

// TestVersionsAccountsAndReviews: versions kept with digest and author,
// unchanged text is no version, a bad spec is refused with its line, an
// account starts on the shipped sandbox and moves only when told (audited,
// its welcome then carries the spec), and a review is recorded and
// withdrawn (audited) — all per tenant.
func TestVersionsAccountsAndReviews(t *testing.T) {
	ctx := context.Background()
	d := testenv.DB(t)
	t1, t2 := factory.Tenant(t, d, "one", "One"), factory.Tenant(t, d, "two", "Two")
	fs := factory.Store(t, d)
	acct := factory.Account(t, fs, t1, fleet.AccountInput{Key: "acct-1", Workers: factory.Workers("watcher")})
	agentID, _ := factory.Agent(t, fs, t1, acct, "agent-1")
	st := registry.New(d.App)
	by := audit.Entry{Actor: "admin@fleet.test"}

	_, _, err := st.Apply(ctx, t1, by, "bad.yaml", []byte(strings.Replace(realSource(t), "version: 1", "version: 9", 1)))
	var errs *spec.Errors
	require.ErrorAs(t, err, &errs)
	require.Equal(t, 4, errs.List[0].Line, "the version's line")

	src := realSource(t)
	v1, changed, err := st.Apply(ctx, t1, by, "acme.yaml", []byte(src))
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, 1, v1.Version)
	require.Equal(t, registry.Digest(src), v1.Digest)
	require.False(t, v1.Shipped, "a spec that is not a shipped text is a real target")
	_, changed, err = st.Apply(ctx, t1, by, "acme.yaml", []byte(src))
	require.NoError(t, err)
	require.False(t, changed, "the same text is no new version")
	src2 := strings.Replace(src, "poll_interval: 1s", "poll_interval: 2s", 1)
	v2, changed, err := st.Apply(ctx, t1, by, "acme.yaml", []byte(src2))
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, 2, v2.Version)
	vs, err := st.Versions(ctx, t1, v1.PlatformID)
	require.NoError(t, err)
	require.Len(t, vs, 2)
	require.Equal(t, "admin@fleet.test", vs[1].CreatedBy)
	var minus, plus []string
	for _, l := range registry.Diff(vs[1].Source, vs[0].Source) {
		switch l.Op {
		case '-':
			minus = append(minus, l.Text)
		case '+':
			plus = append(plus, l.Text)
		}
	}
	require.Equal(t, []string{"  poll_interval: 1s"}, minus)
	require.Equal(t, []string{"  poll_interval: 2s"}, plus)

	// The shipped sandbox's own text needs no review.
	sb, _, err := st.Apply(ctx, t1, by, "sandbox.yaml", []byte(sandboxSource(t)))
	require.NoError(t, err)
	require.True(t, sb.Shipped)

	// An account starts on the built-in sandbox; a new version moves none.
	as, err := st.Accounts(ctx, t1)
	require.NoError(t, err)
	require.Len(t, as, 1)
	require.True(t, as[0].OnSandbox())
	require.Empty(t, as[0].Held)
	cfg, _, err := fs.Welcome(ctx, fleet.Agent{ID: agentID, Tenant: t1, AccountID: acct})
	require.NoError(t, err)
	require.Nil(t, cfg.Account.Platform, "the built-in sandbox travels as no spec")

	// A live agent hears of the move at once (a configure command).
	require.NoError(t, db.InTenant(ctx, d.App, t1, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE agents SET last_seen = now() WHERE id = $1`, agentID)
		return err
	}))
	require.NoError(t, st.SetAccount(ctx, t1, by, acct, v1.PlatformID, 1))
	cmds, err := fs.Pending(ctx, t1, agentID)
	require.NoError(t, err)
	require.Len(t, cmds, 1)
	require.Equal(t, fleet.CmdConfigure, cmds[0].Kind)
	a, err := st.AccountByID(ctx, t1, acct)
	require.NoError(t, err)
	require.Equal(t, "acme-board", a.Platform)
	require.Equal(t, 1, a.Version)
	require.Equal(t, 2, a.Latest)
	require.Equal(t, registry.HeldNoReview("acme-board"), a.Held)
	cfg, _, err = fs.Welcome(ctx, fleet.Agent{ID: agentID, Tenant: t1, AccountID: acct})
	require.NoError(t, err)
	require.Equal(t, v1.Wire(), cfg.Account.Platform)
	require.ErrorIs(t, st.SetAccount(ctx, t1, by, acct, v1.PlatformID, 7), registry.ErrNoVersion)

	// The review: the reference is required; recording lifts the hold.
	_, err = st.RecordReview(ctx, t1, by, v1.PlatformID, registry.ReviewInput{Reference: "  "})
	var inv registry.Invalid
	require.ErrorAs(t, err, &inv)
	r, err := st.RecordReview(ctx, t1, by, v1.PlatformID, registry.ReviewInput{Reference: "Legal memo LM-2026-114", Note: "terms permit automation"})
	require.NoError(t, err)
	require.Equal(t, "admin@fleet.test", r.ReviewedBy)
	a, _ = st.AccountByID(ctx, t1, acct)
	require.Empty(t, a.Held)
	p, err := st.ByID(ctx, t1, v1.PlatformID)
	require.NoError(t, err)
	require.Equal(t, "Legal memo LM-2026-114", p.Review.Reference)
	require.NoError(t, st.WithdrawReview(ctx, t1, by, v1.PlatformID))
	require.ErrorIs(t, st.WithdrawReview(ctx, t1, by, v1.PlatformID), registry.ErrNoReview)
	a, _ = st.AccountByID(ctx, t1, acct)
	require.NotEmpty(t, a.Held)
	rs, err := st.Reviews(ctx, t1, v1.PlatformID)
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.NotNil(t, rs[0].WithdrawnAt, "a withdrawn review stays on record")

	// Back to the built-in sandbox.
	require.NoError(t, st.SetAccount(ctx, t1, by, acct, "", 0))
	a, _ = st.AccountByID(ctx, t1, acct)
	require.True(t, a.OnSandbox())

	require.Equal(t, []string{registry.ActionApply, registry.ActionApply, registry.ActionApply, registry.ActionAccount,
		registry.ActionReviewRecord, registry.ActionReviewWithdraw, registry.ActionAccount}, actions(t, d, t1))

	// Another tenant sees nothing of it and can change nothing of it.
	ps, err := st.Platforms(ctx, t2)
	require.NoError(t, err)
	require.Empty(t, ps)
	_, err = st.Versions(ctx, t2, v1.PlatformID)
	require.NoError(t, err)
	_, err = st.Version(ctx, t2, v1.PlatformID, 1)
	require.ErrorIs(t, err, registry.ErrNoPlatform)
	require.ErrorIs(t, st.SetAccount(ctx, t2, by, acct, v1.PlatformID, 1), registry.ErrNoAccount)
	_, err = st.RecordReview(ctx, t2, by, v1.PlatformID, registry.ReviewInput{Reference: "not theirs"})
	require.ErrorIs(t, err, registry.ErrNoPlatform)
	other, err := st.Accounts(ctx, t2)
	require.NoError(t, err)
	require.Empty(t, other)
	acct2 := factory.Account(t, fs, t2, fleet.AccountInput{Key: "acct-2"})
	require.ErrorIs(t, st.SetAccount(ctx, t2, by, acct2, v1.PlatformID, 1), registry.ErrNoVersion, "another tenant's platform is not there")
	require.Empty(t, actions(t, d, t2))
}
