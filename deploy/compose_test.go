package deploy

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/fleetwright/fleetwright/app/testenv"
)

// There is no container engine on the machines the suite runs on, so the
// stack is not started here (docs/DEPLOY.md says how to run it); these
// tests check what can be checked without one: the file's structure, its
// secrets, its limits, and that every flag and variable it gives the
// binary is one the binary really has, for the role it runs.

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Secrets  map[string]struct {
		File string `yaml:"file"`
	} `yaml:"secrets"`
	Networks map[string]struct {
		Internal bool `yaml:"internal"`
	} `yaml:"networks"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       map[string]any    `yaml:"build"`
	User        string            `yaml:"user"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Secrets     []string          `yaml:"secrets"`
	Networks    any               `yaml:"networks"`
	Ports       []string          `yaml:"ports"`
	Healthcheck struct {
		Test    []string `yaml:"test"`
		Disable bool     `yaml:"disable"`
	} `yaml:"healthcheck"`
	LimitsWhy string `yaml:"x-limits-why"`
	Restart   string `yaml:"restart"`
	Logging   struct {
		Driver  string            `yaml:"driver"`
		Options map[string]string `yaml:"options"`
	} `yaml:"logging"`
	Deploy struct {
		Resources struct {
			Limits struct {
				Memory string `yaml:"memory"`
				CPUs   string `yaml:"cpus"`
				PIDs   int    `yaml:"pids"`
			} `yaml:"limits"`
		} `yaml:"resources"`
	} `yaml:"deploy"`
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile("compose.yaml")
	require.NoError(t, err)
	var c composeFile
	require.NoError(t, yaml.Unmarshal(b, &c))
	return c
}

// flagRoles reads the binary's --help table: each flag, its variable and
// the roles it belongs to.
func flagRoles(t *testing.T) (flags map[string][]string, vars map[string]bool) {
	t.Helper()
	out, err := exec.Command(testenv.Binary(t), "--help").CombinedOutput()
	require.NoError(t, err, string(out))
	flags, vars = map[string][]string{}, map[string]bool{}
	// Roles are words (some two: "agent reset-state") joined by commas.
	row := regexp.MustCompile(`^\s+--([a-z0-9-]+)\s+(FLEET_[A-Z0-9_]+)\s+(?:""|\S+(?: \S+)*?)\s{2,}([a-z-]+(?:[ ,][a-z-]+)*)\s{2,}`)
	for _, l := range strings.Split(string(out), "\n") {
		if m := row.FindStringSubmatch(l); m != nil {
			flags[m[1]] = strings.Split(m[3], ",")
			vars[m[2]] = true
		}
	}
	require.Contains(t, flags, "panel-ca-file", "the --help table was not read")
	return flags, vars
}

func TestComposeFlagsAreTheBinarysOwn(t *testing.T) {
	c := loadCompose(t)
	flags, vars := flagRoles(t)
	roles := map[string]string{"panel": "panel", "agent-1": "agent", "agent-2": "agent"}
	for name, role := range roles {
		s, ok := c.Services[name]
		require.True(t, ok, "service %s", name)
		require.Equal(t, "fleetwright:${FLEET_VERSION:-dev}", s.Image, name)
		require.Equal(t, "..", s.Build["context"], "%s builds the repository's Dockerfile", name)
		require.Equal(t, "10001:10001", s.User, "%s runs as the image's non-root user", name)
		require.Contains(t, s.Command, "--role="+role, name)
		for _, arg := range s.Command {
			require.True(t, strings.HasPrefix(arg, "--") && strings.Contains(arg, "="), "%s: %q is not --flag=value", name, arg)
			flag := strings.TrimPrefix(arg[:strings.Index(arg, "=")], "--")
			rs, known := flags[flag]
			require.True(t, known, "%s: --%s is not a flag of the binary", name, flag)
			ok := false
			for _, r := range rs {
				ok = ok || r == role || r == "all"
			}
			require.True(t, ok, "%s: --%s is not a %s flag (roles %v)", name, flag, role, rs)
		}
		for k := range s.Environment {
			require.True(t, vars[k] || k == "PGPASSFILE", "%s: %s is no variable the binary reads", name, k)
		}
	}
	panel := c.Services["panel"].Command
	require.Contains(t, panel, "--redis-password-file=/run/secrets/redis_password")
	require.Contains(t, panel, "--secret-key-file=/run/secrets/panel_secret_key")
	require.Contains(t, c.Services["agent-1"].Command, "--panel-ca-file=/run/secrets/caddy_root_ca")
	require.Contains(t, c.Services["agent-2"].Command, "--token-file=/run/secrets/agent_2_token")
}

// TestComposeKeepsSecretsOutOfTheEnvironment: every secret a service uses is
// declared and read from a file; no environment value, command or URL holds
// a password or key; the panel's sealing key and database passwords are
// never passed as variables.
func TestComposeKeepsSecretsOutOfTheEnvironment(t *testing.T) {
	c := loadCompose(t)
	secretish := regexp.MustCompile(`(?i)(password|secret|token|key)=|://[^/@\s]*:[^/@\s]*@`)
	for name, s := range c.Services {
		for _, sec := range s.Secrets {
			decl, ok := c.Secrets[sec]
			require.True(t, ok, "%s uses undeclared secret %s", name, sec)
			require.True(t, strings.HasPrefix(decl.File, "./secrets/"), "secret %s comes from a file under deploy/secrets", sec)
		}
		for k, v := range s.Environment {
			require.False(t, strings.Contains(k, "PASSWORD") && !strings.HasSuffix(k, "_FILE"), "%s: %s carries a password", name, k)
			require.NotContains(t, []string{"FLEET_SECRET_KEY", "FLEET_DATABASE_URL", "FLEET_DATABASE_APP_URL", "FLEET_REDIS_URL"}, k, name)
			require.False(t, secretish.MatchString(k+"="+v), "%s: %s=%s looks like a secret", name, k, v)
		}
		for _, arg := range s.Command {
			if strings.Contains(arg, "/run/secrets/") {
				continue // a path to a secret, not a secret
			}
			require.False(t, secretish.MatchString(arg), "%s: %q looks like a secret on a command line", name, arg)
		}
	}
	require.Equal(t, "/run/secrets/pg_super_password", c.Services["postgres"].Environment["POSTGRES_PASSWORD_FILE"])
	b, err := os.ReadFile(".gitignore")
	if err != nil {
		b, err = os.ReadFile("../.gitignore")
	}
	require.NoError(t, err)
	require.Contains(t, string(b), "/deploy/secrets/", "generated secrets are never committed")
}

// TestComposeLimitsAndHealth: every service has a memory, CPU and pids limit
// with its reason, a health check (or says why not), and the panel is
// reached only through Caddy.
func TestComposeLimitsAndHealth(t *testing.T) {
	c := loadCompose(t)
	for _, name := range []string{"postgres", "redis", "panel", "caddy", "agent-1", "agent-2"} {
		s, ok := c.Services[name]
		require.True(t, ok, name)
		l := s.Deploy.Resources.Limits
		require.NotEmpty(t, l.Memory, "%s: memory limit", name)
		require.NotEmpty(t, l.CPUs, "%s: CPU limit", name)
		require.Positive(t, l.PIDs, "%s: pids limit", name)
		require.Greater(t, len(s.LimitsWhy), 40, "%s: x-limits-why says why these numbers", name)
		// A crash loop ends (and shows) instead of spinning for ever, and
		// a chatty container cannot fill the host's disk with its log.
		require.Regexp(t, `^on-failure:[1-9]$`, s.Restart, "%s: restarts are bounded", name)
		require.Equal(t, "json-file", s.Logging.Driver, "%s: log driver", name)
		require.NotEmpty(t, s.Logging.Options["max-size"], "%s: log size bounded", name)
		require.NotEmpty(t, s.Logging.Options["max-file"], "%s: log files bounded", name)
		if strings.HasPrefix(name, "agent") {
			require.True(t, s.Healthcheck.Disable, "%s: an agent serves no HTTP", name)
		} else {
			require.NotEmpty(t, s.Healthcheck.Test, "%s: health check", name)
		}
	}
	ignore, err := os.ReadFile("../.dockerignore")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^deploy/secrets$`, string(ignore), "the generated secrets never enter an image's build context")
	require.Contains(t, c.Services["panel"].Healthcheck.Test, "http://127.0.0.1:8080/readyz")
	require.Empty(t, c.Services["panel"].Ports, "the panel publishes no port: Caddy does")
	require.Equal(t, []string{"443:443"}, c.Services["caddy"].Ports)
	require.True(t, c.Networks["back"].Internal, "Postgres and Redis are unreachable from outside")
	require.True(t, c.Networks["edge"].Internal, "the panel's plain HTTP is reachable only from Caddy")

	caddy, err := os.ReadFile(filepath.Join("compose", "Caddyfile"))
	require.NoError(t, err)
	require.Contains(t, string(caddy), "tls internal")
	require.Contains(t, string(caddy), "cert /run/secrets/caddy_root_ca")
	require.Contains(t, string(caddy), "key /run/secrets/caddy_root_key")
	require.Regexp(t, `(?s)handle /metrics\s*\{\s*respond 404\s*\}`, string(caddy), "/metrics is never proxied")
	require.Contains(t, c.Services["panel"].Command, "--metrics-listen=127.0.0.1:9464", "the panel's metrics stay on its loopback")
	init, err := os.ReadFile(filepath.Join("compose", "postgres-init.sh"))
	require.NoError(t, err)
	require.Contains(t, string(init), "fleet_app LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB NOBYPASSRLS NOINHERIT")
	out, err := exec.Command("sh", "-n", filepath.Join("compose", "postgres-init.sh")).CombinedOutput()
	require.NoError(t, err, string(out))
}

// TestMakeSecrets runs the secrets script: every file the compose file
// names exists (the agents' token files empty, waiting for the panel's
// tokens), private files are 0600, the pgpass and redis.conf hold the
// generated passwords, the CA is a CA, and a second run changes nothing.
func TestMakeSecrets(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatalf("openssl not found (%v): install the openssl package", err)
	}
	dir := filepath.Join(t.TempDir(), "secrets")
	out, err := exec.Command("sh", filepath.Join("compose", "make-secrets.sh"), dir).CombinedOutput()
	require.NoError(t, err, string(out))
	c := loadCompose(t)
	for name, s := range c.Secrets {
		p := filepath.Join(dir, strings.TrimPrefix(s.File, "./secrets/"))
		st, err := os.Stat(p)
		require.NoError(t, err, "secret %s", name)
		if name == "caddy_root_ca" {
			require.Equal(t, os.FileMode(0o644), st.Mode().Perm())
		} else {
			require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), name)
		}
	}
	read := func(f string) string {
		b, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		return string(b)
	}
	require.Regexp(t, `^[0-9a-f]{64}\n$`, read("panel_secret_key"))
	require.Contains(t, read("pgpass"), "postgres:5432:fleetwright:fleet_app:"+strings.TrimSpace(read("pg_app_password")))
	require.Contains(t, read("redis.conf"), "requirepass "+strings.TrimSpace(read("redis_password")))
	require.Contains(t, read("redis.conf"), "maxmemory-policy noeviction")
	blk, _ := pem.Decode([]byte(read("caddy_root_ca.crt")))
	require.NotNil(t, blk)
	ca, err := x509.ParseCertificate(blk.Bytes)
	require.NoError(t, err)
	require.True(t, ca.IsCA)
	before := read("pg_owner_password") + read("caddy_root_ca.crt")
	out, err = exec.Command("sh", filepath.Join("compose", "make-secrets.sh"), dir).CombinedOutput()
	require.NoError(t, err, string(out))
	require.Equal(t, before, read("pg_owner_password")+read("caddy_root_ca.crt"), "a second run keeps what exists")
}
