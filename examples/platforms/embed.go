// Package platforms embeds the platform specs Fleetwright ships (the
// sandbox board's, sandbox.yaml): the agent's built-in platforms, which a
// worker names in its "platform" setting when the panel sends no spec of
// the account's own. docs/ADAPTERS.md is the reference of the format.
package platforms

import "embed"

// FS holds every shipped spec, NAME.yaml.
//
//go:embed *.yaml
var FS embed.FS
