package link

import (
	"fmt"
	"os"
	"strings"

	"github.com/fleetwright/fleetwright/modules/wire"
)

// ReadTokenFile reads the token the panel issued, refusing a file others can
// read or write: the token never goes on a command line, and a file anyone
// on the host can read is no better.
func ReadTokenFile(path string) (wire.Secret, error) {
	if path == "" {
		return wire.Secret{}, fmt.Errorf("--token-file is required")
	}
	fi, err := os.Stat(path)
	if err != nil {
		return wire.Secret{}, fmt.Errorf("token file: %v", err)
	}
	if !fi.Mode().IsRegular() {
		return wire.Secret{}, fmt.Errorf("token file %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return wire.Secret{}, fmt.Errorf("token file %s has mode %04o; it must be readable by its owner only (chmod 600 %s)", path, perm, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return wire.Secret{}, fmt.Errorf("token file: %v", err)
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
		return wire.Secret{}, fmt.Errorf("token file %s must hold exactly one token", path)
	}
	return wire.NewSecret(tok), nil
}
