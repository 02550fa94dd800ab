package propose_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/proto"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/browser"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/board/boardtest"
	"github.com/fleetwright/fleetwright/modules/cli"
	"github.com/fleetwright/fleetwright/modules/platform/engine"
	"github.com/fleetwright/fleetwright/modules/platform/propose"
	"github.com/fleetwright/fleetwright/modules/platform/spec"
	"github.com/fleetwright/fleetwright/modules/wire"
)

const password = "Orchard-Lantern-Seven-42"

// dialect is one face of the sandbox board: how a person signs in, books
// and opens the bookings there, and the manual edits its draft needs
// before `platform check` passes (docs/ADAPTERS.md lists the same).
type dialect struct {
	name string
	// signIn: the form page, its fields, its submit; then the code's.
	signInURL, user, pass, submit, afterPassword string
	code, codeSubmit, landing                    string
	feedPath                                     string
	// row is the selector of one load's booking control; booked is what
	// the page shows once it is booked.
	row, booked  func(id string) string
	bookingsURL  string
	bookingsPath string
	edits        []edit
}

// edit is one named manual edit of a draft, as a person would make it.
type edit struct {
	name     string
	old, new string
}

var dialects = []dialect{
	{
		name: board.DialectClassic, signInURL: "/login", user: "#username", pass: "#password", submit: "#login-submit", afterPassword: "/login/totp",
		code: "#code", codeSubmit: "#totp-submit", landing: "/loads", feedPath: "/api/loads",
		row:         func(id string) string { return fmt.Sprintf(`[data-load-id=%q] button`, id) },
		booked:      func(id string) string { return fmt.Sprintf(`[data-load-id=%q] .result.booked`, id) },
		bookingsURL: "/api/bookings?after=0&limit=200", bookingsPath: "/api/bookings",
		edits: []edit{
			{"name", "name: sandbox-freight-exchange", "name: sandbox-draft"},
			{"code_reused", "    - name: code\n      one_time_code: true\n",
				"    - name: code\n      one_time_code: true\n      code_reused: {header: {name: X-Board-Error, equals: totp_reused}}\n"},
			{"taken", "result: confirmed, booking_id: {json: booking.id}}\n",
				"result: confirmed, booking_id: {json: booking.id}}\n    - {when: {status: [409], json: {path: status, equals: taken}}, result: taken}\n"},
			{"idempotency header", "  results: # guess: the one answer recorded", "  idempotency_header: Idempotency-Key\n  results: # guess: the one answer recorded"},
			{"idempotency read", "idempotency:\n  honoured: false", "idempotency:\n  read: {request: {url: /api/platform}, path: idempotency_keys}\n  # honoured: false"},
		},
	},
	{
		name: board.DialectHTML, signInURL: "/signin", user: "#user_login", pass: "#user_password", submit: "#signin-submit", afterPassword: "/signin/verify",
		code: "#otp_attempt", codeSubmit: "#otp-submit", landing: "/dashboard", feedPath: "/api/v2/loads",
		row:         func(id string) string { return fmt.Sprintf(`[data-load=%q] button`, id) },
		booked:      func(string) string { return "#confirmation .confirmation-number" },
		bookingsURL: "/api/v2/account/bookings?page[offset]=0&page[limit]=50", bookingsPath: "/api/v2/account/bookings",
		edits: []edit{
			{"name", "name: haulbridge-freight-portal", "name: haulbridge-draft"},
			{"code_reused", "    - name: code\n      one_time_code: true\n",
				"    - name: code\n      one_time_code: true\n      code_reused: {html: {selector: '.flash[data-code]', attr: data-code, equals: otp_used}}\n"},
			{"signed_out", "    - {url_path: /signin}\n", "    - {url_path: /signin}\n    - {json: {path: errors.0.code, equals: not_authenticated}}\n"},
			{"taken", "booking_id: {html: '#confirmation .confirmation-number'}}\n",
				"booking_id: {html: '#confirmation .confirmation-number'}}\n    - {when: {status: [200], html: {selector: '.flash[data-code]', attr: data-code, equals: already_booked}}, result: taken}\n"},
			{"request token", "    url: /loads/{{path .key}}/book\n    form:\n", "    url: /loads/{{path .key}}/book\n    form:\n      request_token: '{{.booking_key}}'\n"},
			{"idempotency read", "idempotency:\n  honoured: false", "idempotency:\n  read: {request: {url: /api/v2/about}, path: meta.request_tokens_honoured}\n  # honoured: false"},
		},
	},
}

func pagePath(p *rod.Page) string {
	info, err := p.Info()
	if err != nil {
		return ""
	}
	u, err := url.Parse(info.URL)
	if err != nil {
		return ""
	}
	return u.Path
}

func typeInto(t *testing.T, p *rod.Page, sel, text string) {
	t.Helper()
	el, err := p.Element(sel)
	require.NoError(t, err, sel)
	require.NoError(t, el.Input(text), sel)
}

func click(t *testing.T, p *rod.Page, sel string) {
	t.Helper()
	el, err := p.Element(sel)
	require.NoError(t, err, sel)
	require.NoError(t, el.Click(proto.InputMouseButtonLeft, 1), sel)
}

// TestProposeFromRecordedSession: a person's session on a real board of
// each dialect, recorded from real Chromium over CDP as a HAR; the
// command drafts a spec from it; with the dialect's manual edits the
// engine's check passes against the same board with another account —
// sign-in, the feed's key and published_at, the bookings walk, one
// booking — and no secret of the session is in the draft, the command's
// output or the log.
func TestProposeFromRecordedSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b, err := browser.Launch(ctx, browser.Options{})
	require.NoError(t, err)
	defer b.Close()
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			s := boardtest.Start(t, func(c *board.Config) { c.Dialect = d.name; c.PollInterval = 150 * time.Millisecond })
			acct, err := s.CreateAccount(ctx, board.AccountSpec{Username: "dispatch-1", Password: password, Client: "acme"})
			require.NoError(t, err)

			// The person's session, recorded.
			p, err := b.Page(ctx)
			require.NoError(t, err)
			defer p.Close()
			p = p.Context(ctx)
			rec := record(t, ctx, p)
			require.NoError(t, p.Navigate(s.URL()+d.signInURL))
			typeInto(t, p, d.user, "dispatch-1")
			typeInto(t, p, d.pass, password)
			click(t, p, d.submit)
			require.Eventually(t, func() bool { return pagePath(p) == d.afterPassword }, 20*time.Second, 50*time.Millisecond)
			code := boardtest.Code(acct.TOTPSecret, time.Now())
			typeInto(t, p, d.code, code)
			click(t, p, d.codeSubmit)
			require.Eventually(t, func() bool { return pagePath(p) == d.landing }, 20*time.Second, 50*time.Millisecond)

			loads, err := s.Publish(ctx, 4, nil)
			require.NoError(t, err)
			polls := rec.answered(d.feedPath)
			require.Eventually(t, func() bool { return rec.answered(d.feedPath) >= polls+4 }, 20*time.Second, 50*time.Millisecond, "a few feed polls")
			_, err = p.Element(d.row(loads[0].ID))
			require.NoError(t, err)
			click(t, p, d.row(loads[0].ID))
			_, err = p.Element(d.booked(loads[0].ID))
			require.NoError(t, err, "the page shows the booking")
			require.NoError(t, p.Navigate(s.URL()+d.bookingsURL))
			require.Eventually(t, func() bool { return rec.answered(d.bookingsPath) >= 1 }, 20*time.Second, 50*time.Millisecond)
			raw := rec.HAR(t)

			dir := t.TempDir()
			harFile := filepath.Join(dir, "session.har")
			require.NoError(t, os.WriteFile(harFile, raw, 0o600))
			secrets := sessionSecrets(t, raw, password, code, acct.TOTPSecret)

			// The command, with the log captured.
			out := filepath.Join(dir, "draft.yaml")
			var logBuf, stdout, stderr bytes.Buffer
			prev := slog.Default()
			slog.SetDefault(slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug})))
			code2 := cli.New(cli.Build{Version: "test"}).Run(ctx, []string{"platform", "propose", "--har", harFile, "--out", out}, strings.NewReader(""), &stdout, &stderr)
			slog.SetDefault(prev)
			require.Equal(t, 0, code2, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
			draft, err := os.ReadFile(out)
			require.NoError(t, err)
			t.Logf("draft (%s):\n%s", d.name, draft)
			for _, sec := range secrets {
				for where, text := range map[string]string{"draft": string(draft), "stdout": stdout.String(), "stderr": stderr.String(), "log": logBuf.String()} {
					// Not NotContains: its failure would print the secret.
					require.False(t, strings.Contains(text, sec), "a secret of the session (%d bytes) is in the %s", len(sec), where)
				}
			}
			require.Contains(t, stderr.String(), "draft written to "+out)
			require.Contains(t, string(draft), "{{.password}}")
			require.Contains(t, string(draft), "{{.code}}")
			require.Contains(t, string(draft), "# guess:")

			// The draft as it is passes the check (no booking); with the
			// manual edits it passes again, booking one load.
			ids := map[string]bool{}
			for _, l := range loads {
				ids[l.ID] = true
			}
			checkDraft(t, ctx, s, string(draft), "check-1", "", ids, loads[0].ID)
			text := string(draft)
			for _, e := range d.edits {
				require.Contains(t, text, e.old, "edit %q", e.name)
				text = strings.Replace(text, e.old, e.new, 1)
			}
			r := checkDraft(t, ctx, s, text, "check-2", loads[1].ID, ids, loads[0].ID)
			require.NotNil(t, r.Book)
			require.True(t, r.Book.OK, r.Book.Error)
			require.Equal(t, string(wire.ResultConfirmed), r.Book.Result)
			require.NotEmpty(t, r.Book.BookingID)
			require.Len(t, s.Bookings("acme"), 2)
		})
	}
}

// checkDraft runs the engine's check of a draft against the board with a
// new account, and asserts what it extracted: sign-in, the feed's jobs
// with key and published_at, the bookings walk complete with the
// person's booking.
func checkDraft(t *testing.T, ctx context.Context, s *board.Server, text, user, book string, ids map[string]bool, booked string) engine.CheckReport {
	t.Helper()
	sp, err := spec.Parse("draft.yaml", []byte(text))
	require.NoError(t, err)
	acct, err := s.CreateAccount(ctx, board.AccountSpec{Username: user, Password: password, Client: "acme"})
	require.NoError(t, err)
	ad, err := engine.New(sp, s.URL())
	require.NoError(t, err)
	r := ad.Check(ctx, engine.CheckOptions{
		Credentials: wire.Credentials{Username: user, Password: wire.NewSecret(password), TOTPSecret: wire.NewSecret(acct.TOTPSecret)},
		Book:        book,
	})
	var report bytes.Buffer
	cli.PrintCheck(&report, r)
	t.Logf("check:\n%s", report.String())
	require.True(t, r.SignIn.OK, r.SignIn.Error)
	require.True(t, r.Feed.OK, r.Feed.Error)
	require.GreaterOrEqual(t, r.Feed.Count, 3, "the live loads")
	require.NotEmpty(t, r.Feed.Traced)
	for _, it := range r.Feed.Traced {
		f := traced(it)
		require.True(t, ids[f["key"]], "key %q is a published load's", f["key"])
		require.NotEmpty(t, f["published_at"])
	}
	require.True(t, r.Bookings.OK, r.Bookings.Error)
	require.True(t, r.Bookings.Complete)
	require.GreaterOrEqual(t, r.Bookings.Count, 1)
	require.Equal(t, "acme", r.Bookings.Client)
	bf := traced(r.Bookings.Traced[0])
	require.Equal(t, booked, bf["key"], "the person's booking")
	require.NotEmpty(t, bf["booking_id"])
	return r
}

func traced(it engine.ItemTrace) map[string]string {
	out := map[string]string{}
	for _, f := range it.Fields {
		out[f.Field] = f.Value
	}
	return out
}

var (
	metaCSRF   = regexp.MustCompile(`name="csrf-token" content="([^"]+)"`)
	hiddenCSRF = regexp.MustCompile(`name="(?:authenticity_token|csrf_token)" value="([^"]+)"`)
)

// sessionSecrets are the secrets the HAR holds — the password, the code,
// every cookie, every CSRF token — each checked to be there, so that
// their absence from the draft means something.
func sessionSecrets(t *testing.T, raw []byte, fixed ...string) []string {
	t.Helper()
	h, err := propose.ReadHAR(raw)
	require.NoError(t, err)
	set := map[string]bool{}
	for _, e := range h.Log.Entries {
		for _, x := range e.Response.Headers {
			if strings.EqualFold(x.Name, "Set-Cookie") {
				for _, line := range strings.Split(x.Value, "\n") {
					if _, v, ok := strings.Cut(strings.SplitN(line, ";", 2)[0], "="); ok && v != "" {
						set[v] = true
					}
				}
			}
		}
		for _, c := range e.Request.Cookies {
			set[c.Value] = true
		}
		for _, x := range e.Request.Headers {
			if strings.EqualFold(x.Name, "X-CSRF-Token") {
				set[x.Value] = true
			}
		}
		for _, m := range metaCSRF.FindAllStringSubmatch(e.Response.Content.Text, -1) {
			set[m[1]] = true
		}
		for _, m := range hiddenCSRF.FindAllStringSubmatch(e.Response.Content.Text, -1) {
			set[m[1]] = true
		}
	}
	require.GreaterOrEqual(t, len(set), 3, "the session's cookies and CSRF tokens are in the HAR")
	var out []string
	for v := range set {
		out = append(out, v)
	}
	for _, v := range fixed {
		if v != fixed[2] { // the TOTP seed is never sent; the others are in the HAR
			require.Contains(t, string(raw), v)
		}
		out = append(out, v)
	}
	return out
}
