// Package crawlexample holds the example crawl jobs (docs/CRAWL.md) as files
// a person reads and copies, embedded for the demo, which runs
// catalogue-http.yaml on its sandbox catalogue.
package crawlexample

import "embed"

// Files are the example job files.
//
//go:embed *.yaml
var Files embed.FS
