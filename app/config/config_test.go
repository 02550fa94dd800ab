package config

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestFlagWinsOverEnvironmentWinsOverDefault(t *testing.T) {
	s := New("test")
	var listen, dir string
	var d time.Duration
	s.String(&listen, "listen", "FLEET_LISTEN", "127.0.0.1:8080", "address")
	s.String(&dir, "data-dir", "FLEET_DATA_DIR", "./var", "state")
	s.Duration(&d, "ttl", "FLEET_TTL", time.Second, "ttl")
	rest, err := s.Parse([]string{"--listen", "127.0.0.1:9"}, env(map[string]string{
		"FLEET_LISTEN": "127.0.0.1:7", "FLEET_DATA_DIR": "/srv", "FLEET_TTL": "",
	}))
	require.NoError(t, err)
	require.Empty(t, rest)
	require.Equal(t, "127.0.0.1:9", listen)
	require.Equal(t, "/srv", dir)
	require.Equal(t, time.Second, d)
	require.True(t, s.Given("data-dir"))
	require.False(t, s.Given("ttl"))
}

func TestBadValuesAreOneLineErrorsNamingTheChoice(t *testing.T) {
	s := New("test")
	var role string
	var n int
	s.Enum(&role, "role", "FLEET_ROLE", "panel", []string{"panel", "board"}, "what runs")
	s.Int(&n, "n", "FLEET_N", 1, "count")

	_, err := s.Parse([]string{"--role=nope"}, env(nil))
	require.Error(t, err)
	require.Contains(t, err.Error(), "panel, board")
	require.NotContains(t, err.Error(), "\n")

	_, err = New2(t).Parse(nil, env(map[string]string{"FLEET_N": "x"}))
	require.ErrorContains(t, err, "FLEET_N")

	_, err = s.Parse([]string{"--nope"}, env(nil))
	require.ErrorContains(t, err, "nope")
	require.NotContains(t, err.Error(), "\n")

	_, err = s.Parse([]string{"--help"}, env(nil))
	require.True(t, errors.Is(err, ErrHelp))
}

func New2(t *testing.T) *Set {
	s := New("test")
	var n int
	s.Int(&n, "n", "FLEET_N", 1, "count")
	return s
}

func TestHelpListsVariableAndDefault(t *testing.T) {
	s := New("test")
	var listen string
	s.String(&listen, "listen", "FLEET_LISTEN", "127.0.0.1:8080", "address to serve on", Roles("panel"))
	var b bytes.Buffer
	s.PrintDefaults(&b)
	line := strings.Split(b.String(), "\n")[1]
	for _, want := range []string{"--listen", "FLEET_LISTEN", "127.0.0.1:8080", "panel", "address to serve on"} {
		require.Contains(t, line, want)
	}
}

func TestListRepeatsAndSplits(t *testing.T) {
	s := New("test")
	var allow, ports []string
	s.List(&allow, "allow", "FLEET_ALLOW", "ranges")
	s.List(&ports, "port", "FLEET_PORTS", "ports")
	_, err := s.Parse([]string{"--allow", "10.0.0.0/8", "--allow=127.0.0.1, ::1"}, env(map[string]string{
		"FLEET_ALLOW": "192.168.0.0/16", "FLEET_PORTS": "80,8080",
	}))
	require.NoError(t, err)
	require.Equal(t, []string{"10.0.0.0/8", "127.0.0.1", "::1"}, allow, "the flag wins over the variable")
	require.Equal(t, []string{"80", "8080"}, ports)
}
