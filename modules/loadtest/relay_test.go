package loadtest

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A blocked relay passes nothing either way, not even a close; unblocked,
// what was held goes through, then the close.
func TestRelayBlackholesThenLetsEverythingThrough(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	got := make(chan string, 1)
	arrived := make(chan struct{}) // the first write reached the server
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		first := make([]byte, len("before "))
		if _, err := io.ReadFull(c, first); err != nil {
			c.Close()
			return
		}
		close(arrived)
		rest, _ := io.ReadAll(c) // until the client's close arrives
		got <- string(first) + string(rest)
		c.Close()
	}()
	r, err := newRelay(ln.Addr().String())
	require.NoError(t, err)
	defer r.close()

	c, err := net.Dial("tcp", strings.TrimPrefix(r.URL(), "http://"))
	require.NoError(t, err)
	_, err = c.Write([]byte("before "))
	require.NoError(t, err)
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the first write did not pass the open relay")
	}
	r.block()
	_, err = c.Write([]byte("during"))
	require.NoError(t, err, "the agent's writes do not fail: nothing tells it")
	require.NoError(t, c.Close())
	select {
	case s := <-got:
		t.Fatalf("the close passed the blackhole: %q", s)
	case <-time.After(300 * time.Millisecond):
	}
	require.Equal(t, 1, r.unblock(), "the agent's close was counted")
	select {
	case s := <-got:
		require.Equal(t, "before during", s)
	case <-time.After(5 * time.Second):
		t.Fatal("nothing passed once unblocked")
	}
}
