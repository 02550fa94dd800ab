package claim

import "time"

const LeaseSQLForTest = leaseSQL
const LeaseDiagSQLForTest = leaseDiagSQL

// JobTimeoutsForTest returns the claim jobs' per-attempt timeouts.
func JobTimeoutsForTest() map[string]time.Duration {
	return map[string]time.Duration{
		"reconcile":       (&reconcileWorker{}).Timeout(nil),
		"duplicate_sweep": (&duplicateSweepWorker{}).Timeout(nil),
	}
}
