package server

import (
	"context"
	"fmt"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	diskFreeDesc = prometheus.NewDesc("fleet_data_dir_free_bytes",
		"Bytes available to the process on the filesystem of the data dir (Postgres, Redis, logs, anchors).", []string{"path"}, nil)
	diskSizeDesc = prometheus.NewDesc("fleet_data_dir_size_bytes",
		"Size of the filesystem of the data dir.", []string{"path"}, nil)
)

// DiskCollector exports the free and total bytes of the filesystem holding
// dir, read at each scrape: the "disk nearly full" alert uses their ratio.
func DiskCollector(dir string) prometheus.Collector { return diskCollector{dir: dir} }

type diskCollector struct{ dir string }

func (c diskCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- diskFreeDesc
	ch <- diskSizeDesc
}

func (c diskCollector) Collect(ch chan<- prometheus.Metric) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(c.dir, &st); err != nil {
		return
	}
	bs := float64(st.Bsize)
	ch <- prometheus.MustNewConstMetric(diskFreeDesc, prometheus.GaugeValue, float64(st.Bavail)*bs, c.dir)
	ch <- prometheus.MustNewConstMetric(diskSizeDesc, prometheus.GaugeValue, float64(st.Blocks)*bs, c.dir)
}

// DiskCheck is a readiness check that fails while the filesystem holding
// dir is (nearly) full: under 64 MiB free, or under 2 % of a smaller
// filesystem. Postgres then refuses writes (a clear error per statement,
// nothing half-written); the panel stays up and says why it is not ready,
// and becomes ready again by itself once space returns.
func DiskCheck(dir string) Check {
	return Check{Name: "disk", Critical: true, Probe: func(context.Context) error {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			return fmt.Errorf("server: disk: %w", err)
		}
		free, size := st.Bavail*uint64(st.Bsize), st.Blocks*uint64(st.Bsize)
		if free < min(64<<20, size/50) {
			return fmt.Errorf("server: the data dir's filesystem (%s) is full: %d bytes free of %d; free space (Postgres refuses writes until then)", dir, free, size)
		}
		return nil
	}}
}
