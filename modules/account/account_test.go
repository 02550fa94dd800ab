package account

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pquerna/otp/totp"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/app/server"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestPasswordRules(t *testing.T) {
	for pw, bad := range map[string]bool{
		"short1!": true, "password123": true, "Qwerty123": true, "Summer2024": true, "ops.person-secret-x": true,
		"correct horse battery": false, "Quiet-Harbour-Lantern-42": false,
	} {
		err := CheckPasswordRules(pw, "ops.person@fleet.test")
		require.Equal(t, bad, err != nil, "%q: %v", pw, err)
		if err != nil {
			require.NotContains(t, err.Error(), pw, "the message never repeats the password")
		}
	}
	require.Greater(t, len(common()), 5000)
	h, err := hashPassword("Quiet-Harbour-Lantern-42")
	require.NoError(t, err)
	require.Contains(t, h, "$argon2id$v=19$m=19456,t=2,p=1$")
	ok, err := checkPassword(context.Background(), "Quiet-Harbour-Lantern-42", h)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = checkPassword(context.Background(), "Quiet-Harbour-Lantern-43", h)
	require.NoError(t, err)
	require.False(t, ok)
}

func TestTOTPAcceptsOneStepOfSkewEitherWay(t *testing.T) {
	k, err := newTOTPKey("Fleetwright", "a@b.c")
	require.NoError(t, err)
	now := time.Unix(1_900_000_000, 0)
	step := now.Unix() / 30
	for d, ok := range map[int64]bool{-2: false, -1: true, 0: true, 1: true, 2: false} {
		code, err := totp.GenerateCode(k.Secret(), now.Add(time.Duration(d)*30*time.Second))
		require.NoError(t, err)
		got := matchStep(k.Secret(), code, now)
		if ok {
			require.Equal(t, step+d, got, "skew %d", d)
		} else {
			require.Zero(t, got, "skew %d", d)
		}
	}
	require.Zero(t, matchStep(k.Secret(), "12345", now))
}

func TestSessionsEndWhenIdleOrTooOld(t *testing.T) {
	ctx := context.Background()
	d := testenv.DB(t)
	fake := clock.NewFake(time.Now())
	s := New(Deps{DB: d.App, Shell: auth.NewShell(), Vault: testenv.Vault(t), Clock: fake, Config: Config{SessionIdle: 30 * time.Minute, SessionMax: 2 * time.Hour}})
	u, err := CreateUser(ctx, d.App, NewUser{Email: "a@fleet.test", Role: auth.Viewer, Password: "Quiet-Harbour-Lantern-42"}, audit.Entry{Actor: "t"})
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
	start := func() string {
		var tok string
		require.NoError(t, pgx.BeginFunc(ctx, d.App, func(tx pgx.Tx) error {
			tok, _, err = s.startSession(ctx, tx, u.ID, true, "", req)
			return err
		}))
		return tok
	}
	tok := start()
	// Used every 20 minutes, it lives until the absolute limit.
	for range 5 {
		fake.Advance(20 * time.Minute)
		se, err := s.lookup(ctx, tok, true)
		require.NoError(t, err)
		require.NotNil(t, se)
	}
	fake.Advance(20 * time.Minute) // 2h since sign-in
	se, err := s.lookup(ctx, tok, true)
	require.NoError(t, err)
	require.Nil(t, se, "absolute timeout")

	tok = start()
	fake.Advance(31 * time.Minute)
	se, err = s.lookup(ctx, tok, true)
	require.NoError(t, err)
	require.Nil(t, se, "idle timeout")
	fake.Advance(-31 * time.Minute)
	se, err = s.lookup(ctx, tok, true)
	require.NoError(t, err)
	require.Nil(t, se, "an ended session stays ended")
}

func TestCookieTransport(t *testing.T) {
	caddy, err := server.ParseTrustedProxies("127.0.0.1,::1")
	require.NoError(t, err)
	for _, c := range []struct {
		remote, host, proto string
		tls, secure, dev    bool
		trusted             []netip.Prefix
	}{
		{"127.0.0.1:5000", "127.0.0.1:8080", "", false, false, true, nil},
		{"127.0.0.1:5000", "localhost:8080", "", false, false, true, caddy},
		{"127.0.0.1:5000", "panel.example.com", "https", false, true, false, caddy}, // Caddy on this host
		{"127.0.0.1:5000", "panel.example.com", "", false, false, false, caddy},
		{"10.0.0.5:5000", "127.0.0.1:8080", "https", false, false, false, caddy}, // a remote peer cannot claim TLS
		{"10.0.0.5:5000", "panel.example.com", "", true, true, false, caddy},
		// Any local process connects from loopback: without
		// --trusted-proxies its X-Forwarded-Proto is not believed.
		{"127.0.0.1:5000", "panel.example.com", "https", false, false, false, nil},
	} {
		r := httptest.NewRequest(http.MethodGet, "http://"+c.host+"/", nil)
		r.RemoteAddr, r.Host = c.remote, c.host
		if c.proto != "" {
			r.Header.Set("X-Forwarded-Proto", c.proto)
		}
		if c.tls {
			r.TLS = &tlsState
		}
		server.RealIP(c.trusted)(http.HandlerFunc(func(_ http.ResponseWriter, req *http.Request) { r = req })).ServeHTTP(httptest.NewRecorder(), r)
		secure, dev := transport(r)
		require.Equal(t, c.secure, secure, "%+v", c)
		require.Equal(t, c.dev, dev, "%+v", c)
		w := httptest.NewRecorder()
		err := setCookie(w, r, "tok", time.Hour)
		if !secure && !dev {
			require.ErrorIs(t, err, errInsecure)
			continue
		}
		ck := w.Result().Cookies()[0]
		require.True(t, ck.HttpOnly)
		require.Equal(t, http.SameSiteLaxMode, ck.SameSite)
		if secure {
			require.Equal(t, CookieName, ck.Name)
			require.True(t, ck.Secure)
		} else {
			require.Equal(t, DevCookieName, ck.Name)
		}
	}
}

// The probe: values sent as session cookies were registered as log
// secrets before being checked, so they blanked out later log lines.
func TestPresentedCookiesAreRegisteredAsSecretsOnlyOnceVerified(t *testing.T) {
	ctx := context.Background()
	d := testenv.DB(t)
	s := New(Deps{DB: d.App, Shell: auth.NewShell(), Vault: testenv.Vault(t), Clock: clock.Real{}})
	u, err := CreateUser(ctx, d.App, NewUser{Email: "cookie@fleet.test", Role: auth.Viewer, Password: "Quiet-Harbour-Lantern-42"}, audit.Entry{Actor: "t"})
	require.NoError(t, err)
	var valid string
	require.NoError(t, pgx.BeginFunc(ctx, d.App, func(tx pgx.Tx) error {
		valid, _, err = s.startSession(ctx, tx, u.ID, true, "", httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil))
		return err
	}))
	var seen *auth.User
	h := s.Middleware(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { seen = auth.UserFrom(r.Context()) }))
	forged := []string{"127.0.0.1", "review.test", "signin.failed", "ops@fleet.test",
		"kq3JxW9vTz2mB7nP4sLf8hYdkq3JxW9vTz2mB7nP4sL"} // well formed, random, but never issued
	for _, v := range forged {
		r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8080/", nil)
		r.RemoteAddr = "127.0.0.1:5000"
		r.AddCookie(&http.Cookie{Name: DevCookieName, Value: v})
		seen = nil
		h.ServeHTTP(httptest.NewRecorder(), r)
		require.Nil(t, seen)
		line := `msg=sign-in ip=127.0.0.1 email=ops@fleet.test action=signin.failed via=review.test cookie-echo=` + v
		require.Equal(t, line, logging.Scrub(line), "a presented cookie must not become a log secret")
	}
	r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8080/", nil)
	r.RemoteAddr = "127.0.0.1:5000"
	r.AddCookie(&http.Cookie{Name: DevCookieName, Value: valid})
	h.ServeHTTP(httptest.NewRecorder(), r)
	require.NotNil(t, seen)
	require.Equal(t, "t="+logging.Redacted, logging.Scrub("t="+valid), "an issued, verified token is a secret")
}

// Item 11 of issue 12: a console tab left open polls every few seconds; the
// polling must not keep the session alive past its idle timeout.
func TestPollingDoesNotKeepASessionAlive(t *testing.T) {
	ctx := context.Background()
	d := testenv.DB(t)
	fake := clock.NewFake(time.Now())
	s := New(Deps{DB: d.App, Shell: auth.NewShell(), Vault: testenv.Vault(t), Clock: fake, Config: Config{SessionIdle: 30 * time.Minute, SessionMax: 12 * time.Hour}})
	u, err := CreateUser(ctx, d.App, NewUser{Email: "poll@fleet.test", Role: auth.Viewer, Password: "Quiet-Harbour-Lantern-42"}, audit.Entry{Actor: "t"})
	require.NoError(t, err)
	var tok string
	require.NoError(t, pgx.BeginFunc(ctx, d.App, func(tx pgx.Tx) error {
		tok, _, err = s.startSession(ctx, tx, u.ID, true, "", httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil))
		return err
	}))
	signedIn := func(method string, htmx bool) bool {
		var seen *auth.User
		h := s.Middleware(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { seen = auth.UserFrom(r.Context()) }))
		r := httptest.NewRequest(method, "http://127.0.0.1:8080/t/acme/fleet/rows", nil)
		r.RemoteAddr = "127.0.0.1:5000"
		r.AddCookie(&http.Cookie{Name: DevCookieName, Value: tok})
		if htmx {
			r.Header.Set("HX-Request", "true")
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
		return seen != nil
	}
	// A real click keeps it alive.
	fake.Advance(20 * time.Minute)
	require.True(t, signedIn(http.MethodGet, false))
	// Then only polling, every two seconds' worth of minutes: it ends 30
	// minutes after the click all the same.
	for range 14 {
		fake.Advance(2 * time.Minute)
		require.True(t, signedIn(http.MethodGet, true))
	}
	fake.Advance(2*time.Minute + time.Second)
	require.False(t, signedIn(http.MethodGet, true), "30 minutes without the user: ended")
	require.False(t, signedIn(http.MethodGet, false), "and it stays ended")
	// An htmx POST is the user acting: it counts.
	require.NoError(t, pgx.BeginFunc(ctx, d.App, func(tx pgx.Tx) error {
		tok, _, err = s.startSession(ctx, tx, u.ID, true, "", httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil))
		return err
	}))
	fake.Advance(20 * time.Minute)
	require.True(t, signedIn(http.MethodPost, true))
	fake.Advance(20 * time.Minute)
	require.True(t, signedIn(http.MethodGet, false))
}
