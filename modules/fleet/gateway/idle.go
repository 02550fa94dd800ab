package gateway

import (
	"bufio"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"
)

// An idle agent connection is its reader goroutine waiting for the agent's
// next frame. Blocked inside the WebSocket library's Read, that goroutine
// sits about fifteen calls deep (frame reader, bufio, net, poller) with a
// timer registered on its context: its stack stays at 4–8 KiB for the
// connection's whole life, most of an idle connection's memory. On a plain
// TCP connection (loopback, or TLS terminated by a proxy in front) the
// reader instead waits for the socket to become readable with a peek that
// consumes nothing (idle_linux.go), a few calls deep, and calls Read only
// once a frame is arriving, on a short-lived goroutine (docs/BENCHMARKS.md,
// "Agent connections").
//
// The library reads during its close handshake too (it waits for the
// agent's close frame), so no other goroutine may read while the reader
// waits: another goroutine closing the connection asks the reader to do it
// (requestClose), waking it with a read deadline in the past.

// idleWait is a connection's shallow wait; nil where it cannot be used (a
// TLS connection the panel terminates itself: decrypted bytes may wait
// inside TLS while the socket is quiet).
type idleWait struct {
	nc net.Conn
	rc syscall.RawConn
	br *bufio.Reader
	// waiting is true while the reader is in wait; closing holds a close
	// asked for by another goroutine.
	waiting atomic.Bool
	closing atomic.Pointer[closeRequest]
}

type closeRequest struct {
	code   websocket.StatusCode
	reason string
}

// newIdleWait returns the shallow wait for a hijacked connection and the
// reader the WebSocket library reads it through, or nil.
func newIdleWait(nc net.Conn, br *bufio.Reader) *idleWait {
	tc, ok := nc.(*net.TCPConn)
	if !ok || br == nil || !canWaitSocket {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return &idleWait{nc: nc, rc: rc, br: br}
}

// wait returns nil once a frame is arriving (bytes buffered or readable),
// or the connection has ended or failed (the next Read reports how); or
// the close another goroutine asked for.
func (w *idleWait) wait() *closeRequest {
	w.waiting.Store(true)
	defer w.waiting.Store(false)
	for {
		if cr := w.closing.Load(); cr != nil {
			_ = w.nc.SetReadDeadline(time.Time{})
			return cr
		}
		if w.br.Buffered() > 0 {
			return nil
		}
		err := waitSocket(w.rc)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return nil
		}
		// Woken for a close request (checked at the top); a deadline
		// nobody asked for is cleared.
		if w.closing.Load() == nil {
			_ = w.nc.SetReadDeadline(time.Time{})
		}
	}
}

// request asks the reader to close the connection with code and reason.
func (w *idleWait) request(code websocket.StatusCode, reason string) {
	w.closing.CompareAndSwap(nil, &closeRequest{code: code, reason: reason})
	if w.waiting.Load() {
		_ = w.nc.SetReadDeadline(time.Unix(1, 0))
	}
}

// requestClose starts closing the connection with a close handshake (code,
// reason) from any goroutine, without waiting; ended reports when the
// connection's life is over.
func (c *conn) requestClose(code websocket.StatusCode, reason string) {
	if c.idle == nil {
		go func() { _ = c.ws.Close(code, reason) }()
		return
	}
	c.idle.request(code, reason)
}

// closeAndWait closes the connection as requestClose does and waits (at
// most limit) until its life is over.
func (c *conn) closeAndWait(code websocket.StatusCode, reason string, limit time.Duration) {
	c.requestClose(code, reason)
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-c.ctx.Done():
	case <-t.C:
	}
}
