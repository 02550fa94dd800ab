// Package migrations embeds the panel's SQL migrations. Files are named
// NNNN_name.sql and applied in order, one transaction each; `${app_role}`
// stands for the application role's quoted name.
package migrations

import "embed"

// FS holds every migration file.
//
//go:embed *.sql
var FS embed.FS
