package main

import (
	"context"
	"encoding/json"
	"errors"
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

var assistantCommands = []string{"model-stub", "studio", "eval"}

// runAssistantCommand runs "assistant model-stub|studio|eval".
func runAssistantCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "" || args[0][0] == '-' {
		fmt.Fprintf(stderr, "fleetwright: assistant needs one of: model-stub, studio, eval (the role itself is --role=assistant; see fleetwright --help)\n")
		return 2
	}
	sub, args := args[0], args[1:]
	s := config.New("fleetwright assistant " + sub)
	var listen, script, outside, model, endpoint, modelURL, keyFile, jsonOut string
	var timeout time.Duration
	switch sub {
	case "model-stub":
		s.String(&listen, "listen", "FLEET_ASSISTANT_STUB_LISTEN", "127.0.0.1:11434", "address the scripted model listens on (Ollama's default port)")
		s.String(&script, "script", "FLEET_ASSISTANT_STUB_SCRIPT", "post", "built-in script (post, injection) or a JSON script file")
	case "studio":
		s.String(&listen, "listen", "FLEET_ASSISTANT_STUDIO_LISTEN", "127.0.0.1:8075", "address of the Demo Studio")
		s.String(&outside, "outside", "FLEET_ASSISTANT_STUDIO_OUTSIDE", "127.0.0.2:8076", "address of the outside server that logs every request (a second loopback address)")
	case "eval":
		s.String(&model, "model", "FLEET_ASSISTANT_MODEL", "qwen2.5:7b", "the model to evaluate")
		s.Enum(&endpoint, "model-endpoint", "FLEET_ASSISTANT_MODEL_ENDPOINT", "ollama", []string{"ollama", "openai"}, "the model's protocol")
		s.String(&modelURL, "model-url", "FLEET_ASSISTANT_MODEL_URL", "", "the endpoint's base URL (default Ollama's http://127.0.0.1:11434)")
		s.String(&keyFile, "model-key-file", "FLEET_ASSISTANT_MODEL_KEY_FILE", "", "file with the OpenAI-compatible endpoint's key (mode 0600)")
		s.Duration(&timeout, "task-timeout", "FLEET_ASSISTANT_EVAL_TASK_TIMEOUT", 10*time.Minute, "bound on one task")
		s.String(&jsonOut, "json", "FLEET_ASSISTANT_EVAL_JSON", "", "also write the report as JSON to this file")
	default:
		fmt.Fprintf(stderr, "fleetwright: unknown command \"assistant %s\"; assistant takes: model-stub, studio, eval\n", sub)
		return 2
	}
	rest, err := s.Parse(args, os.Getenv)
	if errors.Is(err, config.ErrHelp) {
		fmt.Fprintf(stdout, "Usage: fleetwright assistant %s [flags]\n\n", sub)
		s.PrintDefaults(stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "fleetwright: %v\n", err)
		return 2
	}
	if len(rest) > 0 {
		fmt.Fprintf(stderr, "fleetwright: unexpected argument %q\n", rest[0])
		return 2
	}
	log := logging.New(stderr, logging.Options{Format: "text"})
	ctx, stop := signalContext()
	defer stop()
	switch sub {
	case "model-stub":
		sc, ok := stub.Scripts[script]
		if !ok {
			b, err := os.ReadFile(script)
			if err != nil {
				fmt.Fprintf(stderr, "fleetwright: --script %q is neither a built-in script (post, injection) nor a readable file: %v\n", script, err)
				return 2
			}
			if err := json.Unmarshal(b, &sc); err != nil {
				fmt.Fprintf(stderr, "fleetwright: --script %s is not a valid script: %v\n", script, err)
				return 2
			}
		}
		return exit(stderr, serve(ctx, stdout, listen, "scripted model (ollama: /api/chat; openai: /v1)", stub.New(sc, stderr).Handler()))
	case "studio":
		out := &studio.Outside{}
		ln, err := net.Listen("tcp", outside)
		if err != nil {
			return exit(stderr, fmt.Errorf("studio: outside server on %s: %w", outside, err))
		}
		osrv := &http.Server{Handler: logRequests(out, stdout), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = osrv.Serve(ln) }()
		defer osrv.Close()
		fmt.Fprintf(stdout, "outside address (logs every request): http://%s/\n", ln.Addr())
		st := studio.New("http://" + ln.Addr().String())
		return exit(stderr, serve(ctx, stdout, listen, "Demo Studio", st.Handler()))
	case "eval":
		rep, err := eval.Run(ctx, eval.Options{Model: model, Endpoint: endpoint, URL: modelURL, KeyFile: keyFile, TaskTimeout: timeout, Log: log})
		if err != nil {
			return exit(stderr, err)
		}
		rep.Print(stdout)
		if jsonOut != "" {
			b, _ := json.MarshalIndent(rep, "", "  ")
			if err := os.WriteFile(jsonOut, b, 0o644); err != nil {
				return exit(stderr, err)
			}
		}
		if !rep.AllPassed() {
			return 1
		}
		return 0
	}
	return 2
}

func logRequests(o *studio.Outside, w io.Writer) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "OUTSIDE REQUEST: %s %s\n", r.Method, r.URL)
		o.ServeHTTP(rw, r)
	})
}

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
