package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// releaseStartupPages unmaps from this process the pages of its own
// executable's read-only mappings (code and read-only data) that it has
// touched so far. Start-up runs every linked package's initialisation,
// which faults in most of a large binary's code and data (about 23 MiB of
// this one) that an idle agent never touches again: they would stay in its
// resident set for its whole life. MADV_DONTNEED on a clean, read-only
// file mapping only drops this process's page-table entries: the pages
// stay in the page cache (shared with every other process of the binary),
// nothing is written or read, and a page the agent uses again is mapped
// back on its first touch. It returns the bytes of the ranges advised.
func releaseStartupPages() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("agent: release start-up pages: %w", err)
	}
	exe = strings.TrimSuffix(exe, " (deleted)")
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, fmt.Errorf("agent: release start-up pages: %w", err)
	}
	type mapping struct {
		start, end uint64
		dirty      bool
	}
	var maps []mapping
	var cur *mapping
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(f[0], "-"); ok && len(f) >= 5 && !strings.HasSuffix(f[0], ":") {
			// A mapping's header: address perms offset dev inode [path].
			cur = nil
			path := ""
			if len(f) >= 6 {
				path = strings.TrimSuffix(strings.Join(f[5:], " "), " (deleted)")
			}
			perms := f[1]
			// Only private read-only mappings of the executable itself.
			if path != exe || len(perms) < 4 || perms[0] != 'r' || perms[1] != '-' || perms[3] != 'p' {
				continue
			}
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 != nil || err2 != nil || end <= start {
				continue
			}
			maps = append(maps, mapping{start: start, end: end})
			cur = &maps[len(maps)-1]
			continue
		}
		if cur == nil || len(f) < 2 {
			continue
		}
		// A page written after mapping (a relocated, then write-protected
		// table of a position-independent binary) is a private copy that
		// exists nowhere but here: such a mapping is left alone. (Private_Dirty
		// is no sign of that: it also counts a freshly written binary's
		// pages not yet flushed to disk.)
		if f[0] == "Anonymous:" && f[1] != "0" {
			cur.dirty = true
		}
	}
	var total int64
	for _, m := range maps {
		if m.dirty {
			continue
		}
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, uintptr(m.start), uintptr(m.end-m.start), syscall.MADV_DONTNEED); e != 0 {
			return total, fmt.Errorf("agent: release start-up pages: madvise: %w", e)
		}
		total += int64(m.end - m.start)
	}
	return total, nil
}
