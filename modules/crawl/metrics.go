package crawl

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// proxyBytes is the crawler's traffic through the tenants' proxy pools: a
// cost a pool's provider bills by.
var proxyBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "fleet_proxy_traffic_bytes_total",
	Help: "Bytes crawl pages fetched through a proxy pool (each page's body as the crawler received it, decompressed; headers and TLS not counted), by tenant and pool.",
}, []string{"tenant", "pool"})

// Metrics registers the crawler's counters on reg (once per registry).
func Metrics(reg prometheus.Registerer) {
	if err := reg.Register(proxyBytes); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			panic(err)
		}
	}
}
