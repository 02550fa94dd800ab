package engine_test

import (
	"bufio"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/traits"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// confirmed is the sandbox board's answer to a booking, byte for byte in
// shape (modules/board's commit).
const confirmed = `{"booking":{"id":4242,"load_id":"L-000001","client":"acme","account":"acme-1","booked_at":"2026-03-01T12:00:00.123456Z","idempotency_key":"op-1","source":"http"},"status":"confirmed"}` + "\n"

// cannedBoard answers the session check with a signed-in session and every
// other request on a keep-alive connection with the confirmed answer,
// reading as little as it can: the benchmark measures the adapter (build,
// gate, write, read, parse), not a server.
func cannedBoard(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ln.Close() })
	answer := func(status, body string) []byte {
		return []byte("HTTP/1.1 " + status + "\r\nContent-Type: application/json\r\nCache-Control: no-store\r\nContent-Length: " +
			strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	}
	booked := answer("201 Created", confirmed)
	session := answer("200 OK", `{"signed_in":true,"account":"acme-1","client":"acme","csrf_token":"csrf-0123456789"}`+"\n")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					n, first, resp := 0, true, booked
					for {
						line, err := br.ReadSlice('\n')
						if err != nil {
							return
						}
						if len(line) <= 2 {
							break
						}
						if first && strings.HasPrefix(string(line), "GET /api/session ") {
							resp = session
						}
						first = false
						if len(line) > 16 && strings.EqualFold(string(line[:15]), "content-length:") {
							n, _ = strconv.Atoi(strings.TrimSpace(string(line[15:])))
						}
					}
					if _, err := br.Discard(n); err != nil {
						return
					}
					if _, err := c.Write(resp); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// BenchmarkBook: build one booking request, send it through the gate, read
// and parse the answer — the hand-written sandbox adapter against the
// engine over examples/platforms/sandbox.yaml, on the same loopback board.
func BenchmarkBook(b *testing.B) {
	url := cannedBoard(b)
	tr, err := traits.For("acme-1", "us-east")
	if err != nil {
		b.Fatal(err)
	}
	gate := func() error { return nil }
	// The canned answers are the classic dialect's.
	for _, ad := range targets(b)[:2] {
		b.Run(strings.TrimPrefix(ad.name, "classic/"), func(b *testing.B) {
			a, err := ad.new(url)
			if err != nil {
				b.Fatal(err)
			}
			sess, err := a.NewSession(platform.SessionOptions{Traits: tr})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if err := sess.Check(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				r := sess.Book(ctx, "L-000001", "op-1", gate)
				if r.Result != wire.ResultConfirmed || r.BookingID != "4242" {
					b.Fatalf("%+v", r)
				}
			}
		})
	}
}
