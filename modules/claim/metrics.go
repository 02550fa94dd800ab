package claim

import (
	"context"
	"time"

	tenantpkg "github.com/fleetwright/fleetwright/modules/tenant"
	"github.com/prometheus/client_golang/prometheus"
)

// Stages of a claim's life between its six timestamps, plus the two spans
// the reports split: publish→detect and detect→action.
const (
	StagePublishSeen     = "publish_seen"       // published_at → seen_at (= publish→detect)
	StageSeenQueued      = "seen_queued"        // seen_at → queued_at
	StageQueuedLeased    = "queued_leased"      // queued_at → leased_at
	StageLeasedActSent   = "leased_act_sent"    // leased_at → act_sent_at
	StageActSentConfirm  = "act_sent_confirmed" // act_sent_at → confirmed_at
	StageDetectAction    = "detect_action"      // seen_at → act_sent_at
	StagePublishDetected = StagePublishSeen
)

// Stages lists the stages in report order.
var Stages = []string{StagePublishSeen, StageSeenQueued, StageQueuedLeased, StageLeasedActSent, StageActSentConfirm, StageDetectAction}

// Steps of fleet_claim_panel_seconds: the panel's own share of a claim's
// path, kept apart from the network and the agents so a report can say
// which part of detect → leased is ours.
const (
	PanelStepDetect        = "detect"
	PanelStepQueuedOffered = "queued_offered"
	// PanelStepReoffered is a re-offer's own path (publication to arrival at
	// a replica): a re-offer is never timed from the job's first queueing.
	PanelStepReoffered = "reoffered"
	// PanelStepGrant is assignment's path inside one replica: a queued
	// entry's arrival at the dispatcher to the grant's publication (actor
	// chosen, job recorded and granted in one commit).
	PanelStepGrant = "grant"
	// PanelStepRegrant is a re-grant's own path (after a NOT_SENT, an
	// undelivered grant, or the sweep), from its start to its publication.
	PanelStepRegrant = "regrant"
	// PanelStepGrantRouted is a grant's pub/sub hop to the replica holding
	// the actor's connection.
	PanelStepGrantRouted = "grant_routed"
	// PanelStepGate is the gate's read-only fenced check of a grant.
	PanelStepGate = "gate"
	// PanelStepBatch is one assign-mode batch: its entries' arrival at the
	// dispatcher to its commit (actors chosen, jobs recorded and granted).
	PanelStepBatch = "grant_batch"
	PanelStepLease = "lease"
	PanelStepAct   = "act"
)

// PanelBuckets are fine-grained at the low end (on one host each step takes
// well under a millisecond to a few milliseconds) and reach 60 s, so a
// saturated run's percentiles read a real bucket, never the last edge.
var PanelBuckets = []float64{.0001, .00025, .0005, .001, .002, .003, .005, .0075, .01, .015, .025, .05, .1, .25, .5, 1, 2.5,
	5, 10, 20, 30, 60}

// StageBuckets cover a claim's stages up to a minute (a re-offered job's
// queued → leased, an action's act sent → confirmed under load).
var StageBuckets = []float64{.005, .01, .025, .05, .075, .1, .15, .2, .3, .5, .75, 1, 1.5, 2.5, 5, 10, 20, 30, 45, 60}

type metrics struct {
	leases, acts, outcomes, dispatched, reconciled *prometheus.CounterVec
	grants, gates                                  *prometheus.CounterVec
	late, watched                                  *prometheus.CounterVec
	conflicts, givenUp                             prometheus.Counter
	stage, panel                                   *prometheus.HistogramVec
	batch                                          prometheus.Histogram
	duplicates                                     *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		leases: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_claim_leases_total",
			Help: "Lease requests by result: granted, or the refusal reason."}, []string{"result"}),
		acts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_claim_acts_total",
			Help: "LEASED → ACTING requests by result: ok, or the refusal reason."}, []string{"result"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_claim_outcomes_total",
			Help: "Outcomes recorded, by result."}, []string{"result"}),
		dispatched: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_claim_dispatched_total",
			Help: "Queued jobs the dispatcher handled: offered, or filtered out."}, []string{"result"}),
		reconciled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_claim_reconciled_total",
			Help: "Reconciler decisions: confirmed, released, incomplete (look-up refused as proof), too_early, settled."}, []string{"result"}),
		stage: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fleet_claim_stage_seconds",
			Help:    "Time between a confirmed claim's timestamps (agent times corrected by the measured offset).",
			Buckets: StageBuckets},
			[]string{"stage", "tenant", "cell"}), // tenant: the slug
		panel: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fleet_claim_panel_seconds",
			Help: "The panel's own time on the path detect → leased, measured inside the replica: detect (a sighting's cell dedupe and queue), " +
				"queued_offered (the cell's stream, the dispatcher's filters and job record, and the pub/sub hop, until a first offer reaches this replica), " +
				"reoffered (a re-offer's publication to its arrival), grant (assign mode: a queued entry's arrival at the dispatcher to the grant's publication), " +
				"regrant (a re-grant's start to its publication), grant_routed (the grant's pub/sub hop), gate (a grant's read-only fenced check), " +
				"lease (the lease statement), act (the fenced LEASED → ACTING statement).",
			Buckets: PanelBuckets}, []string{"step"}),
		duplicates: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fleet_claim_duplicate_confirmations",
			Help: "Extra bookings of one load the board shows for the tenant's client (board evidence only)."}, []string{"tenant"}),
	}
	m.late = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_claim_late_evidence_total",
		Help: "Bookings of an earlier attempt applied to a job's claim after it moved on, by the claim's state before (LEASED, ACTING, UNKNOWN, RELEASED)."},
		[]string{"from_state"})
	m.watched = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_claim_watch_total",
		Help: "Look-ups of jobs whose attempt's fate is in doubt, by result: none, found, settled, expired, incomplete."}, []string{"result"})
	m.grants = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_claim_grants_total",
		Help: "Assign mode's grants by result: granted, undelivered (released NOT_SENT and granted again), or the refusal reason."}, []string{"result"})
	m.gates = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_claim_gate_checks_total",
		Help: "Granted actions' read-only gate checks by result: ok, or the refusal reason."}, []string{"result"})
	m.batch = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fleet_claim_grant_batch_jobs",
		Help:    "Jobs granted in one transaction (assign mode): one under light load, more as the stream fills while a batch commits.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64}})
	m.conflicts = prometheus.NewCounter(prometheus.CounterOpts{Name: "fleet_claim_conflicts_total",
		Help: "Conflicts found: one job booked two or more times for one client with different booking ids (board evidence)."})
	m.givenUp = prometheus.NewCounter(prometheus.CounterOpts{Name: "fleet_claim_given_up_total",
		Help: "Jobs given up after an unknown outcome (released where booking again is not safe)."})
	if reg != nil {
		reg.MustRegister(m.leases, m.acts, m.outcomes, m.dispatched, m.reconciled, m.stage, m.panel, m.duplicates,
			m.late, m.watched, m.conflicts, m.givenUp, m.grants, m.gates, m.batch)
	}
	return m
}

// StageDurations returns the stage spans a claim has (missing timestamps and
// negative spans, which clock error can produce, are left out).
func (c Claim) StageDurations() map[string]time.Duration {
	out := map[string]time.Duration{}
	span := func(name string, a, b *time.Time) {
		if a != nil && b != nil && !b.Before(*a) {
			out[name] = b.Sub(*a)
		}
	}
	leased := &c.LeasedAt
	span(StagePublishSeen, c.PublishedAt, c.SeenAt)
	span(StageSeenQueued, c.SeenAt, c.QueueAt)
	span(StageQueuedLeased, c.QueueAt, leased)
	span(StageLeasedActSent, leased, c.ActSentAt)
	span(StageActSentConfirm, c.ActSentAt, c.ConfirmedAt)
	span(StageDetectAction, c.SeenAt, c.ActSentAt)
	return out
}

// observe records a confirmed claim's stages in the histograms.
func (e *Engine) observe(ctx context.Context, tenant, key string) {
	c, err := e.store.Get(ctx, tenant, key)
	if err != nil {
		return
	}
	slug := tenantpkg.Slug(ctx, e.store.pool, tenant)
	for stage, d := range c.StageDurations() {
		e.m.stage.WithLabelValues(stage, slug, c.Cell).Observe(d.Seconds())
	}
}
