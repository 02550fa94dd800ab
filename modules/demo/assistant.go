package demo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/unit"
)

// The demo's third worker type: a local AI browser assistant enrolled in
// AssistantTenant, driving the Demo Studio (a fake website: a brief, a
// drafts editor with Publish, a calendar) with the scripted model (a fake
// LLM speaking Ollama's protocol), both shipped as `fleetwright assistant
// studio` and `fleetwright assistant model-stub`. All three are processes of
// the same binary, supervised like the agents.
const (
	// AssistantTenant is the tenant the assistant is enrolled in.
	AssistantTenant = "acme"
	// AssistantName is its agent's name on the fleet page.
	AssistantName = "assistant-home"
)

// AssistantDir is the assistant's state dir (its SQLite state, sealed
// secrets and browser profile); its token file lives beside it.
func AssistantDir(dataDir string) string { return filepath.Join(dataDir, "assistant") }

// AssistantTokenFile is the assistant's enrolment token.
func AssistantTokenFile(dataDir string) string { return filepath.Join(dataDir, "assistant.token") }

// AssistantLog is the assistant's log; the model's and the studio's are
// beside it.
func AssistantLog(dataDir string) string { return filepath.Join(dataDir, "logs", "assistant.log") }

// assistantAgent enrols the assistant as an agent of the tenant's first
// account (an assistant needs no platform account of its own; the agent row
// is what the panel knows it by), writing its token on the first start and
// whenever the token file is gone.
func (s *seeder) assistantAgent(ctx context.Context, tenantID string) error {
	var account string
	for _, a := range Agents {
		if a.Tenant == AssistantTenant {
			account = a.Key
			break
		}
	}
	var accountID string
	if err := db.TenantRow(ctx, s.p.DB, tenantID, `SELECT id::text FROM accounts WHERE account_key = $1`, account).Scan(&accountID); err != nil {
		return fmt.Errorf("demo: the assistant's account %s: %w", account, err)
	}
	var agentID string
	err := db.TenantRow(ctx, s.p.DB, tenantID, `SELECT id::text FROM agents WHERE account_id = $1 AND name = $2 AND retired_at IS NULL`,
		accountID, AssistantName).Scan(&agentID)
	token := ""
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// A new enrolment on an old state dir: the demo clears what the
		// retired predecessor left.
		_ = os.RemoveAll(AssistantDir(s.dataDir))
		if agentID, token, err = s.p.Fleet.CreateAgent(ctx, tenantID, accountID, AssistantName, s.by); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("demo: the assistant's agent: %w", err)
	default:
		if _, serr := os.Stat(AssistantTokenFile(s.dataDir)); serr != nil {
			if _, serr := os.Stat(AssistantDir(s.dataDir)); serr != nil {
				if err := s.p.Fleet.AcceptNewInstallation(ctx, tenantID, agentID, s.by); err != nil {
					return err
				}
			}
			if token, err = s.p.Fleet.RotateToken(ctx, tenantID, agentID, s.by); err != nil {
				return err
			}
		}
	}
	if token != "" {
		return writeSecretFile(AssistantTokenFile(s.dataDir), token+"\n")
	}
	return nil
}

// freePort asks the kernel for a free loopback port. Another process could
// take it before the child listens; the child then fails to start, says so
// in its log, and its unit restarts it on another start of the demo.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("demo: a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// assistantAddrs are the three processes' addresses.
type assistantAddrs struct {
	model, studio, outside, ui string
}

// startAssistant starts the scripted model, the Demo Studio and the
// assistant under fp's supervision, and returns the studio's URL and the
// assistant's (the key in its query is made fresh at each start and read
// from its log; it is what opens the UI, so it is printed only in the
// banner).
func startAssistant(ctx context.Context, fp *fleetProcs, exe, dataDir, panelURL string, log *slog.Logger) (studioURL, uiURL string, err error) {
	var ports [4]int
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return "", "", err
		}
	}
	at := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	a := assistantAddrs{model: at(ports[0]), studio: at(ports[1]), outside: at(ports[2]), ui: at(ports[3])}
	dir := AssistantDir(dataDir)
	tmp := filepath.Join(TempRoot(dataDir), "assistant")
	_ = os.RemoveAll(tmp)
	for _, d := range []string{dir, filepath.Join(dir, "home"), tmp} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", "", fmt.Errorf("demo: assistant dir: %w", err)
		}
	}
	if err := browserReach(dataDir, dir, tmp); err != nil {
		log.Warn("demo: the browser's user cannot use the assistant's TMPDIR", "err", err)
	}
	// The UI's line of the previous start must not be read as this one's.
	_ = os.Remove(AssistantLog(dataDir))
	procs := []struct {
		name, log string
		args      []string
	}{
		{"assistant-model", "assistant-model.log", []string{"assistant", "model-stub", "--listen=" + a.model, "--script=post"}},
		{"assistant-studio", "assistant-studio.log", []string{"assistant", "studio", "--listen=" + a.studio, "--outside=" + a.outside}},
		{"assistant", "assistant.log", []string{"--role=assistant", "--state-dir=" + dir, "--listen=" + a.ui,
			"--model-url=http://" + a.model, "--model=scripted", "--panel=" + panelURL, "--token-file=" + AssistantTokenFile(dataDir),
			"--accept-panel-tasks", "--egress-allow=127.0.0.1/32", "--egress-port=" + strconv.Itoa(ports[1])}},
	}
	for _, p := range procs {
		out, err := os.OpenFile(filepath.Join(dataDir, "logs", p.log), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return "", "", fmt.Errorf("demo: %s log: %w", p.name, err)
		}
		fp.logs = append(fp.logs, out)
		fp.units = append(fp.units, unit.Start(unit.Spec{
			Name: p.name, Path: exe, Dir: dir, Env: agentEnv(dir, tmp), Output: out, Args: p.args,
			RestartSec: restartSec, StartLimitInterval: startLimitInterval, StartLimitBurst: startLimitBurst,
			RestartPreventExitStatus: []int{exitRetired}, StopTimeout: stopTimeout,
		}, log, nil))
		fp.tmps = append(fp.tmps, tmp)
	}
	uiURL, err = waitUIURL(ctx, AssistantLog(dataDir), a.ui, 30*time.Second)
	if err != nil {
		return "http://" + a.studio, "", err
	}
	return "http://" + a.studio, uiURL, nil
}

// waitUIURL reads the assistant's launch line from its log.
func waitUIURL(ctx context.Context, logFile, addr string, within time.Duration) (string, error) {
	prefix := "assistant UI: http://" + addr + "/?k="
	deadline := time.Now().Add(within)
	for {
		if f, err := os.Open(logFile); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if i := strings.Index(sc.Text(), prefix); i >= 0 {
					_ = f.Close()
					return strings.TrimSpace(sc.Text()[i+len("assistant UI: "):]), nil
				}
			}
			_ = f.Close()
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("demo: the assistant did not start within %v (see %s)", within, logFile)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
