package board_test

import (
	"net/http"
	"net/http/cookiejar"

	"github.com/fleetwright/fleetwright/app/config"
)

func newSet() *config.Set { return config.New("board") }

func jarClient() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar}
}
