package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/views"
)

// names says who a worker is: its agent's name and the worker's, together
// ("agent-east-1 · actor-1"), since two agents may each run an "actor-1".
type names map[string]string

// newNames names the tenant's agents; two agents of one name are told apart
// by the start of their ids.
func newNames(byID map[string]string) names {
	count := map[string]int{}
	for _, n := range byID {
		count[n]++
	}
	out := names{}
	for id, n := range byID {
		if count[n] > 1 {
			n += " (" + shortID(id) + ")"
		}
		out[id] = n
	}
	return out
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// agent is an agent's name, or "agent <id…>" for one the panel no longer
// knows.
func (n names) agent(id string) string {
	if s, ok := n[id]; ok {
		return s
	}
	if id == "" {
		return "unknown agent"
	}
	return "agent " + shortID(id)
}

// of is the worker's full name.
func (n names) of(h claim.Holder) string {
	if h.Worker == "" {
		return n.agent(h.Agent)
	}
	return n.agent(h.Agent) + " · " + h.Worker
}

// filterValue is what the worker filter takes for this worker.
func (n names) filterValue(h claim.Holder) string { return n.agent(h.Agent) + "/" + h.Worker }

func storyURL(slug, key string) string {
	return "/t/" + slug + "/claims/load?key=" + url.QueryEscape(key)
}

// event is one line of a load's timeline.
type event struct {
	At     time.Time
	What   string
	Who    string
	Detail string
	// Class is the line's badge: ok, warn, bad or "" (plain).
	Class string
	// Kind groups lines: sighting, lease, attempt, verdict, reconciler,
	// evidence, review, transition.
	Kind string
}

type storyModel struct {
	Slug   string
	Key    string
	Tenant string
	Story  claim.Story
	Names  names
	Events []event
	Stamps []stamp
	// Verdict and Why say in words how the load ended (or where it is).
	Verdict, VerdictClass, Why string
	// Margin says what is known of the margin of a load lost to another
	// client ("" when it was not lost).
	Margin string
	Grace  time.Duration
}

// stamp is one of the six timestamps and the stage that ends at it.
type stamp struct {
	Name, Label, Stage string
	At                 *time.Time
	Since              string
}

func (w *web) storyPage(rw http.ResponseWriter, r *http.Request) {
	at, _ := auth.TenantFrom(r.Context())
	key := strings.TrimSpace(r.URL.Query().Get("key"))
	if key == "" || len(key) > 200 {
		auth.NotFound(rw, r)
		return
	}
	st, err := w.Engine.Store().LoadStory(r.Context(), at.ID, key)
	if errors.Is(err, claim.ErrNoStory) {
		auth.NotFound(rw, r)
		return
	}
	if err != nil {
		w.fail(rw, r, "claim story", err)
		return
	}
	byID, err := w.Engine.Store().AgentNames(r.Context(), at.ID)
	if err != nil {
		w.fail(rw, r, "agent names", err)
		return
	}
	m := storyModel{Slug: at.Slug, Key: key, Tenant: at.Name, Story: st, Names: newNames(byID), Grace: w.Engine.Config().Grace}
	m.build()
	views.Render(rw, r, http.StatusOK, storyPage(w.Shell.Page(rw, r, at.Name+" · Load "+key), m))
}

func (m *storyModel) add(at *time.Time, e event) {
	if at == nil || at.IsZero() {
		return
	}
	e.At = *at
	m.Events = append(m.Events, e)
}

func (m *storyModel) build() {
	st := m.Story
	if s := st.Sighting; s != nil {
		m.add(s.PublishedAt, event{Kind: "sighting", What: "published on the board", Who: "the board's clock",
			Detail: fmt.Sprintf("%s → %s, %s, %d mi, $%s", orDash(s.Job.Origin), orDash(s.Job.Destination), orDash(s.Job.Equipment), s.Job.Miles, money(&s.Job.RateCents))})
		who := "a watcher"
		if s.Agent != "" || s.Worker != "" {
			who = m.Names.of(claim.Holder{Agent: s.Agent, Worker: s.Worker})
		}
		m.add(&s.SeenAt, event{Kind: "sighting", What: "seen (first sighting that passed the filters)", Who: who,
			Detail: fmt.Sprintf("agent clock corrected, ± %d ms", s.ClockErrorMS)})
		m.add(&s.QueuedAt, event{Kind: "sighting", What: "queued in cell " + s.Cell, Who: "cell dispatcher"})
	}
	if rv := st.Review; rv != nil {
		m.add(&rv.RequestedAt, event{Kind: "review", Class: "warn", What: "held for review", Who: "claim engine", Detail: "rate $" + money(&rv.RateCents) + " is above the tenant's review threshold"})
		if rv.DecidedAt != nil {
			by := ""
			if rv.DecidedBy != nil {
				by = *rv.DecidedBy
			}
			m.add(rv.DecidedAt, event{Kind: "review", What: "review " + strings.ToLower(rv.State), Who: by})
		}
	}
	for _, a := range st.Attempts {
		who := m.Names.of(a.Holder)
		tok := fmt.Sprintf("token %d", a.Token)
		m.add(&a.LeasedAt, event{Kind: "lease", What: "lease granted", Who: who, Detail: tok + " · operation " + shortID(a.OperationID)})
		m.add(a.ActStartedAt, event{Kind: "attempt", What: "action started (fenced check passed)", Who: who, Detail: tok})
		m.add(a.ActSentAt, event{Kind: "attempt", What: "booking request sent to the board", Who: who, Detail: tok})
		if a.Outcome != "" {
			d := tok
			if a.Detail != "" {
				d += " · " + a.Detail
			}
			m.add(a.OutcomeAt, event{Kind: "verdict", Class: outcomeClass(a.Outcome), What: "outcome: " + outcomeLabel(a.Outcome), Who: who, Detail: d})
		}
		if a.BookingID != "" {
			d := tok + " · booking " + a.BookingID
			if a.Conflict {
				d += " · one of two or more bookings of this load (conflict)"
			}
			w := "the board has this attempt's booking"
			cls := "ok"
			if a.LateEvidence {
				w, cls = "late evidence: the board has this attempt's booking", "warn"
			}
			if a.Conflict {
				cls = "bad"
			}
			m.add(a.BookedAt, event{Kind: "evidence", Class: cls, What: w, Who: "the board (a look-up)", Detail: d})
		}
	}
	for _, t := range st.Transitions {
		from := t.From
		if from == "" {
			from = "none"
		}
		m.add(&t.At, event{Kind: "transition", What: from + " → " + t.To, Who: m.Names.of(t.Holder), Detail: fmt.Sprintf("token %d", t.Token)})
	}
	for _, a := range st.Audit {
		if a.Action == "claim.outcome" {
			// The attempt's own outcome line says it, with the detail.
			continue
		}
		m.add(&a.At, auditEvent(m.Names, a))
	}
	for _, j := range st.Jobs {
		what := "reconciler"
		if j.Kind == "claim.watch" {
			what = "watch (looks up a released load until it expires)"
		}
		m.add(&j.CreatedAt, event{Kind: "reconciler", What: what + " queued", Who: "panel"})
		for _, e := range j.Errors {
			m.add(&e.At, event{Kind: "reconciler", Class: "warn", What: fmt.Sprintf("look-up %d decided nothing", e.Attempt), Who: what, Detail: crop(e.Error, 240)})
		}
		if j.FinalizedAt != nil {
			m.add(j.FinalizedAt, event{Kind: "reconciler", What: what + " ended: " + j.State, Who: "panel", Detail: fmt.Sprintf("%d attempt(s)", j.Attempts)})
		}
	}
	if d := st.Duplicate; d != nil {
		m.add(&d.FoundAt, event{Kind: "evidence", Class: "bad", What: fmt.Sprintf("booked %d times for this client (board evidence)", d.Bookings), Who: "duplicate sweep"})
	}
	sort.SliceStable(m.Events, func(i, j int) bool { return m.Events[i].At.Before(m.Events[j].At) })
	m.stamps()
	m.verdict()
}

// auditEvent reads an audit entry of the claim engine in words; the
// reconciler's decisions carry their look-up's evidence.
func auditEvent(n names, a claim.AuditRecord) event {
	e := event{Kind: "verdict", Who: a.Actor, What: a.Action, Detail: crop(a.Detail, 160)}
	if id, worker, ok := strings.Cut(strings.TrimPrefix(a.Actor, "agent:"), "/"); ok && strings.HasPrefix(a.Actor, "agent:") {
		e.Who = n.of(claim.Holder{Agent: id, Worker: worker})
	}
	var d struct {
		Token    *int64 `json:"token"`
		Outcome  string `json:"outcome"`
		Detail   string `json:"detail"`
		Evidence *struct {
			LookupID    string            `json:"lookup_id"`
			Complete    bool              `json:"complete"`
			Bookings    []json.RawMessage `json:"bookings"`
			GraceLeftMS *int64            `json:"grace_left_ms"`
		} `json:"evidence"`
	}
	_ = json.Unmarshal([]byte(a.Detail), &d)
	if d.Evidence != nil {
		ev := d.Evidence
		parts := []string{"look-up " + shortID(ev.LookupID)}
		if ev.Complete {
			parts = append(parts, "complete")
		} else {
			parts = append(parts, "incomplete")
		}
		parts = append(parts, fmt.Sprintf("%d booking(s) of this load", len(ev.Bookings)))
		if ev.GraceLeftMS != nil {
			if *ev.GraceLeftMS > 0 {
				parts = append(parts, fmt.Sprintf("sent %s before grace ended", time.Duration(*ev.GraceLeftMS)*time.Millisecond))
			} else {
				parts = append(parts, "sent after grace")
			}
		}
		e.Detail = strings.Join(parts, " · ")
	}
	switch a.Action {
	case "claim.outcome":
		e.What = "outcome reported"
		if d.Outcome != "" {
			e.What += ": " + outcomeLabel(d.Outcome)
		}
		e.Class = outcomeClass(d.Outcome)
	case "claim.released":
		e.What, e.Class = "released by the sweeper", "warn"
	case "claim.unknown":
		e.What, e.Class = "outcome unknown: the board may have committed; the reconciler will look", "bad"
	case "claim.reconcile.confirm":
		e.Kind, e.What, e.Class = "reconciler", "reconciler: the board has our booking — confirmed", "ok"
	case "claim.reconcile.release":
		e.Kind, e.What, e.Class = "reconciler", "reconciler: a complete look-up after grace found no booking — released", "warn"
	case "claim.reconcile.give_up":
		e.Kind, e.What, e.Class = "reconciler", "reconciler: no booking found; given up (the platform does not honour idempotency keys)", "bad"
	case "claim.duplicate":
		e.Kind, e.What, e.Class = "evidence", "booked more than once (board evidence)", "bad"
	case "claim.conflict":
		e.Kind, e.What, e.Class = "evidence", "conflict: two bookings with different ids", "bad"
	case "claim.restore.confirm":
		e.Kind, e.What, e.Class = "evidence", "confirmed by the look-up after a restore", "ok"
	}
	if strings.HasPrefix(a.Action, "claim.review") {
		e.Kind = "review"
	}
	return e
}

func outcomeClass(o string) string {
	switch o {
	case claim.GivenUp, "UNKNOWN":
		return "bad"
	case "CONFIRMED":
		return "ok"
	case "TAKEN", "NOT_SENT", "RELEASED":
		return "warn"
	}
	return ""
}

// stamps are the six timestamps of the claim (the current attempt's), each
// with the time since the one before.
func (m *storyModel) stamps() {
	c := m.Story.Claim
	var pub, seen, queued *time.Time
	if s := m.Story.Sighting; s != nil {
		pub, seen, queued = s.PublishedAt, &s.SeenAt, &s.QueuedAt
	}
	var leased, sent, ok *time.Time
	if c != nil {
		if c.PublishedAt != nil {
			pub = c.PublishedAt
		}
		if c.SeenAt != nil {
			seen = c.SeenAt
		}
		if c.QueueAt != nil {
			queued = c.QueueAt
		}
		leased, sent, ok = &c.LeasedAt, c.ActSentAt, c.ConfirmedAt
	}
	list := []stamp{
		{Name: "published_at", Label: "published on the board", At: pub},
		{Name: "seen_at", Label: "seen by a watcher", Stage: claim.StagePublishSeen, At: seen},
		{Name: "queued_at", Label: "queued in the cell", Stage: claim.StageSeenQueued, At: queued},
		{Name: "leased_at", Label: "leased", Stage: claim.StageQueuedLeased, At: leased},
		{Name: "act_sent_at", Label: "booking request sent", Stage: claim.StageLeasedActSent, At: sent},
		{Name: "confirmed_at", Label: "confirmed by the board", Stage: claim.StageActSentConfirm, At: ok},
	}
	var prev *time.Time
	for i := range list {
		if list[i].At != nil && prev != nil {
			list[i].Since = "+" + fmtDur(list[i].At.Sub(*prev))
		}
		if list[i].At != nil {
			prev = list[i].At
		}
	}
	m.Stamps = list
}

// verdict says how the load ended, and for a load lost to another client
// what is known of the margin.
func (m *storyModel) verdict() {
	c := m.Story.Claim
	if c == nil {
		m.Verdict, m.VerdictClass = "never leased", "badge"
		m.Why = "The load was seen and queued, but no worker of this tenant got its lease (another client's booking, a filter, a pause or a review may have kept it)."
		return
	}
	m.Verdict, m.VerdictClass = string(c.State), stateClass(c.State)
	switch c.State {
	case claim.Confirmed:
		m.Why = "Booked for this client by " + m.Names.of(c.Holder) + "."
		if c.LateEvidence {
			m.Why += " The booking was found late (a look-up showed an earlier attempt's booking) and applied."
		}
	case claim.Taken:
		m.Why = "Lost: the board gave the load to another client."
		if c.Detail != "" {
			m.Why += " The actor's report: “" + c.Detail + "”."
		}
		m.Margin = "Margin: not known. The board's answer to a lost booking says only that the load was taken; it does not say when the other client booked it, so the panel cannot say by how much this load was lost."
		if c.PublishedAt != nil && c.ActSentAt != nil {
			m.Margin += " What is known: our booking request left " + fmtDur(c.ActSentAt.Sub(*c.PublishedAt)) + " after the load was published."
		}
	case claim.Unknown:
		m.Why = fmt.Sprintf("The outcome is not known: the board may have committed. The reconciler looks the client's bookings up and releases only when a complete look-up sent after grace (%s) finds none; nothing is retried blind.", m.Grace)
	case claim.Released:
		switch c.Outcome {
		case claim.GivenUp:
			m.Why = "Given up after an unknown outcome: no booking was found, and since the platform does not honour idempotency keys the load is never leased again."
		case "NOT_SENT":
			m.Why = "Released: the booking request provably never left the worker (" + orDash(c.Detail) + ")."
		default:
			m.Why = "Released: " + orDash(c.Detail) + "."
		}
	case claim.Leased:
		m.Why = "Leased to " + m.Names.of(c.Holder) + "; no action has started."
	case claim.Acting:
		m.Why = "The booking request of " + m.Names.of(c.Holder) + " is in flight."
	}
}
