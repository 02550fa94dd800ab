package link

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/coder/websocket"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Dialer says how to reach the panel's agent endpoint.
type Dialer struct {
	// URL is the endpoint (WebSocketURL).
	URL string
	// Client dials it (Client: the CA of --panel-ca-file, no redirects).
	Client *http.Client
	// CAFile is --panel-ca-file ("": this machine's CAs), named in the
	// advice when the panel's certificate is not trusted.
	CAFile string
	// UserAgent names the role and its build ("fleetwright-agent/v1.2").
	UserAgent string
	// Clock stamps each frame sent (default: the real clock).
	Clock clock.Clock
	// WriteTimeout bounds each write, in real time (default 30 s).
	WriteTimeout time.Duration
}

// Conn is one connection to the panel, speaking one protocol version: the
// newest until the welcome chooses one.
type Conn struct {
	ws      *websocket.Conn
	version int
	clock   clock.Clock
	write   time.Duration
}

// Dial opens a connection; ctx bounds the dial only.
func (d Dialer) Dial(ctx context.Context) (*Conn, error) {
	ws, resp, err := websocket.Dial(ctx, d.URL, &websocket.DialOptions{HTTPClient: d.Client,
		HTTPHeader: http.Header{"User-Agent": {d.UserAgent}}})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("link: dial %s: HTTP %d: %w", d.URL, resp.StatusCode, err)
		}
		return nil, fmt.Errorf("link: dial %s: %w%s", d.URL, err, trustHint(err, d.CAFile))
	}
	ws.SetReadLimit(wire.MaxMessageBytes)
	c := &Conn{ws: ws, version: wire.Current, clock: d.Clock, write: d.WriteTimeout}
	if c.clock == nil {
		c.clock = clock.Real{}
	}
	if c.write <= 0 {
		c.write = 30 * time.Second
	}
	return c, nil
}

// Version is the protocol version the connection speaks.
func (c *Conn) Version() int { return c.version }

// Send writes one message.
func (c *Conn) Send(ctx context.Context, m wire.Message) error {
	data, err := wire.Encode(c.version, wire.Frame{Time: c.clock.Now(), Message: m})
	if err != nil {
		return fmt.Errorf("link: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, c.write)
	defer cancel()
	if err := c.ws.Write(wctx, websocket.MessageText, data); err != nil {
		return fmt.Errorf("link: send %s: %w", m.MessageType(), err)
	}
	return nil
}

// Read reads one message. One that is not part of the protocol (binary, or
// not decodable) is answered with a protocol error, which ends the
// connection.
func (c *Conn) Read(ctx context.Context) (wire.Frame, error) {
	typ, data, err := c.ws.Read(ctx)
	if err != nil {
		return wire.Frame{}, fmt.Errorf("link: read: %w", err)
	}
	if typ != websocket.MessageText {
		c.ProtocolError(ctx, wire.Error{Code: wire.CodeMalformed, Message: "binary messages are not part of the protocol"})
		return wire.Frame{}, errors.New("link: the panel sent a binary message")
	}
	f, err := wire.Decode(data)
	if err != nil {
		c.ProtocolError(ctx, wire.ErrorFor(err))
		return wire.Frame{}, fmt.Errorf("link: %w", err)
	}
	return f, nil
}

// ProtocolError tells the panel what was wrong and closes the connection.
func (c *Conn) ProtocolError(ctx context.Context, e wire.Error) {
	_ = c.Send(ctx, e)
	_ = c.ws.Close(websocket.StatusPolicyViolation, string(e.Code))
}

// Close closes the connection with a status and a reason.
func (c *Conn) Close(code websocket.StatusCode, reason string) error { return c.ws.Close(code, reason) }

// CloseNow drops the connection without a closing handshake.
func (c *Conn) CloseNow() error { return c.ws.CloseNow() }

// Rejected is the panel's reject of a hello.
type Rejected struct{ wire.Reject }

func (r *Rejected) Error() string {
	return fmt.Sprintf("link: the panel refused the hello: %s: %s", r.Reason, r.Message)
}

// ErrVersion is a welcome that chose a version outside the hello's window.
var ErrVersion = errors.New("link: the panel chose a protocol version outside this end's window")

// Hello says hello and reads the panel's answer: the welcome, or a
// *Rejected error for a reject (the connection is then closed), or
// ErrVersion for a welcome whose version lies outside h.MinVersion ..
// h.Version (answered with a protocol error). After a welcome the
// connection speaks the version it chose. ctx bounds the wait for the
// answer.
func (c *Conn) Hello(ctx context.Context, h wire.Hello) (wire.Welcome, error) {
	if err := c.Send(ctx, h); err != nil {
		return wire.Welcome{}, err
	}
	f, err := c.Read(ctx)
	if err != nil {
		return wire.Welcome{}, err
	}
	switch m := f.Message.(type) {
	case wire.Reject:
		_ = c.ws.Close(websocket.StatusNormalClosure, "")
		return wire.Welcome{}, &Rejected{m}
	case wire.Welcome:
		if m.Version < h.MinVersion || m.Version > h.Version {
			c.ProtocolError(ctx, wire.Error{Code: wire.CodeUnexpected, Message: fmt.Sprintf("welcome chose version %d outside %d..%d", m.Version, h.MinVersion, h.Version)})
			return wire.Welcome{}, fmt.Errorf("%w: it chose %d, this end speaks %d..%d", ErrVersion, m.Version, h.MinVersion, h.Version)
		}
		c.version = m.Version
		return m, nil
	default:
		c.ProtocolError(ctx, wire.Error{Code: wire.CodeUnexpected, Message: fmt.Sprintf("expected welcome or reject, got %s", f.Type)})
		return wire.Welcome{}, fmt.Errorf("link: expected welcome or reject, got %s", f.Type)
	}
}
