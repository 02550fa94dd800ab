package server

import (
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
