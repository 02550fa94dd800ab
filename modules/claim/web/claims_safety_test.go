package web_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
	"github.com/fleetwright/fleetwright/modules/tenant"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// givenUp runs a claim to UNKNOWN and releases it as the reconciler does
// where the platform does not honour idempotency keys; it returns the token.
func givenUp(t *testing.T, c *paneltest.Console, tn tenant.Tenant, key string, h claim.Holder) int64 {
	t.Helper()
	ctx := context.Background()
	c.Job(t, tn, key, 235000)
	lr := c.Claims.Lease(ctx, tn.ID, h, wire.LeaseRequest{RequestID: "l-" + key, Worker: h.Worker, Key: key})
	require.True(t, lr.Granted, lr.Reason)
	require.True(t, c.Claims.Act(ctx, tn.ID, h, wire.ActRequest{RequestID: "a-" + key, Worker: h.Worker, Key: key, Token: lr.Token}).OK)
	require.True(t, c.Claims.Outcome(ctx, tn.ID, h, wire.Outcome{RequestID: "o-" + key, Worker: h.Worker, Key: key, Token: lr.Token,
		Result: wire.ResultUnknown}, claim.Offset{}).OK)
	require.NoError(t, c.Claims.Store().Resolve(ctx, tn.ID, key, lr.Token, 0, claim.Resolution{GiveUp: true}))
	return lr.Token
}

// TestClaimsPageShowsGivenUpLateEvidenceAndConflicts: the claims page says
// "given up after an unknown outcome", marks a claim confirmed from late
// evidence, and lists a conflict with its booking ids under a banner.
func TestClaimsPageShowsGivenUpLateEvidenceAndConflicts(t *testing.T) {
	c := paneltest.New(t)
	ctx := context.Background()
	// UNKNOWN needs River (its reconcile job is inserted with it): an
	// insert-only client, the jobs themselves are not run here.
	rc, err := river.NewClient(riverpgxv5.New(c.DB.App), &river.Config{})
	require.NoError(t, err)
	c.Claims.Store().SetEnqueuer(rc)
	alpha := c.Tenant(t, "alpha")
	const pw = "correct horse battery"
	op := c.User(t, "op@fleet.test", auth.Operator, pw)
	c.Grant(t, op, alpha)
	oc := paneltest.Browserless()
	c.Enrolled(t, oc, "op@fleet.test", pw)
	c.Claimed(t, alpha, "LD-OK", "actor-1")
	h := claim.Holder{Agent: "00000000-0000-4000-8000-0000000000a1", Worker: "actor-2"}
	givenUp(t, c, alpha, "LD-GU", h)
	late := givenUp(t, c, alpha, "LD-LATE", h)
	require.True(t, c.Claims.Outcome(ctx, alpha.ID, h, wire.Outcome{RequestID: "late", Worker: h.Worker, Key: "LD-LATE", Token: late,
		Result: wire.ResultConfirmed}, claim.Offset{}).OK, "a late CONFIRMED is applied")
	// A conflict as the board's evidence leaves it: two booking ids on the
	// attempts of one job (the engine's marking is tested in modules/claim).
	c.Claimed(t, alpha, "LD-CF", "actor-3")
	require.NoError(t, db.InTenant(ctx, c.DB.App, alpha.ID, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE claim_attempts SET conflict = true, booking_id = '41', booked_at = now(),
			outcome_at = now() WHERE target_job_key = 'LD-CF'`)
		return err
	}))

	res, body := paneltest.Do(t, oc, "GET", c.Server.URL+"/t/alpha/claims/rows?window=1h", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="given-up"`)
	require.Contains(t, body, "given up after an unknown outcome")
	require.Contains(t, body, `data-testid="late-evidence"`)
	require.Contains(t, body, `data-testid="conflict-alarm"`)
	require.Contains(t, body, `data-testid="conflict-LD-CF"`)
	require.Regexp(t, `data-testid="given-up-count">1<`, body)
	require.Regexp(t, `data-testid="late-evidence-count">1<`, body)
	require.Regexp(t, `data-testid="conflicts-count"><span class="badge bad">1<`, body)
	counts, err := c.Claims.Store().Safety(ctx, alpha.ID)
	require.NoError(t, err)
	require.Equal(t, claim.SafetyCounts{Conflicts: 1, LateEvidence: 1, GivenUp: 1}, counts)
}
