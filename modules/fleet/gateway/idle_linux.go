package gateway

import (
	"syscall"
	"unsafe"
)

// canWaitSocket: this platform has waitSocket.
const canWaitSocket = true

// waitSocket waits until the socket has a byte to read, has reached its
// end or has failed, without consuming anything: recv with MSG_PEEK, and
// the runtime's poller between attempts. It returns the poller's error (a
// closed connection, a read deadline); the socket's own errors are left for
// the next read to report.
func waitSocket(rc syscall.RawConn) error {
	var b [1]byte
	return rc.Read(func(fd uintptr) bool {
		for {
			_, _, e := syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
				syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // nothing yet: the poller waits
			default:
				return true // a byte, the end (0 bytes) or an error
			}
		}
	})
}
