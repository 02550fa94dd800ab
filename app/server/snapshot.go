package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Snapshot is a collector of figures read from the database at each
// scrape that does not vanish when the read fails: a scrape during a
// database outage reports the last figures read, and two gauges of its own
// say how old they are —
//
//	fleet_db_gauges_up{source}                           1 when this scrape's read succeeded
//	fleet_db_gauges_last_success_timestamp_seconds{source} when a read last succeeded
//
// so an alert on the figures keeps firing through the outage instead of
// resolving, and another alert says the figures are stale.
type Snapshot struct {
	descs   []*prometheus.Desc
	read    func(ctx context.Context) ([]prometheus.Metric, error)
	log     *slog.Logger
	up, ts  *prometheus.Desc
	timeout time.Duration

	mu     sync.Mutex
	last   []prometheus.Metric
	lastOK time.Time
}

// NewSnapshot returns the collector of source (its label), whose read
// returns the figures of descs.
func NewSnapshot(source string, descs []*prometheus.Desc, read func(ctx context.Context) ([]prometheus.Metric, error), log *slog.Logger) *Snapshot {
	l := prometheus.Labels{"source": source}
	return &Snapshot{descs: descs, read: read, log: log, timeout: 5 * time.Second,
		up: prometheus.NewDesc("fleet_db_gauges_up",
			"1 when this scrape read the source's figures from the database; 0: they are the last ones read (see the timestamp).", nil, l),
		ts: prometheus.NewDesc("fleet_db_gauges_last_success_timestamp_seconds",
			"When the source's figures were last read from the database (Unix time).", nil, l)}
}

// Describe implements prometheus.Collector.
func (s *Snapshot) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range s.descs {
		ch <- d
	}
	ch <- s.up
	ch <- s.ts
}

// Collect implements prometheus.Collector.
func (s *Snapshot) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	ms, err := s.read(ctx)
	s.mu.Lock()
	up := 0.0
	if err == nil {
		s.last, s.lastOK, up = ms, time.Now(), 1
	} else if s.log != nil {
		s.log.Warn("figures not read from the database: the last ones read are reported", "err", err)
	}
	last, lastOK := s.last, s.lastOK
	s.mu.Unlock()
	for _, m := range last {
		ch <- m
	}
	ch <- prometheus.MustNewConstMetric(s.up, prometheus.GaugeValue, up)
	if !lastOK.IsZero() {
		ch <- prometheus.MustNewConstMetric(s.ts, prometheus.GaugeValue, float64(lastOK.UnixMilli())/1000)
	}
}
