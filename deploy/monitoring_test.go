package deploy

import (
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// promtool returns the path of promtool or fails: the rules are part of the
// product and must not pass unchecked on a machine that lacks it.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (%v): install Debian's prometheus package (make deps, or apt-get install prometheus) to check the alert rules", err)
	}
	return p
}

// TestAlertRulesPassPromtool checks the rules' syntax and runs their unit
// tests (alerts_test.yml): each alert fires on its condition, with its
// labels and text, and stays silent without it.
func TestAlertRulesPassPromtool(t *testing.T) {
	pt := promtool(t)
	out, err := exec.Command(pt, "check", "rules", "prometheus/alerts.yml").CombinedOutput()
	require.NoError(t, err, "promtool check rules:\n%s", out)
	require.Contains(t, string(out), "SUCCESS")
	cmd := exec.Command(pt, "test", "rules", "alerts_test.yml")
	cmd.Dir = "prometheus"
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "promtool test rules:\n%s", out)
	require.Contains(t, string(out), "SUCCESS")
}

// TestAlertsCoverWhatAPersonMustHear: the issues' lists are there, and
// every rule has a unit test in alerts_test.yml that expects it to fire,
// and a runbook_url to a heading of docs/OPERATIONS.md that exists.
func TestAlertsCoverWhatAPersonMustHear(t *testing.T) {
	rules, err := os.ReadFile("prometheus/alerts.yml")
	require.NoError(t, err)
	tests, err := os.ReadFile("prometheus/alerts_test.yml")
	require.NoError(t, err)
	ops, err := os.ReadFile("../docs/OPERATIONS.md")
	require.NoError(t, err)
	for _, name := range []string{"FleetWorkerCrashLoop", "FleetAgentCrashLoop", "FleetWorkerHung", "FleetQueueBacklog",
		"FleetCellFailing", "FleetDuplicateConfirmation", "FleetAuditVerificationFailed", "FleetDiskNearlyFull",
		"FleetDependencyDown", "FleetMetricsStale", "FleetAgentOffline", "FleetReplicasOnMixedVersions",
		"FleetHTTPErrorRatio", "FleetClaimUnknownRatio", "FleetModelSpendLimitReached", "FleetModelSpendSurge",
		"FleetNoSyncStandby", "FleetDatabaseFailover", "FleetSentinelNoQuorum"} {
		require.Contains(t, string(rules), "alert: "+name)
	}
	headings := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(ops), -1) {
		headings[strings.ToLower(strings.TrimSpace(m[1]))] = true
	}
	blocks := regexp.MustCompile(`(?m)^      - alert: `).Split(string(rules), -1)[1:]
	require.NotEmpty(t, blocks)
	for _, b := range blocks {
		name := strings.Fields(b)[0]
		// A test that expects it to fire: its name, then a non-empty exp_alerts.
		fires := regexp.MustCompile(`alertname: ` + name + `\s+(#[^\n]*\s+)*exp_alerts:\s+(#[^\n]*\s+)*- exp_labels`)
		require.Regexp(t, fires, string(tests), "%s has no unit test in which it fires", name)
		m := regexp.MustCompile(`runbook_url: "https://github.com/fleetwright/fleetwright/blob/main/docs/OPERATIONS.md#([a-z]+)"`).FindStringSubmatch(b)
		require.NotNil(t, m, "%s has no runbook_url into docs/OPERATIONS.md", name)
		require.Equal(t, strings.ToLower(name), m[1], name)
		require.True(t, headings[strings.ToLower(name)], "docs/OPERATIONS.md has no heading %q for the runbook of %s", name, name)
	}
}

var metricNameRe = regexp.MustCompile(`"(fleet_[a-z_]+)"`)
var exprMetricRe = regexp.MustCompile(`\bfleet_[a-z_]+\b`)

// exportedMetrics collects the metric names the Go code declares.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, root := range []string{"../app", "../modules"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range metricNameRe.FindAllStringSubmatch(string(b), -1) {
				out[m[1]] = true
			}
			return nil
		})
		require.NoError(t, err)
	}
	return out
}

func known(exported map[string]bool, name string) bool {
	if exported[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if strings.HasSuffix(name, suffix) && exported[strings.TrimSuffix(name, suffix)] {
			return true
		}
	}
	return false
}

// TestDashboardAndRulesUseOnlyExportedMetrics: a renamed metric must not
// leave a dashboard panel or an alert silently empty.
func TestDashboardAndRulesUseOnlyExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)
	require.True(t, exported["fleet_alarms_open"], "the scan found the code's metrics")
	b, err := os.ReadFile("grafana/fleetwright.json")
	require.NoError(t, err)
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &dash))
	require.Equal(t, "fleetwright", dash.UID)
	require.GreaterOrEqual(t, len(dash.Panels), 15)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			for _, m := range exprMetricRe.FindAllString(tg.Expr, -1) {
				require.True(t, known(exported, m), "panel %q uses %s, which no code exports", p.Title, m)
				used[m] = true
			}
		}
	}
	// The figures are on the dashboard.
	for _, m := range []string{"fleet_claim_outcomes_total", "fleet_queue_oldest_job_seconds", "fleet_worker_oldest_task_seconds",
		"fleet_worker_last_operation_timestamp_seconds", "fleet_embedded_restarts_total", "fleet_alarms_open", "fleet_claim_duplicate_confirmations",
		"fleet_browser_seconds_total", "fleet_proxy_traffic_bytes_total"} {
		require.True(t, used[m], "the dashboard lacks %s", m)
	}
	rules, err := os.ReadFile("prometheus/alerts.yml")
	require.NoError(t, err)
	for _, m := range exprMetricRe.FindAllString(string(rules), -1) {
		require.True(t, known(exported, m), "alerts.yml uses %s, which no code exports", m)
	}
}
