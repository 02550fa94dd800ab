package loadtest

import (
	"encoding/binary"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/fleetwright/fleetwright/modules/board"
)

// keepSessions adds the session cookies a board issued to the known
// secrets (before the board is replaced, and before the scan), once each:
// a cookie anywhere but its own agent's agent.db is a leak.
func (r *runner) keepSessions(b *board.Server) {
	if b == nil {
		return
	}
	seen := map[string]bool{}
	for _, s := range r.secrets {
		if s.kind == "board_session" {
			seen[s.value] = true
		}
	}
	for _, s := range b.IssuedSessions() {
		if !seen[s.Token] {
			// The account is named after its agent, whose agent.db keeps
			// the cookie by design.
			r.addSecret(s.Token, "board_session", s.Account)
		}
	}
}

// scanner finds any of a set of known secrets in a byte stream in one pass:
// every secret is at least 8 bytes, so each position is looked up by its
// next 8 bytes (after a cheap two-byte prefilter) and confirmed in full.
type scanner struct {
	first [1 << 16]bool
	by8   map[uint64][]int
	sec   []secret
}

func newScanner(secs []secret) *scanner {
	s := &scanner{by8: map[uint64][]int{}}
	for i, x := range secs {
		if len(x.value) < 8 {
			continue
		}
		s.sec = append(s.sec, x)
		k := binary.LittleEndian.Uint64([]byte(x.value[:8]))
		s.by8[k] = append(s.by8[k], len(s.sec)-1)
		s.first[int(x.value[0])<<8|int(x.value[1])] = true
		_ = i
	}
	return s
}

// find returns the indexes of the secrets b contains.
func (s *scanner) find(b []byte) map[int]bool {
	var found map[int]bool
	for i := 0; i+8 <= len(b); i++ {
		if !s.first[int(b[i])<<8|int(b[i+1])] {
			continue
		}
		for _, j := range s.by8[binary.LittleEndian.Uint64(b[i:])] {
			v := s.sec[j].value
			if i+len(v) <= len(b) && string(b[i:i+len(v)]) == v {
				if found == nil {
					found = map[int]bool{}
				}
				found[j] = true
			}
		}
	}
	return found
}

// scanSecrets reads every file under the run's directory — every process's
// output, the board's and this command's logs, the embedded Postgres and
// Redis (their logs and data), the panels' data dirs and the agents' state
// dirs — for the run's known secrets. An agent's own token file and its
// own state database hold its own credentials on purpose (they are its
// host's), and the board's store holds each account's TOTP secret as any
// platform must to check codes (the board is the platform, not Fleetwright);
// anything else anywhere is a leak.
func (r *runner) scanSecrets(rep *Report) {
	r.keepSessions(r.board())
	sc := newScanner(r.secrets)
	rep.SecretsKnown = len(sc.sec)
	agents := filepath.Join(r.dir, "agents") + string(filepath.Separator)
	_ = filepath.WalkDir(r.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		rep.FilesScanned++
		rep.BytesScanned += int64(len(b))
		owner := ""
		if rest, ok := strings.CutPrefix(path, agents); ok {
			name, file, _ := strings.Cut(rest, string(filepath.Separator))
			if file == "token" || strings.HasPrefix(file, "agent.db") {
				owner = name
			}
		}
		rel, _ := filepath.Rel(r.dir, path)
		boardStore := strings.HasPrefix(rel, "board"+string(filepath.Separator)+"board.sqlite")
		for j := range sc.find(b) {
			x := sc.sec[j]
			if owner != "" && x.owner == owner {
				continue
			}
			if boardStore && x.kind == "totp_secret" {
				continue
			}
			rep.Leaks = append(rep.Leaks, Leak{Kind: x.kind, Where: rel})
		}
		return nil
	})
	rep.SecretsLeaked = len(rep.Leaks)
}
