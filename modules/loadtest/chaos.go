package loadtest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/fleet"
)

// Chaos kinds, as named in the report's chaos_hits.
const (
	KindAgentKill     = "agent_kill_mid_action"    // SIGKILL an agent while its claim is ACTING (board hold)
	KindAgentStop     = "agent_stop_past_lease"    // SIGSTOP an agent holding a claim past its lease and act deadline, then SIGCONT
	KindRedisOutage   = "cell_redis_outage"        // stop cell b's Redis, start it again
	KindDropResponse  = "board_drop_response"      // the board commits and drops the response
	KindDropReused    = "board_drop_reused"        // the board commits a booking that came on a reused connection and drops the response
	KindLateCommit    = "board_late_commit"        // 504 at once, committed seconds later
	Kind5xx           = "board_5xx_burst"          // 503 without effect
	KindSessionStorm  = "session_storm"            // every board session expires
	KindPanelRestart  = "panel_replica_restart"    // SIGKILL a panel replica; its unit restarts it
	KindPGRestart     = "postgres_restart"         // SIGKILL every process of the cluster; started again once they are gone
	KindPGStall       = "postgres_stall"           // SIGSTOP every process of the cluster for 5–20 s, then SIGCONT
	KindPanelFreeze   = "panel_freeze"             // SIGSTOP the replica that leads River past its leadership's expiry, then SIGCONT
	KindBoardRestart  = "board_restart"            // the board stops at once (connections dropped) and starts again on its file store
	KindStopAfterGate = "agent_stop_after_gate"    // an agent SIGSTOPs itself right after its send gate opened; continued past its act deadline
	KindCommitLate    = "board_commit_after_grace" // 504 at once, committed grace + 10 s later; each must end CONFIRMED within 2 min
	KindPartition     = "agent_panel_partition"    // one agent's path to its replica blackholed past its lease and two ping intervals
	KindClockSkew     = "agent_clock_skew"         // an HTTP-only agent whose wall clock is minutes off signs in, claims and reports corrected times
	// clockSkew is how far that agent's wall clock is off.
	clockSkew = -3 * time.Minute
	// skewTolerance bounds a corrected timestamp's distance from the
	// board's own record of the same moment.
	skewTolerance = 2 * time.Second
	// panelPingEvery is the replicas' ping interval (gateway.Config's
	// default); each side drops a connection silent for two of them.
	panelPingEvery = 15 * time.Second
	// partitionGrace is how much longer a cut lasts while the panel has not
	// dropped the silent agent yet.
	partitionGrace = 2 * panelPingEvery
	// reconnectWithin bounds the agent's reconnect once traffic resumes.
	reconnectWithin = 30 * time.Second
	// commitLateWindow is how long board_commit_after_grace answers 504.
	commitLateWindow = 8 * time.Second
	// commitLateMax bounds the wait for the first booking request answered
	// 504 by board_commit_after_grace.
	commitLateMax = 60 * time.Second
	// afterGraceConfirm bounds the wait for a late commit's CONFIRMED.
	afterGraceConfirm = 2 * time.Minute
	// stopAfterGateBooking is the booking after whose opened gate the
	// chosen agent stops itself.
	stopAfterGateBooking = 2
	pgStallMin           = 5 * time.Second
	pgStallMax           = 20 * time.Second
	chaosGap             = time.Second
	boardBurstMin        = 3 * time.Second
	boardBurstMax        = 25 * time.Second
	// holdFor is how long the board holds each booking request while an
	// agent inside an action is looked for; a request is chosen only while
	// its hold has at least holdSlack left, so the agent is acted on before
	// the board answers it. Together under the hard timeout (15 s): the
	// held request is answered before the actor gives up on it.
	holdFor           = 7 * time.Second
	holdSlack         = 3 * time.Second
	findActingTimeout = 45 * time.Second
	// demandEvery is how often a step that waits for a booking request
	// publishes a load of its own while none came.
	demandEvery = 1500 * time.Millisecond
)

// ChaosKinds lists every kind in schedule order.
// board_commit_after_grace comes once the fleet has been booking for a
// while: it needs a booking request inside its window, which a fleet still
// warming up on a loaded machine may not send.
var ChaosKinds = []string{KindPartition, Kind5xx, KindDropResponse, KindDropReused, KindSessionStorm, KindPanelFreeze, KindAgentKill, KindLateCommit, KindCommitLate,
	KindPGRestart, KindRedisOutage, KindStopAfterGate, KindPGStall, KindAgentStop, KindBoardRestart, KindClockSkew, KindPanelRestart}

// chaos runs the schedule in cycles until ctx ends; cycleDone closes when
// the first cycle has finished. Each step is bounded and restores what it
// changed; the seeded generator picks targets and jitters the gaps, so a
// seed replays the same choices.
func (r *runner) chaos(ctx context.Context, cycleDone chan<- struct{}) {
	steps := map[string]func(context.Context) (int, string){
		Kind5xx: func(ctx context.Context) (int, string) {
			// Until the first hit only booking requests fail: every route
			// failing at rate 1 would hide the feed, and no agent would
			// see a load to book.
			return r.boardBurst(ctx, board.EvServerError, 0.25, func(c *board.Chaos, rate float64) {
				if rate == 1 {
					c.ErrorRate, c.BookErrorRate = 0, 1
				} else {
					c.ErrorRate, c.BookErrorRate = rate, 0
				}
			})
		},
		KindDropResponse: func(ctx context.Context) (int, string) {
			return r.boardBurst(ctx, board.EvResponseDropped, 0.4, func(c *board.Chaos, rate float64) { c.DropResponseRate = rate })
		},
		KindDropReused: func(ctx context.Context) (int, string) {
			return r.boardBurst(ctx, board.EvResponseDropped, 1, func(c *board.Chaos, rate float64) { c.DropReusedResponseRate = rate })
		},
		KindLateCommit: func(ctx context.Context) (int, string) {
			return r.boardBurst(ctx, board.EvLateCommit, 0.4, func(c *board.Chaos, rate float64) {
				c.LateCommitRate, c.LateCommitDelay = rate, board.Duration(5*time.Second)
			})
		},
		KindSessionStorm: func(context.Context) (int, string) {
			n := r.board().SessionStorm(1)
			return min(n, 1), fmt.Sprintf("%d sessions expired", n)
		},
		KindAgentKill:     r.killMidAction,
		KindAgentStop:     r.stopPastLease,
		KindRedisOutage:   r.redisOutage,
		KindPanelRestart:  r.panelRestart,
		KindPGRestart:     r.postgresRestart,
		KindPGStall:       r.postgresStall,
		KindPanelFreeze:   r.panelFreeze,
		KindBoardRestart:  r.boardRestart,
		KindStopAfterGate: r.awaitGateStop,
		KindCommitLate:    r.commitAfterGrace,
		KindPartition:     r.partition,
		KindClockSkew:     r.checkClockSkew,
	}
	for cycle := 1; ; cycle++ {
		for _, kind := range ChaosKinds {
			if !r.sleep(ctx, chaosGap+time.Duration(r.rng.Int64N(int64(time.Second)))) {
				return
			}
			start := time.Now()
			hits, detail := steps[kind](ctx)
			r.mu.Lock()
			r.hits[kind] += hits
			r.mu.Unlock()
			r.log.Info("chaos", "cycle", cycle, "kind", kind, "hits", hits, "detail", detail, "took", time.Since(start).Round(time.Millisecond))
			r.printf("chaos %s: %d hit(s), %s", kind, hits, detail)
		}
		if cycle == 1 {
			close(cycleDone)
		}
		if ctx.Err() != nil {
			return
		}
	}
}

func onOff(on bool, v float64) float64 {
	if on {
		return v
	}
	return 0
}

// sleep waits d unless ctx ends first.
func (r *runner) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// boardBurst turns one board switch on until the board logged at least one
// event of its kind (and at least boardBurstMin passed), at most
// boardBurstMax, then off; the hits are the events the board logged. The
// hit does not rest on the dice or on the publisher: until the first event
// the switch is at rate 1 (the first request it applies to is hit), only
// then at its rate, and while nothing was hit the step publishes a load
// every tenant wants each demandEvery, so booking requests keep coming.
func (r *runner) boardBurst(ctx context.Context, event string, rate float64, set func(*board.Chaos, float64)) (int, string) {
	apply := func(v float64) error {
		c := r.board().Chaos()
		set(&c, v)
		return r.board().SetChaos(c)
	}
	after := r.lastEvent()
	if err := apply(1); err != nil {
		return 0, err.Error()
	}
	start := time.Now()
	first, demanded := time.Duration(0), 0
	var nextDemand time.Time
	for time.Since(start) < boardBurstMax {
		n := r.countEvents(after, event)
		if n > 0 && first == 0 {
			first = time.Since(start)
			_ = apply(rate)
		}
		if time.Since(start) >= boardBurstMin && n > 0 {
			break
		}
		if n == 0 && time.Now().After(nextDemand) {
			demanded += r.demand(ctx)
			nextDemand = time.Now().Add(demandEvery)
		}
		if !r.sleep(ctx, 200*time.Millisecond) {
			break
		}
	}
	_ = apply(0)
	n := r.countEvents(after, event)
	return n, fmt.Sprintf("switch on for %s (rate 1 until the first hit after %s, then %v; %d load(s) published for it)",
		time.Since(start).Round(100*time.Millisecond), first.Round(100*time.Millisecond), rate, demanded)
}

// demand publishes one load every tenant's filter wants (the publisher's
// own draw), so a step that needs booking requests gets them whatever the
// Poisson publisher did meanwhile; it returns how many it published.
func (r *runner) demand(ctx context.Context) int {
	loads, err := r.board().Publish(ctx, 1, nil)
	if err != nil {
		r.log.Warn("chaos: demand load", "err", err)
	}
	return len(loads)
}

func (r *runner) lastEvent() int64 {
	return r.board().Stats().Events
}

// countEvents counts the board's events of a type after seq.
func (r *runner) countEvents(after int64, typ string) int {
	n := 0
	for {
		evs := r.board().Events(after, 1000)
		if len(evs) == 0 {
			return n
		}
		for _, e := range evs {
			if e.Type == typ {
				n++
			}
			after = e.Seq
		}
	}
}

// acting is a claim being acted on right now.
type acting struct {
	p        *proc
	key      string
	tenantID string
}

// findActing holds every booking on the board for holdFor and waits until
// the board is holding a booking request of one of the candidate agents
// whose claim is ACTING: that agent is inside its action (its request is
// in flight, unanswered, for at least holdSlack more), whatever the load on
// the machine. While none is found it publishes a load every tenant wants
// each demandEvery, so the candidates get work to act on.
func (r *runner) findActing(ctx context.Context, candidates []*proc) (acting, func(), error) {
	c := r.board().Chaos()
	c.Hold = board.Duration(holdFor)
	_ = r.board().SetChaos(c)
	release := func() {
		c := r.board().Chaos()
		c.Hold = 0
		_ = r.board().SetChaos(c)
	}
	// Every booking request the board logs after this point read the
	// switch after it was set: it is held.
	after := r.lastEvent()
	byName := map[string]*proc{}
	for _, p := range candidates {
		byName[p.agent.Name] = p
	}
	deadline := time.Now().Add(findActingTimeout)
	var held []*board.Event
	var nextDemand time.Time
	for time.Now().Before(deadline) {
		for {
			evs := r.board().Events(after, 1000)
			if len(evs) == 0 {
				break
			}
			for _, e := range evs {
				after = e.Seq
				if e.Type == board.EvBookingRequest && byName[e.Account] != nil {
					held = append(held, e)
				}
			}
		}
		live := held[:0]
		for _, e := range held {
			if time.Since(e.At) < holdFor-holdSlack {
				live = append(live, e)
			}
		}
		held = live
		for _, e := range held {
			p := byName[e.Account]
			r.mu.Lock()
			busy := r.stopped[p] || r.partitioned == p
			r.mu.Unlock()
			if busy || p.pid() == 0 {
				continue
			}
			a := acting{p: p, key: e.LoadID, tenantID: r.tenantIDs[p.agent.Tenant]}
			var holder string
			if err := r.super.QueryRow(ctx, `SELECT holder_agent::text FROM claims WHERE tenant_id = $1 AND target_job_key = $2 AND state = 'ACTING'`,
				a.tenantID, a.key).Scan(&holder); err == nil && holder == p.agentID {
				return a, release, nil
			}
		}
		if len(held) == 0 && time.Now().After(nextDemand) {
			r.demand(ctx)
			nextDemand = time.Now().Add(demandEvery)
		}
		if !r.sleep(ctx, 100*time.Millisecond) {
			break
		}
	}
	release()
	return acting{}, func() {}, errNoCandidate
}

// claimState reads one claim's state.
func (r *runner) claimState(ctx context.Context, tenantID, key string) string {
	var s string
	_ = r.super.QueryRow(ctx, `SELECT state FROM claims WHERE tenant_id = $1 AND target_job_key = $2`, tenantID, key).Scan(&s)
	return s
}

// killMidAction SIGKILLs an HTTP-only agent whose claim is ACTING while
// the board holds its booking request (findActing), so the request still
// books after the agent died: the claim must end CONFIRMED through the
// reconciler. The agent's unit restarts it, and its journal reports the
// action UNKNOWN. The state is read once more just before the kill; with
// the request held for holdSlack more, nothing can have answered it.
func (r *runner) killMidAction(ctx context.Context) (int, string) {
	var cands []*proc
	for _, p := range r.agents {
		if p.agent.httpOnly() && p.agent.acts() && p != r.gateAgent() {
			cands = append(cands, p)
		}
	}
	a, release, err := r.findActing(ctx, cands)
	defer release()
	if err != nil {
		return 0, "no HTTP-only agent's booking request was held while ACTING within " + findActingTimeout.String()
	}
	if st := r.claimState(ctx, a.tenantID, a.key); st != "ACTING" {
		return 0, fmt.Sprintf("%s's claim %s was %s, not ACTING, at the kill", a.p.name, a.key, st)
	}
	if err := a.p.u.Signal(syscall.SIGKILL); err != nil {
		return 0, err.Error()
	}
	return 1, fmt.Sprintf("SIGKILL %s while %s was ACTING and its booking request held by the board", a.p.name, a.key)
}

// stopPastLease SIGSTOPs an agent holding a claim for longer than both its
// lease and its act deadline, then SIGCONTs it: the database, not the
// agent's clock, must decide what its late words are worth.
func (r *runner) stopPastLease(ctx context.Context) (int, string) {
	var cands []*proc
	for _, p := range r.agents {
		if p.agent.acts() && p != r.gateAgent() {
			cands = append(cands, p)
		}
	}
	a, release, err := r.findActing(ctx, cands)
	if err != nil {
		release()
		return 0, "no agent's booking request was held while ACTING within " + findActingTimeout.String()
	}
	state := r.claimState(ctx, a.tenantID, a.key)
	if state != "ACTING" && state != "LEASED" {
		release()
		return 0, "the claim was settled before the stop"
	}
	if err := a.p.u.Signal(syscall.SIGSTOP); err != nil {
		release()
		return 0, err.Error()
	}
	r.mu.Lock()
	r.stopped[a.p] = true
	r.mu.Unlock()
	release()
	cfg := r.eng.Config()
	stopFor := max(cfg.LeaseFor, cfg.HardTimeout) + 3*time.Second
	// The schedule goes on while the agent is frozen; the continue is not
	// cut short by ctx (the agent must be continued whatever happens, and
	// restoreAll continues it too if the run ends first).
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		time.Sleep(stopFor)
		during := r.claimState(context.WithoutCancel(ctx), a.tenantID, a.key)
		r.mu.Lock()
		if r.stopped[a.p] {
			_ = a.p.u.Signal(syscall.SIGCONT)
			delete(r.stopped, a.p)
		}
		r.mu.Unlock()
		r.log.Info("chaos: agent continued", "agent", a.p.name, "key", a.key, "state_when_continued", during)
		r.printf("chaos %s: continued %s after %s; %s was %s by then", KindAgentStop, a.p.name, stopFor, a.key, during)
	}()
	return 1, fmt.Sprintf("SIGSTOP %s for %s while %s was %s", a.p.name, stopFor, a.key, state)
}

// redisOutage stops cell b's Redis, waits until a replica raised the cell's
// alarm, starts Redis again and waits until the cell is restored.
func (r *runner) redisOutage(ctx context.Context) (int, string) {
	alarms0, restored0 := r.panelAlarms()
	r.redisMu.Lock()
	rd := r.redis[1]
	r.redis[1] = nil
	r.redisMu.Unlock()
	rd.Stop()
	down := time.Now()
	// Up to a minute: a replica whose timers run late on a loaded machine
	// (or one frozen by panel_freeze meanwhile) still notices.
	for time.Since(down) < time.Minute {
		if a, _ := r.panelAlarms(); a > alarms0 && time.Since(down) >= 4*time.Second {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	alarmed, _ := r.panelAlarms()
	nrd, err := r.startRedis(context.WithoutCancel(ctx), 1)
	r.redisMu.Lock()
	r.redis[1] = nrd
	r.redisMu.Unlock()
	if err != nil {
		return 0, "Redis did not start again: " + err.Error()
	}
	outage := time.Since(down)
	for start := time.Now(); time.Since(start) < 30*time.Second; {
		if _, rs := r.panelAlarms(); rs > restored0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	_, restored := r.panelAlarms()
	if alarmed == alarms0 {
		return 0, fmt.Sprintf("down %s but no replica noticed", outage.Round(100*time.Millisecond))
	}
	return 1, fmt.Sprintf("down %s, %d alarm(s), %d restore(s)", outage.Round(100*time.Millisecond), alarmed-alarms0, restored-restored0)
}

func (r *runner) panelAlarms() (alarms, restored int) {
	for _, p := range r.panels {
		_, a, rs := p.out.counts()
		alarms += a
		restored += rs
	}
	return
}

// panelRestart SIGKILLs a replica (seeded choice); its unit restarts it on
// the same address, and its agents reconnect.
func (r *runner) panelRestart(ctx context.Context) (int, string) {
	p := r.panels[r.rng.IntN(len(r.panels))]
	before, _, _ := p.out.counts()
	if err := p.u.Signal(syscall.SIGKILL); err != nil {
		return 0, err.Error()
	}
	killed := time.Now()
	if err := p.out.waitMarks(context.WithoutCancel(ctx), before+1, 2*time.Minute); err != nil {
		return 0, fmt.Sprintf("%s killed but not ready again within 2m", p.name)
	}
	return 1, fmt.Sprintf("SIGKILL %s; ready again after %s", p.name, time.Since(killed).Round(100*time.Millisecond))
}

// postgresRestart SIGKILLs every process of the cluster at once (the OOM
// killer's worst day); the run's supervisor starts it again once they are
// all gone, as a panel's does. A hit is a cluster whose every process died
// and whose new postmaster answered.
func (r *runner) postgresRestart(ctx context.Context) (int, string) {
	procs := r.pg.Processes()
	old := r.pg.Pid()
	if len(procs) == 0 || old == 0 {
		return 0, "no process of the cluster found"
	}
	for _, pid := range procs {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	killed := time.Now()
	for time.Since(killed) < 2*time.Minute {
		if r.pg.Pid() != old && r.pg.State() == embedded.StateRunning {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			err := r.super.QueryRow(cctx, "SELECT 1").Scan(new(int))
			cancel()
			if err == nil {
				return 1, fmt.Sprintf("SIGKILL %d processes; answering again after %s", len(procs), time.Since(killed).Round(100*time.Millisecond))
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0, fmt.Sprintf("SIGKILL %d processes; not back within 2m (state %s)", len(procs), r.pg.State())
}

// postgresStall freezes every process of the cluster (SIGSTOP) for a seeded
// 5–20 s, then continues them: statements hang rather than fail, the way a
// stalled disk or a paused VM looks. A hit is a stall during which every
// process was seen stopped.
func (r *runner) postgresStall(ctx context.Context) (int, string) {
	d := pgStallMin + time.Duration(r.rng.Int64N(int64(pgStallMax-pgStallMin)))
	procs := r.pg.Processes()
	if len(procs) == 0 {
		return 0, "no process of the cluster found"
	}
	r.mu.Lock()
	r.pgStopped = procs
	r.mu.Unlock()
	for _, pid := range procs {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	// A signal is delivered when the process next runs: look until every
	// one is stopped (a moment on a busy machine).
	stopped := 0
	for look := time.Now(); time.Since(look) < 3*time.Second; time.Sleep(50 * time.Millisecond) {
		stopped = 0
		for _, pid := range procs {
			if st := processState(pid); st == 'T' || st == 't' || st == 0 {
				stopped++
			}
		}
		if stopped == len(procs) {
			break
		}
	}
	// Not cut short by ctx: the cluster must be continued whatever happens
	// (restoreAll continues it too).
	time.Sleep(d)
	r.continuePostgres()
	if stopped < len(procs) {
		return 0, fmt.Sprintf("only %d of %d processes stopped", stopped, len(procs))
	}
	return 1, fmt.Sprintf("SIGSTOP %d processes for %s", len(procs), d.Round(100*time.Millisecond))
}

// continuePostgres sends SIGCONT to the cluster's processes a stall stopped.
func (r *runner) continuePostgres() {
	r.mu.Lock()
	procs := r.pgStopped
	r.pgStopped = nil
	r.mu.Unlock()
	for _, pid := range procs {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
}

// processState is the state letter of /proc/PID/stat (R, S, T, Z, …), 0
// when the process is gone.
func processState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// panelFreeze SIGSTOPs the replica that leads River (read from River's
// leader table; each replica's River client id is its replica id) until its
// leadership has expired by the database's clock and another replica took
// over (or 30 s more passed), then continues it: a leader that wakes up must
// find it no longer leads, and its periodic jobs must not have overlapped.
// The schedule goes on meanwhile; the hit is counted when the replica is
// continued past the expiry.
func (r *runner) panelFreeze(ctx context.Context) (int, string) {
	var leader string
	var expires, now time.Time
	if err := r.super.QueryRow(ctx, `SELECT leader_id, expires_at, now() FROM river_leader LIMIT 1`).Scan(&leader, &expires, &now); err != nil {
		return 0, "no River leader: " + err.Error()
	}
	var pid int
	if err := r.super.QueryRow(ctx, `SELECT pid FROM panel_replicas WHERE id = $1`, leader).Scan(&pid); err != nil {
		return 0, "the leader " + leader + " is no known replica: " + err.Error()
	}
	var p *proc
	for _, x := range r.panels {
		if x.pid() == pid {
			p = x
		}
	}
	if p == nil {
		return 0, fmt.Sprintf("the leader's pid %d is no replica of this run", pid)
	}
	if err := p.u.Signal(syscall.SIGSTOP); err != nil {
		return 0, err.Error()
	}
	r.mu.Lock()
	r.stopped[p] = true
	r.mu.Unlock()
	// The stop is delivered when the process next runs: look for a moment.
	for look := time.Now(); processState(pid) != 'T'; time.Sleep(50 * time.Millisecond) {
		if time.Since(look) > 3*time.Second {
			r.note("%s: %s did not stop", KindPanelFreeze, p.name)
			break
		}
	}
	frozen := time.Now()
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		bctx := context.WithoutCancel(ctx)
		past, successor := false, ""
		ttl := expires.Sub(now)
		for time.Since(frozen) < ttl+45*time.Second {
			var cur string
			var dbNow time.Time
			if err := r.super.QueryRow(bctx, `SELECT coalesce((SELECT leader_id FROM river_leader LIMIT 1), ''), now()`).Scan(&cur, &dbNow); err == nil {
				past = dbNow.After(expires.Add(time.Second))
				if cur != leader {
					successor = cur
				}
				if past && (successor != "" || time.Since(frozen) > ttl+30*time.Second) {
					break
				}
			}
			time.Sleep(250 * time.Millisecond)
		}
		r.mu.Lock()
		if r.stopped[p] {
			_ = p.u.Signal(syscall.SIGCONT)
			delete(r.stopped, p)
		}
		if past {
			r.hits[KindPanelFreeze]++
		}
		r.mu.Unlock()
		took := time.Since(frozen).Round(100 * time.Millisecond)
		r.log.Info("chaos: leader continued", "replica", p.name, "frozen", took, "past_expiry", past, "successor", successor)
		r.printf("chaos %s: continued %s after %s (past its leadership's expiry: %v; a successor took over: %v)", KindPanelFreeze, p.name, took, past, successor != "")
	}()
	return 0, fmt.Sprintf("SIGSTOP %s, River's leader (its leadership expires in %s); the hit counts once it is continued past that", p.name, expires.Sub(now).Round(100*time.Millisecond))
}

// boardRestart stops the board the way a crash would (board.Server.Kill:
// connections in flight dropped without an answer, held requests and late
// commits abandoned) and starts it again on its file store and address with
// the same switches. A hit is a board that came back with every event it
// had committed and answered on its address.
func (r *runner) boardRestart(ctx context.Context) (int, string) {
	r.brdMu.Lock()
	old := r.brd
	before := old.Stats()
	cfg := r.bcfg
	cfg.Chaos, cfg.Rate = old.Chaos(), before.PublishRate
	killErr := old.Kill()
	down := time.Now()
	var nb *board.Server
	var err error
	// The address is free again at once (the listener is closed; Go sets
	// SO_REUSEADDR), but allow a moment on a busy machine.
	for i := 0; i < 50; i++ {
		if nb, err = board.Start(context.WithoutCancel(ctx), cfg, r.boardLog); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		r.brdMu.Unlock()
		r.note("%s: the board did not start again: %v", KindBoardRestart, err)
		return 0, "the board did not start again: " + err.Error()
	}
	r.keepSessions(r.brd)
	r.brd = nb
	r.brdMu.Unlock()
	r.boardServing(nb, cfg)
	after := nb.Stats()
	if killErr != nil {
		r.log.Warn("chaos: board kill", "err", killErr)
	}
	res, err := http.Get(nb.URL() + "/healthz")
	if err == nil {
		res.Body.Close()
	}
	if err != nil || after.Events < before.Events {
		return 0, fmt.Sprintf("back after %s but events %d → %d, health: %v", time.Since(down).Round(time.Millisecond), before.Events, after.Events, err)
	}
	return 1, fmt.Sprintf("killed with %d events; back on %s after %s with %d", before.Events, nb.URL(), time.Since(down).Round(time.Millisecond), after.Events)
}

// gateAgent is the agent that runs with the StopAfterGateEnv chaos
// switch: the first actor agent of the first tenant (with the browser
// actor when there is one, so the HTTP-only agents stay for
// agent_kill_mid_action).
func (r *runner) gateAgent() *proc {
	for _, p := range r.agents {
		if p.agent.Tenant == 0 && p.agent.acts() {
			return p
		}
	}
	return nil
}

// watchGateStops continues the gate agent each time it stopped itself after
// its send gate opened (its process seen stopped while the run did not stop
// it), once max(lease, hard timeout) + 3 s have passed: past its act
// deadline, so its booking request leaves late, as from a host that froze
// between the last deadline check and the send. A hit is one such stop
// continued past the deadline.
func (r *runner) watchGateStops(ctx context.Context) {
	p := r.gateAgent()
	if p == nil {
		return
	}
	cfg := r.eng.Config()
	stopFor := max(cfg.LeaseFor, cfg.HardTimeout) + 3*time.Second
	for r.sleep(ctx, 100*time.Millisecond) {
		pid := p.pid()
		if pid == 0 || processState(pid) != 'T' {
			continue
		}
		r.mu.Lock()
		ours := r.stopped[p]
		if !ours {
			r.stopped[p] = true
		}
		r.mu.Unlock()
		if ours {
			continue
		}
		stopped := time.Now()
		r.log.Info("chaos: the agent stopped itself after its send gate opened", "agent", p.name, "pid", pid)
		select {
		case <-time.After(stopFor):
		case <-ctx.Done():
		}
		r.mu.Lock()
		if r.stopped[p] {
			_ = syscall.Kill(pid, syscall.SIGCONT)
			delete(r.stopped, p)
		}
		past := time.Since(stopped) >= stopFor
		if past {
			r.hits[KindStopAfterGate]++
		}
		r.mu.Unlock()
		r.printf("chaos %s: %s stopped itself after its send gate opened; continued after %s", KindStopAfterGate, p.name, time.Since(stopped).Round(100*time.Millisecond))
	}
}

// awaitGateStop is the schedule's step for agent_stop_after_gate: the agent
// stops itself on its own booking (watchGateStops continues it and counts
// the hit), so the step only waits, bounded, until that has happened once.
func (r *runner) awaitGateStop(ctx context.Context) (int, string) {
	p := r.gateAgent()
	if p == nil {
		return 0, "no actor agent to run with the setting"
	}
	start := time.Now()
	var nextDemand time.Time
	for time.Since(start) < time.Minute {
		r.mu.Lock()
		done, now := r.hits[KindStopAfterGate], r.stopped[p]
		r.mu.Unlock()
		if done > 0 || now {
			return 0, fmt.Sprintf("%s stopped itself after booking %d's gate opened (hits counted when it is continued)", p.name, stopAfterGateBooking)
		}
		// The agent's tenant wants every load: each one published here
		// is a booking for it to make.
		if time.Now().After(nextDemand) {
			r.demand(ctx)
			nextDemand = time.Now().Add(demandEvery)
		}
		if !r.sleep(ctx, 200*time.Millisecond) {
			break
		}
	}
	return 0, fmt.Sprintf("%s did not stop itself within 1m (fewer than %d bookings?)", p.name, stopAfterGateBooking)
}

// commitAfterGrace answers every booking 504 for a moment and commits each
// grace + 10 s later: after the reconciler's complete look-up found nothing
// and released (or gave up) the claim. The first commit of a load wins (the
// others find it taken). Each booking so committed must end CONFIRMED within
// 2 minutes of the commit — late evidence found by the panel's continued
// look-ups — which the background check below waits for; a hit is one that
// did.
func (r *runner) commitAfterGrace(ctx context.Context) (int, string) {
	delay := r.eng.Config().Grace + 10*time.Second
	start := r.board().Stats().AsOf
	// Every booking request of the window is answered 504, so a load whose
	// every client asked within it is booked by nobody until the first
	// commit; one asked for after the window is booked at once by another
	// client, and its late commit finds it taken.
	after := r.lastEvent()
	set := func(on bool) {
		c := r.board().Chaos()
		c.LateCommitRate, c.LateCommitDelay = onOff(on, 1), board.Duration(delay)
		_ = r.board().SetChaos(c)
	}
	set(true)
	on := time.Now()
	// While no booking was answered yet, loads of the step's own keep
	// booking requests coming (demand).
	var nextDemand time.Time
	for time.Since(on) < commitLateMax {
		n := r.countEvents(after, board.EvLateCommit)
		if time.Since(on) >= commitLateWindow && n > 0 {
			break
		}
		if n == 0 && time.Now().After(nextDemand) {
			r.demand(ctx)
			nextDemand = time.Now().Add(demandEvery)
		}
		if !r.sleep(ctx, 200*time.Millisecond) {
			break
		}
	}
	set(false)
	n := r.countEvents(after, board.EvLateCommit)
	detail := fmt.Sprintf("switch on for %s", time.Since(on).Round(100*time.Millisecond))
	if n == 0 {
		return 0, "no booking was answered 504 (" + detail + ")"
	}
	switchedOff := time.Now()
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		bctx := context.WithoutCancel(ctx)
		// Every scheduled commit has happened (or found the load taken)
		// once the delay has passed since the switch went off.
		time.Sleep(time.Until(switchedOff.Add(delay + 2*time.Second)))
		type late struct {
			tenant, key string
			at          time.Time
		}
		var commits []late
		for _, b := range r.board().Bookings("") {
			if b.Source == "late_commit" && b.BookedAt.After(start.Add(delay-time.Second)) {
				for i, t := range r.tenants {
					if t.Client == b.Client {
						commits = append(commits, late{tenant: r.tenantIDs[i], key: b.LoadID, at: b.BookedAt})
					}
				}
			}
		}
		confirmed := 0
		var missed []string
		for _, c := range commits {
			ok := false
			for time.Now().Before(c.at.Add(afterGraceConfirm)) {
				if r.claimState(bctx, c.tenant, c.key) == "CONFIRMED" {
					ok = true
					break
				}
				time.Sleep(500 * time.Millisecond)
			}
			if ok {
				confirmed++
			} else {
				missed = append(missed, c.key)
			}
		}
		r.mu.Lock()
		r.afterGrace += len(commits)
		r.afterGraceLate = append(r.afterGraceLate, missed...)
		r.mu.Unlock()
		r.printf("chaos %s: %d booking(s) committed %s after their 504; %d CONFIRMED within %s, not: %v", KindCommitLate, len(commits), delay, confirmed, afterGraceConfirm, missed)
	}()
	// A hit is a booking answered 504 whose commit was scheduled past the
	// grace; whether it lands depends on whether another client booked the
	// load meanwhile (then the board refuses the commit). Every commit that
	// does land must end CONFIRMED within afterGraceConfirm: a miss is a
	// failure of the run (late_commits_unconfirmed), not a lost hit.
	return n, fmt.Sprintf("%d booking(s) answered 504, committed %s later unless the load was taken meanwhile (%s)", n, delay, detail)
}

func (r *runner) isPartitioned(p *proc) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.partitioned == p
}

// agentConnected reads whether the panel records the agent as connected,
// and since when.
func (r *runner) agentConnected(ctx context.Context, p *proc) (bool, time.Time) {
	var c bool
	var at *time.Time
	_ = r.super.QueryRow(ctx, `SELECT connected, connected_at FROM agents WHERE id = $1`, p.agentID).Scan(&c, &at)
	if at == nil {
		return c, time.Time{}
	}
	return c, *at
}

// panelStopped reports whether a panel replica is frozen by the chaos now.
func (r *runner) panelStopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.panels {
		if r.stopped[x] {
			return true
		}
	}
	return false
}

// partition blackholes one HTTP-only actor agent's path to its replica (its
// relay passes nothing, not even a close) for longer than a lease and two
// ping intervals, then lets traffic through. Each side must drop the silent
// connection on its own (docs/PROTOCOL.md), and the agent must be connected
// again within 30 s after traffic resumes. It runs in the background; a hit
// is a partition where the panel dropped the agent, the agent dropped its
// side, and it came back in time.
func (r *runner) partition(ctx context.Context) (int, string) {
	var cands []*proc
	for _, p := range r.agents {
		if p.agent.httpOnly() && p.agent.acts() && p != r.gateAgent() {
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		return 0, "no HTTP-only actor agent"
	}
	p := cands[r.rng.IntN(len(cands))]
	if why := r.awaitFree(ctx, p, time.Minute); why != "" {
		return 0, why
	}
	r.mu.Lock()
	if r.partitioned != nil || r.stopped[p] {
		r.mu.Unlock()
		return 0, p.name + " is busy with other chaos"
	}
	r.partitioned = p
	r.mu.Unlock()
	hold := max(r.eng.Config().LeaseFor, 2*panelPingEvery) + 5*time.Second
	p.relay.block()
	cut := time.Now()
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		bctx := context.WithoutCancel(ctx)
		panelDropped := time.Duration(0)
		// A replica frozen by panel_freeze meanwhile cannot notice the
		// silence: the cut lasts that much longer (while the panel has not
		// dropped the agent yet), so the panel gets its two ping intervals
		// of running time whatever chaos overlaps.
		frozenFor := time.Duration(0)
		// And a panel slow to notice on a loaded machine (its timers late)
		// gets up to partitionGrace more before the cut ends: the step
		// ends the cut once the panel dropped the agent, so it hits unless
		// the panel failed to notice a silence that long.
		for tick := time.Now(); time.Since(cut) < hold+frozenFor ||
			(panelDropped == 0 && time.Since(cut) < hold+frozenFor+partitionGrace); {
			if ok, _ := r.agentConnected(bctx, p); !ok && panelDropped == 0 {
				panelDropped = time.Since(cut)
			}
			time.Sleep(250 * time.Millisecond)
			if r.panelStopped() && panelDropped == 0 {
				frozenFor += time.Since(tick)
			}
			tick = time.Now()
		}
		agentDropped := p.relay.unblock()
		resumed := time.Now()
		back := time.Duration(-1)
		for time.Since(resumed) < reconnectWithin+5*time.Second {
			if ok, at := r.agentConnected(bctx, p); ok && at.After(cut) {
				back = time.Since(resumed)
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		r.mu.Lock()
		r.partitioned = nil
		hit := panelDropped > 0 && agentDropped > 0 && back >= 0 && back <= reconnectWithin
		if hit {
			r.hits[KindPartition]++
		}
		r.mu.Unlock()
		r.log.Info("chaos: partition over", "agent", p.name, "held", hold, "panel_dropped_after", panelDropped,
			"agent_closed", agentDropped, "reconnected_after", back)
		r.printf("chaos %s: %s cut for %s; the panel dropped it after %s, the agent closed %d connection(s), connected again %s after traffic resumed",
			KindPartition, p.name, hold, panelDropped.Round(100*time.Millisecond), agentDropped, back.Round(100*time.Millisecond))
		if !hit {
			r.note("%s: %s was not handled in time (panel dropped after %s, agent closed %d, back after %s)", KindPartition, p.name, panelDropped, agentDropped, back)
		}
	}()
	return 0, fmt.Sprintf("blackholed %s's path to its replica for %s; the hit counts once it is connected again", p.name, hold)
}

// skewAgent runs with the ClockSkewEnv chaos switch: the last HTTP-only
// actor agent (its wall clock 3 minutes slow for the whole run).
func (r *runner) skewAgent() *proc {
	want := r.skewPlan()
	for _, p := range r.agents {
		if p.agent == want {
			return p
		}
	}
	return nil
}

// skewPlan is the skewed agent in the plan: the last HTTP-only actor agent
// that is not the gate agent (the first actor agent of the first tenant).
func (r *runner) skewPlan() *agentPlan {
	var gate, last *agentPlan
	for _, t := range r.tenants {
		for _, a := range t.Agents {
			if !a.acts() {
				continue
			}
			if gate == nil && a.Tenant == 0 {
				gate = a
				continue
			}
			if a.httpOnly() {
				last = a
			}
		}
	}
	return last
}

// skewTenant is the index of the skewed agent's tenant (-1: none).
func (r *runner) skewTenant() int {
	if a := r.skewPlan(); a != nil {
		return a.Tenant
	}
	return -1
}

// checkClockSkew judges the skewed agent: it signed in on the board (its
// TOTP codes use the panel-corrected clock, or the board would refuse codes
// three minutes old), it claimed (CONFIRMED claims of its own loads), and
// the times it reported, corrected by the panel with the offset its pings
// measured, agree with the board's own record of those bookings within 2 s.
// A hit is all three. Only its own loads are judged: they are booked with
// every board switch off, while a booking held by another step's hold is
// recorded by the board seconds after it was sent.
func (r *runner) checkClockSkew(ctx context.Context) (int, string) {
	p := r.skewAgent()
	if p == nil {
		return 0, "no HTTP-only actor agent"
	}
	if why := r.awaitFree(ctx, p, skewFreeWait); why != "" {
		return 0, why
	}
	keys, own := r.skewOwnLoads(ctx, p)
	signIns := 0
	for after := int64(0); ; {
		evs := r.board().Events(after, 1000)
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			if e.Type == board.EvLogin && e.Account == p.agent.Name {
				signIns++
			}
			after = e.Seq
		}
	}
	client := r.tenants[p.agent.Tenant].Client
	start := time.Now()
	for {
		booked := map[string]time.Time{}
		for _, b := range r.board().Bookings(client) {
			if b.Account == p.agent.Name && b.Source == "http" {
				booked[b.LoadID] = b.BookedAt
			}
		}
		rows, err := r.super.Query(ctx, `SELECT target_job_key, act_sent_at FROM claims
			WHERE holder_agent = $1 AND state = 'CONFIRMED' AND act_sent_at IS NOT NULL AND target_job_key = ANY($2)`, p.agentID, keys)
		checked, worst := 0, time.Duration(0)
		if err == nil {
			for rows.Next() {
				var key string
				var sent time.Time
				if rows.Scan(&key, &sent) != nil {
					continue
				}
				at, ok := booked[key]
				if !ok {
					continue
				}
				checked++
				d := at.Sub(sent)
				if d < 0 {
					d = -d
				}
				worst = max(worst, d)
			}
			rows.Close()
		}
		if checked > 0 {
			detail := fmt.Sprintf("%s (clock %s off) signed in %d time(s); %s; %d confirmed booking(s) of its own loads: reported act_sent_at within %s of the board's booking time (bound %s)",
				p.name, clockSkew, signIns, own, checked, worst.Round(time.Millisecond), skewTolerance)
			if signIns == 0 || worst > skewTolerance {
				return 0, detail
			}
			return 1, detail
		}
		if time.Since(start) > 10*time.Second || !r.sleep(ctx, 500*time.Millisecond) {
			return 0, fmt.Sprintf("%s (clock %s off) signed in %d time(s); %s; but it has no confirmed booking of its own loads to check", p.name, clockSkew, signIns, own)
		}
	}
}

// awaitFree waits until the agent is free of other chaos — not frozen
// (agent_stop_past_lease may have stopped it a step before), not cut off
// (agent_panel_partition), running and connected — or the wait passed;
// it says why not ("" when free).
func (r *runner) awaitFree(ctx context.Context, p *proc, wait time.Duration) string {
	start := time.Now()
	for {
		r.mu.Lock()
		busy := r.stopped[p] || r.partitioned == p
		r.mu.Unlock()
		if !busy && p.pid() != 0 {
			if ok, _ := r.agentConnected(ctx, p); ok {
				return ""
			}
		}
		if time.Since(start) > wait || !r.sleep(ctx, 250*time.Millisecond) {
			return fmt.Sprintf("%s was not free of other chaos and connected within %s", p.name, wait)
		}
	}
}

// Own loads of the skewed agent: the board's loads are open to every
// client, so whether the skewed agent's single actor won one depended on
// the dice (in the suite's run it is its tenant's only actor, racing the
// other tenants' fleets for every load). The step makes its hit certain:
// it publishes skewLoads loads at skewLoadRate, a rate per mile below
// otherTenantsMinRate (the floor of every other tenant's filter, far below
// anything the board's publisher draws), so only the skewed agent's
// tenant wants them, and pauses that tenant's other actor agents (the
// operators' per-agent pause, audited) until the skewed agent has
// confirmed one of them or skewOwnWait has passed (another batch every
// skewBatchEvery meanwhile), then resumes them.
const (
	skewLoads   = 3
	skewLoadUSD = 25 // for 150–2,350 miles: at most 17 cents a mile
	// otherTenantsMinRate is the other tenants' filter floor in cents a
	// mile; the board's publisher draws $1.60–3.40 a mile.
	otherTenantsMinRate = 100
	skewOwnWait         = 2 * time.Minute
	skewBatchEvery      = 30 * time.Second
	skewFreeWait        = 2 * time.Minute
)

// skewOwnLoads publishes the skewed agent's own loads and waits until it
// confirmed one (or skewOwnWait passed); it returns their keys and says
// what it did.
func (r *runner) skewOwnLoads(ctx context.Context, p *proc) ([]string, string) {
	tenant := r.tenantIDs[p.agent.Tenant]
	by := audit.Entry{Actor: "loadtest"}
	var paused []*proc
	for _, o := range r.agents {
		if o != p && o.agent.Tenant == p.agent.Tenant && o.agent.acts() {
			if _, err := r.fleet.Enqueue(ctx, tenant, o.agentID, fleet.CmdPause, fleet.CommandBody{Reason: "chaos " + KindClockSkew + ": the skewed agent's own loads"}, by); err != nil {
				r.note("%s: pausing %s: %v", KindClockSkew, o.name, err)
				continue
			}
			paused = append(paused, o)
		}
	}
	defer func() {
		for _, o := range paused {
			if _, err := r.fleet.Enqueue(context.WithoutCancel(ctx), tenant, o.agentID, fleet.CmdResume, fleet.CommandBody{}, by); err != nil {
				r.note("%s: resuming %s: %v", KindClockSkew, o.name, err)
			}
		}
	}()
	if len(paused) > 0 && !r.sleep(ctx, 2*time.Second) { // the pause reaches them
		return nil, "stopped"
	}
	var keys []string
	start := time.Now()
	var nextBatch time.Time
	for {
		if time.Now().After(nextBatch) {
			specs := make([]board.LoadSpec, skewLoads)
			for i := range specs {
				specs[i].RateUSD = skewLoadUSD
			}
			loads, err := r.board().Publish(ctx, skewLoads, specs)
			if err != nil {
				r.note("%s: publishing its own loads: %v", KindClockSkew, err)
			}
			for _, l := range loads {
				keys = append(keys, l.ID)
			}
			nextBatch = time.Now().Add(skewBatchEvery)
		}
		var n int
		err := r.super.QueryRow(ctx, `SELECT count(*) FROM claims WHERE holder_agent = $1 AND state = 'CONFIRMED' AND target_job_key = ANY($2)`,
			p.agentID, keys).Scan(&n)
		if err == nil && n > 0 {
			return keys, fmt.Sprintf("%d own load(s) published (%d other actor agent(s) of its tenant paused meanwhile), %d confirmed by it after %s",
				len(keys), len(paused), n, time.Since(start).Round(100*time.Millisecond))
		}
		if time.Since(start) > skewOwnWait || !r.sleep(ctx, 500*time.Millisecond) {
			return keys, fmt.Sprintf("%d own load(s) published (%d other actor agent(s) of its tenant paused meanwhile), none confirmed by it within %s",
				len(keys), len(paused), skewOwnWait)
		}
	}
}
