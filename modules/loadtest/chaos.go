package loadtest

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/fleetwright/fleetwright/modules/board"
)

// Chaos kinds, as named in the report's chaos_hits.
const (
	KindAgentKill     = "agent_kill_mid_action" // SIGKILL an agent while its claim is ACTING (board hold)
	KindAgentStop     = "agent_stop_past_lease" // SIGSTOP an agent holding a claim past its lease and act deadline, then SIGCONT
	KindRedisOutage   = "cell_redis_outage"     // stop cell b's Redis, start it again
	KindDropResponse  = "board_drop_response"   // the board commits and drops the response
	KindLateCommit    = "board_late_commit"     // 504 at once, committed seconds later
	Kind5xx           = "board_5xx_burst"       // 503 without effect
	KindSessionStorm  = "session_storm"         // every board session expires
	KindPanelRestart  = "panel_replica_restart" // SIGKILL a panel replica; its unit restarts it
	chaosGap          = time.Second
	boardBurstMin     = 3 * time.Second
	boardBurstMax     = 25 * time.Second
	holdFor           = 4 * time.Second
	findActingTimeout = 30 * time.Second
)

// ChaosKinds lists every kind in schedule order.
var ChaosKinds = []string{Kind5xx, KindDropResponse, KindSessionStorm, KindAgentKill, KindLateCommit, KindRedisOutage, KindAgentStop, KindPanelRestart}

// chaos runs the schedule in cycles until ctx ends; cycleDone closes when
// the first cycle has finished. Each step is bounded and restores what it
// changed; the seeded generator picks targets and jitters the gaps, so a
// seed replays the same choices.
func (r *runner) chaos(ctx context.Context, cycleDone chan<- struct{}) {
	steps := map[string]func(context.Context) (int, string){
		Kind5xx: func(ctx context.Context) (int, string) {
			return r.boardBurst(ctx, board.EvServerError, func(c *board.Chaos, on bool) { c.ErrorRate = onOff(on, 0.25) })
		},
		KindDropResponse: func(ctx context.Context) (int, string) {
			return r.boardBurst(ctx, board.EvResponseDropped, func(c *board.Chaos, on bool) { c.DropResponseRate = onOff(on, 0.4) })
		},
		KindLateCommit: func(ctx context.Context) (int, string) {
			return r.boardBurst(ctx, board.EvLateCommit, func(c *board.Chaos, on bool) {
				c.LateCommitRate, c.LateCommitDelay = onOff(on, 0.4), board.Duration(5*time.Second)
			})
		},
		KindSessionStorm: func(context.Context) (int, string) {
			n := r.brd.SessionStorm(1)
			return min(n, 1), fmt.Sprintf("%d sessions expired", n)
		},
		KindAgentKill:    r.killMidAction,
		KindAgentStop:    r.stopPastLease,
		KindRedisOutage:  r.redisOutage,
		KindPanelRestart: r.panelRestart,
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
// boardBurstMax, then off; the hits are the events the board logged.
func (r *runner) boardBurst(ctx context.Context, event string, set func(*board.Chaos, bool)) (int, string) {
	after := r.lastEvent()
	c := r.brd.Chaos()
	set(&c, true)
	if err := r.brd.SetChaos(c); err != nil {
		return 0, err.Error()
	}
	start := time.Now()
	for time.Since(start) < boardBurstMax {
		if time.Since(start) >= boardBurstMin && r.countEvents(after, event) > 0 {
			break
		}
		if !r.sleep(ctx, 200*time.Millisecond) {
			break
		}
	}
	c = r.brd.Chaos()
	set(&c, false)
	_ = r.brd.SetChaos(c)
	n := r.countEvents(after, event)
	return n, fmt.Sprintf("switch on for %s", time.Since(start).Round(100*time.Millisecond))
}

func (r *runner) lastEvent() int64 {
	return r.brd.Stats().Events
}

// countEvents counts the board's events of a type after seq.
func (r *runner) countEvents(after int64, typ string) int {
	n := 0
	for {
		evs := r.brd.Events(after, 1000)
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
// one of the candidate agents (in seeded order) has a claim in ACTING.
func (r *runner) findActing(ctx context.Context, candidates []*proc) (acting, func(), error) {
	c := r.brd.Chaos()
	c.Hold = board.Duration(holdFor)
	_ = r.brd.SetChaos(c)
	release := func() {
		c := r.brd.Chaos()
		c.Hold = 0
		_ = r.brd.SetChaos(c)
	}
	order := append([]*proc(nil), candidates...)
	r.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	deadline := time.Now().Add(findActingTimeout)
	for time.Now().Before(deadline) {
		held := map[string]acting{}
		rows, err := r.super.Query(ctx, `SELECT holder_agent::text, target_job_key, tenant_id::text FROM claims
			WHERE state = 'ACTING' AND act_started_at > now() - interval '2 seconds'`)
		if err == nil {
			for rows.Next() {
				var a acting
				var agent string
				if rows.Scan(&agent, &a.key, &a.tenantID) == nil {
					held[agent] = a
				}
			}
			rows.Close()
		}
		for _, p := range order {
			r.mu.Lock()
			busy := r.stopped[p]
			r.mu.Unlock()
			if a, ok := held[p.agentID]; ok && !busy && p.pid() != 0 {
				a.p = p
				return a, release, nil
			}
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

// killMidAction SIGKILLs an HTTP-only agent whose claim is ACTING (the board
// holds its booking request), so the request still books after the agent
// died: the claim must end CONFIRMED through the reconciler. The agent's
// unit restarts it, and its journal reports the action UNKNOWN.
func (r *runner) killMidAction(ctx context.Context) (int, string) {
	var cands []*proc
	for _, p := range r.agents {
		if p.agent.httpOnly() && p.agent.acts() {
			cands = append(cands, p)
		}
	}
	a, release, err := r.findActing(ctx, cands)
	defer release()
	if err != nil {
		return 0, "no HTTP-only agent was ACTING within " + findActingTimeout.String()
	}
	if r.claimState(ctx, a.tenantID, a.key) != "ACTING" {
		return 0, "the claim left ACTING before the kill"
	}
	if err := a.p.u.Signal(syscall.SIGKILL); err != nil {
		return 0, err.Error()
	}
	return 1, fmt.Sprintf("SIGKILL %s while %s was ACTING", a.p.name, a.key)
}

// stopPastLease SIGSTOPs an agent holding a claim for longer than both its
// lease and its act deadline, then SIGCONTs it: the database, not the
// agent's clock, must decide what its late words are worth.
func (r *runner) stopPastLease(ctx context.Context) (int, string) {
	var cands []*proc
	for _, p := range r.agents {
		if p.agent.acts() {
			cands = append(cands, p)
		}
	}
	a, release, err := r.findActing(ctx, cands)
	if err != nil {
		release()
		return 0, "no agent was ACTING within " + findActingTimeout.String()
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
	for time.Since(down) < 20*time.Second {
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
