package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"

	"github.com/fleetwright/fleetwright/examples/platforms"
	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/platform/engine"
	"github.com/fleetwright/fleetwright/modules/platform/spec"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// errPlatform: the account's platform cannot be built from its spec (a
// digest that does not match, a spec that does not parse or compile, a
// worker naming another platform). The worker reports why and claims
// nothing until the panel sends a spec that builds.
var errPlatform = errors.New("agent: the account's platform cannot be built")

// maxReasonBytes bounds the reason an event carries (a spec's errors can
// be many lines).
const maxReasonBytes = 4000

// Platforms builds every adapter the agent's workers use from a platform
// spec: the built-in ones (examples/platforms, embedded: the sandbox
// board's) or the one the panel sends with the account
// (config.account.platform). A spec is verified and parsed once per digest
// and compiled once per digest and base URL; each worker gets a fork of the
// compiled adapter (its own dial and budget hook).
type Platforms struct {
	mu       sync.Mutex
	builtin  map[string]*wire.PlatformSpec // by name
	parsed   map[string]parsed             // by digest
	compiled map[[2]string]*engine.Adapter // by digest and base URL
}

type parsed struct {
	s   *spec.Spec
	err error
}

// NewPlatforms reads the built-in specs. One that does not parse (a
// broken build) is kept with its errors: a worker naming it reports them.
func NewPlatforms() *Platforms {
	p := &Platforms{builtin: map[string]*wire.PlatformSpec{}, parsed: map[string]parsed{}, compiled: map[[2]string]*engine.Adapter{}}
	files, _ := fs.Glob(platforms.FS, "*.yaml")
	for _, f := range files {
		src, err := fs.ReadFile(platforms.FS, f)
		if err != nil {
			continue
		}
		ps := &wire.PlatformSpec{Name: strings.TrimSuffix(f, ".yaml"), Digest: Digest(src), Source: string(src)}
		_, _ = p.parse(ps, f)
		p.builtin[ps.Name] = ps
	}
	return p
}

// Digest is the hex SHA-256 of a spec's source, as the panel names it.
func Digest(src []byte) string {
	sum := sha256.Sum256(src)
	return hex.EncodeToString(sum[:])
}

// parse verifies and parses a spec once per digest.
func (p *Platforms) parse(ps *wire.PlatformSpec, file string) (*spec.Spec, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if got, ok := p.parsed[ps.Digest]; ok {
		return got.s, got.err
	}
	var out parsed
	switch sum := Digest([]byte(ps.Source)); {
	case !strings.EqualFold(sum, ps.Digest):
		// Not cached: a digest that names another text says nothing of it.
		return nil, fmt.Errorf("the spec's digest %s is not the SHA-256 of its source (%s): it was changed or cut on the way; the panel must send it again", short(ps.Digest), short(sum))
	default:
		out.s, out.err = spec.Parse(file, []byte(ps.Source))
		if out.err == nil && ps.Name != "" && out.s.Name != ps.Name {
			out.s, out.err = nil, fmt.Errorf("the spec names itself %q, but the panel sent it as platform %q", out.s.Name, ps.Name)
		}
	}
	p.parsed[ps.Digest] = out
	return out.s, out.err
}

func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12] + "…"
	}
	return digest
}

// source is the spec the worker's platform is built from: the account's,
// when the panel sent one, else the built-in one the worker's setting names
// (default sandbox).
func (p *Platforms) source(acct wire.Account, setting string) (*wire.PlatformSpec, string, error) {
	if ps := acct.Platform; ps != nil {
		if setting != "" && setting != ps.Name {
			return nil, "", fmt.Errorf("the worker's platform setting names %q, but the account's platform is %q: remove the setting or fix it", setting, ps.Name)
		}
		return ps, fmt.Sprintf("%s v%d", ps.Name, ps.Version), nil
	}
	name := setting
	if name == "" {
		name = defaultAdapter
	}
	ps, ok := p.builtin[name]
	if !ok {
		return nil, "", fmt.Errorf("unknown platform %q: the panel sent no spec for the account, and no built-in platform has that name", name)
	}
	return ps, name + ".yaml (built in)", nil
}

// Adapter returns the worker's adapter for the account's base URL: a fork
// of the one compiled for that spec and URL.
func (p *Platforms) Adapter(acct wire.Account, setting string) (platform.Adapter, *wire.PlatformSpec, error) {
	ps, file, err := p.source(acct, setting)
	if err != nil {
		return nil, acct.Platform, fmt.Errorf("%w: %v", errPlatform, err)
	}
	s, err := p.parse(ps, file)
	if err != nil {
		return nil, ps, fmt.Errorf("%w: %v", errPlatform, err)
	}
	key := [2]string{ps.Digest, acct.BoardURL}
	p.mu.Lock()
	defer p.mu.Unlock()
	ad, ok := p.compiled[key]
	if !ok {
		if ad, err = engine.New(s, acct.BoardURL); err != nil {
			return nil, ps, fmt.Errorf("%w: %v", errPlatform, err)
		}
		p.compiled[key] = ad
	}
	return ad.Fork(), ps, nil
}

// Compiled is how many adapters were compiled from the spec of digest (for
// tests: one per base URL, whatever the number of worker starts).
func (p *Platforms) Compiled(digest string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for k := range p.compiled {
		if k[0] == digest {
			n++
		}
	}
	return n
}

// reason is err as an event carries it.
func reason(err error) string {
	m := strings.TrimPrefix(err.Error(), errPlatform.Error()+": ")
	if len(m) > maxReasonBytes {
		m = m[:maxReasonBytes] + "…"
	}
	return m
}
