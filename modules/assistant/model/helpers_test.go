package model_test

import (
	"io/fs"
	"os"
)

func writeFile(p, s string, mode fs.FileMode) error { return os.WriteFile(p, []byte(s), mode) }
