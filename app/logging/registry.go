package logging

import (
	"container/list"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// What a value must be to be registered. A registered value is replaced in
// every log line, so a short or guessable one ("127.0.0.1", "review.test")
// would blank out the very traces an operator needs — and if anyone could
// register such values, an attacker would hide theirs. Secrets this process
// issues (session and agent tokens, generated passwords, TOTP seeds) are far
// above both limits.
const (
	// minSecretLen is the shortest value registered, in bytes.
	minSecretLen = 12
	// minSecretBits is the least estimated entropy of a registered value:
	// its length times the Shannon entropy of its bytes.
	minSecretBits = 40
	// DefaultMaxSecrets caps the process's registry; past it, the least
	// recently registered secret is forgotten first.
	DefaultMaxSecrets = 100_000
)

// Worthy reports whether v is long and random enough to be registered.
func Worthy(v string) bool {
	if len(v) < minSecretLen {
		return false
	}
	var counts [256]int
	for i := 0; i < len(v); i++ {
		counts[v[i]]++
	}
	n := float64(len(v))
	h := 0.0
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			h -= p * math.Log2(p)
		}
	}
	return h*n >= minSecretBits
}

// RegistryOptions configure NewRegistry.
type RegistryOptions struct {
	// Max is how many secrets are kept (DefaultMaxSecrets when 0).
	Max int
	// Now is the registry's clock for expiries (time.Now when nil).
	Now func() time.Time
}

// Registry holds the live secrets to redact, bounded in number and each
// kept until it expires, and finds all of them in a text in one pass.
//
// Matching uses two Aho–Corasick automata: a large base one and a small one
// of the secrets registered since the base was built. A new secret rebuilds
// only the small one; when it grows past the square root of the registry's
// size, both are merged into a new base (and secrets expired or evicted
// meanwhile are dropped). So registering costs O(√n) amortised instead of
// re-sorting everything, and scanning costs one pass per automaton whatever
// the number of secrets.
type Registry struct {
	mu      sync.RWMutex
	max     int
	now     func() time.Time
	entries map[string]*list.Element
	lru     *list.List // of *entry, most recently registered first
	base    *matcher
	delta   *matcher
	pending []string // registered since base was built: what delta holds
	inBase  int      // secrets base was built with
	merging bool
	onAdd   func(string)
}

type entry struct {
	value string
	exp   time.Time // zero: until evicted
}

// NewRegistry returns an empty registry.
func NewRegistry(o RegistryOptions) *Registry {
	if o.Max <= 0 {
		o.Max = DefaultMaxSecrets
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Registry{max: o.Max, now: o.Now, entries: map[string]*list.Element{}, lru: list.New()}
}

// OnRegister calls f (outside any lock of the registry's readers, but under
// its write lock) with every value accepted from now on. Test helpers use it
// to learn every secret a test produced, so they can check captured logs.
func (r *Registry) OnRegister(f func(string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onAdd = f
}

// Register adds values for ttl (0: until evicted). Values that are not
// Worthy are ignored. Registering a known value again refreshes it.
// It returns how many values were accepted.
func (r *Registry) Register(ttl time.Duration, values ...string) int {
	accepted := 0
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	var exp time.Time
	if ttl > 0 {
		exp = now.Add(ttl)
	}
	added := false
	for _, v := range values {
		if !Worthy(v) {
			continue
		}
		accepted++
		if r.onAdd != nil {
			r.onAdd(v)
		}
		if el, ok := r.entries[v]; ok {
			e := el.Value.(*entry)
			switch {
			case ttl == 0:
				e.exp = time.Time{}
			case !e.exp.IsZero() && exp.After(e.exp):
				e.exp = exp
			}
			r.lru.MoveToFront(el)
			continue
		}
		r.entries[v] = r.lru.PushFront(&entry{value: v, exp: exp})
		r.pending = append(r.pending, v)
		added = true
	}
	if !added {
		return accepted
	}
	// Bound the registry: the least recently registered go first, and so
	// do expired ones that have reached the back.
	for b := r.lru.Back(); b != nil; b = r.lru.Back() {
		e := b.Value.(*entry)
		if r.lru.Len() <= r.max && (e.exp.IsZero() || now.Before(e.exp)) {
			break
		}
		r.lru.Remove(b)
		delete(r.entries, e.value)
	}
	r.delta = buildMatcher(r.pending)
	if !r.merging && (len(r.pending) > int(math.Sqrt(float64(len(r.entries))))+64 || r.inBase > 2*len(r.entries)+1024) {
		r.merge(now)
	}
	return accepted
}

// merge builds a new base automaton of everything live. It is called with
// the write lock held and returns with it held, but builds without it: with
// 100,000 secrets a build takes a good tenth of a second, during which
// logging goes on with the old automata (and registering with the delta).
func (r *Registry) merge(now time.Time) {
	r.merging = true
	all := make([]string, 0, len(r.entries))
	for el := r.lru.Front(); el != nil; {
		next := el.Next()
		e := el.Value.(*entry)
		if !e.exp.IsZero() && !now.Before(e.exp) {
			r.lru.Remove(el)
			delete(r.entries, e.value)
		} else {
			all = append(all, e.value)
		}
		el = next
	}
	cut := len(r.pending)
	r.mu.Unlock()
	base := buildMatcher(all)
	r.mu.Lock()
	r.base, r.inBase, r.merging = base, len(all), false
	r.pending = slices.Clone(r.pending[cut:])
	r.delta = buildMatcher(r.pending)
}

// Len returns how many secrets are held (expired ones not yet dropped
// included).
func (r *Registry) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.entries)
}

// Contains reports whether v is held and not expired.
func (r *Registry) Contains(v string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.live(v, r.now())
}

func (r *Registry) live(v string, now time.Time) bool {
	el, ok := r.entries[v]
	if !ok {
		return false
	}
	e := el.Value.(*entry)
	return e.exp.IsZero() || now.Before(e.exp)
}

// Scrub returns s with every live secret replaced by Redacted. Where
// occurrences overlap or touch, their union becomes one Redacted, so no part
// of either survives.
func (r *Registry) Scrub(s string) string {
	if len(s) < minSecretLen {
		return s
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if len(r.entries) == 0 {
		return s
	}
	now := r.now()
	live := func(v string) bool { return r.live(v, now) }
	var buf [8]span
	found := r.base.find(s, live, buf[:0])
	found = r.delta.find(s, live, found)
	if len(found) == 0 {
		return s
	}
	slices.SortFunc(found, func(a, b span) int { return a.start - b.start })
	var b strings.Builder
	b.Grow(len(s))
	at := 0
	for i := 0; i < len(found); {
		start, end := found[i].start, found[i].end
		for i++; i < len(found) && found[i].start <= end; i++ {
			end = max(end, found[i].end)
		}
		b.WriteString(s[at:start])
		b.WriteString(Redacted)
		at = end
	}
	b.WriteString(s[at:])
	return b.String()
}
