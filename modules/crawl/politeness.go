package crawl

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwright/fleetwright/app/clock"
)

// Budget is the per-domain politeness budget, fleet-wide: its state lives
// in the cell's Redis, so every run on every panel replica, for every
// agent, draws from the same schedule of slots. Agents never reach Redis:
// the panel reserves a slot, waits for it, then hands the page task over.
//
// While the cell's Redis is down the budget falls back to this process:
// each agent gets the domain's rate divided by the number of agents last
// known to crawl it, or nothing when that number was never read.
type Budget struct {
	redis func(ctx context.Context, tenant string) (*redis.Client, error)
	clock clock.Clock

	mu      sync.Mutex
	agents  map[string]int       // domain → agents crawling it, as last read from Redis
	local   map[string]time.Time // domain|agent → next free slot, while Redis is down
	conc    map[string]int       // domain → requests in flight, while Redis is down
	blocked map[string]time.Time // domain → end of a Retry-After, while Redis is down
	seen    map[string]time.Time // domain → end of the latest Retry-After recorded here
}

// NewBudget returns a budget over the tenant's cell Redis.
func NewBudget(rdb func(ctx context.Context, tenant string) (*redis.Client, error), clk clock.Clock) *Budget {
	if clk == nil {
		clk = clock.Real{}
	}
	return &Budget{redis: rdb, clock: clk, agents: map[string]int{}, local: map[string]time.Time{}, conc: map[string]int{}, blocked: map[string]time.Time{},
		seen: map[string]time.Time{}}
}

const keyPrefix = "crawl:pol:"

// stepScript is a page's politeness in one round trip: it takes one of
// the domain's concurrency slots (a leased entry that expires, so a
// crashed panel cannot hold one forever) and books the domain's next slot
// in time, at least gap after the previous one and not before the
// domain's Retry-After block, as reserveScript does. It returns the wait
// for that slot in microseconds, and the agents crawling the domain.
// The schedule is kept in microseconds: whole milliseconds would truncate
// every jittered gap (a 10 ms delay drawn from 5–15 ms lost half a
// millisecond a request on average, 5 % over the rate; the three-agent
// benchmark caught it). The block stays in milliseconds.
//
// When every concurrency slot is taken it books nothing and answers -1;
// the asking run then waits its turn in the domain's queue of waiters
// (oldest first ask first), so runs sharing a domain take turns instead
// of the quickest to ask again winning every free slot. A waiter that
// has not asked for waiterStale leaves the queue (its run ended).
//
// KEYS: nextus, block, agents, conc, waiters (by order of first ask),
// seen (last ask), turns (the waiters' counter).
// ARGV: now ms, gap µs, nextus TTL ms, agent, now µs, limit, lease ms,
// slot id, run id, waiterStale ms.
var stepScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[6])
local run = ARGV[9]
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
local stale = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now - tonumber(ARGV[10]))
for _, w in ipairs(stale) do
  redis.call('ZREM', KEYS[6], w)
  redis.call('ZREM', KEYS[5], w)
end
local free = limit - redis.call('ZCARD', KEYS[4])
local turn = free > 0
if turn then
  local rank = redis.call('ZRANK', KEYS[5], run)
  if rank then
    turn = rank < free
  else
    turn = redis.call('ZCARD', KEYS[5]) < free
  end
end
if not turn then
  if not redis.call('ZSCORE', KEYS[5], run) then
    redis.call('ZADD', KEYS[5], redis.call('INCR', KEYS[7]), run)
  end
  redis.call('PEXPIRE', KEYS[7], 60000)
  redis.call('ZADD', KEYS[6], now, run)
  redis.call('PEXPIRE', KEYS[5], 60000)
  redis.call('PEXPIRE', KEYS[6], 60000)
  return {'-1', 0}
end
redis.call('ZREM', KEYS[5], run)
redis.call('ZREM', KEYS[6], run)
local nowu = tonumber(ARGV[5])
local nxt = tonumber(redis.call('GET', KEYS[1]) or '0')
local blk = tonumber(redis.call('GET', KEYS[2]) or '0') * 1000
if nxt < nowu then nxt = nowu end
if blk > nxt then nxt = blk end
redis.call('SET', KEYS[1], string.format('%d', nxt + tonumber(ARGV[2])), 'PX', ARGV[3])
local hold = math.floor((nxt - nowu) / 1000) + tonumber(ARGV[7])
redis.call('ZADD', KEYS[4], now + hold, ARGV[8])
if redis.call('PTTL', KEYS[4]) < hold then redis.call('PEXPIRE', KEYS[4], hold) end
redis.call('ZADD', KEYS[3], now + 60000, ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
return {string.format('%d', nxt - nowu), redis.call('ZCARD', KEYS[3])}`)

// waiterStale is how long a run that waits for a domain's concurrency
// slot stays in its queue of waiters without asking again.
const waiterStale = 2 * time.Second

// acquireScript takes one of a domain's concurrency slots (a lease that
// expires, so a crashed panel cannot hold one forever).
var acquireScript = redis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[3]), ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
return 0`)

// blockScript extends a domain's Retry-After block, never shortens it.
var blockScript = redis.NewScript(`
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) > cur then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) end
return 1`)

// throttleScript is AutoThrottle's average: the domain's delay moves half
// way towards latency / concurrency, never below the job's delay nor
// above a minute.
var throttleScript = redis.NewScript(`
local cur = tonumber(redis.call('GET', KEYS[1]) or ARGV[2])
local target = tonumber(ARGV[1])
local nd = (cur + target) / 2
if nd < target then nd = target end
if nd < tonumber(ARGV[2]) then nd = tonumber(ARGV[2]) end
if nd > 60000 then nd = 60000 end
redis.call('SET', KEYS[1], math.floor(nd), 'PX', 3600000)
return math.floor(nd)`)

func ms(t time.Time) int64 { return t.UnixMilli() }

// Gap draws one gap between requests: delay × (1 ± jitter), uniform.
func Gap(delay time.Duration, jitter float64) time.Duration {
	if jitter <= 0 || delay <= 0 {
		return delay
	}
	f := 1 + jitter*(2*rand.Float64()-1)
	return time.Duration(float64(delay) * f)
}

// Step takes one of domain's limit concurrency slots for the request
// slot (its id) of run, sent by agent, and books the domain's next slot
// in time, in one Redis round trip. It returns how long to wait for that
// slot, or ok false when every concurrency slot is taken (or it is
// another run's turn): the caller asks again when one of its own requests
// to the domain ends, or after a while. The concurrency slot is held
// for the wait plus lease; Release gives it back.
func (b *Budget) Step(ctx context.Context, tenant, domain, agent, run, id string, gap time.Duration, limit int, lease time.Duration) (wait time.Duration, ok bool, err error) {
	now := b.clock.Now()
	rdb, err := b.redis(ctx, tenant)
	if err == nil {
		var res []any
		res, err = stepScript.Run(ctx, rdb, []string{keyPrefix + domain + ":nextus", keyPrefix + domain + ":block", keyPrefix + domain + ":agents",
			keyPrefix + domain + ":conc", keyPrefix + domain + ":waiters", keyPrefix + domain + ":seen", keyPrefix + domain + ":turns"},
			ms(now), gap.Microseconds(), (gap + time.Hour).Milliseconds(), agent, now.UnixMicro(), limit, lease.Milliseconds(), id, run,
			waiterStale.Milliseconds()).Slice()
		if err == nil && len(res) == 2 {
			ws, _ := res[0].(string)
			w, perr := strconv.ParseInt(ws, 10, 64)
			if perr == nil {
				if w < 0 {
					return 0, false, nil
				}
				n, _ := res[1].(int64)
				b.mu.Lock()
				b.agents[domain] = int(n)
				b.mu.Unlock()
				return time.Duration(w) * time.Microsecond, true, nil
			}
			err = fmt.Errorf("crawl: step: unexpected answer %q", ws)
		}
	}
	// Redis is down: this process alone decides (as Acquire does, and at the
	// rate divided by the agents last known to crawl the domain).
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.agents[domain]
	if n == 0 {
		return 0, false, ErrNoBudget
	}
	if b.conc[domain] >= limit {
		return 0, false, nil
	}
	b.conc[domain]++
	key := domain + "|" + agent
	next := b.local[key]
	if next.Before(now) {
		next = now
	}
	b.local[key] = next.Add(gap * time.Duration(n))
	return next.Sub(now), true, nil
}

// SeenBlock is the end of the latest Retry-After block this process
// recorded for domain (zero when none): a request whose slot came due
// checks it without asking Redis, so a 429 answered while it waited
// holds it back.
func (b *Budget) SeenBlock(domain string) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seen[domain]
}

// ErrNoBudget means the cell's Redis is down and this domain's share was
// never known: nothing is granted until Redis returns.
var ErrNoBudget = errBudget("crawl: the cell's Redis is down and this domain's share of the budget is unknown; waiting for Redis")

type errBudget string

func (e errBudget) Error() string { return string(e) }

// Acquire takes one of the domain's concurrency slots; false when all are
// in use. Release gives it back.
func (b *Budget) Acquire(ctx context.Context, tenant, domain, id string, limit int, lease time.Duration) bool {
	rdb, err := b.redis(ctx, tenant)
	if err == nil {
		n, err := acquireScript.Run(ctx, rdb, []string{keyPrefix + domain + ":conc"}, ms(b.clock.Now()), limit, lease.Milliseconds(), id).Int()
		if err == nil {
			return n == 1
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conc[domain] >= limit {
		return false
	}
	b.conc[domain]++
	return true
}

// Release gives back a concurrency slot.
func (b *Budget) Release(ctx context.Context, tenant, domain, id string) {
	rdb, err := b.redis(ctx, tenant)
	if err == nil && rdb.ZRem(ctx, keyPrefix+domain+":conc", id).Err() == nil {
		return
	}
	b.mu.Lock()
	if b.conc[domain] > 0 {
		b.conc[domain]--
	}
	b.mu.Unlock()
}

// Block honours a Retry-After for the whole domain until until.
func (b *Budget) Block(ctx context.Context, tenant, domain string, until time.Time) {
	b.mu.Lock()
	if until.After(b.seen[domain]) {
		b.seen[domain] = until
	}
	b.mu.Unlock()
	rdb, err := b.redis(ctx, tenant)
	if err == nil {
		d := until.Sub(b.clock.Now()) + time.Minute
		if blockScript.Run(ctx, rdb, []string{keyPrefix + domain + ":block"}, ms(until), d.Milliseconds()).Err() == nil {
			return
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if until.After(b.blocked[domain]) {
		b.blocked[domain] = until
	}
	for k, t := range b.local {
		if len(k) > len(domain) && k[:len(domain)+1] == domain+"|" && t.Before(until) {
			b.local[k] = until
		}
	}
}

// BlockedUntil is the end of the domain's Retry-After block (zero when
// none). A request whose slot came due re-checks it, so a 429 answered
// while it waited still holds it back.
func (b *Budget) BlockedUntil(ctx context.Context, tenant, domain, agent string) time.Time {
	rdb, err := b.redis(ctx, tenant)
	if err == nil {
		v, err := rdb.Get(ctx, keyPrefix+domain+":block").Int64()
		if err == nil {
			return time.UnixMilli(v)
		}
		if errors.Is(err, redis.Nil) {
			return time.Time{}
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.blocked[domain]
}

// Throttle feeds a response time to AutoThrottle and returns the domain's
// delay now (at least min).
func (b *Budget) Throttle(ctx context.Context, tenant, domain string, latency time.Duration, concurrency int, min time.Duration) time.Duration {
	rdb, err := b.redis(ctx, tenant)
	if err != nil {
		return min
	}
	target := latency / time.Duration(max(concurrency, 1))
	n, err := throttleScript.Run(ctx, rdb, []string{keyPrefix + domain + ":delay"}, target.Milliseconds(), min.Milliseconds()).Int64()
	if err != nil {
		return min
	}
	return time.Duration(n) * time.Millisecond
}

// CachedRobots reads a domain's robots.txt from the cell's cache.
func (b *Budget) CachedRobots(ctx context.Context, tenant, domain string) (string, bool) {
	rdb, err := b.redis(ctx, tenant)
	if err != nil {
		return "", false
	}
	v, err := rdb.Get(ctx, keyPrefix+domain+":robots").Result()
	return v, err == nil
}

// CacheRobots keeps a domain's robots.txt for ttl.
func (b *Budget) CacheRobots(ctx context.Context, tenant, domain, body string, ttl time.Duration) {
	if rdb, err := b.redis(ctx, tenant); err == nil {
		_ = rdb.Set(ctx, keyPrefix+domain+":robots", body, ttl).Err()
	}
}

// Backoff is capped exponential backoff with full jitter: a uniform draw
// from [0, min(cap, base × 2^attempt)).
func Backoff(attempt int, base, cap time.Duration) time.Duration {
	d := base
	for i := 0; i < attempt && d < cap; i++ {
		d *= 2
	}
	d = min(d, cap)
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d)))
}
