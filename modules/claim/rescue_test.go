package claim_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/claim"
)

// A reconcile job running on a replica that dies stays "running" until
// River's rescuer retries it, and its UNKNOWN stays unsettled meanwhile:
// the rescue delay is minutes, not River's default hour, and every claim
// job's timeout is below it (else a live job would be rescued while it
// runs).
func TestStuckJobsAreRescuedWithinMinutes(t *testing.T) {
	require.LessOrEqual(t, claim.RescueStuckJobsAfter, 2*time.Minute)
	require.Greater(t, claim.RescueStuckJobsAfter, time.Minute, "above River's default job timeout")
	for name, d := range claim.JobTimeoutsForTest() {
		require.Less(t, d, claim.RescueStuckJobsAfter, name)
	}
}
