package model

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// Ollama speaks Ollama's /api/chat, streamed as one JSON object per line.
type Ollama struct {
	URL  string
	HTTP *http.Client
}

// Endpoint names the endpoint.
func (o *Ollama) Endpoint() string { return "ollama " + o.URL }

type ollamaTool struct {
	Type     string         `json:"type"`
	Function ollamaFunction `json:"function"`
}

type ollamaFunction struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Parameters  map[string]any `json:"parameters"`
}

type ollamaToolCall struct {
	ID       string `json:"id,omitempty"`
	Function struct {
		Index     int             `json:"index"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type ollamaMessage struct {
	Role       string           `json:"role"`
	Content    string           `json:"content"`
	ToolCalls  []ollamaToolCall `json:"tool_calls,omitempty"`
	ToolName   string           `json:"tool_name,omitempty"`
	ToolCallID string           `json:"tool_call_id,omitempty"`
}

type ollamaRequest struct {
	Model    string          `json:"model"`
	Messages []ollamaMessage `json:"messages"`
	Stream   bool            `json:"stream"`
	Tools    []ollamaTool    `json:"tools,omitempty"`
	Format   map[string]any  `json:"format,omitempty"`
	Options  map[string]any  `json:"options,omitempty"`
}

type ollamaChunk struct {
	Model           string        `json:"model"`
	Message         ollamaMessage `json:"message"`
	Done            bool          `json:"done"`
	DoneReason      string        `json:"done_reason"`
	PromptEvalCount int           `json:"prompt_eval_count"`
	EvalCount       int           `json:"eval_count"`
	Error           string        `json:"error"`
}

// Chat sends one streamed /api/chat request and assembles the answer.
func (o *Ollama) Chat(ctx context.Context, req Request) (Response, error) {
	body := ollamaRequest{Model: req.Model, Stream: true, Format: req.Schema, Options: map[string]any{"temperature": 0}}
	for _, m := range req.Messages {
		om := ollamaMessage{Role: m.Role, Content: m.Content, ToolName: m.ToolName, ToolCallID: m.ToolCallID}
		for i, tc := range m.ToolCalls {
			var c ollamaToolCall
			c.ID, c.Function.Index, c.Function.Name, c.Function.Arguments = tc.ID, i, tc.Name, tc.Arguments
			om.ToolCalls = append(om.ToolCalls, c)
		}
		body.Messages = append(body.Messages, om)
	}
	for _, t := range req.Tools {
		body.Tools = append(body.Tools, ollamaTool{Type: "function", Function: ollamaFunction{Name: t.Name, Description: t.Description, Parameters: t.Parameters}})
	}
	resp, err := postJSON(ctx, o.HTTP, o.URL+"/api/chat", body, nil)
	if err != nil {
		return Response{}, fmt.Errorf("model: ollama: %w", err)
	}
	defer resp.Body.Close()
	var out Response
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	done := false
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var ch ollamaChunk
		if err := json.Unmarshal(line, &ch); err != nil {
			return Response{}, fmt.Errorf("model: ollama: unreadable stream line: %w", err)
		}
		if ch.Error != "" {
			return Response{}, fmt.Errorf("model: ollama: %s", ch.Error)
		}
		out.Content += ch.Message.Content
		for _, tc := range ch.Message.ToolCalls {
			out.ToolCalls = append(out.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		if ch.Done {
			out.TokensIn, out.TokensOut = ch.PromptEvalCount, ch.EvalCount
			done = true
			break
		}
	}
	if err := sc.Err(); err != nil {
		return Response{}, fmt.Errorf("model: ollama: read stream: %w", err)
	}
	if !done {
		return Response{}, fmt.Errorf("model: ollama: the stream ended before done")
	}
	return out, nil
}
