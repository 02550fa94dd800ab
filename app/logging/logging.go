// Package logging builds the process's slog logger. Its handler redacts
// secrets before anything is written: attributes whose key names a secret
// (password, token, secret, otp, cookie, authorization, …) lose their value,
// and every value registered as a live secret is replaced wherever it appears:
// in the message, in string attributes, inside error strings, in nested groups
// and in recovered panic messages.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Redacted is what a secret is replaced with.
const Redacted = "[REDACTED]"

// sensitiveKeys are substrings of attribute keys whose values are never written.
var sensitiveKeys = []string{
	"password", "passwd", "token", "secret", "otp", "totp", "cookie",
	"authorization", "session_id", "sessionid", "api_key", "apikey", "private_key", "credential",
}

// The process's registry: what RegisterSecret feeds and Scrub reads.
var defaultRegistry = NewRegistry(RegistryOptions{})

// RegisterSecret marks values as live secrets for as long as the process
// runs (or until the registry's cap evicts the least recently registered):
// from now on they are redacted from every log line of every logger this
// package built. Register only secrets this process issued or verified —
// never a value a client merely presented — and only secrets that are long
// and random enough (see Registry.Register: others are refused).
func RegisterSecret(values ...string) { defaultRegistry.Register(0, values...) }

// RegisterSecretFor is RegisterSecret for a secret that dies: a session
// token is registered for the session's remaining life, after which
// redacting it protects nothing and only costs memory.
func RegisterSecretFor(ttl time.Duration, values ...string) {
	if ttl <= 0 {
		return
	}
	defaultRegistry.Register(ttl, values...)
}

// Scrub returns s with every registered secret replaced. Use it for text that
// leaves the process by another way than the logger (an error page, a report).
func Scrub(s string) string { return defaultRegistry.Scrub(s) }

// Default returns the process's registry.
func Default() *Registry { return defaultRegistry }

// SensitiveKey reports whether an attribute key names a secret.
func SensitiveKey(key string) bool {
	k := strings.ToLower(key)
	for _, s := range sensitiveKeys {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

// Options configure New.
type Options struct {
	// Format is "text" or "json".
	Format string
	// Level is the minimum level written.
	Level slog.Leveler
}

// New returns a logger writing to w through the redacting handler.
func New(w io.Writer, opts Options) *slog.Logger {
	return slog.New(NewHandler(w, opts))
}

// NewHandler returns the redacting handler around slog's text or JSON
// handler, holding back exact repeats of warnings and errors for
// RepeatWindow (Repeats).
func NewHandler(w io.Writer, opts Options) slog.Handler {
	ho := &slog.HandlerOptions{Level: opts.Level}
	var inner slog.Handler
	if opts.Format == "json" {
		inner = slog.NewJSONHandler(w, ho)
	} else {
		inner = slog.NewTextHandler(w, ho)
	}
	return Repeats(&Handler{inner: inner, reg: defaultRegistry}, RepeatWindow, nil)
}

// Handler redacts secrets and delegates to an inner handler.
type Handler struct {
	inner slog.Handler
	reg   *Registry
}

// Wrap puts the redacting layer around any handler (tests use it to capture).
func Wrap(h slog.Handler) *Handler { return &Handler{inner: h, reg: defaultRegistry} }

// Enabled implements slog.Handler.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

// Handle implements slog.Handler.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.reg.Scrub(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.reg.redactAttr(a))
		return true
	})
	return h.inner.Handle(ctx, out)
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		red[i] = h.reg.redactAttr(a)
	}
	return &Handler{inner: h.inner.WithAttrs(red), reg: h.reg}
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{inner: h.inner.WithGroup(name), reg: h.reg}
}

func (reg *Registry) redactAttr(a slog.Attr) slog.Attr {
	if SensitiveKey(a.Key) && a.Value.Kind() != slog.KindGroup {
		return slog.String(a.Key, Redacted)
	}
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, reg.Scrub(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]any, len(g))
		for i, ga := range g {
			red[i] = reg.redactAttr(ga)
		}
		return slog.Group(a.Key, red...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, reg.Scrub(x.Error()))
		case fmt.Stringer:
			return slog.String(a.Key, reg.Scrub(x.String()))
		case []byte:
			return slog.String(a.Key, reg.Scrub(string(x)))
		default:
			// Structures are flattened to text so a secret in a field cannot
			// slip past; their field names are checked too.
			s := fmt.Sprintf("%+v", x)
			return slog.String(a.Key, reg.Scrub(scrubFields(s)))
		}
	default:
		return slog.Attr{Key: a.Key, Value: v}
	}
}

// scrubFields blanks "Key:value" pairs of %+v output whose key is sensitive.
func scrubFields(s string) string {
	if !strings.Contains(s, ":") {
		return s
	}
	parts := strings.Fields(s)
	changed := false
	for i, p := range parts {
		k, _, ok := strings.Cut(strings.TrimLeft(p, "{&["), ":")
		if ok && SensitiveKey(k) {
			parts[i] = k + ":" + Redacted
			changed = true
		}
	}
	if !changed {
		return s
	}
	return strings.Join(parts, " ")
}

// AtLeast returns a logger that drops records below min: for chatty
// libraries (River reports job counts every few seconds at info).
func AtLeast(l *slog.Logger, min slog.Level) *slog.Logger {
	return slog.New(minLevel{Handler: l.Handler(), min: min})
}

type minLevel struct {
	slog.Handler
	min slog.Level
}

func (m minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.min && m.Handler.Enabled(ctx, l)
}

func (m minLevel) WithAttrs(a []slog.Attr) slog.Handler {
	return minLevel{Handler: m.Handler.WithAttrs(a), min: m.min}
}

func (m minLevel) WithGroup(n string) slog.Handler {
	return minLevel{Handler: m.Handler.WithGroup(n), min: m.min}
}

// Printf adapts a structured logger to libraries that log through a
// Printf(ctx, format, args…) method (go-redis's redis.SetLogger), so their
// lines are structured and redacted like the product's own. A library
// repeats itself while a dependency is down (go-redis logs every failed
// dial): the same format is written at most once per Every, and the next
// line says how many were suppressed.
type Printf struct {
	Log   *slog.Logger
	Level slog.Level
	// Every is the window per format (0: every line is written).
	Every time.Duration
	// Now is the time source (nil: time.Now).
	Now func() time.Time

	mu   sync.Mutex
	last map[string]printfSeen
}

type printfSeen struct {
	at         time.Time
	suppressed int
}

// Printf implements the library's logging interface.
func (p *Printf) Printf(ctx context.Context, format string, args ...any) {
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	suppressed := 0
	if p.Every > 0 {
		t := now()
		p.mu.Lock()
		if p.last == nil {
			p.last = map[string]printfSeen{}
		}
		seen, ok := p.last[format]
		if ok && t.Sub(seen.at) < p.Every {
			seen.suppressed++
			p.last[format] = seen
			p.mu.Unlock()
			return
		}
		suppressed = seen.suppressed
		p.last[format] = printfSeen{at: t}
		p.mu.Unlock()
	}
	msg := strings.TrimSpace(fmt.Sprintf(format, args...))
	if suppressed > 0 {
		p.Log.Log(ctx, p.Level, msg, "suppressed_since_last", suppressed)
		return
	}
	p.Log.Log(ctx, p.Level, msg)
}
