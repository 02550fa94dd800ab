//go:build !linux

package fleet

import "syscall"

// canWaitSocket: the shallow wait is Linux's only; elsewhere the reader
// waits inside the WebSocket library's Read.
const canWaitSocket = false

func waitSocket(syscall.RawConn) error { return nil }
