package logging

import (
	"slices"
	"strings"
)

// anchorLen is how many leading bytes of a secret the automaton indexes.
// Every registered secret is at least this long (minSecretLen), so indexing
// a fixed-length prefix keeps the automaton small (at most anchorLen nodes
// per secret, whatever the secret's length) while a hit is confirmed by
// comparing the whole secret.
const anchorLen = minSecretLen

// matcher is an Aho–Corasick automaton over the anchors (first anchorLen
// bytes) of a set of secrets. It is immutable once built, so readers scan it
// without locks while a new one is built.
//
// Nodes are numbered in breadth-first order, so the children of a node are
// consecutive ids sorted by their edge byte: a node stores its first child
// and how many it has, and a transition is a binary search among them. All
// anchors have the same length, so the only nodes that end an anchor are the
// deepest ones, which come last: node n ends group n-firstLeaf.
type matcher struct {
	firstChild []int32
	nChildren  []uint16
	label      []byte // the byte on the edge into the node
	fail       []int32
	firstLeaf  int32
	// root is the root's transitions as a table: most bytes of a text
	// leave or stay at the root, so this is the hot path.
	root [256]int32
	// sorted holds the secrets by anchor, longest first within an anchor;
	// leaf i's secrets are sorted[groupStart[i]:groupStart[i+1]].
	sorted     []string
	groupStart []int32
}

// buildMatcher returns the automaton for secrets (each at least anchorLen
// bytes long), or nil when there are none.
func buildMatcher(secrets []string) *matcher {
	if len(secrets) == 0 {
		return nil
	}
	// Sorted by anchor, then longest first, so each leaf's secrets are a
	// contiguous run in the order they are tried.
	sorted := slices.Clone(secrets)
	slices.SortFunc(sorted, func(a, b string) int {
		if c := strings.Compare(a[:anchorLen], b[:anchorLen]); c != 0 {
			return c
		}
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	sorted = slices.Compact(sorted)
	capNodes := len(sorted)*anchorLen + 1
	m := &matcher{
		firstChild: make([]int32, 1, capNodes),
		nChildren:  make([]uint16, 1, capNodes),
		label:      make([]byte, 1, capNodes),
		sorted:     sorted,
	}
	// A node covers the range [lo, hi) of sorted secrets sharing its prefix.
	// Breadth-first, level by level: every node of depth d is expanded
	// before any node of depth d+1, so ids come out in BFS order.
	type rng struct{ lo, hi int32 }
	level := []rng{{0, int32(len(sorted))}}
	var next []rng
	for depth := 0; depth < anchorLen; depth++ {
		next = next[:0]
		n := int32(len(m.label)) - int32(len(level))
		for _, sp := range level {
			m.firstChild[n] = int32(len(m.label))
			count := 0
			for j := sp.lo; j < sp.hi; {
				c := sorted[j][depth]
				k := j + 1
				for k < sp.hi && sorted[k][depth] == c {
					k++
				}
				m.label = append(m.label, c)
				m.firstChild = append(m.firstChild, 0)
				m.nChildren = append(m.nChildren, 0)
				next = append(next, rng{j, k})
				count++
				j = k
			}
			m.nChildren[n] = uint16(count)
			n++
		}
		level, next = next, level
	}
	m.firstLeaf = int32(len(m.label) - len(level))
	m.groupStart = make([]int32, len(level)+1)
	for i, sp := range level {
		m.groupStart[i] = sp.lo
	}
	m.groupStart[len(level)] = int32(len(sorted))
	for c := range m.root {
		if nx, ok := m.child(0, byte(c)); ok {
			m.root[c] = nx
		}
	}
	// Failure links, in BFS order so a node's parent's link is ready.
	m.fail = make([]int32, len(m.label))
	for n := int32(0); n < int32(len(m.label)); n++ {
		for c := m.firstChild[n]; c < m.firstChild[n]+int32(m.nChildren[n]); c++ {
			if n == 0 {
				continue
			}
			f := m.fail[n]
			for {
				if f == 0 {
					m.fail[c] = m.root[m.label[c]]
					break
				}
				if nx, ok := m.child(f, m.label[c]); ok {
					m.fail[c] = nx
					break
				}
				f = m.fail[f]
			}
		}
	}
	return m
}

// child returns n's child along byte c.
func (m *matcher) child(n int32, c byte) (int32, bool) {
	lo, hi := m.firstChild[n], m.firstChild[n]+int32(m.nChildren[n])
	for lo < hi {
		mid := int32(uint32(lo+hi) >> 1)
		switch l := m.label[mid]; {
		case l == c:
			return mid, true
		case l < c:
			lo = mid + 1
		default:
			hi = mid
		}
	}
	return 0, false
}

// span is a half-open byte range of text to redact.
type span struct{ start, end int }

// find appends to out the longest live secret found at each position of s.
func (m *matcher) find(s string, live func(string) bool, out []span) []span {
	if m == nil {
		return out
	}
	state := int32(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if state == 0 {
			state = m.root[c]
			continue
		}
		for {
			if state == 0 {
				state = m.root[c]
				break
			}
			if nx, ok := m.child(state, c); ok {
				state = nx
				break
			}
			state = m.fail[state]
		}
		if state < m.firstLeaf {
			continue
		}
		start := i + 1 - anchorLen
		g := state - m.firstLeaf
		for _, sec := range m.sorted[m.groupStart[g]:m.groupStart[g+1]] {
			if strings.HasPrefix(s[start:], sec) && live(sec) {
				out = append(out, span{start, start + len(sec)})
				break
			}
		}
	}
	return out
}
