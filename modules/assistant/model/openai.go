package model

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
)

// OpenAI speaks the OpenAI-compatible /chat/completions, streamed as
// server-sent events.
type OpenAI struct {
	URL  string // base, ending in /v1
	Key  string
	HTTP *http.Client
}

// Endpoint names the endpoint (never the key).
func (o *OpenAI) Endpoint() string { return "openai " + o.URL }

type oaFunctionCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type oaToolCall struct {
	Index    *int           `json:"index,omitempty"`
	ID       string         `json:"id,omitempty"`
	Type     string         `json:"type,omitempty"`
	Function oaFunctionCall `json:"function"`
}

type oaMessage struct {
	Role       string       `json:"role"`
	Content    *string      `json:"content"`
	ToolCalls  []oaToolCall `json:"tool_calls,omitempty"`
	ToolCallID string       `json:"tool_call_id,omitempty"`
}

type oaTool struct {
	Type     string         `json:"type"`
	Function ollamaFunction `json:"function"`
}

type oaRequest struct {
	Model          string         `json:"model"`
	Messages       []oaMessage    `json:"messages"`
	Stream         bool           `json:"stream"`
	StreamOptions  map[string]any `json:"stream_options,omitempty"`
	Tools          []oaTool       `json:"tools,omitempty"`
	ResponseFormat map[string]any `json:"response_format,omitempty"`
	Temperature    float64        `json:"temperature"`
}

type oaChunk struct {
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content   string       `json:"content"`
			ToolCalls []oaToolCall `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// Chat sends one streamed request and assembles the answer.
func (o *OpenAI) Chat(ctx context.Context, req Request) (Response, error) {
	body := oaRequest{Model: req.Model, Stream: true, StreamOptions: map[string]any{"include_usage": true}}
	for _, m := range req.Messages {
		c := m.Content
		om := oaMessage{Role: m.Role, Content: &c, ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			om.ToolCalls = append(om.ToolCalls, oaToolCall{ID: tc.ID, Type: "function", Function: oaFunctionCall{Name: tc.Name, Arguments: string(tc.Arguments)}})
		}
		if len(om.ToolCalls) > 0 && c == "" {
			om.Content = nil
		}
		body.Messages = append(body.Messages, om)
	}
	for _, t := range req.Tools {
		body.Tools = append(body.Tools, oaTool{Type: "function", Function: ollamaFunction{Name: t.Name, Description: t.Description, Parameters: t.Parameters}})
	}
	if req.Schema != nil {
		body.ResponseFormat = map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "action", "strict": true, "schema": req.Schema}}
	}
	h := http.Header{"Accept": {"text/event-stream"}}
	if o.Key != "" {
		h.Set("Authorization", "Bearer "+o.Key)
	}
	resp, err := postJSON(ctx, o.HTTP, o.URL+"/chat/completions", body, h)
	if err != nil {
		return Response{}, fmt.Errorf("model: openai: %w", err)
	}
	defer resp.Body.Close()
	var out Response
	calls := map[int]*ToolCall{}
	args := map[int]*bytes.Buffer{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	done := false
	for sc.Scan() {
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue // blank separators, comments, event names
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			done = true
			break
		}
		var ch oaChunk
		if err := json.Unmarshal(data, &ch); err != nil {
			return Response{}, fmt.Errorf("model: openai: unreadable event: %w", err)
		}
		if ch.Error != nil {
			return Response{}, fmt.Errorf("model: openai: %s", ch.Error.Message)
		}
		for _, c := range ch.Choices {
			out.Content += c.Delta.Content
			for j, tc := range c.Delta.ToolCalls {
				i := j
				if tc.Index != nil {
					i = *tc.Index
				}
				cur, ok := calls[i]
				if !ok {
					cur = &ToolCall{}
					calls[i], args[i] = cur, &bytes.Buffer{}
				}
				if tc.ID != "" {
					cur.ID = tc.ID
				}
				if tc.Function.Name != "" {
					cur.Name = tc.Function.Name
				}
				args[i].WriteString(tc.Function.Arguments)
			}
		}
		if ch.Usage != nil {
			out.TokensIn, out.TokensOut = ch.Usage.PromptTokens, ch.Usage.CompletionTokens
		}
	}
	if err := sc.Err(); err != nil {
		return Response{}, fmt.Errorf("model: openai: read stream: %w", err)
	}
	if !done {
		return Response{}, fmt.Errorf("model: openai: the stream ended before [DONE]")
	}
	idx := make([]int, 0, len(calls))
	for i := range calls {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		c := *calls[i]
		// Arguments arrive as a string; keep them raw: the caller's strict
		// check decides whether they are a JSON object.
		c.Arguments = json.RawMessage(args[i].Bytes())
		out.ToolCalls = append(out.ToolCalls, c)
	}
	return out, nil
}
