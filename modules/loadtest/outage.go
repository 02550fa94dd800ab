package loadtest

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/fleetwright/fleetwright/modules/board"
)

// The --board-outage phase (docs/LOADTEST.md, "The board outage"): after
// the measured duration, with the chaos schedule over, the board's API
// fails for the set time while the board keeps publishing, in three parts:
// bookings alone answer 503 (the feed still shows loads, so sightings go on
// and every booking fails), then every request answers 503, then the board
// is down (connections refused) until it starts again on its store. Then
// the fleet runs on for outageAfter and every claim settles; the run judges
// every sighting of the outage, every load published during it and every
// claim open when it began.
const (
	// outageLead is the normal traffic before the outage.
	outageLead = 15 * time.Second
	// outageAfter is the normal traffic after the board returns.
	outageAfter = 60 * time.Second
	// outageResolveWithin bounds the wait for the alarms raised during the
	// outage to resolve once the board is back.
	outageResolveWithin = 3 * time.Minute
	// outageHealthInterval is the panels' health sweep interval in a run
	// with an outage, so an alarm opens and resolves within seconds of its
	// condition (the default is 15 s).
	outageHealthInterval = 5 * time.Second
)

// outageRun is what the phase recorded while it ran.
type outageRun struct {
	start, bookUntil, allUntil, end time.Time
	seqStart, seqEnd                int64
	// openAtStart are the claims LEASED, ACTING or UNKNOWN when it began,
	// per tenant index.
	openAtStart map[int][]string
	note        string
}

// OutageKey is one judged (tenant, job) of the outage.
type OutageKey struct {
	Tenant string `json:"tenant"`
	Key    string `json:"key"`
	Result string `json:"result"`
}

// OutageAlarm is an alarm raised while the board's API failed.
type OutageAlarm struct {
	Kind       string     `json:"kind"`
	Key        string     `json:"key"`
	RaisedAt   time.Time  `json:"raised_at"`
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
}

// Outage is the board outage's report.
type Outage struct {
	Seconds             float64 `json:"seconds"`
	BookingsFailSeconds float64 `json:"bookings_503_seconds"`
	AllFailSeconds      float64 `json:"all_503_seconds"`
	RefusedSeconds      float64 `json:"refused_seconds"`
	// LoadsPublished are the loads the board published while its API failed.
	LoadsPublished int `json:"loads_published"`
	// Sightings are the jobs the tenants' watchers saw while it failed.
	Sightings int `json:"sightings"`
	// OpenAtStart are the claims LEASED, ACTING or UNKNOWN when it began.
	OpenAtStart int `json:"claims_open_at_start"`
	// BookingRequestsRefused counts booking requests answered 503.
	BookingRequestsRefused int `json:"booking_requests_refused"`
	// BookingsAccepted counts bookings the board took while its API
	// failed (0: the outage was real).
	BookingsAccepted int `json:"bookings_accepted"`
	// Judged is every (tenant, job) of the three sets above, and Results
	// counts them by result: confirmed (booked once by the tenant's
	// client), taken (the claim learned another client had it),
	// taken_by_other_client (never leased here, another client booked it),
	// expired, released: <reason> (settled with a reason), and the
	// failures: unsettled, never_claimed, booked_twice, confirmed_not_booked.
	Judged  int            `json:"judged"`
	Results map[string]int `json:"results"`
	// ConfirmedAfter counts the judged claims confirmed after the board
	// returned.
	ConfirmedAfter int `json:"confirmed_after_return"`
	// ReleasedOpen counts the judged claims released (with a reason) whose
	// load no client booked and that had not expired: loads the fleet let
	// go, not lost bookings.
	ReleasedOpen int `json:"released_while_load_open"`
	// Alarms are the alarms raised while it failed; each must be resolved
	// by the end.
	Alarms     []OutageAlarm `json:"alarms"`
	Unresolved int           `json:"alarms_unresolved"`
	// OpenAtReturn counts the alarms open when the board came back, and
	// ResolvedDuring those resolved while it still failed (a flapping
	// alarm: reported, and a warning when none was open at the return).
	OpenAtReturn   int         `json:"alarms_open_when_board_returned"`
	ResolvedDuring int         `json:"alarms_resolved_during_outage"`
	Bad            []OutageKey `json:"bad,omitempty"`
	Failures       []string    `json:"failures,omitempty"`
}

// boardOutage runs the phase; it returns early only when ctx ends.
func (r *runner) boardOutage(ctx context.Context) {
	d := r.cfg.BoardOutage
	bookPart, allPart := d/6, d/2
	refused := d - bookPart - allPart
	o := &outageRun{}
	r.outage = o
	r.printf("board outage: %s of normal traffic, then the board's API fails for %s (bookings 503 %s, every request 503 %s, connections refused %s)",
		outageLead, d, bookPart, allPart, refused)
	if !r.sleep(ctx, outageLead) {
		return
	}
	o.openAtStart = r.openClaims(ctx)
	o.seqStart = r.lastEvent()
	o.start = time.Now()
	r.setBoardErrors(1, 0)
	r.log.Info("board outage: bookings answer 503")
	if !r.sleep(ctx, bookPart) {
		return
	}
	o.bookUntil = time.Now()
	r.setBoardErrors(1, 1)
	r.log.Info("board outage: every request answers 503")
	if !r.sleep(ctx, allPart) {
		return
	}
	o.allUntil = time.Now()

	// Down: the listener and every connection closed; the board object
	// stays readable (its oracle is in memory) until the new one replaces it.
	r.brdMu.Lock()
	old := r.brd
	cfg := r.bcfg
	cfg.Chaos, cfg.Rate = old.Chaos(), old.Stats().PublishRate
	cfg.Chaos.ErrorRate, cfg.Chaos.BookErrorRate = 0, 0
	killErr := old.Kill()
	r.brdMu.Unlock()
	if killErr != nil {
		r.log.Warn("board outage: kill", "err", killErr)
	}
	r.log.Info("board outage: the board is down (connections refused)")
	r.sleep(ctx, refused)
	var nb *board.Server
	var err error
	for i := 0; i < 50; i++ {
		if nb, err = board.Start(context.WithoutCancel(ctx), cfg, r.boardLog); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		// The run cannot go on without its board: the outage fails, and
		// the old object still answers the oracle's questions.
		o.note = "the board did not start again: " + err.Error()
		r.note("board outage: %s", o.note)
		o.end, o.seqEnd = time.Now(), r.lastEvent()
		return
	}
	r.brdMu.Lock()
	r.keepSessions(r.brd)
	r.brd = nb
	r.brdMu.Unlock()
	r.boardServing(nb, cfg)
	o.end = time.Now()
	o.seqEnd = r.lastEvent()
	if res, err := http.Get(nb.URL() + "/healthz"); err == nil {
		res.Body.Close()
	}
	r.printf("board outage: the board is back after %s; %s of normal traffic", o.end.Sub(o.start).Round(time.Second), outageAfter)
	if !r.sleep(ctx, outageAfter) {
		return
	}
	// The alarms raised during the outage resolve once their condition is
	// gone (a watcher reading its feed again, at the next health sweep).
	deadline := time.Now().Add(outageResolveWithin)
	for time.Now().Before(deadline) {
		var open int
		if err := r.super.QueryRow(ctx, `SELECT count(*) FROM alarms WHERE raised_at BETWEEN $1 AND $2 AND resolved_at IS NULL`,
			o.start, o.end).Scan(&open); err == nil && open == 0 {
			break
		}
		if !r.sleep(ctx, 2*time.Second) {
			return
		}
	}
}

// setBoardErrors sets the board's booking and every-request 503 rates.
func (r *runner) setBoardErrors(book, all float64) {
	c := r.board().Chaos()
	c.BookErrorRate, c.ErrorRate = book, all
	if err := r.board().SetChaos(c); err != nil {
		r.note("board outage: set chaos: %v", err)
	}
}

// openClaims lists the claims LEASED, ACTING or UNKNOWN now, per tenant index.
func (r *runner) openClaims(ctx context.Context) map[int][]string {
	out := map[int][]string{}
	for ti, id := range r.tenantIDs {
		rows, err := r.super.Query(ctx, `SELECT target_job_key FROM claims WHERE tenant_id = $1 AND state IN ('LEASED', 'ACTING', 'UNKNOWN')`, id)
		if err != nil {
			continue
		}
		for rows.Next() {
			var k string
			if rows.Scan(&k) == nil {
				out[ti] = append(out[ti], k)
			}
		}
		rows.Close()
	}
	return out
}

// judgeOutage checks, once every claim settled, that nothing of the outage
// was lost: every sighting during it, every load published during it and
// every claim open when it began is booked once by its tenant's client or
// settled with a reason, no load was booked twice, the board accepted no
// booking while it failed, and alarms were raised during it and resolved.
func (r *runner) judgeOutage(ctx context.Context) (*Outage, error) {
	o := r.outage
	rep := &Outage{Results: map[string]int{}}
	if o.start.IsZero() {
		rep.Failures = append(rep.Failures, "the board outage did not run (the run ended first)")
		return rep, nil
	}
	rep.Seconds = round2(o.end.Sub(o.start).Seconds())
	rep.BookingsFailSeconds = round2(o.bookUntil.Sub(o.start).Seconds())
	rep.AllFailSeconds = round2(o.allUntil.Sub(o.bookUntil).Seconds())
	rep.RefusedSeconds = round2(o.end.Sub(o.allUntil).Seconds())
	if o.note != "" {
		rep.Failures = append(rep.Failures, "board outage: "+o.note)
	}

	// The board's side: loads published and 503s during the outage, loads
	// expired at any time.
	loads := map[string]bool{}
	expired := map[string]bool{}
	for after := int64(0); ; {
		evs := r.board().Events(after, 1000)
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			after = e.Seq
			switch {
			case e.Type == board.EvLoadExpired:
				expired[e.LoadID] = true
			case e.Seq <= o.seqStart || e.Seq > o.seqEnd:
			case e.Type == board.EvLoadPublished:
				loads[e.LoadID] = true
			case e.Type == board.EvServerError && e.LoadID != "":
				rep.BookingRequestsRefused++
			}
		}
	}
	rep.LoadsPublished = len(loads)
	booked := map[string]map[string]int{} // load → client → bookings
	for _, t := range r.tenants {
		for _, b := range r.board().Bookings(t.Client) {
			if booked[b.LoadID] == nil {
				booked[b.LoadID] = map[string]int{}
			}
			booked[b.LoadID][t.Client]++
			if b.Source == "http" && !b.BookedAt.Before(o.start) && b.BookedAt.Before(o.end) {
				rep.BookingsAccepted++
			}
		}
	}
	if rep.BookingsAccepted > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("board outage: the board accepted %d booking(s) while its API failed", rep.BookingsAccepted))
	}

	for ti, t := range r.tenants {
		tid := r.tenantIDs[ti]
		keys := map[string]bool{}
		for k := range loads {
			keys[k] = true
		}
		for _, k := range o.openAtStart[ti] {
			keys[k] = true
			rep.OpenAtStart++
		}
		rows, err := r.super.Query(ctx, `SELECT job_key FROM claim_jobs WHERE tenant_id = $1 AND seen_at BETWEEN $2 AND $3`, tid, o.start, o.end)
		if err != nil {
			return nil, fmt.Errorf("loadtest: read sightings: %w", err)
		}
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				rows.Close()
				return nil, fmt.Errorf("loadtest: read sightings: %w", err)
			}
			keys[k] = true
			rep.Sightings++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("loadtest: read sightings: %w", err)
		}
		for k := range keys {
			res := r.outageResult(ctx, tid, t.Client, k, booked[k], expired[k], o.end, rep)
			rep.Judged++
			rep.Results[res]++
			if bad(res) {
				rep.Bad = append(rep.Bad, OutageKey{Tenant: t.Slug, Key: k, Result: res})
			}
		}
	}
	sort.Slice(rep.Bad, func(i, j int) bool { return rep.Bad[i].Tenant+rep.Bad[i].Key < rep.Bad[j].Tenant+rep.Bad[j].Key })
	if len(rep.Bad) > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("board outage: %d job(s) of the outage lost, unsettled or booked twice", len(rep.Bad)))
	}
	if rep.Judged == 0 {
		rep.Failures = append(rep.Failures, "board outage: no sighting, load or open claim to judge")
	}

	rows, err := r.super.Query(ctx, `SELECT kind, key, raised_at, resolved_at FROM alarms WHERE raised_at BETWEEN $1 AND $2 ORDER BY raised_at`, o.start, o.end)
	if err != nil {
		return nil, fmt.Errorf("loadtest: read alarms: %w", err)
	}
	for rows.Next() {
		var a OutageAlarm
		if err := rows.Scan(&a.Kind, &a.Key, &a.RaisedAt, &a.ResolvedAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("loadtest: read alarms: %w", err)
		}
		rep.Alarms = append(rep.Alarms, a)
		switch {
		case a.ResolvedAt == nil:
			rep.Unresolved++
			rep.OpenAtReturn++
		case a.ResolvedAt.Before(o.end):
			rep.ResolvedDuring++
		default:
			rep.OpenAtReturn++
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("loadtest: read alarms: %w", err)
	}
	if len(rep.Alarms) == 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("board outage: no alarm was raised during %.0f s of a failing board", rep.Seconds))
	}
	if rep.Unresolved > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("board outage: %d alarm(s) raised during it still open at the end", rep.Unresolved))
	}
	return rep, nil
}

// outageResult classifies one (tenant, job) of the outage.
func (r *runner) outageResult(ctx context.Context, tenantID, client, key string, booked map[string]int, expired bool, end time.Time, rep *Outage) string {
	var state, outcome, detail, last string
	var confirmedAt *time.Time
	err := r.super.QueryRow(ctx, `SELECT state, COALESCE(outcome, ''), COALESCE(outcome_detail, ''), confirmed_at,
			COALESCE((SELECT t.outcome FROM claim_transitions t WHERE t.tenant_id = c.tenant_id AND t.target_job_key = c.target_job_key
				ORDER BY t.id DESC LIMIT 1), '')
		FROM (SELECT tenant_id, target_job_key, state, outcome, outcome_detail, confirmed_at FROM claims
				WHERE tenant_id = $1 AND target_job_key = $2
			UNION ALL SELECT tenant_id, target_job_key, state, outcome, outcome_detail, confirmed_at FROM claims_archive
				WHERE tenant_id = $1 AND target_job_key = $2) c LIMIT 1`,
		tenantID, key).Scan(&state, &outcome, &detail, &confirmedAt, &last)
	mine, others := booked[client], 0
	for c, n := range booked {
		if c != client {
			others += n
		}
	}
	switch {
	case mine > 1:
		return "booked_twice"
	case err != nil && mine > 0:
		return "booked_without_claim"
	case err != nil && others > 0:
		return "taken_by_other_client"
	case err != nil && expired:
		return "expired"
	case err != nil:
		return "never_claimed"
	}
	switch state {
	case "CONFIRMED":
		if mine != 1 {
			return "confirmed_not_booked"
		}
		if confirmedAt != nil && confirmedAt.After(end) {
			rep.ConfirmedAfter++
		}
		return "confirmed"
	case "TAKEN":
		return "taken"
	case "RELEASED":
		reason := last
		if reason == "" || reason == "RELEASED" {
			reason = outcome
		}
		if detail != "" {
			reason += " (" + shortReason(detail) + ")"
		}
		if strings.TrimSpace(reason) == "" {
			return "released_without_reason"
		}
		if others == 0 && !expired {
			rep.ReleasedOpen++
		}
		return "released: " + reason
	}
	return "unsettled"
}

// shortReason keeps a reason's first words, so results group.
func shortReason(s string) string {
	if i := strings.IndexAny(s, ":;,."); i > 0 {
		s = s[:i]
	}
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}

// bad says whether a result is a failure of the outage's promise.
func bad(res string) bool {
	switch res {
	case "unsettled", "never_claimed", "booked_twice", "confirmed_not_booked", "booked_without_claim", "released_without_reason":
		return true
	}
	return false
}

// writeText prints the outage's part of the report.
func (o *Outage) writeText(p func(string, ...any)) {
	p("")
	p("  board outage: %.0f s (bookings 503 %.0f s, every request 503 %.0f s, connections refused %.0f s)",
		o.Seconds, o.BookingsFailSeconds, o.AllFailSeconds, o.RefusedSeconds)
	p("    loads published during it %d, sightings during it %d, claims open at its start %d", o.LoadsPublished, o.Sightings, o.OpenAtStart)
	p("    booking requests refused %d, bookings accepted while it failed %d", o.BookingRequestsRefused, o.BookingsAccepted)
	names := make([]string, 0, len(o.Results))
	for k := range o.Results {
		names = append(names, k)
	}
	sort.Strings(names)
	p("    %d (tenant, job) judged; confirmed after the board returned %d, released while the load stayed open %d:", o.Judged, o.ConfirmedAfter, o.ReleasedOpen)
	for _, k := range names {
		p("      %-50s %d", k, o.Results[k])
	}
	p("    alarms raised during it %d (open when the board returned %d, resolved while it still failed %d), still open at the end %d",
		len(o.Alarms), o.OpenAtReturn, o.ResolvedDuring, o.Unresolved)
	for _, a := range o.Alarms {
		res := "OPEN"
		if a.ResolvedAt != nil {
			res = "resolved " + a.ResolvedAt.Format("15:04:05")
		}
		p("      %-18s %-40s raised %s, %s", a.Kind, a.Key, a.RaisedAt.Format("15:04:05"), res)
	}
	for _, b := range o.Bad {
		p("    BAD %s %s: %s", b.Tenant, b.Key, b.Result)
	}
}
