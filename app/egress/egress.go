// Package egress is the SSRF guard every fetch whose target comes from data
// goes through: crawl jobs, pages the assistant visits, links, redirects and
// webhook URLs. Endpoints an operator set by flag or configuration file (the
// panel URL, an account's board, the model endpoint, an SMTP relay, an
// upstream proxy) are not data and are dialled directly; a guard whose
// Policy.Only names an account's board dials that board and nothing else
// (the agents' board traffic).
//
// The check runs at dial time on the address actually dialled: the guard
// resolves the name itself, checks every answer, and connects to the checked
// address, never to the name again, so a DNS answer that changes between a
// check and a dial (rebinding) cannot pass. It denies the IANA special-purpose
// IPv4 and IPv6 ranges (IPv4-mapped, NAT64 and 6to4 forms are judged by the
// IPv4 address they carry), allows only configured ports (80 and 443 by
// default), reads host names the way a browser does (127.1, 0x7f000001 and
// 017700000001 are all loopback), and re-checks every redirect hop because
// each hop is a new dial. An allowlist of CIDR ranges admits internal
// addresses on purpose (the demo's and the tests' loopback sites).
//
// Chromium cannot be given a dialer, so Proxy is a guarded local forward
// proxy (CONNECT and plain HTTP) that a browser uses as its only proxy,
// loopback included (ChromiumFlags).
package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// DefaultPorts are the only ports a guarded fetch may reach unless the
// policy names others.
var DefaultPorts = []int{80, 443}

// Policy is what the guard admits besides ordinary public addresses.
type Policy struct {
	// Ports are the destination ports allowed; empty means DefaultPorts.
	Ports []int
	// Allow admits addresses inside these ranges even when they are
	// special-purpose, on Ports (an operator's flag, like --notify-allow).
	// The IPv4 address inside an IPv4-mapped address counts too.
	Allow []netip.Prefix
	// Entries admit special-purpose ranges on their own ports only (a
	// tenant's allowlist: 127.0.0.0/8:8081 opens that port of loopback,
	// not every loopback service).
	Entries []Entry
	// Only, when set, are the only targets dialled (host:port; see
	// OnlyTargets): an account's board and nothing else. Such a target is
	// an admin's configuration, not data, so it is dialled on whatever
	// address it resolves to; any other target is refused before a DNS
	// query, whatever its address.
	Only []string
}

// Entry is one allowlist entry: a range and the ports it opens (none
// written: the default ports, 80 and 443).
type Entry struct {
	Prefix netip.Prefix
	Ports  []int
}

func (e Entry) ports() []int {
	if len(e.Ports) == 0 {
		return DefaultPorts
	}
	return e.Ports
}

func (e Entry) contains(a netip.Addr) bool {
	return e.Prefix.Contains(a) || (a.Is4In6() && e.Prefix.Contains(a.Unmap()))
}

// ParseEntries reads allowlist entries that carry their port:
// "127.0.0.0/8:8081", "127.0.0.1:8081", "[::1]:8081", "[fd00::/8]:8443";
// an entry without a port ("10.1.0.0/16", "::1") opens 80 and 443 only.
// The same range may appear once per port.
func ParseEntries(entries []string) ([]Entry, error) {
	var out []Entry
	for _, raw := range entries {
		e := strings.TrimSpace(raw)
		if e == "" {
			continue
		}
		rng, port := e, ""
		switch {
		case strings.HasPrefix(e, "["):
			end := strings.Index(e, "]")
			if end < 0 {
				return nil, fmt.Errorf("egress: allow entry %q: no closing ] (write [fd00::/8]:8443 or [::1]:8081)", e)
			}
			rng, port = e[1:end], e[end+1:]
			if port != "" && !strings.HasPrefix(port, ":") {
				return nil, fmt.Errorf("egress: allow entry %q: after ] comes :PORT or nothing", e)
			}
			port = strings.TrimPrefix(port, ":")
			if port == "" && end+1 < len(e) {
				return nil, fmt.Errorf("egress: allow entry %q: empty port", e)
			}
		case strings.Count(e, ":") == 1:
			rng, port, _ = strings.Cut(e, ":")
			if port == "" {
				return nil, fmt.Errorf("egress: allow entry %q: empty port", e)
			}
		}
		p, err := ParseAllow([]string{rng})
		if err != nil {
			return nil, fmt.Errorf("%w (entries look like 127.0.0.0/8:8081, 10.0.0.5:443, [::1]:8081 or 10.1.0.0/16 for 80 and 443)", err)
		}
		ent := Entry{Prefix: p[0]}
		if port != "" {
			n, err := strconv.Atoi(port)
			if err != nil || n < 1 || n > 65535 {
				return nil, fmt.Errorf("egress: allow entry %q: port %q is not a number from 1 to 65535", e, port)
			}
			ent.Ports = []int{n}
		}
		out = append(out, ent)
	}
	return out, nil
}

// FormatEntry writes a range and a port as an entry ParseEntries reads
// (port 0: none, the default ports).
func FormatEntry(p netip.Prefix, port int) string {
	s := p.String()
	if p.IsSingleIP() {
		s = p.Addr().String()
	}
	if port == 0 {
		return s
	}
	if p.Addr().Is6() {
		s = "[" + s + "]"
	}
	return s + ":" + strconv.Itoa(port)
}

func (p Policy) ports() []int {
	if len(p.Ports) == 0 {
		return DefaultPorts
	}
	return p.Ports
}

// ErrRefused is matched by every refusal: errors.Is(err, egress.ErrRefused).
var ErrRefused = errors.New("egress: refused")

// Refusal says which target the guard refused and why. It is returned
// (wrapped, through net/http too) by every guarded dial it stops.
type Refusal struct {
	// Target is the host:port asked for, as given.
	Target string
	// Addr is the address refused, when the refusal came after parsing or
	// resolving the host; invalid otherwise.
	Addr netip.Addr
	// Reason is a short human explanation ("loopback (RFC 1122) 127.0.0.0/8").
	Reason string
}

func (r *Refusal) Error() string {
	if r.Addr.IsValid() && r.Addr.String() != hostOf(r.Target) {
		return fmt.Sprintf("egress: refused %s (%s): %s", r.Target, r.Addr, r.Reason)
	}
	return fmt.Sprintf("egress: refused %s: %s", r.Target, r.Reason)
}

// Is makes errors.Is(err, ErrRefused) true for a refusal.
func (r *Refusal) Is(target error) bool { return target == ErrRefused }

func hostOf(target string) string {
	if i := strings.LastIndexByte(target, ':'); i >= 0 {
		return strings.Trim(target[:i], "[]")
	}
	return target
}

// ParseAllow reads allowlist entries: CIDR ranges ("10.1.0.0/16") or single
// addresses ("127.0.0.1", "::1"), which mean a /32 or /128.
func ParseAllow(entries []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if strings.Contains(e, "/") {
			p, err := netip.ParsePrefix(e)
			if err != nil {
				return nil, fmt.Errorf("egress: allow entry %q is not a CIDR range (like 127.0.0.0/8 or fd00::/8): %w", e, err)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(e)
		if err != nil {
			return nil, fmt.Errorf("egress: allow entry %q is neither an address nor a CIDR range", e)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// CheckAddr decides one address and port under the policy: nil when a
// dial may go ahead, a *Refusal otherwise.
func (p Policy) CheckAddr(target string, a netip.Addr, port int) error {
	if a.Zone() != "" {
		return &Refusal{Target: target, Addr: a, Reason: fmt.Sprintf("scoped address (zone %q)", a.Zone())}
	}
	var entryPorts []int
	for _, e := range p.Entries {
		if e.contains(a) {
			if slices.Contains(e.ports(), port) {
				return nil
			}
			entryPorts = append(entryPorts, e.ports()...)
		}
	}
	if r := p.checkPort(target, port); r != nil {
		r.Addr = a
		if len(entryPorts) > 0 && Classify(a) != "" {
			r.Reason = fmt.Sprintf("port %d is not allowed for this address (its allowlist entries open %s)", port, joinPorts(entryPorts))
		}
		return r
	}
	if p.allowed(a) {
		return nil
	}
	if r := Classify(a); r != "" {
		if len(entryPorts) > 0 {
			r += fmt.Sprintf("; its allowlist entries open port %s only", joinPorts(entryPorts))
		}
		return &Refusal{Target: target, Addr: a, Reason: r}
	}
	return nil
}

// portPossible: some address could be dialled on port under the policy
// (checked before a name is resolved).
func (p Policy) portPossible(port int) bool {
	if slices.Contains(p.ports(), port) {
		return true
	}
	for _, e := range p.Entries {
		if slices.Contains(e.ports(), port) {
			return true
		}
	}
	return false
}

func (p Policy) checkPort(target string, port int) *Refusal {
	if !slices.Contains(p.ports(), port) {
		return &Refusal{Target: target, Reason: fmt.Sprintf("port %d is not allowed (allowed: %s)", port, joinPorts(p.ports()))}
	}
	return nil
}

func (p Policy) allowed(a netip.Addr) bool {
	for _, pr := range p.Allow {
		if pr.Contains(a) || (a.Is4In6() && pr.Contains(a.Unmap())) {
			return true
		}
	}
	return false
}

func joinPorts(ps []int) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ", ")
}

// ParseHost reads a host the way a browser's URL parser does. It returns
// the address for an IP literal in any form (dotted decimal, the octal,
// hexadecimal and short forms inet_aton accepts, bracketed or bare IPv6
// with an optional zone) and ok=false for a name to resolve. A host that
// ends in a number but is no valid address is an error: a browser refuses
// it too, and a system resolver might read it differently from us.
func ParseHost(host string) (addr netip.Addr, ok bool, err error) {
	h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.Contains(h, ":") {
		a, err := netip.ParseAddr(h)
		if err != nil {
			return netip.Addr{}, false, fmt.Errorf("egress: %q is not a valid IPv6 address", host)
		}
		return a, true, nil
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" {
		return netip.Addr{}, false, fmt.Errorf("egress: empty host")
	}
	labels := strings.Split(h, ".")
	if !numericLabel(labels[len(labels)-1]) {
		return netip.Addr{}, false, nil
	}
	a, perr := parseIPv4(labels)
	if perr != nil {
		return netip.Addr{}, false, fmt.Errorf("egress: host %q ends in a number but is not an IPv4 address: %v", host, perr)
	}
	return a, true, nil
}

// numericLabel is the URL standard's "ends in a number" test for one label.
func numericLabel(l string) bool {
	if l == "" {
		return false
	}
	if strings.Trim(l, "0123456789") == "" {
		return true
	}
	if len(l) >= 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X') {
		return strings.Trim(l[2:], "0123456789abcdefABCDEF") == ""
	}
	return false
}

// parseIPv4 is inet_aton: one to four parts, each decimal, 0-octal or
// 0x-hexadecimal; the last part fills the remaining bytes.
func parseIPv4(labels []string) (netip.Addr, error) {
	if len(labels) > 4 {
		return netip.Addr{}, fmt.Errorf("%d parts", len(labels))
	}
	vals := make([]uint64, len(labels))
	for i, l := range labels {
		v, err := parseIPv4Number(l)
		if err != nil {
			return netip.Addr{}, err
		}
		vals[i] = v
	}
	last := len(vals) - 1
	for _, v := range vals[:last] {
		if v > 255 {
			return netip.Addr{}, fmt.Errorf("part %d over 255", v)
		}
	}
	if vals[last] >= 1<<(8*(5-len(vals))) {
		return netip.Addr{}, fmt.Errorf("last part %d too large", vals[last])
	}
	n := vals[last]
	for i, v := range vals[:last] {
		n |= v << (8 * (3 - i))
	}
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), nil
}

func parseIPv4Number(l string) (uint64, error) {
	if l == "" {
		return 0, errors.New("empty part")
	}
	base := 10
	switch {
	case len(l) >= 2 && (l[:2] == "0x" || l[:2] == "0X"):
		base, l = 16, l[2:]
		if l == "" {
			return 0, nil
		}
	case len(l) >= 2 && l[0] == '0':
		base, l = 8, l[1:]
	}
	v, err := strconv.ParseUint(l, base, 64)
	if err != nil {
		return 0, fmt.Errorf("part %q is not a base-%d number", l, base)
	}
	return v, nil
}
