package web_test

import (
	"testing"

	"github.com/fleetwright/fleetwright/app/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
