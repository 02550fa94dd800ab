package crawl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/temoto/robotstxt"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/egress"
	"github.com/fleetwright/fleetwright/modules/crawl/spec"
	"github.com/fleetwright/fleetwright/modules/limit"
	"github.com/fleetwright/fleetwright/modules/tenant"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Dispatcher hands page tasks to the crawler workers of connected agents
// (the fleet gateway).
type Dispatcher interface {
	// CrawlAgents lists the connected agents of tenant that speak the
	// crawl protocol.
	CrawlAgents(tenant string) []string
	// Crawl sends one page task to one agent and waits for its result.
	Crawl(ctx context.Context, tenant, agentID string, t wire.PageTask) (wire.PageResult, error)
}

// Egress is the tenant's egress allowlist (admin-set): CIDR ranges and
// extra ports the agents' guards admit.
type Egress func(ctx context.Context, tenant string) (allow []string, ports []int)

// Runner executes runs.
type Runner struct {
	Store  *Store
	Budget *Budget
	Disp   Dispatcher
	Egress Egress
	Clock  clock.Clock
	Log    *slog.Logger
	// NoAgentWait is how long a run waits for a crawler agent before it
	// fails (default 30 s).
	NoAgentWait time.Duration
	// RobotsTTL is how long a robots.txt stays cached (default 1 h).
	RobotsTTL time.Duration
	// OnFinish is told of every finished run (the alarm rules).
	OnFinish func(ctx context.Context, tenant string, job Job, run Run, trace map[string]any)
	// Solvers are the captcha solver adapters built in. None ships; a
	// tenant uses one only with a recorded authorisation (captcha.go).
	Solvers map[string]SolverFactory

	readyOnce    sync.Once
	ready        chan struct{}
	defaultsOnce sync.Once
}

func (r *Runner) readyCh() chan struct{} {
	r.readyOnce.Do(func() { r.ready = make(chan struct{}) })
	return r.ready
}

// Ready says every field is set: runs River hands over before it wait.
func (r *Runner) Ready() { close(r.readyCh()) }

type task struct {
	url       string
	kind      string
	attempt   int
	notBefore time.Time
	page      int // pagination depth of a listing page (1 = a start page)
	// proxyTries counts the proxies that failed this page (not the page's
	// own attempts: the proxy was at fault).
	proxyTries int
	// solution answers the captcha the page showed (an authorised solver's).
	solution *wire.CaptchaSolution
}

type domainState struct {
	robots     *robotstxt.Group
	robotsBusy bool
	robotsDone bool
	delay      time.Duration // AutoThrottle's current delay
	crawlDelay time.Duration
}

type result struct {
	t     task
	agent string
	res   wire.PageResult
	err   error
	// snapshot says the task asked for the run's trace snapshot.
	snapshot bool
	// proxy is the id of the pool's proxy the task went through.
	proxy string
	// solving marks the outcome of a captcha solver (solved or solveErr),
	// not of a fetch.
	solving  bool
	solved   wire.CaptchaSolution
	solveErr error
}

// Execute runs one run to its end: every page the job reaches, within its
// limits, politely. It records the run's figures whatever happens.
func (r *Runner) Execute(ctx context.Context, tenant, runID string) error {
	select {
	case <-r.readyCh():
	case <-ctx.Done():
		return ctx.Err()
	}
	// Runs execute side by side (River's workers): the defaults are set
	// once, not by each run.
	r.defaultsOnce.Do(func() {
		if r.Clock == nil {
			r.Clock = clock.Real{}
		}
		if r.NoAgentWait == 0 {
			r.NoAgentWait = 30 * time.Second
		}
		if r.RobotsTTL == 0 {
			r.RobotsTTL = time.Hour
		}
	})
	run, err := r.Store.Run(ctx, tenant, runID)
	if err != nil {
		return err
	}
	if run.State != "queued" && run.State != "running" {
		return nil // finished already (a retried River job)
	}
	job, err := r.Store.JobByID(ctx, tenant, run.JobID)
	if err != nil {
		return err
	}
	start := r.Clock.Now()
	if err := r.Store.StartRun(ctx, tenant, runID, start); err != nil {
		return err
	}
	x := &execution{r: r, tenant: tenant, job: job, spec: job.Spec, run: run, start: start,
		seen: map[string]bool{}, keys: map[string]bool{}, domains: map[string]*domainState{},
		results: make(chan result, 64), noCrawler: map[string]bool{}}
	x.run.Domains = map[string]DomainFigures{}
	x.allow, x.ports = r.Egress(ctx, tenant)
	log := r.Log.With("tenant", tenant, "job", job.Name, "run", runID)
	if err := x.limits(ctx); err != nil {
		return err
	}
	x.items = newItemWriter(ctx, r.Store, r.Clock, log, tenant, job.ID, runID)
	state, reason := x.loop(ctx)
	// Every item the run found is written before it reports them.
	added, changed, failed := x.items.close()
	x.run.NewItems += added
	x.run.ChangedItems += changed
	x.run.Errors += failed
	end := r.Clock.Now()
	x.run.State, x.run.Reason, x.run.FinishedAt = state, reason, &end
	log.Info("crawl run finished", "state", state, "reason", reason, "pages", x.run.Pages, "items", x.run.Items,
		"errors", x.run.Errors, "bytes", x.run.Bytes, "duration", end.Sub(start))
	fctx := context.WithoutCancel(ctx)
	// The alarm rules run before the run is marked finished: whoever sees
	// a finished run sees its alarms too.
	if r.OnFinish != nil {
		r.OnFinish(fctx, tenant, job, x.run, x.trace)
	}
	x.limitOutcome(fctx, log)
	return r.Store.FinishRun(fctx, tenant, x.run, x.trace)
}

type execution struct {
	r      *Runner
	tenant string
	job    Job
	spec   *spec.Job
	run    Run
	start  time.Time
	allow  []string
	ports  []int

	// The frontier (frontier.go): a queue per host in round-robin order,
	// the tasks queued in all, and the request slots booked in the
	// budget, earliest first.
	hosts    map[string]*hostQueue
	order    []*hostQueue
	nextHost int
	queued   int
	booked   []booking
	seen     map[string]bool
	keys     map[string]bool
	domains  map[string]*domainState
	inflight int
	results  chan result
	trace    map[string]any
	attempts int // page fetches that ended (for the error rate)
	items    *itemWriter

	mu        sync.Mutex
	noCrawler map[string]bool
	rr        int

	// The limits that apply to this run (modules/limit): the lowest of
	// the job's own, the tenant's and the global one.
	runTime     limit.Effective
	retries     limit.Effective
	pagesDay    limit.Effective
	browsers    limit.Effective
	pagesBefore int       // the tenant's other pages today, as last read
	pagesRead   time.Time // when pagesBefore was read
	hit         *limit.Effective

	// The job's proxy pool (nil: the agents' own egress), as last read,
	// with the run's round-robin counter and on-failure position.
	pool    *Pool
	poolAt  time.Time
	proxyRR int
	cursor  string
	egress  map[string]string // agent → the egress last recorded for it

	solverHTTP *http.Client

	// The pause switches as last read (heldAt), and since when the run
	// has been held (zero: it is not).
	heldWhy   string
	heldAt    time.Time
	heldSince time.Time
	// pausedAgent holds the agents that answered a page task with their
	// own pause, until when they are not asked again.
	pausedAgent map[string]time.Time
}

// pausedAgentWait is how long a run leaves an agent that said it is
// paused before it asks it again.
const pausedAgentWait = 5 * time.Second

// holdPoll is how often a run reads the pause switches: a pause holds new
// pages within this, and a resume lets them go within it.
const holdPoll = time.Second

// held reads the pause switches at most every holdPoll and says which one
// holds the run ("" when none does, or when they cannot be read: a run is
// not held by a database hiccup; the claim engine's own statements still
// refuse under a pause).
func (x *execution) held(ctx context.Context, now time.Time) string {
	if !x.heldAt.IsZero() && now.Sub(x.heldAt) < holdPoll {
		return x.heldWhy
	}
	why, err := x.r.Store.Held(ctx, x.tenant)
	if err != nil {
		x.r.Log.Warn("crawl: pause switches not read", "err", err)
		return x.heldWhy
	}
	x.heldWhy, x.heldAt = why, now
	return why
}

func (x *execution) hold(ctx context.Context, now time.Time, why string) {
	if !x.heldSince.IsZero() && x.run.HeldReason == why {
		return
	}
	if x.heldSince.IsZero() {
		x.heldSince = now
		x.r.Log.Info("crawl run held", "tenant", x.tenant, "run", x.run.ID, "reason", why, "in_flight", x.inflight)
	}
	since := x.heldSince
	x.run.HeldSince, x.run.HeldReason = &since, why
	if err := x.r.Store.SetHeld(ctx, x.tenant, x.run.ID, &since, why); err != nil {
		x.r.Log.Warn("crawl: record hold", "err", err)
	}
}

func (x *execution) unhold(ctx context.Context, now time.Time) {
	x.r.Log.Info("crawl run resumed", "tenant", x.tenant, "run", x.run.ID, "held", now.Sub(x.heldSince))
	x.heldSince = time.Time{}
	x.run.HeldSince, x.run.HeldReason = nil, ""
	if err := x.r.Store.SetHeld(ctx, x.tenant, x.run.ID, nil, ""); err != nil {
		x.r.Log.Warn("crawl: record resume", "err", err)
	}
}

func (x *execution) loop(ctx context.Context) (state, reason string) {
	j := x.spec
	for _, u := range j.StartURLs() {
		if j.Pagination != nil && j.Pagination.Param != nil {
			u = setParam(u, j.Pagination.Param.Name, j.Pagination.Param.From)
		}
		x.push(task{url: u, kind: wire.PageListing, page: 1})
	}
	if j.ProxyPool != "" {
		if err := x.loadPool(ctx); err != nil {
			return "failed", err.Error()
		}
	}
	deadline := x.start.Add(j.Limits.RunTimeD)
	if x.runTime.From != "task" {
		deadline = x.start.Add(time.Duration(x.runTime.Value) * time.Second)
	}
	stop := ""
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		x.unbookAll(ctx)
		for x.inflight > 0 {
			x.handle(ctx, <-x.results)
		}
	}()
	var noAgentSince time.Time
	for {
		now := x.r.Clock.Now()
		if ctx.Err() == nil && (x.pending() > 0 || x.inflight > 0) {
			if why := x.held(ctx, now); why != "" {
				// A pause holds the run: no page starts, pages in flight
				// finish and are recorded, and the time held counts against
				// neither the run's run_time nor the wait for an agent.
				// Booked slots are given back: they would pass while held.
				x.hold(ctx, now, why)
				x.unbookAll(ctx)
				noAgentSince = time.Time{}
				select {
				case res := <-x.results:
					x.handle(ctx, res)
				case <-x.r.Clock.After(holdPoll):
				}
				continue
			}
			if !x.heldSince.IsZero() {
				deadline = deadline.Add(now.Sub(x.heldSince))
				x.unhold(ctx, now)
			}
		}
		switch {
		case ctx.Err() != nil:
			stop = "stopped: the panel is shutting down"
		case !now.Before(deadline):
			stop = "limit: run_time " + j.Limits.RunTimeD.String()
			if x.runTime.From != "task" {
				stop, x.hit = x.runTime.Reason(), &x.runTime
			}
		case x.browsers.Set && x.browsers.Value == 0 && j.Render == spec.RenderBrowser:
			// No browser at all: the run could never fetch a page.
			stop, x.hit = x.browsers.Reason(), &x.browsers
		case x.pagesDay.Set && x.pagesToday(ctx, now) >= int(x.pagesDay.Value):
			stop, x.hit = x.pagesDay.Reason(), &x.pagesDay
		case x.run.Pages >= j.Limits.Pages:
			stop = fmt.Sprintf("limit: pages %d", j.Limits.Pages)
		case x.run.Bytes >= j.Limits.BytesN:
			stop = fmt.Sprintf("limit: bytes %d", j.Limits.BytesN)
		}
		if stop != "" {
			return "stopped", stop
		}
		if x.pending() == 0 && x.inflight == 0 {
			return "succeeded", "done"
		}
		// Send the booked requests whose slot has come, up to the run's
		// concurrency. A page in flight may still count against the
		// tenant's pages today: none starts that could pass the limit.
		launched := false
		for len(x.booked) > 0 && !x.booked[0].due.After(now) && x.inflight < j.Limits.Concurrency &&
			(!x.pagesDay.Set || x.pagesToday(ctx, now)+x.inflight < int(x.pagesDay.Value)) {
			b := x.booked[0]
			x.booked = slices.Delete(x.booked, 0, 1)
			if x.r.Budget.SeenBlock(b.host.name).After(now) {
				// A 429 answered while it waited for its slot blocks it
				// too: it books a slot after the block.
				x.unbook(ctx, b, b.t)
				continue
			}
			var px *Proxy
			if x.pool != nil {
				var why string
				if px, why = x.proxyFor(ctx, b.agent, now); px == nil {
					if why != "" {
						return "failed", why
					}
					// Every proxy is benched: the page waits for the
					// first bench to end.
					t := b.t
					t.notBefore = x.pool.nextUsable()
					x.unbook(ctx, b, t)
					continue
				}
			}
			x.recordEgress(ctx, b.agent, px)
			x.launch(ctx, b, px)
			launched = true
		}
		if launched {
			continue
		}
		// Book request slots for the hosts that may have one.
		booked := len(x.booked)
		if x.inflight < j.Limits.Concurrency {
			if x.book(ctx, now) {
				noAgentSince = time.Time{}
			} else if x.agentsPaused(now) {
				// Agents are there, paused on their own: that is a hold,
				// not a missing crawler.
				noAgentSince = time.Time{}
			} else if noAgentSince.IsZero() {
				noAgentSince = now
			} else if now.Sub(noAgentSince) > x.r.NoAgentWait {
				return "failed", "no crawler agent of this tenant is connected (configure a worker of kind crawler on an account)"
			}
		}
		if len(x.booked) > 0 && !x.booked[0].due.After(now) && len(x.booked) != booked {
			continue // a slot booked now is due now
		}
		// Wait for a result, or for the earliest booked slot, host turn or
		// backoff; the pause switches and limits are read at least every
		// 200 ms.
		wait := 200 * time.Millisecond
		if at := x.nextWake(now); !at.IsZero() {
			wait = min(max(at.Sub(now), 0), wait)
		}
		select {
		case res := <-x.results:
			x.handle(ctx, res)
		case <-x.r.Clock.After(wait):
		}
	}
}

func (x *execution) domain(h string) *domainState {
	d := x.domains[h]
	if d == nil {
		d = &domainState{}
		x.domains[h] = d
	}
	return d
}

func hostOf(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return strings.ToLower(p.Hostname())
}

func setParam(u, name string, v int) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	q := p.Query()
	q.Set(name, strconv.Itoa(v))
	p.RawQuery = q.Encode()
	return p.String()
}

// admit applies robots.txt: a disallowed page is skipped, never fetched.
func (x *execution) admit(_ context.Context, t task) bool {
	if t.kind == wire.PageRobots {
		return true
	}
	d := x.domain(hostOf(t.url))
	if d.robots == nil {
		return true
	}
	p, _ := url.Parse(t.url)
	path := p.EscapedPath()
	if p.RawQuery != "" {
		path += "?" + p.RawQuery
	}
	if !d.robots.Test(path) {
		x.r.Log.Debug("crawl: robots.txt disallows", "url", t.url)
		return false
	}
	return true
}

func (x *execution) setRobots(host string, status int, body string) {
	d := x.domain(host)
	d.robotsBusy, d.robotsDone = false, true
	data, err := robotstxt.FromStatusAndString(status, body)
	if err != nil {
		data, _ = robotstxt.FromStatusAndString(404, "")
	}
	d.robots = data.FindGroup("fleetwright")
	if d.robots != nil {
		d.crawlDelay = d.robots.CrawlDelay
	}
}

func (x *execution) agents() []string {
	all := x.r.Disp.CrawlAgents(x.tenant)
	x.mu.Lock()
	defer x.mu.Unlock()
	now := x.r.Clock.Now()
	out := all[:0:0]
	for _, a := range all {
		if !x.noCrawler[a] && !now.Before(x.pausedAgent[a]) {
			out = append(out, a)
		}
	}
	return out
}

// agentsPaused says an agent answered with its own pause lately.
func (x *execution) agentsPaused(now time.Time) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, until := range x.pausedAgent {
		if now.Before(until) {
			return true
		}
	}
	return false
}

// gap is the domain's next gap: the longest of the job's delay, the
// robots.txt crawl-delay and AutoThrottle's delay, with jitter.
func (x *execution) gap(d *domainState) time.Duration {
	base := max(x.spec.Politeness.DelayD, d.crawlDelay, d.delay)
	return Gap(base, *x.spec.Politeness.Jitter)
}

func (x *execution) nextAgent(agents []string) string {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.rr++
	return agents[x.rr%len(agents)]
}

// launch sends a booked request: its slot has come and it takes one of
// the run's in-flight slots until its result is handled. Its host's
// concurrency slot is given back when the request ends.
func (x *execution) launch(ctx context.Context, b booking, px *Proxy) {
	t, agent, host := b.t, b.agent, b.host.name
	snapshot := x.trace == nil && t.kind == wire.PageListing
	if snapshot {
		x.trace = map[string]any{}
	}
	pt := x.pageTask(t, snapshot)
	res := result{t: t, agent: agent, snapshot: snapshot}
	if px != nil {
		pt.Proxy, res.proxy = x.pool.wireProxy(px), px.ID
	}
	x.inflight++
	go func() {
		defer func() { x.results <- res }()
		// Released before the result is handled, so the loop may book
		// the host's next slot at once.
		defer x.r.Budget.Release(context.WithoutCancel(ctx), x.tenant, host, b.id)
		if x.browsers.Set && pt.Render == spec.RenderBrowser && t.kind != wire.PageRobots {
			// The tenant's browser page loads at once, fleet-wide.
			slot := browserSlots + x.tenant
			for !x.r.Budget.Acquire(ctx, x.tenant, slot, pt.TaskID, int(x.browsers.Value), x.lease()) {
				select {
				case <-ctx.Done():
					res.err = ctx.Err()
					return
				case <-x.r.Clock.After(20 * time.Millisecond):
				}
			}
			defer x.r.Budget.Release(context.WithoutCancel(ctx), x.tenant, slot, pt.TaskID)
		}
		res.res, res.err = x.r.Disp.Crawl(ctx, x.tenant, agent, pt)
	}()
}

func (x *execution) pageTask(t task, snapshot bool) wire.PageTask {
	j := x.spec
	rules := wire.CrawlRules{Format: j.Extract.Format}
	if x.extracts(t.kind) {
		rules.Items = j.Extract.Items
		for _, name := range j.Extract.Order {
			f := j.Extract.Fields[name]
			rules.Fields = append(rules.Fields, wire.CrawlField{Name: name, CSS: f.CSS, Attr: f.Attr, Path: f.Path, All: f.All,
				Required: f.Required, Transform: f.Transform})
		}
	}
	if t.kind == wire.PageListing {
		if j.Follow != nil {
			rules.FollowCSS, rules.FollowAttr, rules.FollowLimit = j.Follow.CSS, j.Follow.Attr, j.Follow.Limit
		}
		if pg := j.Pagination; pg != nil {
			if pg.Next != nil {
				rules.NextCSS, rules.NextAttr = pg.Next.CSS, pg.Next.Attr
			}
			if pg.Cursor != nil {
				rules.CursorPath, rules.CursorParam = pg.Cursor.Path, pg.Cursor.Param
			}
		}
	}
	timeout := 30 * time.Second
	if j.Render == spec.RenderBrowser {
		timeout = 60 * time.Second
	}
	return wire.PageTask{TaskID: wire.NewID(), RunID: x.run.ID, Kind: t.kind, URL: t.url, Render: j.Render, Rules: rules,
		AllowedDomains: j.AllowedDomains, EgressAllow: x.allow, EgressPorts: x.ports, MaxBytes: j.Limits.PageBytesN,
		TimeoutMS: timeout.Milliseconds(), Snapshot: snapshot, Solution: t.solution}
}

// extracts says whether the job's extract rules apply to pages of kind:
// with follow, listing pages only lead to item pages (follow links and
// the next page) and extract is the item pages' rule set; without it,
// the listing pages are where the items are.
func (x *execution) extracts(kind string) bool {
	return kind != wire.PageListing || x.spec.Follow == nil
}

func (x *execution) figures(host string, f func(*DomainFigures)) {
	d := x.run.Domains[host]
	f(&d)
	x.run.Domains[host] = d
}

func (x *execution) handle(ctx context.Context, r result) {
	x.inflight--
	t, res := r.t, r.res
	if !r.solving {
		x.hostQ(hostOf(t.url)).busy--
	}
	if r.solving {
		if r.solveErr != nil {
			x.r.Log.Warn("crawl: captcha not solved", "url", t.url, "err", r.solveErr)
			x.captcha(t)
			return
		}
		t.solution = &r.solved
		x.requeue(t)
		return
	}
	if r.snapshot && len(x.trace) == 0 && res.Body == "" && res.Headers == nil {
		// The page asked for the run's trace came back without one (lost,
		// refused, or sent to an agent without a crawler): the next
		// listing page asks again, or an alarm would carry an empty trace.
		x.trace = nil
	}
	host := hostOf(t.url)
	now := x.r.Clock.Now()
	p := x.spec.Politeness
	if r.err != nil {
		if ctx.Err() != nil {
			return
		}
		// The agent went away mid-task: try again elsewhere.
		x.r.Log.Warn("crawl: page task lost", "url", t.url, "agent", r.agent, "err", r.err)
		x.retry(t, now, false)
		return
	}
	if res.Error == wire.PagePaused {
		// The agent's own pause (an operator's, or a switch it heard
		// before this replica read it): the page goes again, elsewhere or
		// later, without spending one of its retries.
		x.mu.Lock()
		if x.pausedAgent == nil {
			x.pausedAgent = map[string]time.Time{}
		}
		x.pausedAgent[r.agent] = now.Add(pausedAgentWait)
		x.mu.Unlock()
		x.requeue(t)
		return
	}
	if res.Error == wire.PageNoCrawler {
		x.mu.Lock()
		x.noCrawler[r.agent] = true
		x.mu.Unlock()
		x.requeue(t)
		return
	}
	if r.proxy != "" {
		if res.ProxyError != "" {
			// The proxy failed, not the page: its health pays, and the
			// page goes again (through another proxy where the rotation
			// says so) without spending one of its own retries.
			x.proxyOutcome(ctx, r.proxy, false, res.ProxyError, now)
			x.r.Log.Warn("crawl: proxy failed", "url", t.url, "proxy", r.proxy, "err", res.ProxyError)
			t.proxyTries++
			if t.proxyTries > maxProxyTries {
				x.run.Errors++
				x.attempts++
				return
			}
			x.retry(t, now, false)
			return
		}
		x.proxyOutcome(ctx, r.proxy, true, "", now)
		if x.pool != nil {
			proxyBytes.WithLabelValues(tenant.Slug(ctx, x.r.Store.pool, x.tenant), x.pool.Name).Add(float64(res.Bytes))
		}
	}
	x.figures(host, func(f *DomainFigures) { f.Requests++; f.TotalMS += res.DurationMS })
	x.run.Bytes += res.Bytes
	if t.kind == wire.PageRobots {
		status := res.Status
		if status == 0 {
			// Unreachable robots.txt: RFC 9309 says assume complete
			// disallow (and do not cache it).
			status = 503
		}
		x.setRobots(host, status, res.Body)
		if status < 500 {
			x.r.Budget.CacheRobots(ctx, x.tenant, host, robotsCacheBody(status, res.Body), x.r.RobotsTTL)
		}
		return
	}
	if *p.AutoThrottle && res.DurationMS > 0 {
		x.domain(host).delay = x.r.Budget.Throttle(ctx, x.tenant, host, time.Duration(res.DurationMS)*time.Millisecond, p.Concurrency, p.DelayD)
	}
	if snap := x.trace; snap != nil && len(snap) == 0 && (res.Body != "" || res.Headers != nil) {
		x.trace = map[string]any{"url": res.URL, "final_url": res.FinalURL, "status": res.Status, "headers": res.Headers,
			"body": res.Body, "items": len(res.Items), "error": res.Error, "at": now}
		if res.Screenshot != "" {
			x.trace["screenshot_jpeg_base64"] = res.Screenshot
		}
	}
	if res.Status == 429 || res.Status == 503 {
		x.figures(host, func(f *DomainFigures) { f.Throttled++ })
		if res.RetryAfterMS > 0 {
			until := now.Add(time.Duration(res.RetryAfterMS) * time.Millisecond)
			x.r.Budget.Block(ctx, x.tenant, host, until)
		}
		x.retry(t, now, true)
		return
	}
	if res.Captcha && res.Challenge != nil && t.solution == nil && ctx.Err() == nil {
		// Solved only under a recorded authorisation (SolveCaptcha refuses
		// otherwise); off the loop, as a solver may take a while.
		x.inflight++
		ch := *res.Challenge
		go func() {
			out := result{t: t, agent: r.agent, solving: true}
			defer func() { x.results <- out }()
			out.solved, out.solveErr = x.r.Store.SolveCaptcha(ctx, x.tenant, x.r.Solvers, x.solverClient(), ch,
				CaptchaUse{JobID: x.job.ID, JobName: x.job.Name, RunID: x.run.ID, URL: t.url})
		}()
		return
	}
	if res.Captcha {
		x.figures(host, func(f *DomainFigures) { f.Errors++ })
		x.captcha(t)
		return
	}
	if res.Error != "" {
		x.figures(host, func(f *DomainFigures) { f.Errors++ })
		// Refusals, captchas and 4xx answers do not get better by retrying.
		permanent := res.Refused != "" || res.Captcha || (res.Status >= 400 && res.Status < 500)
		if permanent || !x.retry(t, now, true) {
			x.run.Errors++
			x.attempts++
			x.r.Log.Warn("crawl: page failed", "url", t.url, "status", res.Status, "err", res.Error)
		}
		return
	}
	x.attempts++
	x.run.Pages++
	if !x.extracts(t.kind) {
		// An agent that still extracts every page (an older build) sent
		// the listing's items and misses: they are not this page's.
		res.Items, res.Missing = nil, nil
	}
	x.run.SelectorFailures += len(res.Missing)
	keyed := map[string]map[string]any{}
	for _, it := range res.Items {
		k, ok := ItemKey(x.spec.ItemKey, it)
		if !ok {
			x.run.SelectorFailures++
			continue
		}
		keyed[k] = it
	}
	for k := range keyed {
		if !x.keys[k] {
			x.keys[k] = true
			x.run.Items++
		}
	}
	x.items.add(keyed, now)
	for _, l := range res.Links {
		x.push(task{url: l, kind: wire.PageItem})
	}
	if t.kind == wire.PageListing {
		x.next(t, res)
	}
}

func robotsCacheBody(status int, body string) string {
	if status >= 400 {
		return "" // no robots.txt: everything allowed
	}
	return body
}

// next queues the listing's next page by the job's pagination.
func (x *execution) next(t task, res wire.PageResult) {
	pg := x.spec.Pagination
	if pg == nil {
		return
	}
	if pg.MaxPages > 0 && t.page >= pg.MaxPages {
		return
	}
	switch {
	case pg.Param != nil:
		if len(res.Items) == 0 {
			return
		}
		u, err := url.Parse(t.url)
		if err != nil {
			return
		}
		n, _ := strconv.Atoi(u.Query().Get(pg.Param.Name))
		n += pg.Param.Step
		if pg.Param.To > 0 && n > pg.Param.To {
			return
		}
		x.push(task{url: setParam(t.url, pg.Param.Name, n), kind: wire.PageListing, page: t.page + 1})
	case res.Next != "":
		x.push(task{url: res.Next, kind: wire.PageListing, page: t.page + 1})
	}
}

// retry queues t again after a full-jitter backoff; false when its
// retries are spent.
func (x *execution) retry(t task, now time.Time, counts bool) bool {
	p := x.spec.Politeness
	if counts {
		if t.attempt >= int(x.retries.Value) {
			if x.retries.From != "task" && t.attempt < *p.Retries && x.hit == nil {
				// The tenant's or the global retry limit gave it up.
				x.hit = &x.retries
			}
			return false
		}
		t.attempt++
	}
	t.notBefore = now.Add(Backoff(t.attempt, p.BackoffBaseD, p.BackoffCapD))
	x.requeue(t)
	return true
}

// ErrorRate is a run's failed pages over pages attempted.
func (r Run) ErrorRate() float64 {
	n := r.Pages + r.Errors
	if n == 0 {
		return 0
	}
	return float64(r.Errors) / float64(n)
}

// maxProxyTries bounds the proxies one page goes through before it fails.
const maxProxyTries = 10

// poolRefresh is how often a run re-reads its pool (benches and restores
// made by other runs and replicas, proxies added or removed).
const poolRefresh = 5 * time.Second

func (x *execution) loadPool(ctx context.Context) error {
	name := x.spec.ProxyPool
	p, err := x.r.Store.PoolForRun(ctx, x.tenant, name)
	if errors.Is(err, ErrNoPool) {
		return fmt.Errorf("the job's proxy_pool %q does not exist in this tenant (fleetwright crawl proxy pool %s creates it)", name, name)
	}
	if err != nil {
		return err
	}
	if len(p.Proxies) == 0 {
		return fmt.Errorf("proxy pool %q has no proxy (fleetwright crawl proxy add %s URL adds one)", name, name)
	}
	x.pool, x.poolAt = &p, x.r.Clock.Now()
	if x.egress == nil {
		x.egress = map[string]string{}
	}
	return nil
}

// proxyFor picks the pool's proxy for a page sent to agent. It returns nil
// and "" while every proxy is benched, nil and the reason when none is
// left to wait for: a run with a pool never falls back to direct egress.
func (x *execution) proxyFor(ctx context.Context, agent string, now time.Time) (*Proxy, string) {
	if now.Sub(x.poolAt) >= poolRefresh {
		if err := x.loadPool(ctx); err != nil {
			return nil, err.Error()
		}
	}
	px := x.pool.pick(agent, now, x.proxyRR, x.cursor)
	if px == nil {
		if x.pool.nextUsable().IsZero() {
			return nil, fmt.Sprintf("every proxy of pool %q was removed after repeated failures: restore one (fleetwright crawl proxy restore ID) or add another", x.pool.Name)
		}
		return nil, ""
	}
	x.proxyRR++
	if x.pool.Rotation == RotateOnFailure {
		x.cursor = px.ID
	}
	return px, ""
}

// proxyOutcome records an outcome through a proxy: in the store (shared
// by every run and replica) when it changes anything, and in the run's
// copy of the pool at once.
func (x *execution) proxyOutcome(ctx context.Context, id string, ok bool, msg string, now time.Time) {
	var px *Proxy
	for i := range x.pool.Proxies {
		if x.pool.Proxies[i].ID == id {
			px = &x.pool.Proxies[i]
		}
	}
	if px == nil || (ok && px.State == ProxyActive && px.Failures == 0 && px.Score == 0) {
		return
	}
	h, err := x.r.Store.ProxyOutcome(ctx, x.tenant, id, ok, msg, now)
	if err != nil {
		x.r.Log.Warn("crawl: record proxy outcome", "proxy", px.URL(), "err", err)
		h = px.Health.After(ok, now, *x.pool)
	}
	if h.State != px.State {
		until := "" // a nil *time.Time would panic in the log's String call
		if h.BenchedUntil != nil {
			until = h.BenchedUntil.UTC().Format(time.RFC3339Nano)
		}
		x.r.Log.Warn("crawl: proxy health changed", "pool", x.pool.Name, "proxy", px.URL(), "from", px.State, "to", h.State,
			"benched_until", until, "err", msg)
		if h.State == ProxyRemoved {
			if err := x.r.Store.proxyRemovedAlarm(ctx, x.tenant, x.pool.Name, *px, msg); err != nil {
				x.r.Log.Error("crawl: raise the proxy's removal alarm", "proxy", px.URL(), "err", err)
			}
		}
	}
	px.Health = h
	if !ok {
		px.LastError = msg
	}
	if !ok && x.pool.Rotation == RotateOnFailure && x.cursor == id {
		// On failure, the next proxy in the pool's order takes over.
		x.cursor = ""
		for i := range x.pool.Proxies {
			if x.pool.Proxies[i].ID == id && i+1 < len(x.pool.Proxies) {
				x.cursor = x.pool.Proxies[i+1].ID
			}
		}
	}
}

// recordEgress keeps the fleet page's egress column: which proxy (or the
// account's own address) each agent's crawler was last handed.
func (x *execution) recordEgress(ctx context.Context, agent string, px *Proxy) {
	key, pool := "direct", ""
	if px != nil {
		key, pool = px.ID, x.pool.Name
	}
	if x.egress == nil {
		x.egress = map[string]string{}
	}
	if x.egress[agent] == key {
		return
	}
	x.egress[agent] = key
	if err := x.r.Store.SetAgentEgress(ctx, x.tenant, agent, pool, px, x.r.Clock.Now()); err != nil {
		x.r.Log.Warn("crawl: record agent egress", "agent", agent, "err", err)
	}
}

// captcha fails a page that showed a captcha nobody solved: not retried;
// the run's crawl.captcha alarm asks a person to look.
func (x *execution) captcha(t task) {
	x.run.Errors++
	x.run.Captchas++
	x.attempts++
	x.r.Log.Warn("crawl: the page asks for a captcha; a person must look", "url", t.url)
}

// solverClient is the HTTP client for the solver's endpoint: through the
// egress guard with the tenant's allowlist (the endpoint was typed by an
// admin, so it is data).
func (x *execution) solverClient() *http.Client {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.solverHTTP != nil {
		return x.solverHTTP
	}
	allow, err := egress.ParseEntries(x.allow)
	if err != nil {
		allow = nil
	}
	g, err := egress.New(egress.Config{Policy: egress.Policy{Entries: allow, Ports: append(append([]int(nil), egress.DefaultPorts...), x.ports...)},
		Logger: x.r.Log})
	if err != nil {
		return &http.Client{Transport: errTransport{err}}
	}
	x.solverHTTP = g.Client(egress.ClientOptions{Timeout: 2 * time.Minute})
	return x.solverHTTP
}

type errTransport struct{ err error }

func (e errTransport) RoundTrip(*http.Request) (*http.Response, error) { return nil, e.err }
