package assistant_test

import (
	"io"
	"log/slog"
	"strconv"
)

func testLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

var _ = strconv.Itoa
