// Package model talks to the language model: Ollama's /api/chat (the
// default) or any OpenAI-compatible /chat/completions endpoint, both
// streamed, with native tool calling or, for models that do not call tools
// reliably, a structured-output fallback (a JSON schema) read by a strict
// parser with a bounded repair loop. The mode is chosen per model, on its
// own, and remembered.
package model

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// Message is one turn of a conversation, in the provider-neutral form the
// assistant stores.
type Message struct {
	Role       string     `json:"role"` // system, user, assistant, tool
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolName   string     `json:"tool_name,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// ToolCall is the model's request to run one tool.
type ToolCall struct {
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// Tool describes one tool to the model: its parameters are a JSON schema.
type Tool struct {
	Name        string
	Description string
	Parameters  map[string]any
}

// Request is one chat call.
type Request struct {
	Model    string
	Messages []Message
	// Tools are offered for native tool calling.
	Tools []Tool
	// Schema, when set, asks for a reply that is one JSON value matching it
	// (structured output) instead of tool calls.
	Schema map[string]any
}

// Response is the model's complete (streamed and assembled) answer.
type Response struct {
	Content   string
	ToolCalls []ToolCall
	// TokensIn and TokensOut are the prompt and completion tokens the
	// endpoint reported.
	TokensIn, TokensOut int
}

// Client is one model endpoint.
type Client interface {
	Chat(ctx context.Context, req Request) (Response, error)
	// Endpoint names the endpoint for the UI ("ollama http://127.0.0.1:11434").
	Endpoint() string
}

// Config selects and reaches the endpoint.
type Config struct {
	// Kind is "ollama" or "openai".
	Kind string
	// URL is the endpoint's base: http://127.0.0.1:11434 for Ollama, a base
	// ending in /v1 for OpenAI-compatible servers.
	URL string
	// KeyFile holds the API key (OpenAI-compatible only); never a flag.
	KeyFile string
	// PriceIn and PriceOut are USD per million prompt and completion tokens
	// (0: not priced, like a local Ollama).
	PriceIn, PriceOut float64
	// Timeout bounds one call (default 5 minutes).
	Timeout time.Duration
}

// New builds the client for cfg. The model endpoint is dialled directly,
// not through the page egress guard: the person set it by flag.
func New(cfg Config) (Client, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Minute
	}
	hc := &http.Client{Timeout: cfg.Timeout}
	base := strings.TrimRight(cfg.URL, "/")
	switch cfg.Kind {
	case "", "ollama":
		if base == "" {
			base = "http://127.0.0.1:11434"
		}
		return &Ollama{URL: base, HTTP: hc}, nil
	case "openai":
		if base == "" {
			return nil, errors.New("model: an OpenAI-compatible endpoint needs --model-url (its base, e.g. http://127.0.0.1:8000/v1)")
		}
		key := ""
		if cfg.KeyFile != "" {
			b, err := os.ReadFile(cfg.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("model: read --model-key-file: %w", err)
			}
			if st, err := os.Stat(cfg.KeyFile); err == nil && st.Mode().Perm()&0o077 != 0 {
				return nil, fmt.Errorf("model: %s is readable by others (mode %o): chmod 600 %s", cfg.KeyFile, st.Mode().Perm(), cfg.KeyFile)
			}
			key = strings.TrimSpace(string(b))
		}
		return &OpenAI{URL: base, Key: key, HTTP: hc}, nil
	}
	return nil, fmt.Errorf("model: unknown endpoint kind %q: use ollama or openai", cfg.Kind)
}

// CostMicro is the cost in millionths of a dollar of a call, 0 for an
// unpriced endpoint.
func (c Config) CostMicro(in, out int) int64 {
	return int64(float64(in)*c.PriceIn + float64(out)*c.PriceOut)
}

func postJSON(ctx context.Context, hc *http.Client, url string, body any, header http.Header) (*http.Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		resp.Body.Close()
		return nil, fmt.Errorf("%s answered %s: %s", url, resp.Status, strings.TrimSpace(string(msg)))
	}
	return resp, nil
}
