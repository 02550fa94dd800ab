package board_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/board/boardtest"
)

func TestPersistenceAcrossRestart(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	path := filepath.Join(t.TempDir(), "board.sqlite")
	start := func() *board.Server {
		cfg := board.Defaults()
		cfg.Listen, cfg.Rate, cfg.Data, cfg.AdminToken, cfg.Clock = "127.0.0.1:0", 0, path, boardtest.AdminToken, clk
		cfg.IdempotencyKeys = true
		s, err := board.Start(ctx, cfg, nil)
		require.NoError(t, err)
		return s
	}
	s := start()
	acct, err := s.CreateAccount(ctx, board.AccountSpec{Username: "acme-1", Password: pw, Client: "acme"})
	require.NoError(t, err)
	ls, err := s.Publish(ctx, 3, nil)
	require.NoError(t, err)
	c, err := boardtest.Login(ctx, s.URL(), "acme-1", pw, acct.TOTPSecret, clk.Now)
	require.NoError(t, err)
	st, _, err := c.Book(ctx, ls[0].ID, "op-1")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, st)
	_, err = s.InjectBooking(ctx, "acme-1", ls[0].ID)
	require.NoError(t, err)
	before := s.Stats()
	eventsBefore := s.Events(0, 0)
	require.NoError(t, s.Close())

	s = start()
	defer s.Close()
	after := s.Stats()
	require.Equal(t, before.LoadsPublished, after.LoadsPublished)
	require.Equal(t, before.BookingRequests, after.BookingRequests)
	require.Equal(t, before.ConfirmedBookings, after.ConfirmedBookings)
	require.EqualValues(t, 1, after.DuplicateConfirmations)
	require.Equal(t, before.Clients, after.Clients)
	require.Equal(t, len(eventsBefore), len(s.Events(0, 0)))
	require.Equal(t, 3, after.LoadsLive)

	// The used TOTP step survived: the same code is still refused.
	hc := jarClient()
	resp, err := hc.PostForm(s.URL()+"/login", map[string][]string{"username": {"acme-1"}, "password": {pw}})
	require.NoError(t, err)
	resp.Body.Close()
	resp, err = hc.PostForm(s.URL()+"/login/totp", map[string][]string{"code": {boardtest.Code(acct.TOTPSecret, clk.Now())}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "totp_reused", resp.Header.Get("X-Board-Error"))

	clk.Advance(30 * time.Second)
	c, err = boardtest.Login(ctx, s.URL(), "acme-1", pw, acct.TOTPSecret, clk.Now)
	require.NoError(t, err)
	p := bookings(t, c, "")
	require.Len(t, p.Bookings, 2)
	// The idempotency key survived too.
	st, body, err := c.Book(ctx, ls[0].ID, "op-1")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, st)
	require.EqualValues(t, 1, body["booking"].(map[string]any)["id"])
	require.Equal(t, after.ConfirmedBookings, s.Stats().ConfirmedBookings)
	// New loads continue the sequence.
	more, err := s.Publish(ctx, 1, nil)
	require.NoError(t, err)
	require.Equal(t, "LD-000004", more[0].ID)
}

func TestDataDirDefaults(t *testing.T) {
	dir := t.TempDir()
	cfg := board.Defaults()
	cfg.Listen, cfg.Rate, cfg.Data, cfg.DataDir = "127.0.0.1:0", 0, "", dir
	s, err := board.Start(context.Background(), cfg, nil)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.FileExists(t, filepath.Join(dir, "board.sqlite"))
	tok, err := os.ReadFile(filepath.Join(dir, "board-admin-token"))
	require.NoError(t, err)
	require.Contains(t, string(tok), s.AdminToken())
	fi, err := os.Stat(filepath.Join(dir, "board-admin-token"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	// Token file flag and seed accounts.
	tokFile := filepath.Join(dir, "tok")
	require.NoError(t, os.WriteFile(tokFile, []byte("file-token-0123456789abcdef\n"), 0o600))
	seed := filepath.Join(dir, "accounts.json")
	require.NoError(t, os.WriteFile(seed, []byte(`[{"username":"demo-1","password":"demo-password","client":"demo","totp_secret":"JBSWY3DPEHPK3PXPJBSWY3DP"}]`), 0o600))
	cfg.AdminTokenFile, cfg.SeedAccounts, cfg.Data = tokFile, seed, "memory"
	s, err = board.Start(context.Background(), cfg, nil)
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, "file-token-0123456789abcdef", s.AdminToken())
	_, err = boardtest.Login(context.Background(), s.URL(), "demo-1", "demo-password", "JBSWY3DPEHPK3PXPJBSWY3DP", nil)
	require.NoError(t, err)

	require.NoError(t, os.WriteFile(seed, []byte(`{"not":"a list"}`), 0o600))
	cfg.Listen = "127.0.0.1:0"
	_, err = board.Start(context.Background(), cfg, nil)
	require.ErrorContains(t, err, "--seed-accounts")
}

// TestPoissonPublisher drives the publisher on a fake clock: arrivals are
// exponential with mean 1/rate, and the same seed gives the same run.
func TestPoissonPublisher(t *testing.T) {
	run := func(seed int, n int) ([]time.Duration, []*board.Load) {
		clk := clock.NewFake(t0)
		s := boardtest.Start(t, func(c *board.Config) { c.Clock, c.Rate, c.Seed, c.LoadTTL = clk, 4, seed, time.Hour })
		for i := 0; i < n; i++ {
			require.True(t, clk.BlockUntil(1, 5*time.Second))
			sl := clk.Sleeps()
			clk.Advance(sl[len(sl)-1])
			want := int64(i + 1)
			require.Eventually(t, func() bool { return s.Stats().LoadsPublished == want }, 5*time.Second, time.Millisecond)
		}
		require.NoError(t, s.SetRate(0))
		var loads []*board.Load
		for _, e := range s.Events(0, 0) {
			if e.Type == board.EvLoadPublished {
				loads = append(loads, &board.Load{ID: e.LoadID, PublishedAt: e.At})
			}
		}
		return clk.Sleeps()[:n], loads
	}
	const n = 400
	a, la := run(7, n)
	b, _ := run(7, n)
	c, _ := run(8, 20)
	require.Equal(t, a, b, "same seed, same arrivals")
	require.NotEqual(t, a[:20], c)
	var sum time.Duration
	at := t0
	for i, d := range a {
		sum += d
		at = at.Add(d)
		require.True(t, la[i].PublishedAt.Equal(at), "published_at is the arrival time")
	}
	mean := sum / n
	require.InDelta(t, float64(250*time.Millisecond), float64(mean), float64(50*time.Millisecond), "mean inter-arrival 1/rate")
}

// Kill is a crash: a request held in flight gets no answer and is never
// committed, a pending late commit is abandoned, and a board started again
// on the store has exactly what was committed before.
func TestKillDropsWhatIsInFlightAndKeepsWhatWasCommitted(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "board.sqlite")
	start := func(listen string) *board.Server {
		cfg := board.Defaults()
		cfg.Listen, cfg.Rate, cfg.Data, cfg.AdminToken = listen, 0, path, boardtest.AdminToken
		s, err := board.Start(ctx, cfg, nil)
		require.NoError(t, err)
		return s
	}
	s := start("127.0.0.1:0")
	acct, err := s.CreateAccount(ctx, board.AccountSpec{Username: "acme-1", Password: pw, Client: "acme"})
	require.NoError(t, err)
	ls, err := s.Publish(ctx, 3, nil)
	require.NoError(t, err)
	c, err := boardtest.Login(ctx, s.URL(), "acme-1", pw, acct.TOTPSecret, time.Now)
	require.NoError(t, err)
	st, _, err := c.Book(ctx, ls[0].ID, "")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, st)

	// A late commit pending, then a held request in flight.
	ch := s.Chaos()
	ch.LateCommitRate, ch.LateCommitDelay = 1, board.Duration(time.Minute)
	require.NoError(t, s.SetChaos(ch))
	st, _, err = c.Book(ctx, ls[1].ID, "")
	require.NoError(t, err)
	require.Equal(t, http.StatusGatewayTimeout, st)
	ch.LateCommitRate, ch.Hold = 0, board.Duration(time.Minute)
	require.NoError(t, s.SetChaos(ch))
	held := make(chan error, 1)
	go func() { _, _, err := c.Book(ctx, ls[2].ID, ""); held <- err }()
	require.Eventually(t, func() bool { return s.Stats().BookingRequests == 3 }, 10*time.Second, 10*time.Millisecond)
	addr := strings.TrimPrefix(s.URL(), "http://")
	events := len(s.Events(0, 0))

	killed := time.Now()
	require.NoError(t, s.Kill())
	require.Less(t, time.Since(killed), 3*time.Second, "no grace period: a crash does not wait")
	require.Error(t, <-held, "the held request gets no answer")

	s = start(addr)
	defer s.Close()
	after := s.Stats()
	require.EqualValues(t, 1, after.ConfirmedBookings, "only the booking committed before the kill")
	require.Len(t, s.Events(0, 0), events, "every committed event, nothing more")
	require.Equal(t, "http://"+addr, s.URL(), "back on the same address")
}
