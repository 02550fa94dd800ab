package stub_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/assistant/model/stub"
)

var clickScript = stub.Script{Steps: []stub.Step{
	{Tool: "click", Args: map[string]any{"element": "$el:Publish"}},
}}

const pageResult = "page:\n[1] link \"Home\"\n[2] button \"Publish\"\n[3] textbox \"Title\""

// The Ollama side decodes line by line, strictly (no unknown field), into
// the official api.ChatResponse, and the official client reads the same
// stream into a tool call with its arguments and token counts.
func TestOllamaStreamDecodesIntoOfficialTypes(t *testing.T) {
	s := stub.New(clickScript, nil)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	body := `{"model":"stub","messages":[{"role":"user","content":"go"},{"role":"assistant","content":"","tool_calls":[{"function":{"name":"read_page","arguments":{}}}]},{"role":"tool","tool_name":"read_page","content":` + jsonString(pageResult) + `}],"tools":[{"type":"function","function":{"name":"click","description":"click","parameters":{"type":"object","properties":{"element":{"type":"integer"}}}}}]}`
	// One tool result: step 1 (index 1) is beyond the script, so finish.
	// Use a conversation with no result first: step 0 is the click.
	body0 := `{"model":"stub","messages":[{"role":"user","content":` + jsonString(pageResult) + `}],"tools":[{"type":"function","function":{"name":"click","parameters":{"type":"object"}}}]}`
	for _, b := range []string{body0, body} {
		resp, err := http.Post(srv.URL+"/api/chat", "application/json", strings.NewReader(b))
		require.NoError(t, err)
		require.Equal(t, "application/x-ndjson", resp.Header.Get("Content-Type"))
		sc := bufio.NewScanner(resp.Body)
		lines, done := 0, false
		for sc.Scan() {
			dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
			dec.DisallowUnknownFields()
			var cr api.ChatResponse
			require.NoError(t, dec.Decode(&cr), "line %q", sc.Text())
			require.Equal(t, "stub", cr.Model)
			require.False(t, done, "nothing after done")
			done = cr.Done
			lines++
		}
		resp.Body.Close()
		require.True(t, done)
		require.GreaterOrEqual(t, lines, 2)
	}

	u, _ := url.Parse(srv.URL)
	c := api.NewClient(u, srv.Client())
	var calls []api.ToolCall
	var last api.ChatResponse
	var tools api.Tools
	require.NoError(t, json.Unmarshal([]byte(`[{"type":"function","function":{"name":"click","parameters":{"type":"object","properties":{"element":{"type":"integer"}}}}}]`), &tools))
	err := c.Chat(context.Background(), &api.ChatRequest{Model: "stub", Messages: []api.Message{{Role: "user", Content: pageResult}}, Tools: tools},
		func(r api.ChatResponse) error {
			calls = append(calls, r.Message.ToolCalls...)
			last = r
			return nil
		})
	require.NoError(t, err)
	require.Len(t, calls, 1)
	require.Equal(t, "click", calls[0].Function.Name)
	v, ok := calls[0].Function.Arguments.Get("element")
	require.True(t, ok)
	require.EqualValues(t, 2, v, "$el:Publish resolved to the element's number")
	require.True(t, last.Done)
	require.Positive(t, last.PromptEvalCount)
	require.Positive(t, last.EvalCount)
}

// The OpenAI side: the official client streams the stub's events through
// its accumulator into one tool call with usage, and every chunk and the
// non-streamed completion carry no field the official types do not know.
func TestOpenAIStreamDecodesIntoOfficialTypes(t *testing.T) {
	s := stub.New(clickScript, nil)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	c := openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("test-key"), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{
		Model:         "stub",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(pageResult)},
		Tools:         []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "click", Parameters: openai.FunctionParameters{"type": "object"}})},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	st := c.Chat.Completions.NewStreaming(context.Background(), params)
	var acc openai.ChatCompletionAccumulator
	n := 0
	for st.Next() {
		ch := st.Current()
		require.Empty(t, ch.JSON.ExtraFields, "chunk %s", ch.RawJSON())
		for _, choice := range ch.Choices {
			require.Empty(t, choice.JSON.ExtraFields)
			require.Empty(t, choice.Delta.JSON.ExtraFields)
			for _, tc := range choice.Delta.ToolCalls {
				require.Empty(t, tc.JSON.ExtraFields)
				require.Empty(t, tc.Function.JSON.ExtraFields)
			}
		}
		require.True(t, acc.AddChunk(ch))
		n++
	}
	require.NoError(t, st.Err())
	require.Greater(t, n, 3)
	require.Len(t, acc.Choices, 1)
	require.Equal(t, "tool_calls", acc.Choices[0].FinishReason)
	tcs := acc.Choices[0].Message.ToolCalls
	require.Len(t, tcs, 1)
	require.Equal(t, "click", tcs[0].Function.Name)
	require.JSONEq(t, `{"element":2}`, tcs[0].Function.Arguments)
	require.Positive(t, acc.Usage.PromptTokens)
	require.Positive(t, acc.Usage.CompletionTokens)

	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{}
	cc, err := c.Chat.Completions.New(context.Background(), params)
	require.NoError(t, err)
	require.Empty(t, cc.JSON.ExtraFields, cc.RawJSON())
	require.Empty(t, cc.Choices[0].Message.JSON.ExtraFields)
	require.Equal(t, "click", cc.Choices[0].Message.ToolCalls[0].Function.Name)
	require.Positive(t, cc.Usage.TotalTokens)
}

// A malformed tool call is malformed for the official client too: the
// arguments do not parse as JSON.
func TestOpenAIMalformedToolCallArguments(t *testing.T) {
	s := stub.New(stub.Script{Steps: []stub.Step{{Tool: "click", Args: map[string]any{"element": 2}, Malformed: "args"}}}, nil)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	c := openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	cc, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    "stub",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("go")},
		Tools:    []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "click"})},
	})
	require.NoError(t, err)
	args := cc.Choices[0].Message.ToolCalls[0].Function.Arguments
	require.False(t, json.Valid([]byte(args)), "arguments %q", args)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
