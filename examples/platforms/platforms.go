// Package platforms holds the platform specs this build ships
// (docs/ADAPTERS.md): the agent's built-in platforms, which a worker names
// in its "platform" setting when the panel sends no spec of the account's
// own. Sandboxes name those that describe the sandbox
// board's dialects: a tenant's platform whose text is one of them needs no
// recorded review before it claims (docs/LAW_REGISTER.md).
package platforms

import "embed"

// FS holds every shipped spec.
//
//go:embed *.yaml
var FS embed.FS

// Sandboxes are the shipped specs of the sandbox board (`--role=board`):
// its classic dialect and its html one.
var Sandboxes = []string{"sandbox.yaml", "haulbridge.yaml"}
