package agent

import (
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"

	"github.com/fleetwright/fleetwright/modules/platform"
)

// StopAfterGateEnv is a chaos switch of `fleetwright loadtest` (its
// agent_stop_after_gate kind; docs/LOADTEST.md, "The agent's chaos
// switches"): with n > 0 the agent SIGSTOPs itself right after its send gate
// opened on its n-th booking, so the request leaves only when someone
// continues it — past its act deadline, which no deadline check can catch
// once the gate has opened. It is compiled into every build because the
// load test drives the shipped binary. Never set it on a real fleet.
const StopAfterGateEnv = "FLEET_CHAOS_AGENT_STOP_AFTER_GATE"

// gateStopper counts bookings whose send gate opened.
type gateStopper struct {
	n      int64
	passed atomic.Int64
	log    *slog.Logger
	// stop freezes the process (tests replace it).
	stop func()
}

func newGateStopper(log *slog.Logger) *gateStopper {
	n, _ := strconv.ParseInt(os.Getenv(StopAfterGateEnv), 10, 64)
	if n <= 0 {
		return nil
	}
	log.Warn("agent: chaos switch (never on a real fleet): this agent stops itself after its send gate opens on booking n", "env", StopAfterGateEnv, "n", n)
	return &gateStopper{n: n, log: log, stop: func() { _ = syscall.Kill(os.Getpid(), syscall.SIGSTOP) }}
}

// wrap returns gate, stopping the process after it opened on the n-th
// booking (counted once per booking, however often the transport asks).
func (g *gateStopper) wrap(gate platform.Gate) platform.Gate {
	if g == nil {
		return gate
	}
	var counted atomic.Bool
	return func() error {
		if err := gate(); err != nil {
			return err
		}
		if counted.CompareAndSwap(false, true) && g.passed.Add(1) == g.n {
			g.log.Warn("agent: chaos switch: send gate opened; stopping myself now", "booking", g.n)
			g.stop()
		}
		return nil
	}
}
