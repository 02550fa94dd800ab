package testenv

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is a child process of a test (usually the fleetwright binary), with
// its combined output captured for assertions.
type Proc struct {
	t      testing.TB
	Cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer
	exited chan struct{}
	err    error
}

// Start runs bin with args and extra environment variables; the process is
// killed when the test ends if it is still running.
func Start(t testing.TB, bin string, args []string, env ...string) *Proc {
	t.Helper()
	p := &Proc{t: t, exited: make(chan struct{})}
	p.Cmd = exec.Command(bin, args...)
	p.Cmd.Env = append(os.Environ(), env...)
	if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "FLEET_METRICS_LISTEN=") }) {
		// A panel's metrics listener defaults to a fixed loopback port;
		// panels of parallel tests take a free one each (the "metrics
		// ready" line says which).
		p.Cmd.Env = append(p.Cmd.Env, "FLEET_METRICS_LISTEN=127.0.0.1:0")
	}
	p.Cmd.Stdout = p
	p.Cmd.Stderr = p
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("testenv: start %s: %v", bin, err)
	}
	go func() { p.err = p.Cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		defer func() { captureFor(t.Name() + ": " + filepath.Base(bin)).add(p.Output()) }()
		select {
		case <-p.exited:
		default:
			_ = p.Cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(30 * time.Second):
				_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
				<-p.exited
			}
		}
		if t.Failed() {
			t.Logf("output of %s:\n%s", bin, p.Output())
		}
	})
	return p
}

// Write collects output.
func (p *Proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

// Output returns everything the process printed so far.
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// WaitFor waits until the output matches re and returns the first submatch
// (or the whole match); it fails the test on timeout or early exit.
func (p *Proc) WaitFor(re string, timeout time.Duration) string {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if m := rx.FindStringSubmatch(p.Output()); m != nil {
			if len(m) > 1 {
				return m[1]
			}
			return m[0]
		}
		select {
		case <-p.exited:
			if m := rx.FindStringSubmatch(p.Output()); m != nil {
				return m[len(m)-1]
			}
			p.t.Fatalf("process exited (%v) before printing %q:\n%s", p.err, re, p.Output())
		case <-time.After(20 * time.Millisecond):
		}
	}
	p.t.Fatalf("timed out after %s waiting for %q:\n%s", timeout, re, p.Output())
	return ""
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) { _ = p.Cmd.Process.Signal(sig) }

// Wait waits up to timeout for the process to exit and returns its exit code
// (-1 when it was killed by a signal); it fails the test on timeout.
func (p *Proc) Wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.t.Fatalf("process did not exit within %s:\n%s", timeout, p.Output())
	}
	return p.Cmd.ProcessState.ExitCode()
}

// Exited is closed when the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// MetricsURL waits for a panel's "metrics ready" line and returns its
// metrics URL (http://127.0.0.1:PORT/metrics): a panel serves /metrics on a
// listener of its own, not on the console's port.
func (p *Proc) MetricsURL(timeout time.Duration) string {
	p.t.Helper()
	return p.WaitFor(`metrics ready" metrics=(http://127\.0\.0\.1:\d+/metrics)`, timeout)
}
