package link

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/wire"
)

// panel answers every hello with answer (a real WebSocket on loopback) and
// hands the hello and what followed it to got.
func panel(t *testing.T, answer wire.Message) (url string, got chan wire.Frame) {
	got = make(chan wire.Frame, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			_, b, err := c.Read(r.Context())
			if err != nil {
				return
			}
			f, err := wire.Decode(b)
			if err != nil {
				return
			}
			got <- f
			if _, ok := f.Message.(wire.Hello); ok {
				out, err := wire.Encode(wire.Current, wire.Frame{Time: time.Now(), Message: answer})
				if err != nil {
					return
				}
				_ = c.Write(r.Context(), websocket.MessageText, out)
			}
		}
	}))
	t.Cleanup(srv.Close)
	u, err := WebSocketURL(srv.URL)
	require.NoError(t, err)
	return u, got
}

func dial(t *testing.T, url string) *Conn {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := Client("")
	require.NoError(t, err)
	c, err := Dialer{URL: url, Client: cl, UserAgent: "fleetwright-test/1"}.Dial(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.CloseNow() })
	return c
}

func TestHelloWelcomeChoosesTheVersion(t *testing.T) {
	url, got := panel(t, wire.Welcome{Version: wire.V4, AgentID: "a1", InstallationID: "inst_a"})
	c := dial(t, url)
	w, err := c.Hello(context.Background(), wire.Hello{Version: wire.Current, MinVersion: wire.V4, Token: wire.NewSecret("tok")})
	require.NoError(t, err)
	require.Equal(t, "inst_a", w.InstallationID)
	require.Equal(t, wire.V4, c.Version(), "the connection speaks the version the welcome chose")
	h := (<-got).Message.(wire.Hello)
	require.Equal(t, "tok", h.Token.Reveal())
}

func TestHelloRejectIsRejected(t *testing.T) {
	url, _ := panel(t, wire.Reject{Reason: wire.RejectUnknownToken, Message: "does not know the token", InstallationID: "inst_a"})
	_, err := dial(t, url).Hello(context.Background(), wire.Hello{Version: wire.Current, MinVersion: wire.MinSupported, Token: wire.NewSecret("tok")})
	var rej *Rejected
	require.ErrorAs(t, err, &rej)
	require.Equal(t, wire.RejectUnknownToken, rej.Reason)
	require.Equal(t, "inst_a", rej.InstallationID)
	require.NotContains(t, err.Error(), "tok\"", "the token is not in the error")
}

// A welcome outside the hello's window is answered with a protocol error.
func TestHelloWelcomeOutsideTheWindow(t *testing.T) {
	url, got := panel(t, wire.Welcome{Version: wire.MinSupported, AgentID: "a1", InstallationID: "inst_a"})
	_, err := dial(t, url).Hello(context.Background(), wire.Hello{Version: wire.Current, MinVersion: wire.V4, Token: wire.NewSecret("tok")})
	require.ErrorIs(t, err, ErrVersion)
	<-got // the hello
	select {
	case f := <-got:
		e, ok := f.Message.(wire.Error)
		require.True(t, ok, "got %s", f.Type)
		require.Equal(t, wire.CodeUnexpected, e.Code)
	case <-time.After(10 * time.Second):
		t.Fatal("no protocol error reached the panel")
	}
}

func TestCleartextOnlyOnLoopback(t *testing.T) {
	for _, ok := range []string{"http://127.0.0.1:1", "http://localhost", "ws://[::1]:8080/agent/ws"} {
		_, err := WebSocketURL(ok)
		require.NoError(t, err, ok)
	}
	for _, bad := range []string{"http://panel.example", "ws://10.0.0.1/agent/ws", "http://127.0.0.1.example.com"} {
		_, err := WebSocketURL(bad)
		require.ErrorContains(t, err, "which is not this machine", bad)
		require.True(t, strings.Contains(err.Error(), "use https:// or wss://"), bad)
	}
}
