package demo

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	crawlexample "github.com/fleetwright/fleetwright/examples/crawl"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/board/catalog"
	"github.com/fleetwright/fleetwright/modules/crawl"
	"github.com/fleetwright/fleetwright/modules/panel"
)

// CrawlTenant is the demo tenant that crawls the catalogue, and CrawlJob
// its job (examples/crawl/catalogue-http.yaml, every two minutes).
const (
	CrawlTenant = "acme"
	CrawlJob    = "catalogue-http"
	crawlFile   = "catalogue-http.yaml"
)

// startCrawl starts the sandbox catalogue, lets the tenant's crawls reach
// it through the egress guard (its loopback hosts and port, on the
// tenant's allowlist), and applies the demo's crawl job, whose schedule the
// panel then runs.
func startCrawl(ctx context.Context, p *panel.Panel, token string, port int, tenantID string, log *slog.Logger) (*catalog.Server, error) {
	cat, err := catalog.Start(catalog.Config{Port: port, Items: 300, Rate: 20, Burst: 20, CrawlDelay: 0.1,
		AdminToken: token, Logger: log.With("component", "catalog")})
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	port = catalog.PortOf(cat.URLs()[0])
	by := audit.Entry{Actor: "demo"}
	if err := p.Crawl.Store.SetEgress(ctx, tenantID, by, crawl.EgressPolicy{Allow: []string{fmt.Sprintf("127.0.0.0/8:%d", port)}}); err != nil {
		cat.Close()
		return nil, err
	}
	src, err := crawlexample.Files.ReadFile(crawlFile)
	if err != nil {
		cat.Close()
		return nil, fmt.Errorf("demo: %w", err)
	}
	job := strings.ReplaceAll(string(src), ":8091", fmt.Sprintf(":%d", port))
	if _, _, err := p.Crawl.Apply(ctx, tenantID, by, crawlFile, []byte(job)); err != nil {
		cat.Close()
		return nil, err
	}
	return cat, nil
}
