package crawl

import (
	"context"
	"net/url"
	"slices"
	"time"

	"github.com/fleetwright/fleetwright/modules/crawl/spec"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// The frontier is a queue per host. A run books a request slot for the
// head of a host's queue only while fewer than politeness.concurrency of
// its own requests hold one of that host's concurrency slots, and takes
// one of its in-flight slots (limits.concurrency) only when a booked
// slot has come: a task waiting for its host's turn holds no in-flight
// slot, so a polite run across several hosts keeps every host busy
// instead of filling its in-flight slots with one host's waiting pages.
// Waiting costs no polling: the budget answers how long until the booked
// slot, and the run's loop sleeps until the earliest one (or a result).

// turnRetry is how soon a run asks again for a host whose concurrency
// slots are all held by other runs or replicas (its own requests ending
// wake it at once).
const turnRetry = 50 * time.Millisecond

// noBudgetRetry is how soon a run asks again for a host while the cell's
// Redis is down and the host's share is unknown.
const noBudgetRetry = time.Second

// hostQueue is one host's part of a run's frontier.
type hostQueue struct {
	name  string
	tasks []task
	// busy counts this run's requests that hold one of the host's
	// concurrency slots: booked, or in flight.
	busy int
	// retryAt is when to ask the budget again after it said no.
	retryAt time.Time
}

// booking is a request slot booked in the budget for a task, and the
// concurrency slot (id) it holds until its request ends.
type booking struct {
	t     task
	host  *hostQueue
	agent string
	id    string
	due   time.Time
}

func (x *execution) hostQ(h string) *hostQueue {
	q := x.hosts[h]
	if q == nil {
		q = &hostQueue{name: h}
		if x.hosts == nil {
			x.hosts = map[string]*hostQueue{}
		}
		x.hosts[h] = q
		x.order = append(x.order, q)
	}
	return q
}

// push queues a newly found URL, once per run.
func (x *execution) push(t task) {
	if x.seen[t.url] {
		return
	}
	x.seen[t.url] = true
	x.requeue(t)
}

// requeue puts a task (again) at the back of its host's queue.
func (x *execution) requeue(t task) {
	q := x.hostQ(hostOf(t.url))
	q.tasks = append(q.tasks, t)
	x.queued++
}

// requeueFront puts a task back at the head of its host's queue: it had
// its turn and could not use it.
func (x *execution) requeueFront(t task) {
	q := x.hostQ(hostOf(t.url))
	q.tasks = slices.Insert(q.tasks, 0, t)
	x.queued++
}

// pending is the tasks not yet sent: queued or booked.
func (x *execution) pending() int { return x.queued + len(x.booked) }

// headOf picks the first task of q that may go now: past its backoff,
// and whose host's robots.txt is known (a robots task is queued first
// otherwise). It returns -1 and the earliest backoff end when none may.
func (x *execution) headOf(q *hostQueue, now time.Time) (int, time.Time) {
	var nb time.Time
	for i, t := range q.tasks {
		if t.notBefore.After(now) {
			if nb.IsZero() || t.notBefore.Before(nb) {
				nb = t.notBefore
			}
			continue
		}
		if t.kind == wire.PageRobots {
			return i, time.Time{}
		}
		d := x.domain(q.name)
		if d.robotsDone {
			return i, time.Time{}
		}
		if !d.robotsBusy {
			d.robotsBusy = true
			if body, ok := x.r.Budget.CachedRobots(context.Background(), x.tenant, q.name); ok {
				x.setRobots(q.name, 200, body)
				return i, time.Time{}
			}
			u, _ := url.Parse(t.url)
			q.tasks = slices.Insert(q.tasks, 0, task{url: u.Scheme + "://" + u.Host + "/robots.txt", kind: wire.PageRobots})
			x.queued++
			return 0, time.Time{}
		}
		// The host's robots.txt is being fetched (or waits for a retry):
		// only its robots task may go.
	}
	return -1, nb
}

// take removes q's task i.
func (x *execution) take(q *hostQueue, i int) task {
	t := q.tasks[i]
	q.tasks = slices.Delete(q.tasks, i, i+1)
	x.queued--
	return t
}

// lease is how long a request's concurrency slot is held past its booked
// time: its timeout and a margin (a crashed panel's slot expires then).
func (x *execution) lease() time.Duration {
	if x.spec.Render == spec.RenderBrowser {
		return 70 * time.Second
	}
	return 40 * time.Second
}

// book asks the budget for a request slot for the head of every host's
// queue that may have one, round robin over the hosts. It returns false
// when a task was ready but no crawler agent is there to take it.
func (x *execution) book(ctx context.Context, now time.Time) (agentsThere bool) {
	p := x.spec.Politeness
	agentsThere = true
	var agents []string
	n := len(x.order)
	for k := 0; k < n; k++ {
		q := x.order[(x.nextHost+k)%n]
		for q.busy < p.Concurrency && !q.retryAt.After(now) {
			i, _ := x.headOf(q, now)
			if i < 0 {
				break
			}
			if agents == nil {
				if agents = x.agents(); len(agents) == 0 {
					return false
				}
			}
			t := x.take(q, i)
			if !x.admit(ctx, t) {
				continue
			}
			agent := x.nextAgent(agents)
			id := wire.NewID()
			wait, ok, err := x.r.Budget.Step(ctx, x.tenant, q.name, agent, x.run.ID, id, x.gap(x.domain(q.name)), p.Concurrency, x.lease())
			if err != nil || !ok {
				x.requeueFront(t)
				q.retryAt = now.Add(turnRetry)
				if err != nil {
					q.retryAt = now.Add(noBudgetRetry)
				}
				break
			}
			q.busy++
			b := booking{t: t, host: q, agent: agent, id: id, due: now.Add(wait)}
			i, _ = slices.BinarySearchFunc(x.booked, b.due, func(e booking, due time.Time) int { return e.due.Compare(due) })
			x.booked = slices.Insert(x.booked, i, b)
		}
	}
	if n > 0 {
		x.nextHost = (x.nextHost + 1) % n
	}
	return agentsThere
}

// unbook gives back a booking that will not be sent: its concurrency
// slot is released and its task goes back to the head of its queue.
func (x *execution) unbook(ctx context.Context, b booking, t task) {
	b.host.busy--
	x.r.Budget.Release(context.WithoutCancel(ctx), x.tenant, b.host.name, b.id)
	x.requeueFront(t)
}

// unbookAll gives back every booking (a pause holds the run, or it ends).
func (x *execution) unbookAll(ctx context.Context) {
	for _, b := range x.booked {
		x.unbook(ctx, b, b.t)
	}
	x.booked = x.booked[:0]
}

// nextWake is when the loop has something to do without a result coming
// back: the earliest booked slot (while an in-flight slot is free), or
// the earliest time a host may be asked again or a backoff ends.
func (x *execution) nextWake(now time.Time) time.Time {
	var at time.Time
	soonest := func(t time.Time) {
		if !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	if len(x.booked) > 0 && x.inflight < x.spec.Limits.Concurrency {
		soonest(x.booked[0].due)
	}
	for _, q := range x.order {
		if len(q.tasks) == 0 || q.busy >= x.spec.Politeness.Concurrency {
			continue
		}
		if q.retryAt.After(now) {
			soonest(q.retryAt)
			continue
		}
		if _, nb := x.headOf(q, now); !nb.IsZero() {
			soonest(nb)
		}
	}
	return at
}
