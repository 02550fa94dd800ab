package gateway

import (
	"time"

	"github.com/fleetwright/fleetwright/modules/wire"
)

// An agent's clock offset is measured on every pong (every 15 s) and kept
// in memory on its connection: the claim engine corrects the agent's
// timestamps and sizes a grant's deadline from that copy (conn.Offset),
// never from the database. The agents row only shows it (the fleet page,
// the load test's round trips), so it is written when it changed, not on
// every pong: ten thousand idle agents made about 1,700 database
// operations a second out of pongs that all said the same thing
// (docs/FLEET.md, "Clock offset").

// OffsetChange is the smallest move of an agent's clock offset (or of its
// error bound) that is written at once. A move inside the stored error
// bound is written at once only when it is larger than this, too.
const OffsetChange = 5 * time.Millisecond

// DefaultOffsetRefresh is how often, at most, a smaller difference between
// the measured and the stored estimate is written.
const DefaultOffsetRefresh = 5 * time.Minute

// offsetDue says whether est, measured at now, should be written over
// stored (written at storedAt; have is false before the connection wrote
// one):
//   - the connection's first estimate, always;
//   - an offset that moved by more than OffsetChange and more than the
//     stored error bound (a move inside the bound is noise the measurement
//     cannot tell from the truth);
//   - an error bound that moved by more than OffsetChange and more than the
//     smaller of the two bounds (it halved or doubled);
//   - any other difference once refresh has passed since the last write;
//   - nothing at all when the estimate is the stored one.
func offsetDue(stored wire.Estimate, storedAt time.Time, have bool, est wire.Estimate, now time.Time, refresh time.Duration) bool {
	if !have {
		return true
	}
	if sameEstimate(stored, est) {
		return false
	}
	if absDuration(est.Offset-stored.Offset) > max(OffsetChange, stored.ErrorBound) {
		return true
	}
	if absDuration(est.ErrorBound-stored.ErrorBound) > max(OffsetChange, min(stored.ErrorBound, est.ErrorBound)) {
		return true
	}
	return now.Sub(storedAt) >= refresh
}

// sameEstimate compares what the agents row shows of an estimate.
func sameEstimate(a, b wire.Estimate) bool {
	return a.Offset == b.Offset && a.ErrorBound == b.ErrorBound && a.RoundTrip == b.RoundTrip
}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// unsavedOffset returns the connection's estimate when the agents row does
// not hold it yet (written with the departure), or nil.
func (c *conn) unsavedOffset() *wire.Estimate {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.offset == (wire.Estimate{}) || (c.storedOK && sameEstimate(c.stored, c.offset)) {
		return nil
	}
	est := c.offset
	return &est
}
