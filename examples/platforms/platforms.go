// Package platforms holds the platform specs this build ships
// (docs/ADAPTERS.md). The files named sandbox*.yaml describe the sandbox
// boards: a tenant's platform whose text is one of them needs no recorded
// review before it claims (docs/LAW_REGISTER.md).
package platforms

import "embed"

// FS holds every shipped spec.
//
//go:embed *.yaml
var FS embed.FS
