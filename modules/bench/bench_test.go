package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/bench"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// cleanEnv is the test's environment without FLEET_ variables, so a
// developer's settings cannot change the run.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLEET_") {
			env = append(env, kv)
		}
	}
	return env
}

// TestQuickRunWritesEveryFigure runs the real command in quick mode on its
// own private Postgres and Redis and checks that the JSON report has every
// field of its contract with plausible values, and that the text table was
// printed.
func TestQuickRunWritesEveryFigure(t *testing.T) {
	bin := testenv.Binary(t)
	dir, err := os.MkdirTemp(testenv.Dir(t), "bench-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755)) // the postgres user traverses it
	jsonPath := filepath.Join(dir, "bench.json")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "bench", "--quick", "--data-dir="+filepath.Join(dir, "run"), "--json="+jsonPath,
		"--cpu-profile="+filepath.Join(dir, "profiles"))
	cmd.Env = cleanEnv()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("bench output:\n%s", out.String())
	require.NoError(t, err)

	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(b, &raw))
	for _, k := range []string{"bare_insert_clients", "bare_insert_per_s", "bare_insert_p50_ms", "bare_insert_p99_ms",
		"ws_rtt_p50_ms", "ws_rtt_p99_ms", "floor_ms", "floor_p99_ms", "modes", "modes_measured", "modes_absent"} {
		require.Contains(t, raw, k)
	}
	var rep bench.Report
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Equal(t, 8, rep.BareInsertClients, "8 clients, one row per commit")
	require.Positive(t, rep.BareInsertPerS)
	require.Positive(t, rep.BareInsertP50)
	require.GreaterOrEqual(t, rep.BareInsertP99, rep.BareInsertP50)
	require.Positive(t, rep.WSRTTP50)
	require.GreaterOrEqual(t, rep.WSRTTP99, rep.WSRTTP50)
	require.InDelta(t, rep.BareInsertP50+rep.WSRTTP50, rep.FloorMS, 0.0015, "floor_ms is the commit p50 plus the round trip p50")
	require.InDelta(t, rep.BareInsertP99+rep.WSRTTP99, rep.FloorP99MS, 0.0015, "floor_p99_ms is the commit p99 plus the round trip p99")
	require.Equal(t, "private", rep.Services)
	require.Equal(t, 1000, rep.BurstJobs)

	// Every planned mode is either measured or said to be absent, never both.
	all := append(slices.Clone(rep.ModeOrder), rep.ModesAbsent...)
	slices.Sort(all)
	require.Equal(t, []string{"assign", "race"}, all)
	require.Equal(t, bench.ModeNames(), rep.ModeOrder, "every mode this build has was measured")
	rawModes := raw["modes"].(map[string]any)
	require.Len(t, rawModes, len(rep.ModeOrder))
	for _, name := range rep.ModeOrder {
		rm := rawModes[name].(map[string]any)
		for _, k := range []string{"saturated_leases_per_s", "detect_act_sent", "panel_in_ms", "burst_1000_max_ms"} {
			require.Contains(t, rm, k, "modes.%s.%s", name, k)
		}
		for _, k := range []string{"detect_act_sent", "panel_in_ms"} {
			require.Contains(t, rm[k], "p50_ms", "modes.%s.%s", name, k)
			require.Contains(t, rm[k], "p99_ms", "modes.%s.%s", name, k)
		}
		m := rep.Modes[name]
		require.Positive(t, m.SaturatedLeasesPerS, name)
		require.NotEmpty(t, m.Steps, name)
		require.InDelta(t, m.SaturatedLeasesPerS/rep.BareInsertPerS, m.RatioToBare, 0.0001, name)
		require.Zero(t, m.Paced.Unfinished, "%s: every paced job reached act_sent", name)
		require.Equal(t, m.Paced.DetectActSent, m.DetectActSent)
		require.Positive(t, m.DetectActSent.P50, name)
		require.GreaterOrEqual(t, m.DetectActSent.P99, m.DetectActSent.P50, name)
		require.GreaterOrEqual(t, m.DetectActSent.P50, m.DetectLeased.P50, "%s: a job is acted on after it is leased", name)
		// The panel's own share: measured for (nearly) every paced job, and
		// a part of the whole path.
		require.GreaterOrEqual(t, m.Paced.PanelInMeasured, m.Paced.Jobs*9/10, name)
		require.Positive(t, m.PanelIn.P50, name)
		require.GreaterOrEqual(t, m.PanelIn.P99, m.PanelIn.P50, name)
		require.Less(t, m.PanelIn.P50, m.DetectActSent.P50, "%s: panel_in is part of detect→act_sent", name)
		require.Equal(t, 1000, m.Burst.Jobs)
		require.False(t, math.IsInf(m.Burst1000MaxMS, 0))
		require.Equal(t, m.Burst.MaxActSentMS, m.Burst1000MaxMS)
		require.GreaterOrEqual(t, m.Burst1000MaxMS, m.Burst.DetectActSent.P99, name)
		require.Positive(t, m.Burst1000MaxMS, name)
		// Where the CPU went at saturation, and which statements took the
		// database's time: the claim path's own statements are among them.
		require.NotNil(t, m.SaturationCPU, name)
		require.Positive(t, m.SaturationCPU.BenchProcess, "%s: the panel and agents used CPU", name)
		require.Positive(t, m.SaturationCPU.Postgres, "%s: the private Postgres's backends are counted", name)
		require.Positive(t, m.SaturationCPU.CommitsPerJob, name)
		require.Positive(t, m.SaturationCPU.Jobs, name)
		require.NotEmpty(t, m.SaturationStatements, name)
		claims := false
		for _, st := range m.SaturationStatements {
			claims = claims || strings.Contains(st.Query, "claims")
			require.NotContains(t, st.Query, "bench-", "statements are normalised: no values")
		}
		require.True(t, claims, "%s: a statement on claims is among the top ones: %+v", name, m.SaturationStatements)
		triggers := false
		for _, f := range m.SaturationFunctions {
			triggers = triggers || (strings.HasPrefix(f.Name, "claim_") && f.CallsPerJob > 0)
		}
		require.True(t, triggers, "%s: the claim triggers' own time is reported: %+v", name, m.SaturationFunctions)
		fi, err := os.Stat(filepath.Join(dir, "profiles", name+".pprof"))
		require.NoError(t, err, "--cpu-profile writes a profile per mode")
		require.Positive(t, fi.Size())
	}
	text := out.String()
	require.Contains(t, text, "bare INSERT … ON CONFLICT, 8 clients")
	require.Contains(t, text, "detect→act_sent")
	for _, name := range rep.ModeOrder {
		require.Contains(t, text, "\n  "+name+" ")
	}
	if len(rep.ModesAbsent) > 0 {
		require.Contains(t, text, "not measured: dispatch mode "+strings.Join(rep.ModesAbsent, ", "))
	}
	_, err = os.Stat(filepath.Join(dir, "run", "bench.log"))
	require.NoError(t, err, "a given --data-dir is kept, with the panel's log")
}

// TestBadFlagsAreRefusedClearly checks that wrong input is refused before
// anything starts, with exit code 2 and a message that names the flag.
func TestBadFlagsAreRefusedClearly(t *testing.T) {
	bin := testenv.Binary(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--clients=0"}, "--clients must be between 1 and 64, got 0"},
		{[]string{"--actors=9999"}, "--actors must be between 1 and 500"},
		{[]string{"--rate=0"}, "--rate must be between 1 and 5000"},
		{[]string{"--burst=5"}, "--burst must be between 10 and 20000"},
		{[]string{"--duration=100ms"}, "--duration must be between 1s and 5m"},
		{[]string{"--duration=soon"}, "duration"},
		{[]string{"--max-p99=1ms"}, "--max-p99 must be between 10ms and 30s"},
		{[]string{"--modes=warp"}, `no dispatch mode "warp"`},
		{[]string{"--modes=race,race"}, `--modes names "race" twice`},
		{[]string{"--database-url=postgres://u@127.0.0.1/db"}, "--database-url needs --database-app-url"},
		{[]string{"--database-app-url=postgres://u@127.0.0.1/db"}, "--database-app-url is only used with --database-url"},
		{[]string{"--database-url=mysql://x", "--database-app-url=mysql://y"}, "--database-url must be a postgres:// URL"},
		{[]string{"--redis-url=localhost:6379"}, "--redis-url must be a redis://"},
		{[]string{"--no-such-flag"}, "no-such-flag"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		cmd := exec.Command(bin, append([]string{"bench"}, c.args...)...)
		cmd.Env = cleanEnv()
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "%v: %s", c.args, out)
		require.Equal(t, 2, exit.ExitCode(), "%v: %s", c.args, out)
		require.Contains(t, string(out), c.want, "%v", c.args)
		require.Contains(t, string(out), "see fleetwright bench --help", "%v", c.args)
	}
	out, err := exec.Command(bin, "bench", "--help").CombinedOutput()
	require.NoError(t, err)
	for _, f := range []string{"--database-url", "--redis-url", "--json", "--quick", "--duration", "--clients", "--actors", "--rate", "--burst", "--max-p99", "--modes"} {
		require.Contains(t, string(out), f)
	}
}
