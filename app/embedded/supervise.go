package embedded

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetwright/fleetwright/app/clock"
)

// States of a supervised service.
const (
	StateRunning    = "running"
	StateRestarting = "restarting" // died; waiting out its backoff or starting again
	StateFailed     = "failed"     // restart budget spent: down until a person acts
	StateStopped    = "stopped"
)

// Supervision configures Supervise: an embedded child that dies (the OOM
// killer, a crash, a stray SIGKILL) is started again on the same data,
// socket and credentials, so clients reconnect by themselves. The budget
// is a unit's (docs/WORKERS.md): more than StartLimitBurst restarts within
// StartLimitInterval and the service stays down and raises the alarm.
type Supervision struct {
	// Service names it in logs and in the metrics' service label
	// ("postgres", "redis:default", "redis:cell-b").
	Service string
	// Clock times the backoff and the budget (tests inject a fake).
	Clock clock.Clock
	// Backoff is the pause before the first restart in the budget window;
	// each further restart in the window doubles it, up to MaxBackoff.
	// Defaults 1 s and 30 s.
	Backoff    time.Duration
	MaxBackoff time.Duration
	// StartLimitInterval and StartLimitBurst: the budget (defaults 300 s, 5).
	StartLimitInterval time.Duration
	StartLimitBurst    int
	// Metrics receives restarts and state (nil: none).
	Metrics *Metrics
	Log     *slog.Logger
	// OnRestart is called after each successful restart.
	OnRestart func(service string)
	// OnGiveUp is called once when the budget is spent: the alarm.
	OnGiveUp func(service string)
}

func (s *Supervision) defaults() {
	if s.Clock == nil {
		s.Clock = clock.Real{}
	}
	if s.Backoff <= 0 {
		s.Backoff = time.Second
	}
	if s.MaxBackoff <= 0 {
		s.MaxBackoff = 30 * time.Second
	}
	if s.StartLimitInterval <= 0 {
		s.StartLimitInterval = 300 * time.Second
	}
	if s.StartLimitBurst <= 0 {
		s.StartLimitBurst = 5
	}
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
}

// Metrics are the embedded services' metrics, shared by every supervisor
// of a process.
type Metrics struct {
	restarts *prometheus.CounterVec
	up       *prometheus.GaugeVec
	failed   *prometheus.GaugeVec
}

// NewMetrics registers the metrics with reg (nil: kept unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_embedded_restarts_total",
			Help: "Times a supervised embedded service (Postgres, a cell's Redis) was started again after it died."}, []string{"service"}),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fleet_embedded_up",
			Help: "1 while the embedded service's process runs and answered its readiness check, 0 otherwise."}, []string{"service"}),
		failed: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fleet_embedded_failed",
			Help: "1 once the embedded service spent its restart budget and stays down until a person restarts the panel (the alarm)."}, []string{"service"}),
	}
	if reg != nil {
		reg.MustRegister(m.restarts, m.up, m.failed)
	}
	return m
}

func (m *Metrics) setUp(service string, up bool) {
	if m == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	m.up.WithLabelValues(service).Set(v)
}

// child is the running process of an embedded service, replaced at each
// restart.
type child struct {
	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	sup     *supervisor
}

// started records a started cmd and waits for it in the background.
func (c *child) started(cmd *exec.Cmd) chan struct{} {
	exited := make(chan struct{})
	c.mu.Lock()
	c.cmd, c.exited, c.waitErr = cmd, exited, nil
	c.mu.Unlock()
	go func() {
		err := cmd.Wait()
		c.mu.Lock()
		if c.cmd == cmd {
			c.waitErr = err
		}
		c.mu.Unlock()
		close(exited)
	}()
	return exited
}

func (c *child) current() (*exec.Cmd, chan struct{}, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmd, c.exited, c.waitErr
}

func (c *child) pid() int {
	cmd, _, _ := c.current()
	if cmd == nil || cmd.Process == nil {
		return 0
	}
	return cmd.Process.Pid
}

// terminate stops the current process with sig, killing it after grace.
func (c *child) terminate(sig syscall.Signal, grace time.Duration) bool {
	cmd, exited, _ := c.current()
	if cmd == nil || cmd.Process == nil {
		return false
	}
	select {
	case <-exited:
		return false
	default:
	}
	_ = cmd.Process.Signal(sig)
	waitExit(cmd, exited, grace)
	return true
}

// service is what a supervisor restarts.
type service interface {
	// launch starts the process again and waits until it is ready.
	launch(ctx context.Context) error
	// reap ends what the dead process left running (Postgres's backends).
	reap(ctx context.Context)
}

type supervisor struct {
	cfg    Supervision
	c      *child
	svc    service
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	state  string
}

func (c *child) supervise(svc service, cfg Supervision) {
	cfg.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	s := &supervisor{cfg: cfg, c: c, svc: svc, cancel: cancel, done: make(chan struct{}), state: StateRunning}
	c.mu.Lock()
	if c.sup != nil {
		c.mu.Unlock()
		cancel()
		panic("embedded: " + cfg.Service + " is already supervised")
	}
	c.sup = s
	c.mu.Unlock()
	cfg.Metrics.setUp(cfg.Service, true)
	if cfg.Metrics != nil {
		cfg.Metrics.restarts.WithLabelValues(cfg.Service).Add(0)
		cfg.Metrics.failed.WithLabelValues(cfg.Service).Set(0)
	}
	go s.run(ctx)
}

// halt ends supervision (before a deliberate stop) and waits for it.
func (c *child) halt() {
	c.mu.Lock()
	s := c.sup
	c.mu.Unlock()
	if s == nil {
		return
	}
	s.cancel()
	<-s.done
	s.setState(StateStopped)
	s.cfg.Metrics.setUp(s.cfg.Service, false)
}

// state reports the supervised state ("" when not supervised).
func (c *child) state() string {
	c.mu.Lock()
	s := c.sup
	c.mu.Unlock()
	if s == nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

func (s *supervisor) setState(st string) {
	s.mu.Lock()
	s.state = st
	s.mu.Unlock()
}

func (s *supervisor) run(ctx context.Context) {
	defer close(s.done)
	cfg := s.cfg
	log := cfg.Log.With("service", cfg.Service)
	var starts []time.Time
	total := 0
	for {
		cmd, exited, _ := s.c.current()
		select {
		case <-ctx.Done():
			return
		case <-exited:
		}
		if ctx.Err() != nil {
			return
		}
		_, _, waitErr := s.c.current()
		s.setState(StateRestarting)
		cfg.Metrics.setUp(cfg.Service, false)
		log.Error("embedded service died; starting it again", "pid", cmd.Process.Pid, "exit", fmt.Sprint(waitErr))
		for {
			now := cfg.Clock.Now()
			kept := starts[:0]
			for _, t := range starts {
				if now.Sub(t) < cfg.StartLimitInterval {
					kept = append(kept, t)
				}
			}
			starts = kept
			if len(starts) >= cfg.StartLimitBurst {
				s.setState(StateFailed)
				if cfg.Metrics != nil {
					cfg.Metrics.failed.WithLabelValues(cfg.Service).Set(1)
				}
				log.Error("ALARM: embedded service spent its restart budget and stays down; restart the panel once the cause is fixed",
					"alarm", "embedded_service_failed", "restarts", len(starts), "within", cfg.StartLimitInterval)
				if cfg.OnGiveUp != nil {
					cfg.OnGiveUp(cfg.Service)
				}
				return
			}
			delay := cfg.Backoff << len(starts)
			if delay > cfg.MaxBackoff || delay <= 0 {
				delay = cfg.MaxBackoff
			}
			select {
			case <-ctx.Done():
				return
			case <-cfg.Clock.After(delay):
			}
			starts = append(starts, cfg.Clock.Now())
			total++
			if cfg.Metrics != nil {
				cfg.Metrics.restarts.WithLabelValues(cfg.Service).Inc()
			}
			s.svc.reap(ctx)
			if err := s.svc.launch(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				log.Error("embedded service did not start again", "attempt", len(starts), "err", err)
				continue
			}
			s.setState(StateRunning)
			cfg.Metrics.setUp(cfg.Service, true)
			log.Warn("embedded service started again", "pid", s.c.pid(), "restarts", total, "after", delay)
			if cfg.OnRestart != nil {
				cfg.OnRestart(cfg.Service)
			}
			break
		}
	}
}
