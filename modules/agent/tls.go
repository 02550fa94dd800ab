package agent

import (
	"fmt"
	"net/http"

	"github.com/fleetwright/fleetwright/modules/link"
)

// panelClient is link.Client, its error a configuration error.
func panelClient(caFile string) (*http.Client, error) {
	c, err := link.Client(caFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return c, nil
}
