package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Report is one bench run's figures. The JSON names are a stable interface
// (docs/BENCHMARKS.md, scripts comparing runs).
type Report struct {
	// Machine and services.
	CPUs     int     `json:"cpus"`
	Postgres string  `json:"postgres_version"`
	Redis    string  `json:"redis_version"`
	Services string  `json:"services"` // "private" or "given"
	Quick    bool    `json:"quick"`
	PhaseS   float64 `json:"phase_s"`

	// The floor: (a) bare durable inserts, (b) one loopback round trip.
	BareInsertClients int     `json:"bare_insert_clients"`
	BareInsertPerS    float64 `json:"bare_insert_per_s"`
	BareInsertP50     float64 `json:"bare_insert_p50_ms"`
	BareInsertP99     float64 `json:"bare_insert_p99_ms"`
	WSRTTP50          float64 `json:"ws_rtt_p50_ms"`
	WSRTTP99          float64 `json:"ws_rtt_p99_ms"`
	// FloorMS is bare_insert_p50_ms + ws_rtt_p50_ms; FloorP99MS the same at p99.
	FloorMS    float64 `json:"floor_ms"`
	FloorP99MS float64 `json:"floor_p99_ms"`

	// Actors is the protocol-only actor connections per mode.
	Actors int `json:"actors"`
	// PacedRate is the paced run's sightings per second.
	PacedRate float64 `json:"paced_rate"`
	// BurstJobs is the burst's size.
	BurstJobs int `json:"burst_jobs"`
	// MaxP99MS is the saturation criterion.
	MaxP99MS float64 `json:"max_p99_ms"`
	// Modes are the dispatch modes measured, by name; ModesAbsent the
	// planned modes this build does not have (not measured).
	Modes       map[string]*ModeReport `json:"modes"`
	ModeOrder   []string               `json:"modes_measured"`
	ModesAbsent []string               `json:"modes_absent"`
	// WallS is the whole run's wall time.
	WallS float64 `json:"wall_s"`
}

// ModeReport is one dispatch mode's figures.
type ModeReport struct {
	About string `json:"about"`
	// SaturatedLeasesPerS is the highest rate of jobs reaching act_sent
	// over the saturation steps; RatioToBare divides it by
	// bare_insert_per_s.
	SaturatedLeasesPerS float64 `json:"saturated_leases_per_s"`
	RatioToBare         float64 `json:"ratio_to_bare"`
	// At the paced rate: detect→act_sent (the modes' comparison),
	// detect→leased, and the panel's own share (panel_in_ms).
	DetectActSent Pct `json:"detect_act_sent"`
	DetectLeased  Pct `json:"detect_leased"`
	PanelIn       Pct `json:"panel_in_ms"`
	// Burst1000MaxMS is the slowest job of the burst, sighting → act_sent
	// (the burst has burst_jobs jobs: 1,000 unless --burst says otherwise).
	Burst1000MaxMS float64 `json:"burst_1000_max_ms"`
	Paced          Phase   `json:"paced"`
	Burst          Phase   `json:"burst"`
	Steps          []Step  `json:"saturation_steps"`
	// SaturationCPU is where the CPU went over the step that set
	// SaturatedLeasesPerS (its sightings, and its wait for their act_sent).
	SaturationCPU *CPUUse `json:"saturation_cpu,omitempty"`
	// SaturationStatements are the statements that took most of the
	// database's time in that step (private Postgres only).
	SaturationStatements []Statement `json:"saturation_statements,omitempty"`
	// SaturationFunctions are the PL/pgSQL functions (triggers) with most
	// own time in that step (private Postgres only).
	SaturationFunctions []Function `json:"saturation_functions,omitempty"`
}

// Step is one saturation step.
type Step struct {
	OfferedPerS float64 `json:"offered_per_s"`
	Phase
}

// WriteJSON writes the report to path (atomically).
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("bench: write --json: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("bench: write --json: %w", err)
	}
	return nil
}

func pctCell(p Pct) string { return fmt.Sprintf("%.2f / %.2f", p.P50, p.P99) }

// WriteText prints the report's table.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "\nfleetwright bench — %d CPUs, PostgreSQL %s, Redis %s (%s services), phases of %.1f s%s\n\n",
		r.CPUs, r.Postgres, r.Redis, r.Services, r.PhaseS, map[bool]string{true: ", quick", false: ""}[r.Quick])
	fmt.Fprintf(w, "  (a) bare INSERT … ON CONFLICT, %d clients, one row per durable commit: %.0f/s, p50 %.3f ms, p99 %.3f ms\n",
		r.BareInsertClients, r.BareInsertPerS, r.BareInsertP50, r.BareInsertP99)
	fmt.Fprintf(w, "  (b) loopback WebSocket round trip: p50 %.3f ms, p99 %.3f ms\n", r.WSRTTP50, r.WSRTTP99)
	fmt.Fprintf(w, "  floor (a + b): p50 %.3f ms, p99 %.3f ms\n\n", r.FloorMS, r.FloorP99MS)
	fmt.Fprintf(w, "  claim path, %d protocol-only actors, %.0f jobs/s paced, a burst of %d, saturation at detect→act_sent p99 > %.0f ms\n",
		r.Actors, r.PacedRate, r.BurstJobs, r.MaxP99MS)
	fmt.Fprintf(w, "  %-8s %14s %9s %20s %20s %18s %18s %14s\n", "mode", "leases/s (sat)", "÷ (a)", "detect→leased ms", "detect→act_sent ms",
		"× floor p50 / p99", "panel_in ms", "burst max ms")
	for _, name := range r.ModeOrder {
		m := r.Modes[name]
		xf := "—"
		if r.FloorMS > 0 && r.FloorP99MS > 0 {
			xf = fmt.Sprintf("%.1f / %.1f", m.DetectActSent.P50/r.FloorMS, m.DetectActSent.P99/r.FloorP99MS)
		}
		fmt.Fprintf(w, "  %-8s %14.1f %8.2f%% %20s %20s %18s %18s %14.0f\n", name, m.SaturatedLeasesPerS, 100*m.RatioToBare,
			pctCell(m.DetectLeased), pctCell(m.DetectActSent), xf, pctCell(m.PanelIn), m.Burst1000MaxMS)
	}
	fmt.Fprintf(w, "  (percentiles p50 / p99; paced figures at %.0f jobs/s; the floor is %.3f / %.3f ms)\n", r.PacedRate, r.FloorMS, r.FloorP99MS)
	for _, name := range r.ModeOrder {
		m := r.Modes[name]
		fmt.Fprintf(w, "\n  %s: %s\n", name, m.About)
		fmt.Fprintf(w, "    %-22s %8s %10s %12s %22s %12s\n", "phase", "jobs", "leases/s", "unfinished", "detect→act_sent ms", "max ms")
		fmt.Fprintf(w, "    %-22s %8d %10.1f %12d %22s %12.0f\n", fmt.Sprintf("paced %.0f/s", r.PacedRate), m.Paced.Jobs, m.Paced.LeasesPerS,
			m.Paced.Unfinished, pctCell(m.Paced.DetectActSent), m.Paced.MaxActSentMS)
		fmt.Fprintf(w, "    %-22s %8d %10.1f %12d %22s %12.0f\n", fmt.Sprintf("burst of %d", r.BurstJobs), m.Burst.Jobs, m.Burst.LeasesPerS,
			m.Burst.Unfinished, pctCell(m.Burst.DetectActSent), m.Burst.MaxActSentMS)
		for _, s := range m.Steps {
			fmt.Fprintf(w, "    %-22s %8d %10.1f %12d %22s %12.0f\n", fmt.Sprintf("step %.0f/s offered", s.OfferedPerS), s.Jobs, s.LeasesPerS,
				s.Unfinished, pctCell(s.DetectActSent), s.MaxActSentMS)
		}
		if u := m.SaturationCPU; u != nil {
			fmt.Fprintf(w, "    CPU over the saturated step (%.1f s, %d jobs): bench process (panel + agents) %.2f cores, Postgres %.2f, Redis %.2f, idle %.2f of %d; %.2f durable commits (writing transactions) per job\n",
				u.WindowS, u.Jobs, u.BenchProcess, u.Postgres, u.Redis, u.Idle, r.CPUs, u.CommitsPerJob)
		}
		if len(m.SaturationStatements) > 0 {
			fmt.Fprintf(w, "    the database's time in that step, by statement (pg_stat_statements):\n      %6s %9s %9s  %s\n", "share", "per job", "mean ms", "statement")
			for _, st := range m.SaturationStatements {
				fmt.Fprintf(w, "      %5.1f%% %9.2f %9.3f  %s\n", 100*st.Share, st.CallsPerJob, st.MeanMS, st.Query)
			}
		}
		if len(m.SaturationFunctions) > 0 {
			fmt.Fprintf(w, "    PL/pgSQL functions (the triggers) by their own time, as a part of the statements' time:\n      %6s %9s %9s  %s\n", "share", "per job", "self ms", "function")
			for _, f := range m.SaturationFunctions {
				fmt.Fprintf(w, "      %5.1f%% %9.2f %9.3f  %s\n", 100*f.Share, f.CallsPerJob, f.SelfMeanMS, f.Name)
			}
		}
	}
	if len(r.ModesAbsent) > 0 {
		fmt.Fprintf(w, "\n  not measured: dispatch mode %s is not part of this build\n", strings.Join(r.ModesAbsent, ", "))
	}
	fmt.Fprintf(w, "\n  wall time %.0f s\n", r.WallS)
}
