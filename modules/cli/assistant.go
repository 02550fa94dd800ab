package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/modules/assistant/eval"
	"github.com/fleetwright/fleetwright/modules/assistant/model/stub"
	"github.com/fleetwright/fleetwright/modules/assistant/studio"
)

var assistantRole = []string{"assistant"}

func assistantCommands() []Command {
	return []Command{
		define(Command{Name: "assistant model-stub", Roles: assistantRole,
			Summary: "serve the scripted model (Ollama and OpenAI-compatible protocols) for the assistant without a real model (--listen, --script post|injection|FILE)"},
			func(s *config.Set, o *stubOptions) {
				s.String(&o.listen, "listen", "FLEET_ASSISTANT_STUB_LISTEN", "127.0.0.1:11434", "address the scripted model listens on (Ollama's default port)")
				s.String(&o.script, "script", "FLEET_ASSISTANT_STUB_SCRIPT", "post", "built-in script (post, injection) or a JSON script file")
			}, modelStub),
		define(Command{Name: "assistant studio", Roles: assistantRole,
			Summary: "serve the Demo Studio (--listen) and its outside address that logs every request (--outside, default 127.0.0.2:8076)"},
			func(s *config.Set, o *studioOptions) {
				s.String(&o.listen, "listen", "FLEET_ASSISTANT_STUDIO_LISTEN", "127.0.0.1:8075", "address of the Demo Studio")
				s.String(&o.outside, "outside", "FLEET_ASSISTANT_STUDIO_OUTSIDE", "127.0.0.2:8076", "address of the outside server that logs every request (a second loopback address)")
			}, serveStudio),
		define(Command{Name: "assistant eval", Roles: assistantRole,
			Summary: "run the Demo Studio tasks against a model (--model, --model-endpoint, --model-url) and report success, steps, tokens and time per task",
			Detail:  "Exit 1 when a task failed."},
			func(s *config.Set, o *evalOptions) {
				s.String(&o.model, "model", "FLEET_ASSISTANT_MODEL", "qwen2.5:7b", "the model to evaluate")
				s.Enum(&o.endpoint, "model-endpoint", "FLEET_ASSISTANT_MODEL_ENDPOINT", "ollama", []string{"ollama", "openai"}, "the model's protocol")
				s.String(&o.url, "model-url", "FLEET_ASSISTANT_MODEL_URL", "", "the endpoint's base URL (default Ollama's http://127.0.0.1:11434)")
				s.String(&o.keyFile, "model-key-file", "FLEET_ASSISTANT_MODEL_KEY_FILE", "", "file with the OpenAI-compatible endpoint's key (mode 0600)")
				s.Duration(&o.timeout, "task-timeout", "FLEET_ASSISTANT_EVAL_TASK_TIMEOUT", 10*time.Minute, "bound on one task")
				s.String(&o.json, "json", "FLEET_ASSISTANT_EVAL_JSON", "", "also write the report as JSON to this file")
			}, runEval),
	}
}

type stubOptions struct{ listen, script string }

func modelStub(ctx context.Context, c *Call, o *stubOptions) error {
	sc, ok := stub.Scripts[o.script]
	if !ok {
		b, err := os.ReadFile(o.script)
		if err != nil {
			return usagef("--script %q is neither a built-in script (post, injection) nor a readable file: %v", o.script, err)
		}
		if err := json.Unmarshal(b, &sc); err != nil {
			return usagef("--script %s is not a valid script: %v", o.script, err)
		}
	}
	return serve(ctx, c.Stdout, o.listen, "scripted model (ollama: /api/chat; openai: /v1)", stub.New(sc, c.Stderr).Handler())
}

type studioOptions struct{ listen, outside string }

func serveStudio(ctx context.Context, c *Call, o *studioOptions) error {
	out := &studio.Outside{}
	ln, err := net.Listen("tcp", o.outside)
	if err != nil {
		return fmt.Errorf("studio: outside server on %s: %w", o.outside, err)
	}
	osrv := &http.Server{Handler: logRequests(out, c.Stdout), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = osrv.Serve(ln) }()
	defer osrv.Close()
	fmt.Fprintf(c.Stdout, "outside address (logs every request): http://%s/\n", ln.Addr())
	st := studio.New("http://" + ln.Addr().String())
	return serve(ctx, c.Stdout, o.listen, "Demo Studio", st.Handler())
}

type evalOptions struct {
	model, endpoint, url, keyFile, json string
	timeout                             time.Duration
}

func runEval(ctx context.Context, c *Call, o *evalOptions) error {
	log := logging.New(c.Stderr, logging.Options{Format: "text"})
	rep, err := eval.Run(ctx, eval.Options{Model: o.model, Endpoint: o.endpoint, URL: o.url, KeyFile: o.keyFile, TaskTimeout: o.timeout, Log: log})
	if err != nil {
		return err
	}
	rep.Print(c.Stdout)
	if o.json != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(o.json, b, 0o644); err != nil {
			return err
		}
	}
	if !rep.AllPassed() {
		return exit(ExitFailed)
	}
	return nil
}

func logRequests(o *studio.Outside, w io.Writer) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "OUTSIDE REQUEST: %s %s\n", r.Method, r.URL)
		o.ServeHTTP(rw, r)
	})
}

// serve serves h on addr until ctx ends, printing the address it took.
func serve(ctx context.Context, out io.Writer, addr, what string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(out, "%s: http://%s/\n", what, ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return nil
	case err := <-errc:
		return err
	}
}
