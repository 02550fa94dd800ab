package cli_test

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWrongInputIsOneLineNamingItWithStatus2 feeds every command family an
// unknown flag, a missing argument or a bad value. Each is refused before
// anything is done — the database flags point at nothing, so a command that
// went on would fail with 1 instead — in one line on stderr that names what
// is wrong and the command's --help.
func TestWrongInputIsOneLineNamingItWithStatus2(t *testing.T) {
	t.Setenv("FLEET_DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
	t.Setenv("FLEET_DATABASE_APP_URL", "postgres://nobody@127.0.0.1:1/none")
	t.Setenv("FLEET_DATA_DIR", t.TempDir())
	for _, c := range []struct {
		args []string
		want string
		help string // the --help the message points to
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"; commands: version, migrate, admin, audit, agent, limit`, "fleetwright --help"},
		{[]string{"version", "now"}, `unexpected argument "now"`, "version --help"},
		{[]string{"migrate", "--bogus"}, "unknown flag --bogus", "migrate --help"},
		{[]string{"admin"}, "admin needs one of: create-user, reset-mfa, disable-user, pause, resume, dispatch-mode, issue-agent-token", "admin --help"},
		{[]string{"admin", "promote"}, `unknown command "admin promote"; admin takes: create-user`, "admin --help"},
		{[]string{"admin", "create-user", "--role=admin"}, "--email is required", "admin create-user --help"},
		{[]string{"admin", "create-user", "--email=x@fleet.test", "--role=boss"}, "must be one of admin, operator, viewer", "admin create-user --help"},
		{[]string{"admin", "reset-mfa", "--email"}, "--email needs a value", "admin reset-mfa --help"},
		{[]string{"admin", "disable-user", "--tenant=acme", "--email=x@fleet.test"}, "unknown flag --tenant", "admin disable-user --help"},
		{[]string{"admin", "pause", "acme"}, `unexpected argument "acme"`, "admin pause --help"},
		{[]string{"admin", "resume", "--mode=race"}, "unknown flag --mode", "admin resume --help"},
		{[]string{"admin", "dispatch-mode", "--tenant=acme"}, "--tenant and --mode (race or assign) are required", "admin dispatch-mode --help"},
		{[]string{"admin", "dispatch-mode", "--tenant=acme", "--mode=fastest"}, "must be one of race, assign", "admin dispatch-mode --help"},
		{[]string{"admin", "issue-agent-token", "--tenant=acme"}, "--tenant and --agent are required", "admin issue-agent-token --help"},
		{[]string{"audit", "verify", "--fix"}, "unknown flag --fix", "audit verify --help"},
		{[]string{"audit"}, "audit needs one of: verify", "audit --help"},
		{[]string{"agent", "reset-state"}, "--state-dir is required", "agent reset-state --help"},
		{[]string{"agent"}, "agent needs one of: reset-state; the role itself is --role=agent", "agent --help"},
		{[]string{"assistant", "model-stub", "--script=" + filepath.Join(t.TempDir(), "none.json")}, "is neither a built-in script (post, injection) nor a readable file", "assistant model-stub --help"},
		{[]string{"assistant", "studio", "--outside"}, "--outside needs a value", "assistant studio --help"},
		{[]string{"assistant", "eval", "--model-endpoint=claude"}, "must be one of ollama, openai", "assistant eval --help"},
		{[]string{"assistant", "chat"}, `unknown command "assistant chat"; assistant takes: model-stub, studio, eval, retention, export, erase`, "assistant --help"},
		{[]string{"assistant", "retention", "set", "photos", "30"}, `unknown kind "photos"; kinds: assistant_conversations, assistant_page_text, assistant_screenshots`, "assistant retention set --help"},
		{[]string{"assistant", "retention", "set", "assistant_page_text", "soon", "--state-dir=/nonexistent"}, `"soon" is not a number of days`, "assistant retention set --help"},
		{[]string{"assistant", "retention", "show"}, "--state-dir is required", "assistant retention show --help"},
		{[]string{"assistant", "export", "--state-dir=" + t.TempDir()}, "no assistant state in", "assistant export --help"},
		{[]string{"assistant", "erase", "--state-dir=" + t.TempDir()}, "add --confirm erase", "assistant erase --help"},
		{[]string{"crawl", "validate"}, "takes at least 1 argument(s) (FILE…), got 0", "crawl validate --help"},
		{[]string{"crawl", "apply", "job.yaml"}, "--tenant is required", "crawl apply --help"},
		{[]string{"crawl", "run", "--tenant=acme"}, "takes 1 argument(s) (NAME), got 0", "crawl run --help"},
		{[]string{"crawl", "list", "--wait", "--tenant=acme"}, "unknown flag --wait", "crawl list --help"},
		{[]string{"crawl", "runs", "a", "b", "--tenant=acme"}, "takes 1 argument(s) (NAME), got 2", "crawl runs --help"},
		{[]string{"crawl", "items", "job", "--tenant=acme", "--format=xml"}, "must be one of table, jsonl, csv", "crawl items --help"},
		{[]string{"crawl", "pause", "--tenant=acme"}, "takes 1 argument(s) (NAME), got 0", "crawl pause --help"},
		{[]string{"crawl", "resume", "job"}, "--tenant is required", "crawl resume --help"},
		{[]string{"crawl", "egress", "--tenant=acme", "--port=http"}, `--port "http" is not a number`, "crawl egress --help"},
		{[]string{"crawl", "proxy"}, "crawl proxy needs one of: pool, add, list, remove, restore", "crawl proxy --help"},
		{[]string{"crawl", "proxy", "pool", "p", "--tenant=acme", "--cooldown=soon"}, `invalid value "soon" for --cooldown`, "crawl proxy pool --help"},
		{[]string{"crawl", "proxy", "add", "pool1", "--tenant=acme"}, "takes 2 argument(s) (POOL URL), got 1", "crawl proxy add --help"},
		{[]string{"crawl", "proxy", "list", "extra", "--tenant=acme"}, `unexpected argument "extra"`, "crawl proxy list --help"},
		{[]string{"crawl", "proxy", "remove", "--tenant=acme"}, "takes 1 argument(s) (ID), got 0", "crawl proxy remove --help"},
		{[]string{"crawl", "proxy", "restore", "id"}, "--tenant is required", "crawl proxy restore --help"},
		{[]string{"crawl", "captcha", "solve"}, `unknown command "crawl captcha solve"; crawl captcha takes: show, authorise, revoke`, "crawl captcha --help"},
		{[]string{"crawl", "captcha", "show"}, "--tenant is required", "crawl captcha show --help"},
		{[]string{"crawl", "captcha", "authorise", "--tenant=acme", "--solver"}, "--solver needs a value", "crawl captcha authorise --help"},
		{[]string{"crawl", "captcha", "revoke", "now", "--tenant=acme"}, `unexpected argument "now"`, "crawl captcha revoke --help"},
		{[]string{"platform", "validate"}, "takes at least 1 argument(s) (FILE…), got 0", "platform validate --help"},
		{[]string{"platform", "validate", "p.yaml", "--tenant=acme"}, "unknown flag --tenant", "platform validate --help"},
		{[]string{"limit", "show", "run_time"}, `unexpected argument "run_time"`, "limit show --help"},
		{[]string{"limit", "set", "run_time"}, "takes 2 argument(s) (NAME VALUE), got 1", "limit set --help"},
		{[]string{"limit", "set", "speed", "3"}, `unknown limit "speed"; limits: browser_concurrency`, "limit set --help"},
		{[]string{"limit", "set", "run_time", "soon"}, "soon", "limit set --help"},
		{[]string{"retention", "show", "--days=3"}, "unknown flag --days", "retention show --help"},
		{[]string{"retention", "set", "photos", "30"}, `unknown kind "photos"; kinds: agent_events`, "retention set --help"},
		{[]string{"retention", "set", "alarms", "a while"}, "not a number of days", "retention set --help"},
		{[]string{"retention", "run", "--tenant=acme"}, "unknown flag --tenant", "retention run --help"},
		{[]string{"privacy", "export"}, "give exactly one of --tenant or --email", "privacy export --help"},
		{[]string{"privacy", "export", "--tenant=acme", "--confirm=acme"}, "unknown flag --confirm", "privacy export --help"},
		{[]string{"privacy", "erase", "--tenant=acme", "--email=x@fleet.test"}, "give exactly one of --tenant or --email", "privacy erase --help"},
		{[]string{"privacy", "erase", "--tenant=acme"}, `nothing erased: --confirm must repeat "acme"`, "privacy erase --help"},
		{[]string{"privacy", "erase", "--email=x@fleet.test", "--confirm=y@fleet.test"}, `nothing erased: --confirm must repeat "x@fleet.test"`, "privacy erase --help"},
		{[]string{"fetch"}, "takes 1 argument(s) (URL), got 0", "fetch --help"},
		{[]string{"fetch", "ftp://example.com/"}, `"ftp://example.com/" is not an http:// or https:// URL`, "fetch --help"},
		{[]string{"fetch", "http://example.com/", "--allow=the-lan"}, "--allow:", "fetch --help"},
		{[]string{"fetch", "http://example.com/", "--port=0"}, `--port "0" is not a port number from 1 to 65535`, "fetch --help"},
		{[]string{"unit-failed"}, "--unit is required (the failed unit's name)", "unit-failed --help"},
		{[]string{"unit-failed", "--unit=x.service", "--retries=3"}, "unknown flag --retries", "unit-failed --help"},
		{[]string{"bench", "--clients=0"}, "--clients must be between 1 and 64, got 0", "bench --help"},
		{[]string{"bench", "now"}, `unexpected argument "now"`, "bench --help"},
		{[]string{"loadtest", "--dispatch-mode=fastest"}, "must be one of race, assign", "loadtest --help"},
		{[]string{"loadtest", "--board-outage=1s"}, "--board-outage must be 0 (none) or between 30s and 1h", "loadtest --help"},
	} {
		r := run(t, "", c.args...)
		require.Equal(t, 2, r.code, "%v: %s", c.args, r)
		msg := strings.TrimSpace(r.stderr)
		require.NotContains(t, msg, "\n", "%v: one line", c.args)
		require.Contains(t, msg, c.want, c.args)
		require.Contains(t, msg, "see fleetwright "+strings.TrimPrefix(c.help, "fleetwright "), c.args)
		require.Empty(t, r.stdout, c.args)
		if name, ok := strings.CutSuffix(c.help, " --help"); ok && name != "fleetwright" {
			require.LessOrEqual(t, strings.Count(msg, name+":"), 1, "%v: the command is named once: %s", c.args, msg)
		}
	}
}

// TestHelpOfEveryCommandAndGroupComesFromTheTable: each command's --help
// is its usage line, summary and flags, exit 0 on stdout; each group's
// lists exactly its commands.
func TestHelpOfEveryCommandAndGroupComesFromTheTable(t *testing.T) {
	tb := table()
	groups := map[string][]string{}
	for _, c := range tb.Commands() {
		r := run(t, "", append(strings.Fields(c.Name), "--help")...)
		require.Equal(t, 0, r.code, "%s: %s", c.Name, r)
		require.True(t, strings.HasPrefix(r.stdout, "Usage: "+c.Usage()+"\n\n"+c.Summary+"\n"), "%s:\n%s", c.Name, r.stdout)
		require.Contains(t, r.stdout, "Flags (a flag wins over its variable")
		if c.DB {
			require.Contains(t, r.stdout, "--database-app-url", c.Name)
			require.Contains(t, r.stdout, "FLEET_DATABASE_URL", c.Name)
		} else {
			require.NotContains(t, r.stdout, "FLEET_DATABASE_URL", "%s takes no shared database flags", c.Name)
		}
		w := strings.Fields(c.Name)
		for i := 1; i < len(w); i++ {
			g := strings.Join(w[:i], " ")
			groups[g] = append(groups[g], strings.Join(w[i:], " "))
		}
	}
	require.Contains(t, groups, "crawl proxy")
	for g, cmds := range groups {
		for _, h := range []string{"--help", "-h", "help"} {
			r := run(t, "", append(strings.Fields(g), h)...)
			require.Equal(t, 0, r.code, "%s %s: %s", g, h, r)
			require.True(t, strings.HasPrefix(r.stdout, "Usage: fleetwright "+g+" COMMAND [flags]\n"), r.stdout)
			require.Equal(t, cmds, listed(r.stdout), "%s --help lists its commands", g)
		}
	}
	require.Equal(t, "fleetwright v-test\n", run(t, "", "version").stdout)
}

// listed are the command names a list of --help shows: the lower-case
// words of each entry's first column (its arguments are upper case).
func listed(text string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "  ") || strings.HasPrefix(line, "   ") {
			continue
		}
		col, _, _ := strings.Cut(line[2:], "  ")
		var words []string
		for _, w := range strings.Fields(col) {
			if !regexp.MustCompile(`^[a-z][a-z-]*$`).MatchString(w) {
				break
			}
			words = append(words, w)
		}
		out = append(out, strings.Join(words, " "))
	}
	return out
}

// helpNames are the command names fleetwright --help lists for role.
func helpNames(t *testing.T, role string) []string {
	t.Helper()
	var b bytes.Buffer
	table().WriteCommands(&b, role)
	return listed(b.String())
}

// TestHelpIsFilteredByRole: --role=agent --help lists what an agent host
// takes, and the panel's list has no agent-only command.
func TestHelpIsFilteredByRole(t *testing.T) {
	all := helpNames(t, "")
	require.Equal(t, table().Names(), all)
	require.Subset(t, all, []string{"admin dispatch-mode", "crawl proxy add", "crawl captcha authorise"})
	require.Equal(t, []string{"version", "agent reset-state", "fetch", "unit-failed"}, helpNames(t, "agent"))
	require.Equal(t, []string{"version", "assistant model-stub", "assistant studio", "assistant eval",
		"assistant retention show", "assistant retention set", "assistant retention run", "assistant export", "assistant erase", "fetch", "unit-failed"}, helpNames(t, "assistant"))
	panel := helpNames(t, "panel")
	require.Contains(t, panel, "admin create-user")
	require.Contains(t, panel, "privacy erase")
	require.NotContains(t, panel, "agent reset-state")
	require.NotContains(t, panel, "assistant eval")
	require.Equal(t, all, helpNames(t, "all"))
}

// readmeCommands are the commands README's command table names: the words
// each backticked cell of its first column starts with, a\|b expanded.
func readmeCommands(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	text := string(b)
	start := strings.Index(text, "\n| command | what it does |")
	require.Positive(t, start, "README has its command table")
	var out []string
	for _, line := range strings.Split(text[start+1:], "\n")[2:] {
		if !strings.HasPrefix(line, "| `") {
			break
		}
		first := strings.SplitN(strings.ReplaceAll(line, `\|`, "\x00"), "|", 3)[1]
		for _, span := range regexp.MustCompile("`([^`]*)`").FindAllStringSubmatch(first, -1) {
			var words []string
			for _, w := range strings.Fields(span[1]) {
				if !regexp.MustCompile("^[a-z][a-z\x00-]*$").MatchString(w) {
					break
				}
				words = append(words, w)
			}
			require.NotEmpty(t, words, line)
			last := len(words) - 1
			for _, alt := range strings.Split(words[last], "\x00") {
				out = append(out, strings.Join(append(slices.Clone(words[:last]), alt), " "))
			}
		}
	}
	return out
}

// TestReadmeHelpAndDispatchNameTheSameCommands: the README's command
// table, fleetwright --help and the dispatch agree, in the same order.
func TestReadmeHelpAndDispatchNameTheSameCommands(t *testing.T) {
	names := table().Names()
	require.Equal(t, names, readmeCommands(t), "README's command table")
	require.Equal(t, names, helpNames(t, ""), "--help")
	for _, n := range names {
		r := run(t, "", append(strings.Fields(n), "--help")...)
		require.Equal(t, 0, r.code, n)
		require.True(t, strings.HasPrefix(r.stdout, "Usage: fleetwright "+n+" "), "%s dispatches to itself: %s", n, r.stdout)
	}
}
