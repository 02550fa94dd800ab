package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/fleetwright/fleetwright/modules/claim"
)

// Stage is one latency stage's percentiles over the confirmed claims.
type Stage struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P95   float64 `json:"p95_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
	// Clock (publish_detect only): the error bounds of the platform clock
	// readings the figure rests on, and how many of its claims had one.
	Clock *ClockBound `json:"board_clock,omitempty"`
}

// ClockBound summarises the platform clock's error bounds behind
// publish → detect.
type ClockBound struct {
	Measured int     `json:"measured"`
	P50      float64 `json:"p50_ms"`
	Max      float64 `json:"max_ms"`
}

// Unknowns says how the claims that became UNKNOWN were settled.
type Unknowns struct {
	Raised    int `json:"raised"`
	Confirmed int `json:"settled_confirmed"` // the board had our booking (reconciled, or a late true report)
	Released  int `json:"settled_released"`  // a complete look-up after grace found none
	Unsettled int `json:"unsettled"`
}

// Leak is a known secret found where it must not be.
type Leak struct {
	Kind  string `json:"kind"`
	Where string `json:"where"`
}

// Report is the result of a run; the JSON names are the contract.
type Report struct {
	Workers        int    `json:"workers"`
	BrowserWorkers int    `json:"browser_workers"`
	AgentProcesses int    `json:"agent_processes"`
	PanelReplicas  int    `json:"panel_replicas"`
	Tenants        int    `json:"tenants"`
	Cells          int    `json:"cells"`
	Chaos          string `json:"chaos"`
	// DispatchMode is the tenants' claim dispatch mode (race or assign).
	DispatchMode     string  `json:"dispatch_mode"`
	Seed             int     `json:"seed"`
	Rate             float64 `json:"rate"`
	DurationSeconds  float64 `json:"duration_seconds"`
	PublishedSeconds float64 `json:"published_seconds"`
	SettleSeconds    float64 `json:"settle_seconds"`
	Settled          bool    `json:"settled"`
	Machine          string  `json:"machine"`

	LoadsPublished         int64 `json:"loads_published"`
	BoardBookings          int64 `json:"board_bookings"`
	BookingRequests        int64 `json:"booking_requests"`
	DuplicateConfirmations int64 `json:"duplicate_confirmations"`

	Claims           int      `json:"claims"`
	Confirmed        int      `json:"confirmed"`
	Taken            int      `json:"taken"`
	NotSent          int      `json:"not_sent"`
	Released         int      `json:"released"`
	UnknownRaised    int      `json:"unknown_raised"`
	UnknownSettled   Unknowns `json:"unknown_settled"`
	UnknownUnsettled int      `json:"unknown_unsettled"`
	LostClaims       int      `json:"lost_claims"`
	// GivenUpAfterUnknown counts jobs released after an UNKNOWN that were
	// given up (never leased again: booking them again is not safe).
	GivenUpAfterUnknown int `json:"given_up_after_unknown"`
	// LateEvidenceApplied counts attempts whose booking was applied after
	// their claim had moved on (RELEASED or LEASED → CONFIRMED, a marked ACTING).
	LateEvidenceApplied int `json:"late_evidence_applied"`
	// Conflicts counts jobs booked two or more times for one client with
	// different booking ids (board evidence); 0 is required.
	Conflicts int `json:"conflicts"`
	// LateCommitsAfterGrace are board_commit_after_grace's bookings, and
	// LateCommitsUnconfirmed those not CONFIRMED within 2 minutes of the
	// commit (0 is required).
	LateCommitsAfterGrace  int            `json:"late_commits_after_grace"`
	LateCommitsUnconfirmed int            `json:"late_commits_unconfirmed"`
	Unconfirmed            []string       `json:"late_commits_unconfirmed_keys,omitempty"`
	PhantomClaims          int            `json:"phantom_claims"`
	StuckClaims            int            `json:"stuck_claims"`
	States                 map[string]int `json:"states"`
	Lost                   []string       `json:"lost,omitempty"`
	Phantom                []string       `json:"phantom,omitempty"`
	Stuck                  []string       `json:"stuck,omitempty"`

	ChaosHits map[string]int `json:"chaos_hits"`
	// EmbeddedRestarts counts the run's own services started again by their
	// supervisor (postgres, redis:a, redis:b) after they died.
	EmbeddedRestarts map[string]int `json:"embedded_restarts"`
	SecretsLeaked    int            `json:"secrets_leaked"`
	Leaks            []Leak         `json:"leaks,omitempty"`
	SecretsKnown     int            `json:"secrets_known"`
	FilesScanned     int            `json:"files_scanned"`
	BytesScanned     int64          `json:"bytes_scanned"`
	LeftBehind       int            `json:"processes_left_behind"`
	// MaxBrowsers is the most Chromium instances seen at once (sampled each second).
	MaxBrowsers int `json:"max_chromium"`

	Stages map[string]Stage `json:"stages"`
	// Panel is the panel's own share of detect→leased, measured inside the
	// replicas (histograms, so percentiles are interpolated within buckets).
	Panel map[string]Stage `json:"panel"`
	// PanelIn is panel_in per claim over the whole run: one replica's
	// monotonic time from a sighting's arrival on an agent connection to
	// the first send of its job to an actor (the offer in race mode, the
	// grant in assign mode), measured inside the replicas
	// (fleet_claim_panel_in_seconds, interpolated within its buckets).
	PanelIn Stage `json:"panel_in_ms"`
	// PanelInOfClaims is the number of claims panel_in's count is out of:
	// a job is measured only when the replica that received its sighting
	// also sent its first offer or grant (one replica's clock, never two).
	PanelInOfClaims int `json:"panel_in_of_claims"`
	// PanelInTarget is issue 16's target for it (p50 ≤ 3 ms), reported
	// and never a failure.
	PanelInTarget Target `json:"panel_in_target"`
	// RoundTripMS is the agents' measured WebSocket round trip (ping/pong).
	RoundTripMS Stage `json:"agent_round_trip"`

	// LogVolume is every process's log volume (bytes per minute) and the
	// ceiling check (a warning).
	LogVolume LogVolume `json:"log_volume"`
	// BoardOutage is the --board-outage phase and its judgement.
	BoardOutage *Outage `json:"board_outage,omitempty"`

	// Warnings are findings that do not fail the run.
	Warnings []string `json:"warnings,omitempty"`
	Notes    []string `json:"notes,omitempty"`
	Failures []string `json:"failures,omitempty"`
	Failed   bool     `json:"failed"`
}

// Target is a speed target checked against a run's figure.
type Target struct {
	Name     string  `json:"name"`
	P50MaxMS float64 `json:"p50_max_ms"`
	P50MS    float64 `json:"p50_ms"`
	Met      bool    `json:"met"`
}

// gather reads the claims, the board's ground truth and the panels' own
// timings.
func (r *runner) gather(ctx context.Context) (*Report, error) {
	workers, browsers, agents := counts(r.tenants)
	rep := &Report{Workers: workers, BrowserWorkers: browsers, AgentProcesses: agents, PanelReplicas: len(r.panels),
		Tenants: len(r.tenants), Cells: 2, Chaos: r.cfg.Chaos, DispatchMode: r.dispatchMode(), Seed: r.cfg.Seed, Rate: r.cfg.Rate,
		DurationSeconds: r.cfg.Duration.Seconds(), PublishedSeconds: r.measured.Seconds(),
		Machine: machine(), ChaosHits: map[string]int{}, States: map[string]int{}, Stages: map[string]Stage{}}
	r.mu.Lock()
	if r.cfg.Chaos == "on" {
		for _, k := range ChaosKinds {
			rep.ChaosHits[k] = r.hits[k]
		}
	}
	rep.Notes = append(rep.Notes, r.notes...)
	rep.MaxBrowsers = r.maxBrowsers
	rep.EmbeddedRestarts = map[string]int{}
	for k, v := range r.restarts {
		rep.EmbeddedRestarts[k] = v
	}
	r.mu.Unlock()

	st := r.board().Stats()
	rep.LoadsPublished, rep.BoardBookings, rep.BookingRequests, rep.DuplicateConfirmations =
		st.LoadsPublished, st.ConfirmedBookings, st.BookingRequests, st.DuplicateConfirmations

	type row struct {
		state, outcome string
		c              claim.Claim
	}
	spans := map[string][]float64{}
	var boardBounds []float64
	add := func(name string, a, b *time.Time) {
		if a != nil && b != nil && !b.Before(*a) {
			spans[name] = append(spans[name], float64(b.Sub(*a).Microseconds())/1000)
		}
	}
	for ti, t := range r.tenants {
		tid := r.tenantIDs[ti]
		rows, err := r.super.Query(ctx, `SELECT target_job_key, state, COALESCE(outcome, ''), leased_at, act_sent_at, confirmed_at,
				published_at, seen_at, queued_at, board_clock_error_ms
			FROM claims WHERE tenant_id = $1
			UNION ALL SELECT target_job_key, state, COALESCE(outcome, ''), leased_at, act_sent_at, confirmed_at,
				published_at, seen_at, queued_at, board_clock_error_ms
			FROM claims_archive WHERE tenant_id = $1`, tid)
		if err != nil {
			return nil, fmt.Errorf("loadtest: read claims: %w", err)
		}
		confirmed := map[string]bool{}
		for rows.Next() {
			var x row
			if err := rows.Scan(&x.c.Key, &x.state, &x.outcome, &x.c.LeasedAt, &x.c.ActSentAt, &x.c.ConfirmedAt,
				&x.c.PublishedAt, &x.c.SeenAt, &x.c.QueueAt, &x.c.BoardClockErrorMS); err != nil {
				rows.Close()
				return nil, fmt.Errorf("loadtest: read claims: %w", err)
			}
			rep.Claims++
			rep.States[x.state]++
			switch x.state {
			case "CONFIRMED":
				confirmed[x.c.Key] = true
				c := x.c
				leased := &c.LeasedAt
				add("publish_detect", c.PublishedAt, c.SeenAt)
				if c.BoardClockErrorMS != nil && c.PublishedAt != nil && c.SeenAt != nil {
					boardBounds = append(boardBounds, float64(*c.BoardClockErrorMS))
				}
				add("seen_queued", c.SeenAt, c.QueueAt)
				add("queued_leased", c.QueueAt, leased)
				add("detect_leased", c.SeenAt, leased)
				add("leased_act_sent", leased, c.ActSentAt)
				add("detect_action", c.SeenAt, c.ActSentAt)
				add("act_sent_confirmed", c.ActSentAt, c.ConfirmedAt)
				add("publish_confirmed", c.PublishedAt, c.ConfirmedAt)
			case "LEASED", "ACTING", "UNKNOWN":
				rep.Stuck = append(rep.Stuck, fmt.Sprintf("%s/%s %s", t.Slug, x.c.Key, x.state))
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("loadtest: read claims: %w", err)
		}
		booked := map[string]bool{}
		for _, b := range r.board().Bookings(t.Client) {
			booked[b.LoadID] = true
		}
		for k := range booked {
			if !confirmed[k] {
				rep.Lost = append(rep.Lost, t.Slug+"/"+k)
			}
		}
		for k := range confirmed {
			if !booked[k] {
				rep.Phantom = append(rep.Phantom, t.Slug+"/"+k)
			}
		}
	}
	rep.Confirmed, rep.Taken = rep.States["CONFIRMED"], rep.States["TAKEN"]
	sort.Strings(rep.Lost)
	sort.Strings(rep.Phantom)
	sort.Strings(rep.Stuck)
	rep.LostClaims, rep.PhantomClaims, rep.StuckClaims = len(rep.Lost), len(rep.Phantom), len(rep.Stuck)

	// UNKNOWNs and NOT_SENTs from the transition log: each UNKNOWN (by key
	// and token) and what followed it.
	err := r.super.QueryRow(ctx, `SELECT count(*) FROM claim_transitions WHERE outcome = 'NOT_SENT' AND to_state = 'RELEASED'`).Scan(&rep.NotSent)
	if err != nil {
		return nil, fmt.Errorf("loadtest: read transitions: %w", err)
	}
	if err := r.super.QueryRow(ctx, `SELECT count(*) FROM claim_transitions WHERE to_state = 'RELEASED'`).Scan(&rep.Released); err != nil {
		return nil, fmt.Errorf("loadtest: read transitions: %w", err)
	}
	err = r.super.QueryRow(ctx, `
		WITH u AS (SELECT tenant_id, target_job_key, token, id FROM claim_transitions WHERE to_state = 'UNKNOWN')
		SELECT count(*),
		  count(*) FILTER (WHERE nxt = 'CONFIRMED'),
		  count(*) FILTER (WHERE nxt = 'RELEASED'),
		  count(*) FILTER (WHERE nxt IS NULL)
		FROM (SELECT (SELECT t.to_state FROM claim_transitions t
		              WHERE t.tenant_id = u.tenant_id AND t.target_job_key = u.target_job_key AND t.token = u.token AND t.id > u.id
		              ORDER BY t.id LIMIT 1) AS nxt FROM u) s`).Scan(
		&rep.UnknownSettled.Raised, &rep.UnknownSettled.Confirmed, &rep.UnknownSettled.Released, &rep.UnknownSettled.Unsettled)
	if err != nil {
		return nil, fmt.Errorf("loadtest: read transitions: %w", err)
	}
	rep.UnknownRaised, rep.UnknownUnsettled = rep.UnknownSettled.Raised, rep.UnknownSettled.Unsettled
	err = r.super.QueryRow(ctx, `SELECT
		  (SELECT count(*) FROM claim_transitions WHERE to_state = 'RELEASED' AND outcome = 'GIVEN_UP'),
		  (SELECT count(*) FROM claim_attempts WHERE late_evidence),
		  (SELECT count(*) FROM (SELECT DISTINCT tenant_id, target_job_key FROM claim_attempts WHERE conflict) c)`).Scan(
		&rep.GivenUpAfterUnknown, &rep.LateEvidenceApplied, &rep.Conflicts)
	if err != nil {
		return nil, fmt.Errorf("loadtest: read attempts: %w", err)
	}
	r.mu.Lock()
	rep.LateCommitsAfterGrace, rep.Unconfirmed = r.afterGrace, append([]string(nil), r.afterGraceLate...)
	r.mu.Unlock()
	rep.LateCommitsUnconfirmed = len(rep.Unconfirmed)

	for name, v := range spans {
		rep.Stages[name] = percentiles(v)
	}
	if s, ok := rep.Stages["publish_detect"]; ok {
		b := percentiles(boardBounds)
		s.Clock = &ClockBound{Measured: b.Count, P50: b.P50, Max: b.Max}
		rep.Stages["publish_detect"] = s
	}
	var rtts []float64
	rows, err := r.super.Query(ctx, `SELECT rtt_ms FROM agents WHERE rtt_ms IS NOT NULL`)
	if err == nil {
		for rows.Next() {
			var e float64
			if rows.Scan(&e) == nil {
				rtts = append(rtts, e)
			}
		}
		rows.Close()
	}
	rep.RoundTripMS = percentiles(rtts)
	r.stopScrape()
	r.scrapeAll(ctx, true)
	rep.Panel = r.panelShare()
	rep.PanelIn = r.panelIn()
	rep.PanelInTarget = Target{Name: "panel_in p50 ≤ 3 ms (issue 16)", P50MaxMS: panelInTargetMS, P50MS: rep.PanelIn.P50,
		Met: rep.PanelIn.Count > 0 && rep.PanelIn.P50 <= panelInTargetMS}
	rep.PanelInOfClaims = rep.Claims
	if rep.PanelIn.Count == 0 {
		w := "no panel_in figure: no replica measured a sighting's arrival and its first offer or grant"
		if rep.DispatchMode == claim.DispatchAssign {
			w += " (in assign mode a grant is measured only on the replica that received the sighting, when it also holds the chosen actor's connection; " +
				"this run's actors of each tenant may all be on the other replica)"
		}
		rep.Warnings = append(rep.Warnings, w)
	}
	if r.outage != nil {
		o, err := r.judgeOutage(ctx)
		if err != nil {
			return nil, err
		}
		rep.BoardOutage = o
		if len(o.Alarms) > 0 && o.OpenAtReturn == 0 {
			rep.Warnings = append(rep.Warnings, "board outage: every alarm raised during it was resolved before the board returned")
		}
	}
	return rep, nil
}

// percentiles by nearest rank.
func percentiles(v []float64) Stage {
	if len(v) == 0 {
		return Stage{}
	}
	sort.Float64s(v)
	at := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(v)))) - 1
		return round2(v[max(0, min(i, len(v)-1))])
	}
	return Stage{Count: len(v), P50: at(.5), P95: at(.95), P99: at(.99), Max: round2(v[len(v)-1])}
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }

func machine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				model = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(strings.SplitN(string(b), "\n", 2)[0], "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf(", %.0f GiB", float64(kb)/(1<<20))
		}
	}
	return fmt.Sprintf("%d cores (%s)%s, %s/%s", runtime.NumCPU(), model, mem, runtime.GOOS, runtime.GOARCH)
}

// finish decides whether the run failed.
func (rep *Report) finish(chaosOn bool) {
	var f []string
	if rep.DuplicateConfirmations > 0 {
		f = append(f, fmt.Sprintf("%d duplicate confirmation(s) on the board", rep.DuplicateConfirmations))
	}
	if rep.LostClaims > 0 {
		f = append(f, fmt.Sprintf("%d lost claim(s)", rep.LostClaims))
	}
	if rep.Conflicts > 0 {
		f = append(f, fmt.Sprintf("%d conflict(s): jobs booked twice for one client", rep.Conflicts))
	}
	if rep.LateCommitsUnconfirmed > 0 {
		f = append(f, fmt.Sprintf("%d booking(s) committed after grace not CONFIRMED within 2 minutes", rep.LateCommitsUnconfirmed))
	}
	if rep.PhantomClaims > 0 {
		f = append(f, fmt.Sprintf("%d phantom claim(s)", rep.PhantomClaims))
	}
	if rep.StuckClaims > 0 || rep.UnknownUnsettled > 0 {
		f = append(f, fmt.Sprintf("%d stuck claim(s), %d UNKNOWN unsettled", rep.StuckClaims, rep.UnknownUnsettled))
	}
	if rep.SecretsLeaked > 0 {
		f = append(f, fmt.Sprintf("%d secret(s) leaked", rep.SecretsLeaked))
	}
	if chaosOn {
		for _, k := range ChaosKinds {
			if rep.ChaosHits[k] == 0 {
				f = append(f, "chaos kind "+k+" never hit")
			}
		}
	}
	if rep.LoadsPublished == 0 || rep.Confirmed == 0 {
		f = append(f, "nothing was published or confirmed: the fleet did not work")
	}
	if rep.BoardOutage != nil {
		f = append(f, rep.BoardOutage.Failures...)
	}
	if rep.LeftBehind > 0 {
		f = append(f, fmt.Sprintf("%d process(es) left behind had to be killed", rep.LeftBehind))
	}
	rep.Failures, rep.Failed = f, len(f) > 0
}

// WriteJSON writes the report to path (0600).
func (rep *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("loadtest: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("loadtest: write report: %w", err)
	}
	return nil
}

// stageOrder is the order stages are printed in.
var stageOrder = []string{"publish_detect", "seen_queued", "queued_leased", "detect_leased", "leased_act_sent", "detect_action", "act_sent_confirmed", "publish_confirmed"}

// WriteText prints the report for a person.
func (rep *Report) WriteText(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	p("")
	p("Fleet load and chaos test — %d workers (%d in Chromium) in %d agent processes, %d panel replicas, %d tenants in %d cells",
		rep.Workers, rep.BrowserWorkers, rep.AgentProcesses, rep.PanelReplicas, rep.Tenants, rep.Cells)
	p("  machine: %s", rep.Machine)
	p("  dispatch mode %s, chaos %s, seed %d, rate %.2g/s, published for %.0fs (asked %.0fs), settled in %.0fs (%v)",
		rep.DispatchMode, rep.Chaos, rep.Seed, rep.Rate, rep.PublishedSeconds, rep.DurationSeconds, rep.SettleSeconds, rep.Settled)
	p("")
	p("  loads published          %d", rep.LoadsPublished)
	p("  board bookings           %d (booking requests %d)", rep.BoardBookings, rep.BookingRequests)
	p("  claims                   %d", rep.Claims)
	p("  confirmed                %d", rep.Confirmed)
	p("  taken                    %d", rep.Taken)
	p("  not sent                 %d", rep.NotSent)
	p("  unknown raised           %d: settled confirmed %d, released %d, unsettled %d",
		rep.UnknownRaised, rep.UnknownSettled.Confirmed, rep.UnknownSettled.Released, rep.UnknownUnsettled)
	p("  duplicate confirmations  %d", rep.DuplicateConfirmations)
	p("  lost claims              %d %s", rep.LostClaims, short(rep.Lost))
	p("  given up after unknown   %d", rep.GivenUpAfterUnknown)
	p("  late evidence applied    %d", rep.LateEvidenceApplied)
	p("  conflicts                %d", rep.Conflicts)
	p("  commits after grace      %d (%d not CONFIRMED within 2 min %s)", rep.LateCommitsAfterGrace, rep.LateCommitsUnconfirmed, short(rep.Unconfirmed))
	p("  phantom claims           %d %s", rep.PhantomClaims, short(rep.Phantom))
	p("  stuck claims             %d %s", rep.StuckClaims, short(rep.Stuck))
	p("  most Chromium at once    %d", rep.MaxBrowsers)
	p("  secrets leaked           %d (%d known secrets, %d files, %.1f MB scanned)", rep.SecretsLeaked, rep.SecretsKnown, rep.FilesScanned, float64(rep.BytesScanned)/1e6)
	for _, l := range rep.Leaks {
		p("    LEAK %s in %s", l.Kind, l.Where)
	}
	if len(rep.ChaosHits) > 0 {
		p("")
		p("  chaos hits:")
		for _, k := range ChaosKinds {
			p("    %-24s %d", k, rep.ChaosHits[k])
		}
	}
	if len(rep.EmbeddedRestarts) > 0 {
		p("  embedded services restarted by their supervisor: %v", rep.EmbeddedRestarts)
	}
	p("")
	p("  latency (ms, confirmed claims)     count      p50      p95      p99      max")
	for _, name := range stageOrder {
		s := rep.Stages[name]
		p("    %-30s %7d %8.1f %8.1f %8.1f %8.1f", name, s.Count, s.P50, s.P95, s.P99, s.Max)
		if s.Clock != nil {
			p("      platform clock measured on %d of %d: error bound p50 ±%.1f ms, worst ±%.1f ms", s.Clock.Measured, s.Count, s.Clock.P50, s.Clock.Max)
		}
	}
	if len(rep.Panel) > 0 {
		p("  the panel's own share of detect→leased (inside the replicas):")
		names := make([]string, 0, len(rep.Panel))
		for n := range rep.Panel {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, name := range names {
			s := rep.Panel[name]
			p("    %-30s %7d %8.1f %8.1f %8.1f", name, s.Count, s.P50, s.P95, s.P99)
		}
	}
	p("    %-30s %7d %8.1f %8.1f %8.1f", "agent↔panel round trip", rep.RoundTripMS.Count, rep.RoundTripMS.P50, rep.RoundTripMS.P95, rep.RoundTripMS.P99)
	p("  panel_in per claim (%s mode; one replica, sighting arrival → first %s sent):", rep.DispatchMode, map[bool]string{true: "grant", false: "offer"}[rep.DispatchMode == claim.DispatchAssign])
	p("    %-30s %7d %8.1f %8.1f %8.1f   (measured for %d of %d claims: those whose sighting arrived on the replica that sent the job)",
		"panel_in", rep.PanelIn.Count, rep.PanelIn.P50, rep.PanelIn.P95, rep.PanelIn.P99, rep.PanelIn.Count, rep.PanelInOfClaims)
	met := "NOT met"
	if rep.PanelInTarget.Met {
		met = "met"
	}
	p("  check: %s: p50 %.2f ms — %s (reported, not a failure)", rep.PanelInTarget.Name, rep.PanelIn.P50, met)
	p("")
	lv := rep.LogVolume
	p("  log volume per process (ceiling %d KiB/min, a warning)      bytes     lines   minutes   KiB/min  repeats held", lv.CeilingBytesPerMin>>10)
	for _, x := range lv.Processes {
		flag := ""
		if x.BytesPerMin > float64(lv.CeilingBytesPerMin) {
			flag = "  OVER"
		}
		p("    %-52s %10d %9d %9.1f %9.1f %13d%s", x.Process, x.Bytes, x.Lines, x.Minutes, x.BytesPerMin/1024, x.RepeatsHeld, flag)
	}
	p("    top: %s at %.1f KiB/min; all processes %.1f KiB/min", lv.Top, lv.TopBytesPerMin/1024, lv.TotalBytesPerMin/1024)
	if o := rep.BoardOutage; o != nil {
		o.writeText(p)
	}
	for _, w := range rep.Warnings {
		p("  warning: %s", w)
	}
	for _, n := range rep.Notes {
		p("  note: %s", n)
	}
	p("")
	if rep.Failed {
		p("FAIL: %s", strings.Join(rep.Failures, "; "))
	} else {
		p("PASS: no duplicate, lost, phantom or unsettled claim; no secret leaked; every enabled chaos kind hit")
	}
}

func short(list []string) string {
	if len(list) == 0 {
		return ""
	}
	if len(list) > 5 {
		return "(" + strings.Join(list[:5], ", ") + ", …)"
	}
	return "(" + strings.Join(list, ", ") + ")"
}
