package embedded

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrArchiveGap refuses a WAL archive a recovery could not replay through.
var ErrArchiveGap = errors.New("embedded: the WAL archive has a gap")

// ArchiveSpan is what CheckArchive found: the archive's unbroken run of
// segments on the backup's timeline, from the one the backup ends in.
type ArchiveSpan struct {
	Timeline uint32
	// First and Last are the segments' file names; Segments their count.
	First, Last string
	Segments    int
}

// segName is a WAL segment's file name.
func segName(tli uint32, segno, perID uint64) string {
	return fmt.Sprintf("%08X%08X%08X", tli, segno/perID, segno%perID)
}

var segRe = regexp.MustCompile(`^[0-9A-F]{24}$`)

// CheckArchive checks that the WAL archive archiveDir can carry a base
// backup (its data directory data, as pg_basebackup wrote it, and its
// system identifier and end LSN) forward: it holds the segment the backup
// ends in and every one after it on the backup's timeline without a gap,
// each of the cluster's system identifier and segment size.
func CheckArchive(archiveDir, data, systemID, endLSN string) (ArchiveSpan, error) {
	var span ArchiveSpan
	tli, err := backupTimeline(filepath.Join(data, "backup_label"))
	if err != nil {
		return span, err
	}
	span.Timeline = tli
	end, err := parseLSN(endLSN)
	if err != nil {
		return span, fmt.Errorf("embedded: the backup's end LSN %q: %w", endLSN, err)
	}
	entries, err := os.ReadDir(archiveDir)
	if err != nil {
		return span, fmt.Errorf("embedded: read the WAL archive: %w; give the --wal-archive directory the panel archived into", err)
	}
	prefix := fmt.Sprintf("%08X", tli)
	var names []string
	for _, e := range entries {
		if segRe.MatchString(e.Name()) && strings.HasPrefix(e.Name(), prefix) {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return span, fmt.Errorf("%w: %s holds no WAL segment of the backup's timeline %d: is it the archive of this panel's cluster?", ErrArchiveGap, archiveDir, tli)
	}
	sort.Strings(names)
	segSize, err := segmentSize(filepath.Join(archiveDir, names[0]))
	if err != nil {
		return span, err
	}
	perID := uint64(0x100000000) / segSize
	num := func(name string) uint64 {
		hi, _ := strconv.ParseUint(name[8:16], 16, 32)
		lo, _ := strconv.ParseUint(name[16:24], 16, 32)
		return hi*perID + lo
	}
	first := end / segSize
	span.First = segName(tli, first, perID)
	want := first
	for _, n := range names {
		s := num(n)
		if s < first {
			continue
		}
		if s != want {
			if want == first {
				return span, fmt.Errorf("%w: it lacks %s, the segment the backup ends in (it starts at %s): the archive began after the backup, or that segment was removed; nothing was restored: use a backup taken after the archive began", ErrArchiveGap, span.First, n)
			}
			return span, fmt.Errorf("%w: %s to %s are missing (between %s and %s); a recovery would stop at the gap and lose everything after it, so nothing was restored: put the missing segments back from where the archive is copied, or restore a backup taken after the gap", ErrArchiveGap,
				segName(tli, want, perID), segName(tli, s-1, perID), segName(tli, want-1, perID), n)
		}
		if err := checkSegment(filepath.Join(archiveDir, n), systemID, segSize); err != nil {
			return span, err
		}
		span.Last = n
		span.Segments++
		want++
	}
	if span.Segments == 0 {
		return span, fmt.Errorf("%w: it holds nothing from %s on, the segment the backup ends in (its newest is %s): the archive stopped before the backup; nothing was restored", ErrArchiveGap, span.First, names[len(names)-1])
	}
	return span, nil
}

// backupTimeline reads START TIMELINE from a base backup's backup_label.
func backupTimeline(label string) (uint32, error) {
	f, err := os.Open(label)
	if err != nil {
		return 0, fmt.Errorf("embedded: the backup has no backup_label (%v): it is not a base backup a WAL archive can carry forward", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "START TIMELINE: "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			if err != nil {
				return 0, fmt.Errorf("embedded: backup_label: %w", err)
			}
			return uint32(n), nil
		}
	}
	return 0, errors.New("embedded: backup_label names no START TIMELINE")
}

func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, errors.New("not an LSN")
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, err
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, err
	}
	return h<<32 | l, nil
}

// walHeader is the start of a segment's first page (XLogLongPageHeaderData).
type walHeader struct {
	sysID   uint64
	segSize uint32
}

func readHeader(path string) (walHeader, int64, error) {
	var h walHeader
	f, err := os.Open(path)
	if err != nil {
		return h, 0, fmt.Errorf("embedded: the WAL archive: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return h, 0, fmt.Errorf("embedded: the WAL archive: %w", err)
	}
	b := make([]byte, 40)
	if _, err := io.ReadFull(f, b); err != nil {
		return h, st.Size(), fmt.Errorf("embedded: the archived segment %s is damaged (%v): put a good copy back", filepath.Base(path), err)
	}
	h.sysID = binary.LittleEndian.Uint64(b[24:32])
	h.segSize = binary.LittleEndian.Uint32(b[32:36])
	return h, st.Size(), nil
}

func segmentSize(path string) (uint64, error) {
	h, _, err := readHeader(path)
	if err != nil {
		return 0, err
	}
	if h.segSize == 0 || h.segSize&(h.segSize-1) != 0 {
		return 0, fmt.Errorf("embedded: %s is not a WAL segment (segment size %d)", filepath.Base(path), h.segSize)
	}
	return uint64(h.segSize), nil
}

func checkSegment(path, systemID string, segSize uint64) error {
	h, size, err := readHeader(path)
	if err != nil {
		return err
	}
	if uint64(size) != segSize || uint64(h.segSize) != segSize {
		return fmt.Errorf("embedded: the archived segment %s is %d bytes, not %d (truncated?): put a good copy back; nothing was restored", filepath.Base(path), size, segSize)
	}
	if systemID != "" && strconv.FormatUint(h.sysID, 10) != systemID {
		return fmt.Errorf("embedded: the archived segment %s is of another cluster (system identifier %d, the backup's is %s): give the WAL archive of the backup's panel; nothing was restored", filepath.Base(path), h.sysID, systemID)
	}
	return nil
}

// Recovery configures Recover.
type Recovery struct {
	// Archive is the WAL archive replayed after the base backup.
	Archive string
	// Until, when set, is recovery_target_time: the recovery stops before
	// the first transaction committed after it. Zero replays the whole
	// archive.
	Until  time.Time
	Logger *slog.Logger
}

// Recovered is what Recover did.
type Recovered struct {
	// LastCommit is the commit time of the last transaction replayed (zero
	// when the recovery replayed none).
	LastCommit time.Time
	// Timeline is the timeline the promoted cluster continues on.
	Timeline uint32
}

// Recover replays the WAL archive r.Archive over the base backup restored
// under dir (as PostgresConfig.Dir) up to r.Until (or to the archive's
// end), promotes the cluster and stops it again: it is then an ordinary
// cluster StartPostgres starts. The recovery settings are given on the
// postmaster's command line only, so none stays in the cluster's
// configuration; it follows the backup's own timeline. The caller must
// hold the data directory's lock.
func Recover(ctx context.Context, dir string, r Recovery) (Recovered, error) {
	var out Recovered
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
	postgresBin, err := findPGBinary("postgres")
	if err != nil {
		return out, err
	}
	who, err := databaseUser()
	if err != nil {
		return out, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return out, fmt.Errorf("embedded: %w", err)
	}
	archive, err := filepath.Abs(r.Archive)
	if err != nil {
		return out, fmt.Errorf("embedded: %w", err)
	}
	if err := checkReachable(filepath.Join(archive, "x"), who); err != nil {
		return out, err
	}
	creds, err := loadOrCreateCredentials(filepath.Join(abs, "credentials.json"))
	if err != nil {
		return out, err
	}
	data := filepath.Join(abs, "data")
	signal := filepath.Join(data, "recovery.signal")
	if err := os.WriteFile(signal, nil, 0o600); err != nil {
		return out, fmt.Errorf("embedded: %w", err)
	}
	if who.cred != nil {
		if err := os.Chown(signal, int(who.uid), int(who.gid)); err != nil {
			return out, fmt.Errorf("embedded: %w", err)
		}
	}
	p := &Postgres{cfg: PostgresConfig{Dir: abs}, creds: creds, bin: postgresBin, who: who, data: data,
		log: r.Logger.With("component", "postgres recovery"), readyWithin: 24 * time.Hour}
	p.socket = shortSocketDir(filepath.Join(abs, "run"), fmt.Sprintf(".s.PGSQL.%d", pgPort))
	if err := os.MkdirAll(p.socket, 0o700); err != nil {
		return out, fmt.Errorf("embedded: %w", err)
	}
	if who.cred != nil {
		if err := os.Chown(p.socket, int(who.uid), int(who.gid)); err != nil {
			return out, fmt.Errorf("embedded: %w", err)
		}
	}
	// restore_command runs under /bin/sh with %f and %p filled in; the
	// archive's path is single-quoted for the shell and % doubled for
	// Postgres. A segment the archive lacks fails cp, which ends the
	// recovery there.
	quoted := "'" + strings.ReplaceAll(strings.ReplaceAll(archive, "%", "%%"), "'", `'\''`) + "'"
	p.args = []string{"-D", data,
		"-c", "listen_addresses=",
		"-c", "unix_socket_directories=" + p.socket,
		"-c", "unix_socket_permissions=0700",
		"-c", "port=" + strconv.Itoa(pgPort),
		// No connection until the recovery is over and promoted.
		"-c", "hot_standby=off",
		"-c", "archive_mode=off",
		"-c", "restore_command=cp " + quoted + "/%f %p",
		"-c", "recovery_target_timeline=current",
		"-c", "recovery_target_action=promote",
		"-c", "logging_collector=off",
		"-c", "log_min_messages=log",
		"-c", "log_checkpoints=off",
	}
	if !r.Until.IsZero() {
		p.args = append(p.args, "-c", "recovery_target_time="+r.Until.UTC().Format("2006-01-02 15:04:05.999999+00"))
	}
	var mu sync.Mutex
	var lines []string
	p.onLine = func(l string) {
		mu.Lock()
		defer mu.Unlock()
		if strings.Contains(l, "FATAL") || strings.Contains(l, "last completed transaction") || strings.Contains(l, "recovery stopping") {
			lines = append(lines, l)
		}
	}
	if err := p.launch(ctx); err != nil {
		_ = os.Remove(signal)
		mu.Lock()
		defer mu.Unlock()
		return out, recoveryFailed(err, lines)
	}
	defer func() {
		p.proc.halt()
		p.proc.terminate(syscall.SIGINT, 60*time.Second)
	}()
	c, err := pgx.Connect(ctx, p.SuperURL("postgres"))
	if err != nil {
		return out, fmt.Errorf("embedded: recovery: connect: %w", err)
	}
	defer c.Close(ctx)
	var inRecovery bool
	var last *time.Time
	if err := c.QueryRow(ctx, `SELECT pg_is_in_recovery(), pg_last_xact_replay_timestamp(), (SELECT timeline_id FROM pg_control_checkpoint())`).
		Scan(&inRecovery, &last, &out.Timeline); err != nil {
		return out, fmt.Errorf("embedded: recovery: %w", err)
	}
	if inRecovery {
		return out, errors.New("embedded: recovery: the cluster accepts connections but is still in recovery")
	}
	if last != nil {
		out.LastCommit = last.UTC()
	}
	// A checkpoint now, so the stop is quick and the next start replays nothing.
	if _, err := c.Exec(ctx, `CHECKPOINT`); err != nil {
		return out, fmt.Errorf("embedded: recovery: checkpoint: %w", err)
	}
	return out, nil
}

// recoveryFailed turns a recovery the postmaster gave up on into what the
// operator can act on.
func recoveryFailed(err error, lines []string) error {
	var last string
	for _, l := range lines {
		if i := strings.Index(l, "last completed transaction was at log time "); i >= 0 {
			last = strings.TrimSpace(l[i+len("last completed transaction was at log time "):])
		}
	}
	for _, l := range lines {
		if strings.Contains(l, "recovery ended before configured recovery target was reached") {
			msg := "embedded: the WAL archive ends before --until: the recovery replayed all of it without reaching that moment"
			if last != "" {
				msg += " (its last transaction was committed at " + last + ")"
			}
			return errors.New(msg + "; nothing was restored: give an earlier --until, or leave --until out to recover everything the archive holds")
		}
	}
	for _, l := range lines {
		if strings.Contains(l, "FATAL") {
			return fmt.Errorf("embedded: the recovery failed: %s; nothing was restored", l)
		}
	}
	return fmt.Errorf("embedded: the recovery failed: %w; nothing was restored", err)
}
