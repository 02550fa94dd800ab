package model

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Modes of calling a model.
const (
	ModeTools      = "tools"      // native tool calling
	ModeStructured = "structured" // JSON-schema output read by the strict parser
)

// ModeStore remembers the mode chosen per model.
type ModeStore interface {
	ModelMode(ctx context.Context, model string) (mode, reason string, ok bool, err error)
	SetModelMode(ctx context.Context, model, mode, reason string) error
}

// Caller asks the model for the next action and gets back exactly one
// valid tool call, whatever the model's quality: a malformed native tool
// call counts against the model and, after SwitchAfter of them, the model
// is moved to structured output for good (remembered, visible); a reply
// the strict parser refuses is sent back with the reason, at most
// MaxRepairs times.
type Caller struct {
	Client      Client
	Modes       ModeStore
	SwitchAfter int // default 2
	MaxRepairs  int // default 3
}

// Turn is the outcome of one Next.
type Turn struct {
	Call ToolCall
	// Messages are what to append to the conversation: the accepted
	// assistant message (repair exchanges are not kept: they cost tokens
	// on every later call and teach the model nothing it needs).
	Message Message
	Mode    string
	// Switched is set when this turn moved the model to structured
	// output; Reason says why.
	Switched            bool
	Reason              string
	Repairs             int
	TokensIn, TokensOut int
	Calls               int
}

// ErrNoValidAction is returned when the model gave no valid action within
// the repair budget.
var ErrNoValidAction = errors.New("model: no valid action")

// Validate checks a call's name and arguments; the tool layer supplies it.
type Validate func(ToolCall) error

// Mode returns the mode a model runs in and why.
func (c *Caller) Mode(ctx context.Context, model string) (string, string, error) {
	if c.Modes == nil {
		return ModeTools, "default", nil
	}
	m, r, ok, err := c.Modes.ModelMode(ctx, model)
	if err != nil {
		return "", "", err
	}
	if !ok {
		return ModeTools, "default: native tool calling until the model fails at it", nil
	}
	return m, r, nil
}

// Next asks for the next action.
func (c *Caller) Next(ctx context.Context, model string, msgs []Message, tools []Tool, validate Validate) (Turn, error) {
	switchAfter, maxRepairs := c.SwitchAfter, c.MaxRepairs
	if switchAfter <= 0 {
		switchAfter = 2
	}
	if maxRepairs <= 0 {
		maxRepairs = 3
	}
	mode, _, err := c.Mode(ctx, model)
	if err != nil {
		return Turn{}, err
	}
	var t Turn
	t.Mode = mode
	failures := 0
	extra := []Message(nil) // the repair exchange of this turn only
	for {
		var req Request
		req.Model = model
		if t.Mode == ModeTools {
			req.Messages = append(append([]Message(nil), msgs...), extra...)
			req.Tools = tools
		} else {
			req.Messages = append(flatten(msgs), extra...)
			req.Messages = withSchemaHint(req.Messages, tools)
			req.Schema = Schema(tools)
		}
		resp, err := c.Client.Chat(ctx, req)
		t.Calls++
		if err != nil {
			return t, err
		}
		t.TokensIn += resp.TokensIn
		t.TokensOut += resp.TokensOut
		var call ToolCall
		var perr error
		formatErr := false // the reply is not a well-formed call at all
		if t.Mode == ModeTools {
			call, perr = fromToolCalls(resp)
		} else {
			call, perr = ParseStructured(resp.Content, tools)
		}
		formatErr = perr != nil
		if perr == nil && validate != nil {
			perr = validate(call)
		}
		if perr == nil {
			t.Call = call
			t.Message = Message{Role: "assistant", Content: resp.Content, ToolCalls: []ToolCall{call}}
			return t, nil
		}
		if !formatErr || t.Mode == ModeStructured {
			// A well-formed call with bad arguments, or a refused
			// structured reply: send the reason back, a bounded number
			// of times, in the same mode.
			if t.Repairs >= maxRepairs {
				return t, fmt.Errorf("%w after %d repairs: %v", ErrNoValidAction, t.Repairs, perr)
			}
			t.Repairs++
			hint := "Call exactly one of the tools with valid arguments."
			if t.Mode == ModeStructured {
				hint = `Reply with only one JSON object {"tool": NAME, "arguments": {...}} matching the schema, nothing else.`
			}
			extra = []Message{{Role: "assistant", Content: clip(resp.Content+callText(resp.ToolCalls), 2000)}, {Role: "user", Content: "Your reply was refused: " + perr.Error() + ". " + hint}}
			continue
		}
		failures++
		if failures >= switchAfter {
			t.Mode, t.Switched = ModeStructured, true
			t.Reason = fmt.Sprintf("%d malformed tool calls in a row (last: %v); using structured output", failures, perr)
			if c.Modes != nil {
				if err := c.Modes.SetModelMode(ctx, model, ModeStructured, t.Reason); err != nil {
					return t, err
				}
			}
			extra = nil
			continue
		}
		extra = []Message{{Role: "assistant", Content: clip(resp.Content, 2000)}, {Role: "user", Content: "That was not a valid tool call: " + perr.Error() + ". Call exactly one of the tools with valid arguments."}}
	}
}

func callText(calls []ToolCall) string {
	if len(calls) == 0 {
		return ""
	}
	b, _ := json.Marshal(map[string]any{"tool": calls[0].Name, "arguments": calls[0].Arguments})
	return string(b)
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// fromToolCalls takes the single native tool call of a reply.
func fromToolCalls(resp Response) (ToolCall, error) {
	if len(resp.ToolCalls) == 0 {
		return ToolCall{}, errors.New("the reply called no tool")
	}
	if len(resp.ToolCalls) > 1 {
		return ToolCall{}, fmt.Errorf("the reply called %d tools; call one at a time", len(resp.ToolCalls))
	}
	c := resp.ToolCalls[0]
	if c.Name == "" {
		return ToolCall{}, errors.New("the tool call has no name")
	}
	args, err := strictObject(c.Arguments)
	if err != nil {
		return ToolCall{}, fmt.Errorf("the arguments of %s are not one JSON object: %v", c.Name, err)
	}
	c.Arguments = args
	return c, nil
}

// strictObject accepts exactly one JSON object (empty means {}) and
// nothing after it.
func strictObject(raw json.RawMessage) (json.RawMessage, error) {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 {
		return json.RawMessage("{}"), nil
	}
	// Some servers send the arguments as a JSON string holding the object.
	if b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, err
		}
		b = bytes.TrimSpace([]byte(s))
	}
	if len(b) == 0 || b[0] != '{' {
		return nil, errors.New("not an object")
	}
	r := bytes.NewReader(b)
	dec := json.NewDecoder(r)
	var m map[string]json.RawMessage
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if trailing(dec, r) {
		return nil, errors.New("text after the object")
	}
	return json.RawMessage(b), nil
}

// trailing reports whether anything but white space follows the decoded value.
func trailing(dec *json.Decoder, r io.Reader) bool {
	rest, _ := io.ReadAll(io.MultiReader(dec.Buffered(), r))
	return len(bytes.TrimSpace(rest)) > 0
}

// Schema is the structured-output schema: one action, named among the tools.
func Schema(tools []Tool) map[string]any {
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Name
	}
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"tool":      map[string]any{"type": "string", "enum": names},
			"arguments": map[string]any{"type": "object"},
		},
		"required":             []string{"tool", "arguments"},
		"additionalProperties": false,
	}
}

// ParseStructured is the strict parser of a structured-output reply:
// exactly one JSON object with exactly the keys "tool" (a known tool) and
// "arguments" (an object), nothing before or after it. No guessing: a
// fenced block, a trailing sentence or an extra key is refused with the
// reason, for the repair loop to send back.
func ParseStructured(content string, tools []Tool) (ToolCall, error) {
	s := strings.TrimSpace(content)
	if s == "" {
		return ToolCall{}, errors.New("the reply is empty")
	}
	if s[0] != '{' {
		return ToolCall{}, errors.New("the reply does not start with a JSON object")
	}
	r := strings.NewReader(s)
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var v struct {
		Tool      *string         `json:"tool"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := dec.Decode(&v); err != nil {
		return ToolCall{}, fmt.Errorf("the reply is not the JSON object asked for: %v", err)
	}
	if trailing(dec, r) {
		return ToolCall{}, errors.New("there is text after the JSON object")
	}
	if v.Tool == nil {
		return ToolCall{}, errors.New(`the object has no "tool"`)
	}
	known := false
	for _, t := range tools {
		if t.Name == *v.Tool {
			known = true
		}
	}
	if !known {
		return ToolCall{}, fmt.Errorf("there is no tool %q", *v.Tool)
	}
	if v.Arguments == nil {
		return ToolCall{}, errors.New(`the object has no "arguments"`)
	}
	args, err := strictObject(v.Arguments)
	if err != nil || args[0] != '{' {
		return ToolCall{}, errors.New(`"arguments" is not an object`)
	}
	return ToolCall{Name: *v.Tool, Arguments: args}, nil
}

// flatten rewrites native tool-call turns as plain text for structured
// mode, so an endpoint that is not offered tools never sees tool messages.
func flatten(msgs []Message) []Message {
	out := make([]Message, 0, len(msgs))
	for _, m := range msgs {
		switch {
		case m.Role == "assistant" && len(m.ToolCalls) > 0:
			b, _ := json.Marshal(map[string]any{"tool": m.ToolCalls[0].Name, "arguments": m.ToolCalls[0].Arguments})
			out = append(out, Message{Role: "assistant", Content: string(b)})
		case m.Role == "tool":
			out = append(out, Message{Role: "user", Content: "Result of " + m.ToolName + ":\n" + m.Content})
		default:
			out = append(out, m)
		}
	}
	return out
}

// withSchemaHint adds the tool list to the system message in structured
// mode, where the endpoint is not told about tools.
func withSchemaHint(msgs []Message, tools []Tool) []Message {
	var b strings.Builder
	b.WriteString("\n\nReply with exactly one JSON object {\"tool\": NAME, \"arguments\": {...}} and nothing else. Tools:\n")
	for _, t := range tools {
		p, _ := json.Marshal(t.Parameters["properties"])
		fmt.Fprintf(&b, "- %s: %s; arguments: %s\n", t.Name, t.Description, p)
	}
	out := append([]Message(nil), msgs...)
	if len(out) > 0 && out[0].Role == "system" {
		out[0].Content += b.String()
		return out
	}
	return append([]Message{{Role: "system", Content: b.String()}}, out...)
}
