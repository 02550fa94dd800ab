package loadtest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/loadtest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// report is the JSON contract of `loadtest --json`, read by name.
type report struct {
	DuplicateConfirmations int            `json:"duplicate_confirmations"`
	LostClaims             int            `json:"lost_claims"`
	PhantomClaims          int            `json:"phantom_claims"`
	StuckClaims            int            `json:"stuck_claims"`
	UnknownRaised          int            `json:"unknown_raised"`
	UnknownUnsettled       int            `json:"unknown_unsettled"`
	Confirmed              int            `json:"confirmed"`
	Taken                  int            `json:"taken"`
	LoadsPublished         int            `json:"loads_published"`
	BoardBookings          int            `json:"board_bookings"`
	ChaosHits              map[string]int `json:"chaos_hits"`
	SecretsLeaked          int            `json:"secrets_leaked"`
	SecretsKnown           int            `json:"secrets_known"`
	FilesScanned           int            `json:"files_scanned"`
	MaxChromium            int            `json:"max_chromium"`
	LeftBehind             int            `json:"processes_left_behind"`
	Workers                int            `json:"workers"`
	Failed                 bool           `json:"failed"`
	GivenUpAfterUnknown    *int           `json:"given_up_after_unknown"`
	LateEvidenceApplied    *int           `json:"late_evidence_applied"`
	Conflicts              *int           `json:"conflicts"`
	LateCommitsAfterGrace  int            `json:"late_commits_after_grace"`
	LateCommitsUnconfirmed *int           `json:"late_commits_unconfirmed"`
	EmbeddedRestarts       map[string]int `json:"embedded_restarts"`
	Stages                 map[string]struct {
		Count int     `json:"count"`
		P50   float64 `json:"p50_ms"`
		P95   float64 `json:"p95_ms"`
		P99   float64 `json:"p99_ms"`
		Clock *struct {
			Measured int     `json:"measured"`
			P50      float64 `json:"p50_ms"`
			Max      float64 `json:"max_ms"`
		} `json:"board_clock"`
	} `json:"stages"`
	Panel map[string]struct {
		Count int     `json:"count"`
		P50   float64 `json:"p50_ms"`
	} `json:"panel"`
	DispatchMode string `json:"dispatch_mode"`
	PanelIn      struct {
		Count int     `json:"count"`
		P50   float64 `json:"p50_ms"`
		P99   float64 `json:"p99_ms"`
	} `json:"panel_in_ms"`
	PanelInTarget struct {
		P50MaxMS float64 `json:"p50_max_ms"`
		Met      *bool   `json:"met"`
	} `json:"panel_in_target"`
	LogVolume struct {
		Processes []struct {
			Process     string  `json:"process"`
			Bytes       int64   `json:"bytes"`
			BytesPerMin float64 `json:"bytes_per_min"`
		} `json:"processes"`
		Top                string  `json:"top_process"`
		TopBytesPerMin     float64 `json:"top_bytes_per_min"`
		CeilingBytesPerMin int64   `json:"ceiling_bytes_per_min"`
	} `json:"log_volume"`
}

// TestReducedRunHoldsUnderChaos is the reduced load test of `make test`:
// the real binary runs `loadtest` with 8 workers (4 in Chromium) for 50 s
// (longer: the first chaos cycle always completes) under every chaos kind, and the report must show no duplicate, lost,
// phantom or unsettled claim, no leaked secret, every kind hit, and no
// process left behind.
func TestReducedRunHoldsUnderChaos(t *testing.T) {
	bin := testenv.Binary(t)
	dir, err := os.MkdirTemp(testenv.Dir(t), "loadtest-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755)) // the postgres user traverses it
	run := filepath.Join(dir, "run")
	jsonPath := filepath.Join(dir, "report.json")
	platformFile, err := filepath.Abs(filepath.Join("..", "..", "examples", "platforms", "sandbox.yaml"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "loadtest", "--workers=8", "--duration=50s", "--rate=1", "--browsers=4",
		"--seed=7", "--progress=5s", "--data-dir="+run, "--json="+jsonPath,
		// The classic dialect's spec: the board runs the dialect it
		// describes, checked against it before the fleet starts.
		"--platform="+platformFile)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLEET_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("loadtest output:\n%s", out.String())
	require.NoError(t, err, "loadtest exits 0 only when the fleet held")

	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var rep report
	require.NoError(t, json.Unmarshal(b, &rep))
	require.False(t, rep.Failed)
	require.Equal(t, 8, rep.Workers)
	require.Zero(t, rep.DuplicateConfirmations, "no load booked twice by one client")
	require.Zero(t, rep.LostClaims, "every booking of a client is CONFIRMED in Fleetwright")
	require.Zero(t, rep.PhantomClaims, "every CONFIRMED claim has its booking on the board")
	require.Zero(t, rep.StuckClaims)
	require.Zero(t, rep.UnknownUnsettled)
	require.NotNil(t, rep.Conflicts, "the report has conflicts")
	require.Zero(t, *rep.Conflicts, "no job booked twice for one client")
	require.NotNil(t, rep.GivenUpAfterUnknown)
	require.NotNil(t, rep.LateEvidenceApplied)
	require.NotNil(t, rep.LateCommitsUnconfirmed)
	require.Zero(t, *rep.LateCommitsUnconfirmed, "every booking committed after grace ended CONFIRMED within 2 minutes")
	// Whether a late commit lands depends on no other client booking the
	// load first (docs/LOADTEST.md); the reduced run checks the injection
	// (board_commit_after_grace hit, above) and that no landed commit went
	// unconfirmed; the full run shows landed commits.
	require.Positive(t, rep.ChaosHits["board_commit_after_grace"], "bookings were answered 504 with a commit past the grace")
	require.GreaterOrEqual(t, rep.EmbeddedRestarts["postgres"], 1, "postgres_restart was healed by the run's supervisor")
	require.Zero(t, rep.SecretsLeaked)
	require.Greater(t, rep.SecretsKnown, 18, "tokens, passwords and TOTP secrets of six agents were looked for")
	require.Greater(t, rep.FilesScanned, 100, "the scan read the cluster's and the agents' files")
	require.Zero(t, rep.LeftBehind, "nothing had to be reaped")
	require.LessOrEqual(t, rep.MaxChromium, 4, "at most four Chromium instances at a time")
	require.Positive(t, rep.MaxChromium, "the browser workers ran Chromium")
	require.Positive(t, rep.UnknownRaised, "the chaos produced UNKNOWN outcomes to settle")
	require.Positive(t, rep.Confirmed)
	require.Equal(t, rep.BoardBookings, rep.Confirmed, "the board's bookings are exactly the claims confirmed")
	for _, kind := range loadtest.ChaosKinds {
		require.Positive(t, rep.ChaosHits[kind], "chaos kind %s hit", kind)
	}
	for _, stage := range []string{"publish_detect", "detect_action", "detect_leased"} {
		s := rep.Stages[stage]
		require.Positive(t, s.Count, stage)
		require.True(t, s.P50 <= s.P95 && s.P95 <= s.P99, "%s percentiles in order: %+v", stage, s)
	}
	// publish → detect rests on the watchers' readings of the board's clock,
	// whose bounds are kept with the figure.
	pd := rep.Stages["publish_detect"]
	require.NotNil(t, pd.Clock)
	require.Positive(t, pd.Clock.Measured, "the board's clock was measured")
	require.LessOrEqual(t, pd.Clock.P50, pd.Clock.Max)
	// The run dispatches in the default mode, assign: the replicas granted
	// jobs (the gate's checks and the grants' pub/sub hop measured too).
	require.Equal(t, "assign", rep.DispatchMode)
	require.Positive(t, rep.Panel["grant"].Count, "the replicas measured their own grants")
	require.Positive(t, rep.Panel["gate"].Count, "the actors' gate checks were answered")

	// panel_in per claim, from the replicas' own clocks, with issue 16's
	// target beside it (reported, not judged).
	require.Positive(t, rep.PanelIn.Count, "the replicas measured sightings' arrivals to their first grants")
	require.Positive(t, rep.PanelIn.P50)
	require.LessOrEqual(t, rep.PanelIn.P50, rep.PanelIn.P99)
	// Not compared with detect→leased's p50: panel_in covers every claim
	// whose sighting arrived on the replica that granted it (won or lost),
	// detect→leased only the confirmed ones, so one median may exceed the
	// other (seen under load: 137 ms against 24 ms) without either being
	// wrong.
	require.Equal(t, 3.0, rep.PanelInTarget.P50MaxMS)
	require.NotNil(t, rep.PanelInTarget.Met)
	require.Equal(t, rep.PanelIn.P50 <= 3, *rep.PanelInTarget.Met)
	require.Contains(t, out.String(), "panel_in p50 ≤ 3 ms")
	require.Contains(t, out.String(), "platform sandbox ("+platformFile+") checked against the classic board")

	// Every process's log volume: both replicas, the six agents, the board,
	// this command, Postgres and both cells' Redis, each with bytes > 0.
	byName := map[string]float64{}
	for _, p := range rep.LogVolume.Processes {
		require.Positive(t, p.Bytes, p.Process)
		require.Positive(t, p.BytesPerMin, p.Process)
		byName[p.Process] = p.BytesPerMin
	}
	for _, name := range []string{"panel-1", "panel-2", "board", "loadtest", "postgres", "redis-a", "redis-b"} {
		require.Contains(t, byName, name)
	}
	require.Len(t, byName, 7+6, "seven services and six agent processes: %v", byName)
	require.Equal(t, byName[rep.LogVolume.Top], rep.LogVolume.TopBytesPerMin)
	for _, v := range byName {
		require.LessOrEqual(t, v, rep.LogVolume.TopBytesPerMin)
	}
	require.Positive(t, rep.LogVolume.CeilingBytesPerMin)
	require.Contains(t, out.String(), "log volume per process")

	// No process of the run is left: none names its directory.
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		environ, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		require.False(t, bytes.Contains(cmdline, []byte(run+"/")) || bytes.Contains(environ, []byte(run+"/")),
			"process %s of the run is still alive: %s", e.Name(), bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
	}
}

func TestBoardIdempotencyFlagIsOnOrOff(t *testing.T) {
	cmd := exec.Command(testenv.Binary(t), "loadtest", "--board-idempotency=maybe")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 2, exit.ExitCode(), string(out))
	require.Contains(t, string(out), "board-idempotency")
	require.Contains(t, string(out), "on")
}

// A dispatch mode the panel does not have is refused before anything runs.
func TestDispatchModeFlagIsRaceOrAssign(t *testing.T) {
	cmd := exec.Command(testenv.Binary(t), "loadtest", "--dispatch-mode=fastest")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 2, exit.ExitCode(), string(out))
	require.Contains(t, string(out), "dispatch-mode")
	require.Contains(t, string(out), "assign")
}

func TestBoardOutageFlagIsBounded(t *testing.T) {
	for _, bad := range []string{"10s", "2h", "soon"} {
		cmd := exec.Command(testenv.Binary(t), "loadtest", "--board-outage="+bad)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, bad)
		require.Equal(t, 2, exit.ExitCode(), string(out))
		require.Contains(t, string(out), "board-outage", bad)
	}
}
