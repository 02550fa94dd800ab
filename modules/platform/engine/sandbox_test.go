package engine_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/board/boardtest"
	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/platform/engine"
	"github.com/fleetwright/fleetwright/modules/platform/sandbox"
	"github.com/fleetwright/fleetwright/modules/platform/spec"
	"github.com/fleetwright/fleetwright/modules/traits"
	"github.com/fleetwright/fleetwright/modules/wire"
)

const password = "acme-password-1"

// platformSpec is examples/platforms/NAME, parsed.
func platformSpec(t testing.TB, name string) *spec.Spec {
	t.Helper()
	path := filepath.Join("..", "..", "..", "examples", "platforms", name)
	src, err := os.ReadFile(path)
	require.NoError(t, err)
	s, err := spec.Parse(name, src)
	require.NoError(t, err)
	return s
}

// target is one adapter over one dialect of the sandbox board, and what
// differs between them that a test names.
type target struct {
	name    string
	dialect string
	new     platform.Factory
	// signIn, feed: the requests a sign-in and a feed poll send.
	signIn []string
	feed   string
	// keys is the request that reads the board's idempotency statement.
	keys string
}

// targets are the adapters of the sandbox board's two dialects: over the
// classic one the hand-written adapter and the spec-driven engine over
// examples/platforms/sandbox.yaml, over the html one the engine over
// examples/platforms/haulbridge.yaml. Every test below runs against each,
// over a real board.
func targets(t testing.TB) []target {
	classic := []string{"POST /login", "POST /login/totp", "GET /api/session"}
	return []target{
		{"classic/hand-written", board.DialectClassic, sandbox.New, classic, "GET /api/loads", "GET /api/platform"},
		{"classic/spec", board.DialectClassic, engine.Factory(platformSpec(t, "sandbox.yaml")), classic, "GET /api/loads", "GET /api/platform"},
		{"html/spec", board.DialectHTML, engine.Factory(platformSpec(t, "haulbridge.yaml")),
			[]string{"GET /signin", "POST /signin", "GET /signin/verify", "POST /signin/verify", "GET /dashboard"}, "GET /api/v2/loads", "GET /api/v2/about"},
	}
}

// start runs a board of the target's dialect.
func (tg target) start(t *testing.T, mod ...func(*board.Config)) *board.Server {
	t.Helper()
	return boardtest.Start(t, append([]func(*board.Config){func(c *board.Config) { c.Dialect = tg.dialect }}, mod...)...)
}

func setup(t *testing.T, tg target, mod ...func(*board.Config)) (*board.Server, platform.Session, wire.Credentials) {
	t.Helper()
	s := tg.start(t, mod...)
	sess, creds := account(t, tg, s, "acme-1", "acme")
	return s, sess, creds
}

// account creates a board account and a session of the target's adapter
// for it (not signed in).
func account(t *testing.T, tg target, s *board.Server, user, client string) (platform.Session, wire.Credentials) {
	t.Helper()
	acct, err := s.CreateAccount(context.Background(), board.AccountSpec{Username: user, Password: password, Client: client})
	require.NoError(t, err)
	ad, err := tg.new(s.URL())
	require.NoError(t, err)
	tr, err := traits.For(user, "us-east")
	require.NoError(t, err)
	sess, err := ad.NewSession(platform.SessionOptions{Traits: tr})
	require.NoError(t, err)
	creds := wire.Credentials{Username: user, Password: wire.NewSecret(password), TOTPSecret: wire.NewSecret(acct.TOTPSecret),
		Origins: []string{s.URL()}}
	return sess, creds
}

// Sign in over HTTP with password and TOTP, watch the feed, book with the
// operation id as idempotency key, see taken, list bookings with proof of
// completeness, and notice a signed-out session.
func TestHTTPSession(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			s, sess, creds := setup(t, tg, func(c *board.Config) { c.IdempotencyKeys = true })
			require.NoError(t, sess.Login(ctx, creds, &platform.TOTP{Secret: creds.TOTPSecret}))
			require.NoError(t, sess.Check(ctx))

			loads, err := s.Publish(ctx, 2, nil)
			require.NoError(t, err)
			jobs, err := sess.Jobs(ctx)
			require.NoError(t, err)
			require.Len(t, jobs, 2)
			require.Equal(t, loads[0].ID, jobs[0].Key)
			// The html dialect writes times to the millisecond.
			require.WithinDuration(t, loads[0].PublishedAt, jobs[0].PublishedAt, time.Millisecond)
			l := loads[0]
			j := jobs[0]
			require.Equal(t, l.Origin.City+", "+l.Origin.State, j.Origin)
			require.Equal(t, l.Destination.City+", "+l.Destination.State, j.Destination)
			require.Equal(t, l.Equipment, j.Equipment)
			require.Equal(t, l.WeightLb, j.WeightLbs)
			require.Equal(t, l.Miles, j.Miles)
			// The html dialect states the rate per mile, to the cent.
			require.InDelta(t, int64(l.RateUSD)*100, j.RateCents, float64(l.Miles)/2, "the rate in cents")
			require.WithinDuration(t, l.ExpiresAt, j.ExpiresAt, time.Millisecond)
			require.True(t, l.PickupStart.Equal(j.PickupStart))
			require.True(t, l.PickupEnd.Equal(j.PickupEnd))
			jobs, err = sess.Jobs(ctx)
			require.NoError(t, err)
			require.Empty(t, jobs, "the cursor moved on")

			r := sess.Book(ctx, loads[0].ID, "op-1", nil)
			require.Equal(t, wire.ResultConfirmed, r.Result, r.Detail)
			require.False(t, r.SentAt.IsZero())
			require.False(t, r.ConfirmedAt.IsZero())
			require.Equal(t, "op-1", s.Bookings("acme")[0].IdempotencyKey)
			require.Equal(t, "1", r.BookingID)

			// Another client takes the second load first.
			rival, rcreds := account(t, tg, s, "rival-1", "rival")
			require.NoError(t, rival.Login(ctx, rcreds, &platform.TOTP{Secret: rcreds.TOTPSecret}))
			r = rival.Book(ctx, loads[1].ID, "op-r", nil)
			require.Equal(t, wire.ResultConfirmed, r.Result, r.Detail)
			r = sess.Book(ctx, loads[1].ID, "op-2", nil)
			require.Equal(t, wire.ResultTaken, r.Result)

			// A load that does not exist left the worker: UNKNOWN, settled
			// by the reconciler.
			r = sess.Book(ctx, "no-such-load", "op-9", nil)
			require.Equal(t, wire.ResultUnknown, r.Result)
			require.Contains(t, r.Detail, "404")

			b, err := sess.Bookings(ctx, "")
			require.NoError(t, err)
			require.True(t, b.Complete)
			require.Empty(t, b.Next, "one page holds the list")
			require.Equal(t, "acme", b.Client, "the platform says which client answered")
			require.False(t, b.AsOf.IsZero())
			require.Len(t, b.Bookings, 1)
			require.Equal(t, loads[0].ID, b.Bookings[0].Key)
			require.Equal(t, "acme-1", b.Bookings[0].Account)
			_, err = sess.Bookings(ctx, "not-a-booking-id")
			require.Error(t, err, "a cursor the adapter never gave is refused")

			s.SessionStorm(1)
			require.ErrorIs(t, sess.Check(ctx), platform.ErrSignedOut)
			_, err = sess.Bookings(ctx, "")
			require.ErrorIs(t, err, platform.ErrSignedOut, "a signed-out look-up is an error, never an empty complete list")
			_, err = sess.Jobs(ctx)
			require.ErrorIs(t, err, platform.ErrSignedOut)
			r = sess.Book(ctx, loads[0].ID, "op-3", nil)
			require.True(t, r.SignedOut)
			require.Equal(t, wire.ResultUnknown, r.Result)
		})
	}
}

// Wrong credentials stop sign-in with ErrCredentials, and the password
// never appears in the error.
func TestWrongPassword(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			_, sess, creds := setup(t, tg)
			creds.Password = wire.NewSecret("not-the-password-42")
			err := sess.Login(ctx, creds, &platform.TOTP{Secret: creds.TOTPSecret})
			require.ErrorIs(t, err, platform.ErrCredentials)
			require.NotContains(t, err.Error(), "not-the-password-42")
		})
	}
}

// The gate runs right before the request's bytes leave; a refusal is
// NOT_SENT and the board never sees the request.
func TestGateRefusesBeforeSending(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			s, sess, creds := setup(t, tg)
			require.NoError(t, sess.Login(ctx, creds, &platform.TOTP{Secret: creds.TOTPSecret}))
			loads, err := s.Publish(ctx, 1, nil)
			require.NoError(t, err)
			r := sess.Book(ctx, loads[0].ID, "op-1", func() error { return errors.New("deadline passed") })
			require.Equal(t, wire.ResultNotSent, r.Result)
			require.True(t, r.SentAt.IsZero())
			require.EqualValues(t, 0, s.Stats().BookingRequests)
			require.Empty(t, s.Bookings("acme"))
			// The gate opening is what the next booking's SentAt records.
			r = sess.Book(ctx, loads[0].ID, "op-1", func() error { return nil })
			require.Equal(t, wire.ResultConfirmed, r.Result, r.Detail)
			require.EqualValues(t, 1, s.Stats().BookingRequests)
		})
	}
}

// The board's chaos switches: a 5xx, a late commit's 504, a captcha and a
// dropped answer all end UNKNOWN (captcha flagged); none is ever CONFIRMED.
func TestChaosAnswersAreUnknown(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			s, sess, creds := setup(t, tg)
			require.NoError(t, sess.Login(ctx, creds, &platform.TOTP{Secret: creds.TOTPSecret}))
			loads, err := s.Publish(ctx, 4, nil)
			require.NoError(t, err)
			calm := s.Chaos()
			for i, c := range []struct {
				set     func(*board.Chaos)
				captcha bool
			}{
				{func(c *board.Chaos) { c.BookErrorRate = 1 }, false},
				{func(c *board.Chaos) { c.LateCommitRate, c.LateCommitDelay = 1, board.Duration(time.Hour) }, false},
				{func(c *board.Chaos) { c.CaptchaRate = 1 }, true},
				{func(c *board.Chaos) { c.DropResponseRate = 1 }, false},
			} {
				ch := calm
				c.set(&ch)
				require.NoError(t, s.SetChaos(ch))
				r := sess.Book(ctx, loads[i].ID, "op", nil)
				require.Equal(t, wire.ResultUnknown, r.Result, "case %d: %s", i, r.Detail)
				require.Equal(t, c.captcha, r.Captcha, "case %d", i)
				require.False(t, r.SentAt.IsZero(), "case %d: the request left", i)
			}
			require.NoError(t, s.SetChaos(calm))
		})
	}
}

// A reused one-time code is refused by the board; the session waits for
// the next step and signs in with a fresh code.
func TestLoginWaitsForTheNextCode(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, sess, creds := setup(t, tg)
			// Another sign-in of the same account uses the current step first.
			ad, err := tg.new(s.URL())
			require.NoError(t, err)
			first, err := ad.NewSession(platform.SessionOptions{})
			require.NoError(t, err)
			require.NoError(t, first.Login(ctx, creds, &platform.TOTP{Secret: creds.TOTPSecret}))
			codes := &platform.TOTP{Secret: creds.TOTPSecret}
			require.NoError(t, sess.Login(ctx, creds, codes))
			require.Equal(t, 1, codes.Waits, "the used step was refused and the next code waited for")
			require.NoError(t, sess.Check(ctx))
		})
	}
}

// The HTTP session writes its headers in the traits' profile order (Go's
// own transport sorts them) with the traits' user agent and language.
func TestHeaderOrder(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer ln.Close()
			got := make(chan []string, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				br := bufio.NewReader(c)
				var names []string
				for {
					line, err := br.ReadString('\n')
					if err != nil || line == "\r\n" {
						break
					}
					if name, _, ok := strings.Cut(line, ":"); ok {
						names = append(names, name)
					}
				}
				got <- names
				_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"))
			}()
			a, err := tg.new("http://" + ln.Addr().String())
			require.NoError(t, err)
			tr, err := traits.For("acme-7", "us-east")
			require.NoError(t, err)
			sess, err := a.NewSession(platform.SessionOptions{Traits: tr, Timeout: 5 * time.Second})
			require.NoError(t, err)
			_ = sess.Check(context.Background())
			names := <-got
			var want []string
			for _, o := range tr.Profile.HeaderOrder {
				for _, n := range names {
					if strings.EqualFold(n, o) {
						want = append(want, n)
					}
				}
			}
			require.GreaterOrEqual(t, len(want), 4)
			require.Equal(t, want, names[:len(want)], "profile headers first, in the profile's order")
			require.Equal(t, "Host", names[0])
			require.Contains(t, names, "User-Agent")
		})
	}
}

// The adapter reads the board's own idempotency_keys status and CheckKeys
// refuses whenever the tenant's setting disagrees with it; the status read
// counts against the request budget, once per cache period.
func TestIdempotencySettingMustMatchTheBoard(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			for _, boardKeys := range []bool{false, true} {
				s := tg.start(t, func(c *board.Config) { c.IdempotencyKeys = boardKeys })
				a, err := tg.new(s.URL())
				require.NoError(t, err)
				got, err := a.(platform.KeyPolicy).HonoursIdempotencyKeys(ctx)
				require.NoError(t, err)
				require.Equal(t, boardKeys, got)
				require.NoError(t, platform.CheckKeys(ctx, a, boardKeys), "setting and board agree")
				err = platform.CheckKeys(ctx, a, !boardKeys)
				require.ErrorIs(t, err, platform.ErrKeysMismatch)
				require.Contains(t, err.Error(), a.Name())
				require.Contains(t, err.Error(), "Claim settings")
			}
			s := tg.start(t)
			a, err := tg.new(s.URL())
			require.NoError(t, err)
			var admitted []string
			refuse := false
			a.(platform.Metered).SetAdmit(func(r *http.Request) error {
				if refuse {
					return errors.New("budget spent")
				}
				admitted = append(admitted, r.Method+" "+r.URL.Path)
				return nil
			})
			refuse = true
			_, err = a.(platform.KeyPolicy).HonoursIdempotencyKeys(ctx)
			require.ErrorIs(t, err, platform.ErrUnavailable)
			require.ErrorContains(t, err, "budget spent")
			refuse = false
			_, err = a.(platform.KeyPolicy).HonoursIdempotencyKeys(ctx)
			require.NoError(t, err)
			_, err = a.(platform.KeyPolicy).HonoursIdempotencyKeys(ctx)
			require.NoError(t, err)
			require.Equal(t, []string{tg.keys}, admitted, "counted once: the answer is cached")

			a, err = tg.new("http://127.0.0.1:1")
			require.NoError(t, err)
			err = platform.CheckKeys(ctx, a, false)
			require.ErrorIs(t, err, platform.ErrUnavailable)
		})
	}
}

// Every request a session sends passes the account's request budget
// (SessionOptions.Admit); a refused booking is NOT_SENT.
func TestAdmitCountsEveryRequest(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			s := tg.start(t)
			acct, err := s.CreateAccount(ctx, board.AccountSpec{Username: "acme-1", Password: password, Client: "acme"})
			require.NoError(t, err)
			a, err := tg.new(s.URL())
			require.NoError(t, err)
			var seen []string
			refuse := false
			sess, err := a.NewSession(platform.SessionOptions{Admit: func(r *http.Request) error {
				if refuse {
					return errors.New("budget spent")
				}
				seen = append(seen, r.Method+" "+r.URL.Path)
				return nil
			}})
			require.NoError(t, err)
			creds := wire.Credentials{Username: "acme-1", Password: wire.NewSecret(password), TOTPSecret: wire.NewSecret(acct.TOTPSecret),
				Origins: []string{s.URL()}}
			require.NoError(t, sess.Login(ctx, creds, &platform.TOTP{Secret: creds.TOTPSecret}))
			loads, err := s.Publish(ctx, 1, nil)
			require.NoError(t, err)
			_, err = sess.Jobs(ctx)
			require.NoError(t, err)
			for _, r := range append(tg.signIn, tg.feed) {
				require.Contains(t, seen, r)
			}
			refuse = true
			r := sess.Book(ctx, loads[0].ID, "op-1", nil)
			require.Equal(t, wire.ResultNotSent, r.Result)
			require.EqualValues(t, 0, s.Stats().BookingRequests)
		})
	}
}

// The client's bookings come page by page from a cursor: every booking of
// the client exactly once, another client's never; a booking made during
// the walk is on a later page; only the last page ends the list.
func TestBookingsArePagedByCursor(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			s, sess, creds := setup(t, tg)
			require.NoError(t, sess.Login(ctx, creds, &platform.TOTP{Secret: creds.TOTPSecret}))
			_, err := s.CreateAccount(ctx, board.AccountSpec{Username: "rival-1", Password: password, Client: "rival"})
			require.NoError(t, err)
			loads, err := s.Publish(ctx, 451, nil)
			require.NoError(t, err)
			for i, l := range loads[:450] {
				_, err := s.InjectBooking(ctx, "acme-1", l.ID)
				require.NoError(t, err)
				if i%3 == 0 {
					_, err := s.InjectBooking(ctx, "rival-1", l.ID)
					require.NoError(t, err)
				}
			}
			seen := map[string]bool{}
			cursor, pages := "", 0
			for {
				b, err := sess.Bookings(ctx, cursor)
				require.NoError(t, err)
				require.True(t, b.Complete, "page %d proves itself", pages)
				require.Equal(t, "acme", b.Client)
				require.LessOrEqual(t, len(b.Bookings), 200)
				for _, bk := range b.Bookings {
					require.False(t, seen[bk.BookingID], "booking %s twice", bk.BookingID)
					seen[bk.BookingID] = true
					require.Equal(t, "acme-1", bk.Account, "another client's booking is never listed")
				}
				pages++
				if pages == 1 {
					_, err := s.InjectBooking(ctx, "acme-1", loads[450].ID)
					require.NoError(t, err)
				}
				if b.Next == "" {
					break
				}
				require.NotEqual(t, cursor, b.Next)
				cursor = b.Next
			}
			require.Equal(t, 3, pages)
			require.Len(t, seen, 451)
		})
	}
}
