// Package eval runs the assistant against the Demo Studio: the Harness
// starts a Demo Studio, its outside address on 127.0.0.2 and an assistant
// on loopback, and drives the assistant's UI over HTTP as the person
// would. `fleetwright assistant eval` runs a set of tasks through it
// against a real model; the tests run the same harness against the
// scripted model.
package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/fleetwright/fleetwright/modules/assistant"
	"github.com/fleetwright/fleetwright/modules/assistant/studio"
)

// Harness is a running Demo Studio, outside server and assistant.
type Harness struct {
	Studio     *studio.Studio
	StudioURL  string
	Outside    *studio.Outside
	OutsideURL string
	UI         string // http://127.0.0.1:port
	Key        string
	StateDir   string
	Client     *http.Client

	servers []*http.Server
	cancel  context.CancelFunc
	done    chan error
	out     *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func serveOn(addr string, h http.Handler) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv, "http://" + ln.Addr().String(), nil
}

// StartStudio starts the Demo Studio on 127.0.0.1 and the outside server
// on 127.0.0.2, both on free ports.
func StartStudio() (*Harness, error) {
	h := &Harness{Outside: &studio.Outside{}}
	osrv, ourl, err := serveOn("127.0.0.2:0", h.Outside)
	if err != nil {
		return nil, fmt.Errorf("eval: outside server on 127.0.0.2: %w", err)
	}
	h.servers = append(h.servers, osrv)
	h.OutsideURL = ourl
	h.Studio = studio.New(ourl)
	ssrv, surl, err := serveOn("127.0.0.1:0", h.Studio.Handler())
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("eval: studio: %w", err)
	}
	h.servers = append(h.servers, ssrv)
	h.StudioURL = surl
	return h, nil
}

// StartAssistant runs an assistant in this process with cfg (Listen and
// StateDir default to a free loopback port and a new temporary dir).
func (h *Harness) StartAssistant(ctx context.Context, cfg assistant.Config, log *slog.Logger) error {
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.StateDir == "" {
		d, err := os.MkdirTemp("", "fleet-assistant-")
		if err != nil {
			return err
		}
		cfg.StateDir = d
	}
	h.StateDir = cfg.StateDir
	h.out = &lockedBuffer{}
	cfg.Out = h.out
	ready := make(chan string, 1)
	cfg.Ready = ready
	rctx, cancel := context.WithCancel(ctx)
	h.cancel = cancel
	h.done = make(chan error, 1)
	go func() { h.done <- assistant.Run(rctx, cfg, log) }()
	select {
	case <-ready:
	case err := <-h.done:
		// Run returned: nothing is left to stop (StopAssistant would wait
		// for a second result that never comes).
		cancel()
		h.cancel = nil
		return err
	case <-time.After(90 * time.Second):
		cancel()
		h.cancel = nil
		select {
		case err := <-h.done:
			return fmt.Errorf("eval: the assistant did not start within 90 s (stopped: %v)", err)
		case <-time.After(30 * time.Second):
			return errors.New("eval: the assistant did not start within 90 s, nor stop within 30 s after")
		}
	}
	return h.Connect(h.out.String())
}

var launchURL = regexp.MustCompile(`assistant UI: (http://[^/\s]+)/\?k=([0-9a-f]+)`)

// Connect reads the launch line and opens the UI the way a person does:
// the key in the query once, a cookie from then on.
func (h *Harness) Connect(output string) error {
	m := launchURL.FindStringSubmatch(output)
	if m == nil {
		return errors.New("eval: no launch URL in the assistant's output")
	}
	h.UI, h.Key = m[1], m[2]
	jar, _ := cookiejar.New(nil)
	h.Client = &http.Client{Jar: jar, Timeout: 30 * time.Second}
	resp, err := h.Client.Get(h.UI + "/?k=" + h.Key)
	if err != nil {
		return fmt.Errorf("eval: open UI: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("eval: open UI: %s", resp.Status)
	}
	return nil
}

// StopAssistant stops the in-process assistant and waits for it.
func (h *Harness) StopAssistant() error {
	if h.cancel == nil {
		return nil
	}
	h.cancel()
	err := <-h.done
	h.cancel = nil
	return err
}

// Close stops everything the harness started.
func (h *Harness) Close() {
	_ = h.StopAssistant()
	for _, s := range h.servers {
		_ = s.Close()
	}
}

// Post sends a form to the UI as its own page would (with its Origin).
func (h *Harness) Post(path string, form url.Values) (*http.Response, string, error) {
	req, err := http.NewRequest(http.MethodPost, h.UI+path, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", h.UI)
	resp, err := h.Client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b), nil
}

// Submit starts a task and returns its id.
func (h *Harness) Submit(goal string, urls []string, limits url.Values) (int64, error) {
	f := url.Values{"goal": {goal}, "urls": {strings.Join(urls, "\n")}}
	for k, v := range limits {
		f[k] = v
	}
	resp, body, err := h.Post("/tasks", f)
	if err != nil {
		return 0, err
	}
	var id int64
	if _, err := fmt.Sscanf(resp.Request.URL.Path, "/tasks/%d", &id); err != nil {
		return 0, fmt.Errorf("eval: submit: %s: %s", resp.Status, body)
	}
	return id, nil
}

// Tasks lists the assistant's tasks.
func (h *Harness) Tasks() ([]assistant.TaskJSON, error) {
	resp, err := h.Client.Get(h.UI + "/api/tasks")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out []assistant.TaskJSON
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("eval: tasks: %w", err)
	}
	return out, nil
}

// Task returns one task.
func (h *Harness) Task(id int64) (assistant.TaskJSON, error) {
	ts, err := h.Tasks()
	if err != nil {
		return assistant.TaskJSON{}, err
	}
	for _, t := range ts {
		if t.ID == id {
			return t, nil
		}
	}
	return assistant.TaskJSON{}, fmt.Errorf("eval: no task %d", id)
}

// Wait polls until the task is in one of the statuses or has a pending
// approval (when approval is true), or until timeout.
func (h *Harness) Wait(id int64, timeout time.Duration, approval bool, statuses ...string) (assistant.TaskJSON, error) {
	deadline := time.Now().Add(timeout)
	var last assistant.TaskJSON
	for time.Now().Before(deadline) {
		t, err := h.Task(id)
		if err == nil {
			last = t
			if approval && len(t.Pending) > 0 {
				return t, nil
			}
			for _, s := range statuses {
				if t.Status == s {
					return t, nil
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return last, fmt.Errorf("eval: task %d is %q (%s) after %s, not %v (approval %v)", id, last.Status, last.StopReason, timeout, statuses, approval)
}

// Decide approves or denies an approval through the UI's form.
func (h *Harness) Decide(approvalID int64, approve bool) error {
	d := "deny"
	if approve {
		d = "approve"
	}
	resp, body, err := h.Post(fmt.Sprintf("/approvals/%d", approvalID), url.Values{"decision": {d}})
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("eval: decide %d: %s: %s", approvalID, resp.Status, body)
	}
	return nil
}

// Get fetches a UI page's body.
func (h *Harness) Get(path string) (int, string, error) {
	resp, err := h.Client.Get(h.UI + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// Port is the port of a base URL ("" if none).
func Port(base string) string {
	u, err := url.Parse(base)
	if err != nil {
		return ""
	}
	return u.Port()
}
