package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/http"
)

// connBufferBytes sizes a hijacked agent connection's read and write
// buffers. An idle agent exchanges a ping and a pong every 15 s (about
// 200 bytes each), so net/http's 4 KiB buffers would be almost all of an
// idle connection's heap; a larger frame is read and written through in
// a few more system calls.
const connBufferBytes = 512

// leanWriter hands the WebSocket library small buffers when it hijacks the
// connection, instead of net/http's (kept alive for as long as the handler
// runs, which the gateway no longer does; see Gateway.ServeHTTP).
type leanWriter struct {
	http.ResponseWriter
	// conn and br are the hijacked connection and the reader handed on
	// (for the idle reader's shallow wait: idle.go).
	conn net.Conn
	br   *bufio.Reader
}

// Hijack implements http.Hijacker.
func (w *leanWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	size := connBufferBytes
	var src interface{ Read([]byte) (int, error) } = conn
	if n := brw.Reader.Buffered(); n > 0 {
		// Bytes the client sent right after its handshake stay first in
		// line: they are loaded into the new buffer before it is handed on.
		b, _ := brw.Reader.Peek(n)
		size = max(size, n)
		src = &prefixReader{prefix: bytes.Clone(b), conn: conn}
	}
	r := bufio.NewReaderSize(src, size)
	if p, ok := src.(*prefixReader); ok {
		if _, err := r.Peek(len(p.prefix)); err != nil {
			_ = conn.Close()
			return nil, nil, errors.New("fleet: hijack: buffered handshake bytes lost")
		}
	}
	w.conn, w.br = conn, r
	return conn, bufio.NewReadWriter(r, bufio.NewWriterSize(conn, connBufferBytes)), nil
}

// prefixReader reads prefix, then conn.
type prefixReader struct {
	prefix []byte
	conn   net.Conn
}

func (p *prefixReader) Read(b []byte) (int, error) {
	if len(p.prefix) > 0 {
		n := copy(b, p.prefix)
		p.prefix = p.prefix[n:]
		return n, nil
	}
	return p.conn.Read(b)
}
