package panel

// Serve serves the console for a caller that embeds the panel with Start (the
// demo role) until Stop; it returns nil after a graceful stop. Run does the
// same for the panel role.
func (p *Panel) Serve() error { return p.srv.Serve() }
