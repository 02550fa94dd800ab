package logging

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// RepeatWindow is how long an exactly repeated warning or error is held
// back by the process's logger (New): a dependency that is down, a peer
// that keeps sending the same bad message, must not fill the disk.
const RepeatWindow = 10 * time.Second

// Repeats wraps h so that a warning or error repeated exactly — the same
// level, message and attributes, those added by With included — within
// every is written once; the next one written after the window carries
// repeated=N, the number held back. Info and debug lines pass untouched:
// they are the ones people and tests wait for, and their volume is the
// level's business. now is the time source (nil: time.Now).
func Repeats(h slog.Handler, every time.Duration, now func() time.Time) slog.Handler {
	if now == nil {
		now = time.Now
	}
	return &repeats{inner: h, every: every, now: now, st: &repeatState{seen: map[string]repeatSeen{}}}
}

type repeatSeen struct {
	at   time.Time
	held int
}

type repeatState struct {
	mu   sync.Mutex
	seen map[string]repeatSeen
}

type repeats struct {
	inner  slog.Handler
	every  time.Duration
	now    func() time.Time
	st     *repeatState
	prefix string // the attributes and groups added by With, as text
}

func (r *repeats) Enabled(ctx context.Context, l slog.Level) bool { return r.inner.Enabled(ctx, l) }

func (r *repeats) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level < slog.LevelWarn || r.every <= 0 {
		return r.inner.Handle(ctx, rec)
	}
	var b strings.Builder
	b.WriteString(rec.Level.String())
	b.WriteString("|")
	b.WriteString(r.prefix)
	b.WriteString("|")
	b.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, "|%s=%v", a.Key, a.Value.Resolve().Any())
		return true
	})
	key := b.String()
	t := r.now()
	r.st.mu.Lock()
	s, ok := r.st.seen[key]
	if ok && t.Sub(s.at) < r.every {
		s.held++
		r.st.seen[key] = s
		r.st.mu.Unlock()
		return nil
	}
	r.st.seen[key] = repeatSeen{at: t}
	if len(r.st.seen) > 4096 {
		for k, v := range r.st.seen {
			if t.Sub(v.at) >= r.every {
				delete(r.st.seen, k)
			}
		}
	}
	r.st.mu.Unlock()
	if s.held > 0 {
		rec = rec.Clone()
		rec.AddAttrs(slog.Int("repeated", s.held))
	}
	return r.inner.Handle(ctx, rec)
}

func (r *repeats) WithAttrs(attrs []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(r.prefix)
	for _, a := range attrs {
		fmt.Fprintf(&b, "%s=%v;", a.Key, a.Value.Resolve().Any())
	}
	return &repeats{inner: r.inner.WithAttrs(attrs), every: r.every, now: r.now, st: r.st, prefix: b.String()}
}

func (r *repeats) WithGroup(name string) slog.Handler {
	return &repeats{inner: r.inner.WithGroup(name), every: r.every, now: r.now, st: r.st, prefix: r.prefix + name + "."}
}
