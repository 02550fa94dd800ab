package crawl_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/crawl"
	"github.com/fleetwright/fleetwright/modules/crawl/spec"
)

func TestJudge(t *testing.T) {
	j, err := spec.Parse("j.yaml", []byte(`version: 1
name: shop
start: {urls: ["https://shop.example/"]}
allowed_domains: [shop.example]
extract: {items: li, fields: {url: {css: a, attr: href}}}
item_key: url
alarms: {drop_share: 0.5, error_rate: 0.2}
`), spec.Options{})
	require.NoError(t, err)
	job := crawl.Job{Name: "shop", Spec: j}
	failing := func(run crawl.Run, prev []int) []string {
		var out []string
		for _, v := range crawl.Judge(job, run, prev) {
			if v.Failing {
				out = append(out, v.Kind)
			}
		}
		return out
	}
	ok := crawl.Run{State: "succeeded", Pages: 10, Items: 100}
	require.Empty(t, failing(ok, []int{100, 90, 110}))
	require.Empty(t, failing(crawl.Run{State: "succeeded", Pages: 1}, nil), "a first run with nothing expected raises nothing")
	require.Equal(t, []string{crawl.AlarmZeroResults}, failing(crawl.Run{State: "succeeded", Pages: 3}, []int{100}))
	require.Equal(t, []string{crawl.AlarmSuddenDrop}, failing(crawl.Run{State: "succeeded", Pages: 10, Items: 40}, []int{100, 10, 95, 105, 98}),
		"below half the trailing median (98), whatever one odd run did")
	require.Empty(t, failing(crawl.Run{State: "succeeded", Pages: 10, Items: 60}, []int{100, 10, 95, 105, 98}))
	require.Equal(t, []string{crawl.AlarmSelectorFailure}, failing(crawl.Run{State: "succeeded", Pages: 10, Items: 100, SelectorFailures: 3}, []int{100}))
	require.Equal(t, []string{crawl.AlarmErrorRate}, failing(crawl.Run{State: "succeeded", Pages: 7, Errors: 3, Items: 100}, []int{100}))
	require.Contains(t, failing(crawl.Run{State: "failed", Reason: "no crawler agent"}, []int{100}), crawl.AlarmErrorRate)

	min := 50
	j.ExpectedItems = &spec.Range{Min: min, Max: 150}
	vs := crawl.Judge(job, crawl.Run{ID: "r1", State: "succeeded", Pages: 2}, nil)
	require.True(t, vs[0].Failing, "expected items make a first empty run an anomaly")
	require.Contains(t, vs[0].Detail, "expected 50–150")
}
