package loadtest

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// logCeilingBytesPerMin is the log volume per process above which the
// report warns: 64 KiB a minute is 90 MiB a day, what one process of a
// fleet may sensibly keep under a week's rotation on a small disk. It is a
// warning, not a failure: the guarantees decide pass or fail.
const logCeilingBytesPerMin = 64 << 10

// logCount is what one process of the run wrote to its log.
type logCount struct {
	bytes, lines atomic.Int64
	// held counts the repeats the process's logger held back (app/logging
	// writes the next one with repeated=N).
	held  atomic.Int64
	since time.Time
}

func (c *logCount) add(b []byte) {
	c.bytes.Add(int64(len(b)))
	c.lines.Add(int64(bytes.Count(b, []byte{'\n'})))
}

// repeated matches the repeat counter in text (repeated=3) and JSON
// ("repeated":3) log lines.
var repeated = regexp.MustCompile(`\brepeated"?[=:](\d+)`)

// countHeld adds the repeats held back that whole lines in b report.
func (c *logCount) countHeld(b []byte) {
	if !bytes.Contains(b, []byte("repeated")) {
		return
	}
	for _, m := range repeated.FindAllSubmatch(b, -1) {
		if n, err := strconv.ParseInt(string(m[1]), 10, 64); err == nil {
			c.held.Add(n)
		}
	}
}

// logMeter counts every process's log output by process name: a panel
// replica or an agent across its restarts is one process name, as an
// operator's log file would be. Each has its own file under logs/.
type logMeter struct {
	mu    sync.Mutex
	procs map[string]*logCount
	files []*os.File
}

func newLogMeter() *logMeter { return &logMeter{procs: map[string]*logCount{}} }

// counter returns name's count, created now if new.
func (m *logMeter) counter(name string) *logCount {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.procs[name]
	if c == nil {
		c = &logCount{since: time.Now()}
		m.procs[name] = c
	}
	return c
}

// writer counts what passes through w as name's output.
func (m *logMeter) writer(name string, w io.Writer) io.Writer {
	return countingWriter{w: w, c: m.counter(name)}
}

type countingWriter struct {
	w io.Writer
	c *logCount
}

func (cw countingWriter) Write(b []byte) (int, error) {
	cw.c.add(b)
	cw.c.countHeld(b) // slog writes one whole record per Write
	return cw.w.Write(b)
}

// open opens logs/name.log (0600, appended) and returns it counted as
// name's output; closeAll closes it.
func (m *logMeter) open(dir, name string) (io.Writer, error) {
	f, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("loadtest: open log: %w", err)
	}
	m.mu.Lock()
	m.files = append(m.files, f)
	m.mu.Unlock()
	return m.writer(name, f), nil
}

// closeAll closes the files open opened.
func (m *logMeter) closeAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, f := range m.files {
		_ = f.Close()
	}
	m.files = nil
}

// addFiles counts the files under dir (a service's own log directory) as
// name's output.
func (m *logMeter) addFiles(name, dir string) {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	if n > 0 {
		m.counter(name).bytes.Add(n)
	}
}

// ProcessLog is one process's log volume over the run.
type ProcessLog struct {
	Process     string  `json:"process"`
	Bytes       int64   `json:"bytes"`
	Lines       int64   `json:"lines"`
	Minutes     float64 `json:"minutes"`
	BytesPerMin float64 `json:"bytes_per_min"`
	// RepeatsHeld counts the exact repeats of warnings and errors its
	// logger held back (the rate limit of app/logging).
	RepeatsHeld int64 `json:"repeats_held"`
}

// LogVolume is every process's log volume and the ceiling check.
type LogVolume struct {
	Processes          []ProcessLog `json:"processes"`
	Top                string       `json:"top_process"`
	TopBytesPerMin     float64      `json:"top_bytes_per_min"`
	TotalBytesPerMin   float64      `json:"total_bytes_per_min"`
	CeilingBytesPerMin int64        `json:"ceiling_bytes_per_min"`
	// OverCeiling names the processes above the ceiling (a warning).
	OverCeiling []string `json:"over_ceiling,omitempty"`
}

// volume reports every process's bytes per minute of its life in the run
// (from its first start to now).
func (m *logMeter) volume(now time.Time) LogVolume {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := LogVolume{CeilingBytesPerMin: logCeilingBytesPerMin}
	for name, c := range m.procs {
		mins := max(now.Sub(c.since).Minutes(), 1.0/60)
		p := ProcessLog{Process: name, Bytes: c.bytes.Load(), Lines: c.lines.Load(), Minutes: round2(mins), RepeatsHeld: c.held.Load()}
		p.BytesPerMin = round2(float64(p.Bytes) / mins)
		v.Processes = append(v.Processes, p)
		v.TotalBytesPerMin += p.BytesPerMin
		if p.BytesPerMin > v.TopBytesPerMin || v.Top == "" {
			v.Top, v.TopBytesPerMin = name, p.BytesPerMin
		}
		if p.BytesPerMin > logCeilingBytesPerMin {
			v.OverCeiling = append(v.OverCeiling, name)
		}
	}
	sort.Slice(v.Processes, func(i, j int) bool { return v.Processes[i].Process < v.Processes[j].Process })
	sort.Strings(v.OverCeiling)
	v.TotalBytesPerMin = round2(v.TotalBytesPerMin)
	return v
}

// warnings are the log volume's findings for the report.
func (v LogVolume) warnings() []string {
	var w []string
	for _, name := range v.OverCeiling {
		for _, p := range v.Processes {
			if p.Process == name {
				w = append(w, fmt.Sprintf("%s logged %.1f KiB/min, above the ceiling of %d KiB/min", name, p.BytesPerMin/1024, v.CeilingBytesPerMin>>10))
			}
		}
	}
	return w
}
