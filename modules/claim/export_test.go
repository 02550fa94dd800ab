package claim

import (
	"context"
	"time"
)

var LeaseSQLForTest = leaseSQL
var LeaseDiagSQLForTest = leaseDiagSQL

// JobTimeoutsForTest returns the claim jobs' per-attempt timeouts.
func JobTimeoutsForTest() map[string]time.Duration {
	return map[string]time.Duration{
		"reconcile":       (&reconcileWorker{}).Timeout(nil),
		"duplicate_sweep": (&duplicateSweepWorker{}).Timeout(nil),
	}
}

// SetHonoursIdempotencyKeysForTest makes every tenant's platform honour
// idempotency keys (or not) until the per-tenant setting exists.
func (s *Store) SetHonoursIdempotencyKeysForTest(v bool) {
	s.honours = func(context.Context, string) (bool, error) { return v, nil }
}

// SourceForTest is an evidence source named name.
func SourceForTest(name string) evidenceSource {
	return evidenceSource{Name: name, Actor: actorEngine, ConfirmAction: "claim.reconcile.confirm"}
}
