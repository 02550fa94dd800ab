package model_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/assistant/model"
	"github.com/fleetwright/fleetwright/modules/assistant/model/stub"
)

var tools = []model.Tool{
	{Name: "click", Description: "click an element", Parameters: map[string]any{"type": "object", "properties": map[string]any{"element": map[string]any{"type": "integer"}}}},
	{Name: "finish", Description: "end", Parameters: map[string]any{"type": "object", "properties": map[string]any{"summary": map[string]any{"type": "string"}}}},
}

type modes struct {
	mu sync.Mutex
	m  map[string][2]string
}

func (m *modes) ModelMode(_ context.Context, name string) (string, string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.m[name]
	return v[0], v[1], ok, nil
}

func (m *modes) SetModelMode(_ context.Context, name, mode, reason string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.m[name] = [2]string{mode, reason}
	return nil
}

func clients(t *testing.T, sc stub.Script) map[string]model.Client {
	s := stub.New(sc, nil)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	o, err := model.New(model.Config{Kind: "ollama", URL: srv.URL})
	require.NoError(t, err)
	a, err := model.New(model.Config{Kind: "openai", URL: srv.URL + "/v1"})
	require.NoError(t, err)
	return map[string]model.Client{"ollama": o, "openai": a}
}

var conv = []model.Message{{Role: "system", Content: "act"}, {Role: "user", Content: "[4] button \"Publish\""}}

func TestNativeToolCallBothProtocols(t *testing.T) {
	for name, c := range clients(t, stub.Script{Steps: []stub.Step{{Tool: "click", Args: map[string]any{"element": "$el:publish"}}}}) {
		t.Run(name, func(t *testing.T) {
			caller := &model.Caller{Client: c, Modes: &modes{m: map[string][2]string{}}}
			turn, err := caller.Next(context.Background(), "m", conv, tools, nil)
			require.NoError(t, err)
			require.Equal(t, model.ModeTools, turn.Mode)
			require.Equal(t, "click", turn.Call.Name)
			require.JSONEq(t, `{"element":4}`, string(turn.Call.Arguments))
			require.Positive(t, turn.TokensIn)
			require.Positive(t, turn.TokensOut)
			require.Equal(t, 1, turn.Calls)
		})
	}
}

// A model that breaks its tool calls is moved to structured output after
// two failures, remembers it, and its next turn goes straight there.
func TestFallbackToStructuredIsAutomaticAndRemembered(t *testing.T) {
	sc := stub.Script{NoTools: true, Steps: []stub.Step{{Tool: "click", Args: map[string]any{"element": 4}}}}
	for name, c := range clients(t, sc) {
		t.Run(name, func(t *testing.T) {
			m := &modes{m: map[string][2]string{}}
			caller := &model.Caller{Client: c, Modes: m}
			turn, err := caller.Next(context.Background(), "small", conv, tools, nil)
			require.NoError(t, err)
			require.True(t, turn.Switched)
			require.Equal(t, model.ModeStructured, turn.Mode)
			require.Contains(t, turn.Reason, "2 malformed tool calls")
			require.Equal(t, 3, turn.Calls, "two broken tool calls, then one structured reply")
			require.Equal(t, "click", turn.Call.Name)
			mode, _, _ := caller.Mode(context.Background(), "small")
			require.Equal(t, model.ModeStructured, mode)

			turn, err = caller.Next(context.Background(), "small", conv, tools, nil)
			require.NoError(t, err)
			require.False(t, turn.Switched)
			require.Equal(t, 1, turn.Calls)
		})
	}
}

// A structured reply wrapped in chatter is refused by the strict parser,
// sent back with the reason, and the repaired reply is accepted.
func TestRepairLoopIsBounded(t *testing.T) {
	sc := stub.Script{Steps: []stub.Step{{Tool: "click", Args: map[string]any{"element": 4}, BrokenJSON: true}}}
	for name, c := range clients(t, sc) {
		t.Run(name, func(t *testing.T) {
			m := &modes{m: map[string][2]string{"m": {model.ModeStructured, "set"}}}
			caller := &model.Caller{Client: c, Modes: m}
			turn, err := caller.Next(context.Background(), "m", conv, tools, nil)
			require.NoError(t, err)
			require.Equal(t, 1, turn.Repairs)
			require.Equal(t, "click", turn.Call.Name)

			// A validator that refuses everything exhausts the budget.
			caller.MaxRepairs = 2
			_, err = caller.Next(context.Background(), "m", conv, tools, func(model.ToolCall) error { return errString("element 4 does not exist") })
			require.ErrorIs(t, err, model.ErrNoValidAction)
			require.Contains(t, err.Error(), "after 2 repairs")
		})
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func TestParseStructuredIsStrict(t *testing.T) {
	ok := []string{
		`{"tool":"click","arguments":{"element":3}}`,
		"  {\"tool\": \"finish\", \"arguments\": {}}\n",
	}
	for _, s := range ok {
		_, err := model.ParseStructured(s, tools)
		require.NoError(t, err, s)
	}
	bad := map[string]string{
		"": "empty",
		"```json\n{\"tool\":\"click\",\"arguments\":{}}\n```": "does not start",
		`{"tool":"click","arguments":{}} thanks`:              "text after",
		`{"tool":"click","arguments":{},"why":"x"}`:           "unknown field",
		`{"tool":"hack","arguments":{}}`:                      "no tool",
		`{"tool":"click"}`:                                    "no \"arguments\"",
		`{"tool":"click","arguments":[1]}`:                    "not an object",
		`{"arguments":{}}`:                                    "no \"tool\"",
	}
	for s, want := range bad {
		_, err := model.ParseStructured(s, tools)
		require.Error(t, err, s)
		require.Contains(t, err.Error(), want, s)
	}
	var sch map[string]any
	b, _ := json.Marshal(model.Schema(tools))
	require.NoError(t, json.Unmarshal(b, &sch))
	require.True(t, strings.Contains(string(b), `"enum":["click","finish"]`))
}

func TestOpenAIKeyFileMustBePrivate(t *testing.T) {
	dir := t.TempDir()
	f := dir + "/key"
	require.NoError(t, writeFile(f, "sk-test\n", 0o644))
	_, err := model.New(model.Config{Kind: "openai", URL: "http://127.0.0.1:1/v1", KeyFile: f})
	require.ErrorContains(t, err, "chmod 600")
	_, err = model.New(model.Config{Kind: "claude"})
	require.ErrorContains(t, err, "use ollama or openai")
}
