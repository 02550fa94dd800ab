package notify_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/egress"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/factory"
	"github.com/fleetwright/fleetwright/modules/notify"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// receiver is a webhook endpoint on a real loopback socket.
type receiver struct {
	mu     sync.Mutex
	got    []notify.Message
	sigs   []string
	bodies [][]byte
	fail   int // answer 500 this many times first
	srv    *httptest.Server
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.fail > 0 {
			r.fail--
			http.Error(w, "busy", http.StatusInternalServerError)
			return
		}
		var m notify.Message
		if err := json.Unmarshal(b, &m); err != nil || req.Header.Get("X-Fleetwright-Event") != strconv.FormatInt(m.EventID, 10) {
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		r.got, r.sigs, r.bodies = append(r.got, m), append(r.sigs, req.Header.Get("X-Fleetwright-Signature")), append(r.bodies, b)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) messages() []notify.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]notify.Message(nil), r.got...)
}

// guardFor admits the loopback receiver's port only, as an admin's
// allowlist would; everything else stays refused.
func guardFor(t *testing.T, srvURL string, allowLoopback bool) *http.Client {
	t.Helper()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srvURL, "http://"))
	p, _ := strconv.Atoi(port)
	pol := egress.Policy{Ports: []int{p}}
	if allowLoopback {
		pol.Allow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	}
	g, err := egress.New(egress.Config{Policy: pol})
	require.NoError(t, err)
	return g.Client(egress.ClientOptions{Timeout: 5 * time.Second, MaxRedirects: -1})
}

type bundle struct {
	d    *testenv.Database
	clk  *clock.Fake
	logs *testenv.SyncBuffer
	v    *vault.Vault
}

func setup(t *testing.T) *bundle {
	v := testenv.Vault(t)
	return &bundle{d: testenv.DB(t), clk: clock.NewFake(time.Now()), logs: &testenv.SyncBuffer{}, v: v}
}

func (b *bundle) notifier(client *http.Client, smtpAddr string) *notify.Notifier {
	return notify.New(b.d.App, b.v, notify.Config{Clock: b.clk, Log: slog.New(slog.NewTextHandler(b.logs, nil)), HTTP: client,
		ConsoleURL: "https://panel.example.com", SMTP: notify.SMTP{Addr: smtpAddr, From: "fleet@example.com"}})
}

func (b *bundle) create(t *testing.T, n *notify.Notifier, c notify.Channel) string {
	t.Helper()
	var secret string
	require.NoError(t, pgx.BeginFunc(context.Background(), b.d.App, func(tx pgx.Tx) error {
		var err error
		secret, err = n.Create(context.Background(), tx, c, "admin@example.com")
		return err
	}))
	return secret
}

func TestWebhookIsSignedDeduplicatedAndToldOfTheResolve(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	r := newReceiver(t)
	n := b.notifier(guardFor(t, r.srv.URL, true), "")
	secret := b.create(t, n, notify.Channel{Name: "ops-hook", Kind: "webhook", Target: r.srv.URL + "/hook?token=abc"})
	require.True(t, strings.HasPrefix(secret, "whsec_"))

	hung := alarm.Alarm{Kind: "worker.hung", Key: "a1/watcher-1", Severity: alarm.Critical,
		Summary: "watcher-1 on agent-1 is hung", Link: "/t/acme/fleet"}
	_, err := alarm.Raise(ctx, b.d.App, hung)
	require.NoError(t, err)
	_, err = alarm.Raise(ctx, b.d.App, alarm.Alarm{Kind: "schedule.failed", Key: "s1", Severity: alarm.Info, Summary: "below the bar"})
	require.NoError(t, err)
	require.NoError(t, n.Deliver(ctx))
	got := r.messages()
	require.Len(t, got, 1, "one message; the info alarm is below the channel's warning bar")
	require.Equal(t, "raised", got[0].Event)
	require.Equal(t, "worker.hung", got[0].Alarm.Kind)
	require.Equal(t, "https://panel.example.com/t/acme/fleet", got[0].Alarm.Link)
	require.NoError(t, notify.Verify(secret, r.sigs[0], r.bodies[0], time.Now(), 5*time.Minute))
	require.Error(t, notify.Verify("whsec_wrong", r.sigs[0], r.bodies[0], time.Now(), 5*time.Minute))
	require.Error(t, notify.Verify(secret, r.sigs[0], append([]byte(" "), r.bodies[0]...), time.Now(), 5*time.Minute))
	require.Error(t, notify.Verify(secret, r.sigs[0], r.bodies[0], time.Now().Add(time.Hour), 5*time.Minute), "an old signature is a replay")

	// Seen again and again: no new message. Delivered once: not repeated.
	for range 3 {
		_, err = alarm.Raise(ctx, b.d.App, hung)
		require.NoError(t, err)
		require.NoError(t, n.Deliver(ctx))
	}
	require.Len(t, r.messages(), 1)
	// Its end is a message of its own.
	_, err = alarm.Resolve(ctx, b.d.App, "", "worker.hung", "a1/watcher-1", "health sweep")
	require.NoError(t, err)
	require.NoError(t, n.Deliver(ctx))
	got = r.messages()
	require.Len(t, got, 2)
	require.Equal(t, "resolved", got[1].Event)
	require.Equal(t, "health sweep", got[1].Alarm.ResolvedBy)
	require.Equal(t, got[0].Alarm.ID, got[1].Alarm.ID)
	require.NotContains(t, b.logs.String(), secret, "the signing secret reaches no log")
	require.NotContains(t, b.logs.String(), "token=abc", "the webhook URL's query reaches no log")
}

func TestWebhookRetriesWithBackoffAndTheGuardRefusesPrivateTargets(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	r := newReceiver(t)
	r.fail = 1
	// Without an allowlist the guard refuses the loopback receiver: the
	// panel's own network is not reachable through a webhook.
	refused := b.notifier(guardFor(t, r.srv.URL, false), "")
	b.create(t, refused, notify.Channel{Name: "internal", Kind: "webhook", Target: r.srv.URL + "/hook"})
	_, err := alarm.Raise(ctx, b.d.App, alarm.Alarm{Kind: "cell.failing", Key: "eu", Severity: alarm.Critical, Summary: "cell eu failing"})
	require.NoError(t, err)
	require.NoError(t, refused.Deliver(ctx))
	require.Empty(t, r.messages())
	require.Contains(t, b.logs.String(), "refused")

	// Allowed, the receiver fails once: the retry waits for its backoff.
	n := b.notifier(guardFor(t, r.srv.URL, true), "")
	require.NoError(t, n.Deliver(ctx)) // too soon after the refused try
	require.Empty(t, r.messages())
	b.clk.Advance(11 * time.Second)
	require.NoError(t, n.Deliver(ctx)) // 500
	require.Empty(t, r.messages())
	require.NoError(t, n.Deliver(ctx)) // backoff 20 s not over
	b.clk.Advance(21 * time.Second)
	require.NoError(t, n.Deliver(ctx))
	require.Len(t, r.messages(), 1)
}

// smtpServer speaks enough SMTP over a real socket to take mail.
type smtpServer struct {
	mu   sync.Mutex
	mail []string
	addr string
}

func newSMTP(t *testing.T) *smtpServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	s := &smtpServer{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return s
}

func (s *smtpServer) serve(c net.Conn) {
	defer c.Close()
	rd := bufio.NewReader(c)
	say := func(l string) { _, _ = c.Write([]byte(l + "\r\n")) }
	say("220 test ESMTP")
	var data strings.Builder
	inData := false
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return
		}
		if inData {
			if line == ".\r\n" {
				inData = false
				s.mu.Lock()
				s.mail = append(s.mail, data.String())
				s.mu.Unlock()
				data.Reset()
				say("250 queued")
				continue
			}
			data.WriteString(line)
			continue
		}
		cmd := strings.ToUpper(strings.TrimSpace(line))
		switch {
		case strings.HasPrefix(cmd, "EHLO"), strings.HasPrefix(cmd, "HELO"):
			say("250 test")
		case strings.HasPrefix(cmd, "MAIL"), strings.HasPrefix(cmd, "RCPT"):
			say("250 ok")
		case cmd == "DATA":
			inData = true
			say("354 go on")
		case cmd == "QUIT":
			say("221 bye")
			return
		default:
			say("502 no")
		}
	}
}

func (s *smtpServer) messages() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.mail...)
}

func TestEmailIsSentOnRaiseAndResolve(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	srv := newSMTP(t)
	n := b.notifier(nil, srv.addr)
	require.Empty(t, b.create(t, n, notify.Channel{Name: "ops-mail", Kind: "email", Target: "ops@example.com", MinSeverity: alarm.Critical}))
	var tenant string
	tenant = factory.Tenant(t, b.d, "acme", "Acme")
	_, err := alarm.Raise(ctx, b.d.App, alarm.Alarm{Kind: "worker.crash_loop", Key: "a1/actor-1", Tenant: tenant, Severity: alarm.Critical,
		Summary: "actor-1 on agent-1: 3 restarts within 15m0s (crash loop)", Link: "/t/acme/fleet"})
	require.NoError(t, err)
	require.NoError(t, n.Deliver(ctx))
	_, err = alarm.Resolve(ctx, b.d.App, tenant, "worker.crash_loop", "a1/actor-1", "health sweep")
	require.NoError(t, err)
	require.NoError(t, n.Deliver(ctx))
	mail := srv.messages()
	require.Len(t, mail, 2)
	require.Contains(t, mail[0], "Subject: [Fleetwright critical] actor-1 on agent-1: 3 restarts within 15m0s (crash loop)")
	require.Contains(t, mail[0], "Tenant: acme")
	require.Contains(t, mail[0], "Console: https://panel.example.com/t/acme/fleet")
	require.Contains(t, mail[1], "Subject: [Fleetwright resolved]")
	require.Contains(t, mail[1], "Resolved by: health sweep")
}

func TestBadChannelsAreRefusedClearly(t *testing.T) {
	b := setup(t)
	n := b.notifier(nil, "")
	for _, c := range []struct {
		ch   notify.Channel
		want string
	}{
		{notify.Channel{Name: "Bad Name", Kind: "webhook", Target: "https://x.example"}, "name:"},
		{notify.Channel{Name: "x", Kind: "pager", Target: "https://x.example"}, "kind:"},
		{notify.Channel{Name: "x", Kind: "webhook", Target: "ftp://x.example"}, "webhook URL"},
		{notify.Channel{Name: "x", Kind: "webhook", Target: "https://u:p@x.example"}, "no credentials"},
		{notify.Channel{Name: "x", Kind: "email", Target: "not an address"}, "e-mail"},
		{notify.Channel{Name: "x", Kind: "email", Target: "ops@example.com"}, "no mail server"},
	} {
		err := pgx.BeginFunc(context.Background(), b.d.App, func(tx pgx.Tx) error {
			_, err := n.Create(context.Background(), tx, c.ch, "t")
			return err
		})
		require.ErrorContains(t, err, c.want)
	}
}

// TestWebhookTokensReachNoLogAndNoStoredError: a receiver's token in the
// URL's path and query never appears in the panel's log or in
// notify_deliveries.last_error, whichever way the delivery fails — the
// guard's refusal, a dead port (the wrapped url.Error carries the URL) or
// an error status.
func TestWebhookTokensReachNoLogAndNoStoredError(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	const pathToken, queryToken = "T0kenInThePath7731", "S3cretInTheQuery9915"
	r := newReceiver(t)
	r.fail = 100
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadURL := "http://" + dead.Addr().String()
	require.NoError(t, dead.Close())
	hook := "/hooks/" + pathToken + "/fleet?token=" + queryToken + "&x=1"

	refused := b.notifier(guardFor(t, r.srv.URL, false), "")
	b.create(t, refused, notify.Channel{Name: "refused", Kind: "webhook", Target: r.srv.URL + hook})
	_, err = alarm.Raise(ctx, b.d.App, alarm.Alarm{Kind: "cell.failing", Key: "eu", Severity: alarm.Critical, Summary: "cell eu failing"})
	require.NoError(t, err)
	require.NoError(t, refused.Deliver(ctx))
	require.Contains(t, b.logs.String(), "refused")

	// The dead port and the failing receiver, both admitted by the guard.
	_, deadPort, _ := net.SplitHostPort(strings.TrimPrefix(deadURL, "http://"))
	p, _ := strconv.Atoi(deadPort)
	_, rPort, _ := net.SplitHostPort(strings.TrimPrefix(r.srv.URL, "http://"))
	q, _ := strconv.Atoi(rPort)
	g, err := egress.New(egress.Config{Policy: egress.Policy{Ports: []int{p, q}, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
	require.NoError(t, err)
	n := b.notifier(g.Client(egress.ClientOptions{Timeout: 5 * time.Second, MaxRedirects: -1}), "")
	b.clk.Advance(time.Second) // the channels exist before the next alarm
	b.create(t, n, notify.Channel{Name: "dead", Kind: "webhook", Target: deadURL + hook})
	b.create(t, n, notify.Channel{Name: "failing", Kind: "webhook", Target: r.srv.URL + hook})
	_, err = alarm.Raise(ctx, b.d.App, alarm.Alarm{Kind: "cell.failing", Key: "us", Severity: alarm.Critical, Summary: "cell us failing"})
	require.NoError(t, err)
	require.NoError(t, n.Deliver(ctx))

	logs := b.logs.String()
	require.Contains(t, logs, "channel=dead")
	require.Contains(t, logs, "channel=failing")
	var stored []string
	require.NoError(t, db.InTenant(ctx, b.d.App, alarm.System, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT last_error FROM notify_deliveries WHERE last_error IS NOT NULL`)
		if err != nil {
			return err
		}
		stored, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}))
	all := strings.Join(stored, "\n")
	require.Contains(t, all, "refused", "the guard's refusal is recorded")
	require.Contains(t, all, "connection refused", "the dead port is recorded")
	for _, s := range append(stored, logs) {
		require.NotContains(t, s, pathToken)
		require.NotContains(t, s, queryToken)
		require.NotContains(t, s, "token=")
	}
	require.Contains(t, all, "500", "the error status is recorded")
}
