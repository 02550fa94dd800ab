package gateway

// completed counts a finished task of worker under its kind (as the
// agent's latest state report names it).
func (c *conn) completed(worker, outcome string) {
	c.mu.Lock()
	kind := c.kinds[worker]
	c.mu.Unlock()
	if kind == "" {
		kind = "unknown"
	}
	c.g.completions.WithLabelValues(kind, outcome).Inc()
}
