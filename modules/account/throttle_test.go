package account

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
)

// site is the account module's routes over a test database, on a real
// loopback HTTP server, with a clock the test moves.
type site struct {
	d     *testenv.Database
	s     *Service
	srv   *httptest.Server
	clock *clock.Fake
}

func newSite(t *testing.T) *site {
	d := testenv.DB(t)
	fake := clock.NewFake(time.Now())
	s := New(Deps{DB: d.App, Shell: auth.NewShell(), Vault: testenv.Vault(t), Clock: fake, Log: testenv.Logger(t)})
	r := chi.NewRouter()
	r.Use(s.Middleware)
	s.Mount(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return &site{d: d, s: s, srv: srv, clock: fake}
}

func (st *site) user(t *testing.T, email, password string) User {
	u, err := CreateUser(context.Background(), st.d.App, NewUser{Email: email, Role: auth.Operator, Password: password}, audit.Entry{Actor: "test"})
	require.NoError(t, err)
	return u
}

func client() *http.Client { return clientFrom("127.0.0.1") }

// clientFrom connects from another loopback address (all of 127/8 is
// loopback on Linux), so a test can be several addresses at once.
func clientFrom(ip string) *http.Client {
	jar, _ := cookiejar.New(nil)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Jar: jar, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func post(t *testing.T, cl *http.Client, u string, form url.Values) *http.Response {
	t.Helper()
	res, err := cl.PostForm(u, form)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res
}

func (st *site) auditCount(t *testing.T, action string) int {
	var n int
	require.NoError(t, audit.InSystem(context.Background(), st.d.App, func(tx pgx.Tx) error {
		return tx.QueryRow(context.Background(), `SELECT count(*) FROM audit_log WHERE action = $1`, action).Scan(&n)
	}))
	return n
}

// parallel sends n requests at once and returns their statuses and
// Retry-After headers.
func parallel(t *testing.T, n int, send func() *http.Response) (statuses map[int]int, retry []string) {
	statuses = map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			res := send()
			mu.Lock()
			defer mu.Unlock()
			statuses[res.StatusCode]++
			if res.StatusCode == http.StatusTooManyRequests {
				retry = append(retry, res.Header.Get("Retry-After"))
			}
		})
	}
	close(start)
	wg.Wait()
	return statuses, retry
}

func TestFiftyParallelPasswordGuessesAreEvaluatedAtMostFiveTimes(t *testing.T) {
	st := newSite(t)
	st.user(t, "ops@fleet.test", "Quiet-Harbour-Lantern-42")
	statuses, retry := parallel(t, 50, func() *http.Response {
		return post(t, client(), st.srv.URL+"/signin", url.Values{"email": {"ops@fleet.test"}, "password": {"Wrong-Guess-Kettle-77"}})
	})
	require.Equal(t, map[int]int{http.StatusUnauthorized: 5, http.StatusTooManyRequests: 45}, statuses)
	for _, ra := range retry {
		n, err := strconv.Atoi(ra)
		require.NoError(t, err, "Retry-After %q", ra)
		require.GreaterOrEqual(t, n, 1)
	}
	require.Equal(t, 5, st.auditCount(t, "signin.failed"), "five evaluated")
	require.Equal(t, 45, st.auditCount(t, "signin.throttled"))
	require.LessOrEqual(t, hashMaxSeen.Load(), int64(cap(hashSlots)), "argon2id runs bounded")
}

func TestFiftyParallelCodesAreEvaluatedAtMostFiveTimes(t *testing.T) {
	st := newSite(t)
	st.user(t, "ops@fleet.test", "Quiet-Harbour-Lantern-42")
	cl := client()
	res := post(t, cl, st.srv.URL+"/signin", url.Values{"email": {"ops@fleet.test"}, "password": {"Quiet-Harbour-Lantern-42"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	statuses, retry := parallel(t, 50, func() *http.Response {
		return post(t, cl, st.srv.URL+auth.MFAPath, url.Values{"code": {"000000"}})
	})
	require.Equal(t, map[int]int{http.StatusUnauthorized: 5, http.StatusTooManyRequests: 45}, statuses)
	require.Len(t, retry, 45)
	require.NotContains(t, retry, "")
}

func TestGuessDelayDoublesUpToFifteenMinutesAndTheRightPasswordWorksAfterIt(t *testing.T) {
	st := newSite(t)
	st.user(t, "ops@fleet.test", "Quiet-Harbour-Lantern-42")
	// Each attempt from another address: this is the account rule alone.
	n := 0
	try := func(password string) *http.Response {
		n++
		return post(t, clientFrom(fmt.Sprintf("127.0.%d.%d", n/200, 2+n%200)), st.srv.URL+"/signin",
			url.Values{"email": {"ops@fleet.test"}, "password": {password}})
	}
	for range AccountFree {
		require.Equal(t, http.StatusUnauthorized, try("Wrong-Guess-Kettle-77").StatusCode)
	}
	// Then each attempt waits: 1 s, 2 s, 4 s, … up to 15 minutes. Even the
	// right password waits its turn, and waiting is all it takes.
	var waits []int
	for range 13 {
		res := try("Quiet-Harbour-Lantern-42")
		require.Equal(t, http.StatusTooManyRequests, res.StatusCode)
		wait, err := strconv.Atoi(res.Header.Get("Retry-After"))
		require.NoError(t, err)
		waits = append(waits, wait)
		st.clock.Advance(time.Duration(wait)*time.Second - time.Millisecond)
		require.Equal(t, http.StatusTooManyRequests, try("Wrong-Guess-Kettle-77").StatusCode, "not a moment early")
		st.clock.Advance(time.Millisecond)
		require.Equal(t, http.StatusUnauthorized, try("Wrong-Guess-Kettle-77").StatusCode)
	}
	require.Equal(t, []int{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 900, 900, 900}, waits)
	st.clock.Advance(15 * time.Minute)
	res := try("Quiet-Harbour-Lantern-42")
	require.Equal(t, http.StatusSeeOther, res.StatusCode, "the right password after the delay works")
	// A success starts the count afresh.
	for range AccountFree {
		require.Equal(t, http.StatusUnauthorized, try("Wrong-Guess-Kettle-77").StatusCode)
	}
}

func TestAnAddressGetsTwentyAttemptsPerMinute(t *testing.T) {
	st := newSite(t)
	for i := range AddressLimit {
		res := post(t, client(), st.srv.URL+"/signin", url.Values{"email": {"nobody" + strconv.Itoa(i) + "@fleet.test"}, "password": {"Wrong-Guess-Kettle-77"}})
		require.Equal(t, http.StatusUnauthorized, res.StatusCode, "attempt %d", i+1)
	}
	res := post(t, client(), st.srv.URL+"/signin", url.Values{"email": {"someone-else@fleet.test"}, "password": {"Wrong-Guess-Kettle-77"}})
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode)
	wait, err := strconv.Atoi(res.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.True(t, wait >= 1 && wait <= 60, "%d", wait)
	st.clock.Advance(time.Minute)
	res = post(t, client(), st.srv.URL+"/signin", url.Values{"email": {"someone-else@fleet.test"}, "password": {"Wrong-Guess-Kettle-77"}})
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
}

func TestArgon2idRunsAreBounded(t *testing.T) {
	require.GreaterOrEqual(t, cap(hashSlots), 1)
	h, err := hashPassword("Quiet-Harbour-Lantern-42")
	require.NoError(t, err)
	hashMaxSeen.Store(0)
	var wg sync.WaitGroup
	for range 2 * cap(hashSlots) {
		wg.Go(func() {
			ok, err := checkPassword(context.Background(), "Quiet-Harbour-Lantern-42", h)
			require.NoError(t, err)
			require.True(t, ok)
		})
	}
	wg.Wait()
	require.LessOrEqual(t, hashMaxSeen.Load(), int64(cap(hashSlots)))
	// A request that cannot get a slot in time is told so, not queued forever.
	for range cap(hashSlots) {
		hashSlots <- struct{}{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = checkPassword(ctx, "Quiet-Harbour-Lantern-42", h)
	require.ErrorIs(t, err, errHashBusy)
	for range cap(hashSlots) {
		<-hashSlots
	}
}
