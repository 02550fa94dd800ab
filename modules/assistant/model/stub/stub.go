// Package stub is the scripted model server shipped with the assistant
// (`fleetwright assistant model-stub`): no model runs on a test machine, so
// this server plays one. It speaks Ollama's /api/chat and the
// OpenAI-compatible /v1/chat/completions exactly (streamed or not, native
// tool calls, structured output), and can play a small model that breaks
// its tool calls, so the assistant's fallback is exercised for real. Its
// replies follow a script: the n-th step answers a conversation that holds
// n tool results. Tests check its output decodes strictly into the
// official client types (github.com/ollama/ollama/api,
// github.com/openai/openai-go/v3).
package stub

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Step is one scripted reply.
type Step struct {
	// Tool and Args are the action. String arguments may hold references
	// the stub resolves against the conversation, as a model would read it:
	// "$el:TEXT" is the number of the last listed element whose line
	// contains TEXT (from read_page's numbered view); "$url:SUFFIX" the
	// first URL in the conversation ending in SUFFIX.
	Tool string         `json:"tool,omitempty"`
	Args map[string]any `json:"args,omitempty"`
	// Text, with no Tool, is a plain text reply.
	Text string `json:"text,omitempty"`
	// Malformed breaks this step's native tool call: "args" (arguments
	// that are not JSON), "text" (the call written as broken text in the
	// content), "name" (a tool that does not exist).
	Malformed string `json:"malformed,omitempty"`
	// BrokenJSON makes the first structured-output reply to this step
	// invalid (a sentence around the object), to exercise the repair loop.
	BrokenJSON bool `json:"broken_json,omitempty"`
}

// Script is what the stub plays.
type Script struct {
	// NoTools plays a small model that cannot call tools: every native
	// tool call it makes is malformed; its structured output is fine.
	NoTools bool   `json:"no_tools,omitempty"`
	Steps   []Step `json:"steps"`
	// Final is the reply once the steps run out (default: finish).
	Final *Step `json:"final,omitempty"`
}

// Server plays a script over HTTP.
type Server struct {
	mu       sync.Mutex
	script   Script
	requests [][]byte
	// Delay is added before each reply (a slow model).
	Delay time.Duration
	log   io.Writer
}

// New returns a server playing script; log, when set, receives one line
// per request.
func New(script Script, log io.Writer) *Server { return &Server{script: script, log: log} }

// SetScript replaces the script.
func (s *Server) SetScript(sc Script) {
	s.mu.Lock()
	s.script = sc
	s.mu.Unlock()
}

// Requests returns every request body received, in order.
func (s *Server) Requests() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.requests...)
}

// Handler serves both protocols.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/chat", s.ollama)
	mux.HandleFunc("POST /v1/chat/completions", s.openai)
	mux.HandleFunc("POST /chat/completions", s.openai)
	mux.HandleFunc("GET /api/version", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]string{"version": "0.17.4"})
	})
	mux.HandleFunc("GET /api/tags", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"models": []map[string]any{{"name": "stub", "model": "stub", "modified_at": time.Unix(0, 0).UTC(), "size": 0, "digest": "stub"}}})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// msg is a conversation turn read from either protocol.
type msg struct {
	Role    string
	Content string
}

// reply is what the script says for a conversation.
type reply struct {
	content   string
	tool      string
	args      string // JSON text, possibly broken on purpose
	malformed bool
}

var (
	elLine = regexp.MustCompile(`(?m)^\s*\[(\d+)\]\s*(.*)$`)
	urlRe  = regexp.MustCompile(`https?://[^\s"'<>)\]]+`)
)

func (s *Server) decide(msgs []msg, toolsOffered, structured bool) reply {
	s.mu.Lock()
	sc := s.script
	s.mu.Unlock()
	results, repairing := 0, false
	for i, m := range msgs {
		if m.Role == "tool" || (m.Role == "user" && strings.HasPrefix(m.Content, "Result of ")) {
			results++
		}
		if i == len(msgs)-1 && m.Role == "user" && (strings.HasPrefix(m.Content, "Your reply was refused") || strings.HasPrefix(m.Content, "That was not a valid tool call")) {
			repairing = true
		}
	}
	st := Step{Tool: "finish", Args: map[string]any{"summary": "script ended"}}
	if sc.Final != nil {
		st = *sc.Final
	}
	if results < len(sc.Steps) {
		st = sc.Steps[results]
	}
	if st.Tool == "" {
		return reply{content: st.Text}
	}
	args := resolve(st.Args, msgs)
	ab, _ := json.Marshal(args)
	if structured {
		b, _ := json.Marshal(map[string]any{"tool": st.Tool, "arguments": json.RawMessage(ab)})
		if st.BrokenJSON && !repairing {
			return reply{content: "Sure! Here is the action:\n" + string(b) + "\nLet me know."}
		}
		return reply{content: string(b)}
	}
	if !toolsOffered {
		return reply{content: "I would call " + st.Tool + " now."}
	}
	kind := st.Malformed
	if sc.NoTools && kind == "" {
		kind = "text"
		if len(msgs)%2 == 0 {
			kind = "args"
		}
	}
	switch kind {
	case "args":
		return reply{tool: st.Tool, args: `{"` + st.Tool + `": ` + strings.TrimSuffix(string(ab), "}"), malformed: true}
	case "text":
		return reply{content: `<tool_call>{"name": "` + st.Tool + `", "arguments": ` + strings.TrimSuffix(string(ab), "}") + `</tool_call>`}
	case "name":
		return reply{tool: st.Tool + "_now", args: string(ab)}
	}
	return reply{tool: st.Tool, args: string(ab)}
}

func resolve(args map[string]any, msgs []msg) map[string]any {
	out := map[string]any{}
	for k, v := range args {
		sv, ok := v.(string)
		if !ok {
			out[k] = v
			continue
		}
		switch {
		case strings.HasPrefix(sv, "$el:"):
			// The newest page view that lists a matching element decides,
			// as a model reading its context would.
			want := strings.ToLower(strings.TrimPrefix(sv, "$el:"))
			n := -1
			for i := len(msgs) - 1; i >= 0 && n < 0; i-- {
				for _, m := range elLine.FindAllStringSubmatch(msgs[i].Content, -1) {
					if strings.Contains(strings.ToLower(m[2]), want) {
						fmt.Sscan(m[1], &n)
					}
				}
			}
			out[k] = n
		case strings.HasPrefix(sv, "$url:"):
			suffix := strings.TrimPrefix(sv, "$url:")
			found := ""
			for _, m := range msgs {
				for _, u := range urlRe.FindAllString(m.Content, -1) {
					if found == "" && strings.HasSuffix(strings.TrimRight(u, ".,;"), suffix) {
						found = strings.TrimRight(u, ".,;")
					}
				}
			}
			out[k] = found
		default:
			out[k] = sv
		}
	}
	return out
}

func tokens(s string) int { return len(s)/4 + 1 }

func (s *Server) record(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.requests = append(s.requests, b)
	s.mu.Unlock()
	if s.log != nil {
		fmt.Fprintf(s.log, "%s %s %d bytes\n", r.Method, r.URL.Path, len(b))
	}
	if s.Delay > 0 {
		time.Sleep(s.Delay)
	}
	return b, nil
}

// ---- Ollama ----

type ollamaIn struct {
	Model    string `json:"model"`
	Stream   *bool  `json:"stream"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	Tools  []json.RawMessage `json:"tools"`
	Format json.RawMessage   `json:"format"`
}

func (s *Server) ollama(w http.ResponseWriter, r *http.Request) {
	b, err := s.record(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var in ollamaIn
	if err := json.Unmarshal(b, &in); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		writeJSON(w, map[string]string{"error": "invalid request: " + err.Error()})
		return
	}
	if in.Model == "" {
		w.WriteHeader(http.StatusBadRequest)
		writeJSON(w, map[string]string{"error": "model is required"})
		return
	}
	var msgs []msg
	prompt := 0
	for _, m := range in.Messages {
		msgs = append(msgs, msg{Role: m.Role, Content: m.Content})
		prompt += tokens(m.Content)
	}
	structured := len(in.Format) > 0 && string(in.Format) != "null"
	rep := s.decide(msgs, len(in.Tools) > 0, structured)
	now := time.Now().UTC()
	type fn struct {
		Index     int             `json:"index"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	type call struct {
		ID       string `json:"id"`
		Function fn     `json:"function"`
	}
	message := map[string]any{"role": "assistant", "content": ""}
	if rep.tool != "" {
		args := json.RawMessage(rep.args)
		if rep.malformed {
			// Ollama itself always sends an object; a small model's broken
			// call surfaces as text in the content. Send it that way.
			message["content"] = `{"name": "` + rep.tool + `", "arguments": ` + rep.args
		} else {
			message["tool_calls"] = []call{{ID: "call_" + fmt.Sprint(len(msgs)), Function: fn{Index: 0, Name: rep.tool, Arguments: args}}}
		}
	}
	out := tokens(rep.content + rep.args)
	final := map[string]any{
		"model": in.Model, "created_at": now, "message": map[string]any{"role": "assistant", "content": ""},
		"done": true, "done_reason": "stop",
		"total_duration": 1000000, "load_duration": 1000, "prompt_eval_count": prompt, "prompt_eval_duration": 1000,
		"eval_count": out, "eval_duration": 1000,
	}
	stream := in.Stream == nil || *in.Stream
	if !stream {
		final["message"] = withContent(message, rep.content)
		writeJSON(w, final)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	fl, _ := w.(http.Flusher)
	for _, part := range chunks(rep.content) {
		_ = enc.Encode(map[string]any{"model": in.Model, "created_at": now, "message": map[string]any{"role": "assistant", "content": part}, "done": false})
		if fl != nil {
			fl.Flush()
		}
	}
	if _, ok := message["tool_calls"]; ok || message["content"] != "" {
		_ = enc.Encode(map[string]any{"model": in.Model, "created_at": now, "message": message, "done": false})
	}
	_ = enc.Encode(final)
}

func withContent(m map[string]any, content string) map[string]any {
	if content != "" {
		m["content"] = fmt.Sprint(m["content"]) + content
	}
	return m
}

// chunks splits text the way a streaming model sends it: a few words at a time.
func chunks(s string) []string {
	var out []string
	for len(s) > 0 {
		n := 12
		if n > len(s) {
			n = len(s)
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

// ---- OpenAI-compatible ----

type openaiIn struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools          []json.RawMessage `json:"tools"`
	ResponseFormat *struct {
		Type string `json:"type"`
	} `json:"response_format"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func textOf(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String()
	}
	return ""
}

func (s *Server) openai(w http.ResponseWriter, r *http.Request) {
	b, err := s.record(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var in openaiIn
	if err := json.Unmarshal(b, &in); err != nil || in.Model == "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		writeJSON(w, map[string]any{"error": map[string]any{"message": "invalid request", "type": "invalid_request_error", "param": nil, "code": nil}})
		return
	}
	var msgs []msg
	prompt := 0
	for _, m := range in.Messages {
		c := textOf(m.Content)
		msgs = append(msgs, msg{Role: m.Role, Content: c})
		prompt += tokens(c)
	}
	structured := in.ResponseFormat != nil && in.ResponseFormat.Type == "json_schema"
	rep := s.decide(msgs, len(in.Tools) > 0, structured)
	out := tokens(rep.content + rep.args)
	id := fmt.Sprintf("chatcmpl-stub%d", len(s.Requests()))
	created := time.Now().Unix()
	finish := "stop"
	var calls []map[string]any
	if rep.tool != "" {
		finish = "tool_calls"
		calls = []map[string]any{{"id": "call_" + fmt.Sprint(len(msgs)), "type": "function", "function": map[string]any{"name": rep.tool, "arguments": rep.args}}}
	}
	usage := map[string]any{"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out}
	if !in.Stream {
		m := map[string]any{"role": "assistant", "content": nilIfEmpty(rep.content, calls != nil), "refusal": nil}
		if calls != nil {
			m["tool_calls"] = calls
		}
		writeJSON(w, map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": in.Model,
			"choices": []map[string]any{{"index": 0, "message": m, "finish_reason": finish, "logprobs": nil}},
			"usage":   usage,
		})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fl, _ := w.(http.Flusher)
	send := func(delta map[string]any, fin any) {
		ev := map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": in.Model,
			"choices": []map[string]any{{"index": 0, "delta": delta, "finish_reason": fin, "logprobs": nil}}}
		var buf bytes.Buffer
		_ = json.NewEncoder(&buf).Encode(ev)
		fmt.Fprintf(w, "data: %s\n\n", bytes.TrimSpace(buf.Bytes()))
		if fl != nil {
			fl.Flush()
		}
	}
	send(map[string]any{"role": "assistant", "content": ""}, nil)
	for _, part := range chunks(rep.content) {
		send(map[string]any{"content": part}, nil)
	}
	if rep.tool != "" {
		// The call arrives as the real API sends it: the id and name
		// first, then the arguments in fragments.
		send(map[string]any{"tool_calls": []map[string]any{{"index": 0, "id": calls[0]["id"], "type": "function", "function": map[string]any{"name": rep.tool, "arguments": ""}}}}, nil)
		for _, part := range chunks(rep.args) {
			send(map[string]any{"tool_calls": []map[string]any{{"index": 0, "function": map[string]any{"arguments": part}}}}, nil)
		}
	}
	send(map[string]any{}, finish)
	if in.StreamOptions != nil && in.StreamOptions.IncludeUsage {
		var buf bytes.Buffer
		_ = json.NewEncoder(&buf).Encode(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": in.Model, "choices": []any{}, "usage": usage})
		fmt.Fprintf(w, "data: %s\n\n", bytes.TrimSpace(buf.Bytes()))
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if fl != nil {
		fl.Flush()
	}
}

func nilIfEmpty(s string, hasCalls bool) any {
	if s == "" && hasCalls {
		return nil
	}
	return s
}
