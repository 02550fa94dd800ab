package panel_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-rod/rod/lib/proto"
	"github.com/pquerna/otp/totp"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/browser"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
)

// TestBrowserSignInEnrolSignOutAndReplay drives real headless Chromium
// through the whole first-day flow of an admin.
func TestBrowserSignInEnrolSignOutAndReplay(t *testing.T) {
	c := paneltest.New(t)
	const email, password = "first.admin@fleet.test", "Quiet-Harbour-Lantern-42"
	c.User(t, email, auth.Admin, password)
	c.Tenant(t, "acme")

	// One deadline for the whole flow, generous for a loaded machine; each
	// step has its own below, so a slow step elsewhere does not eat its time.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b, err := browser.Launch(ctx, browser.Options{Width: 1280, Height: 860})
	require.NoError(t, err)
	defer b.Close()
	base, err := b.Page(ctx)
	require.NoError(t, err)
	// p is re-made at each step so every step gets its own 30 s: a page's
	// Timeout is one deadline from the moment it is set, not per call.
	p := base.Timeout(30 * time.Second)
	step := func() { p = base.Timeout(30 * time.Second) }
	shots := os.Getenv("FLEET_SCREENSHOTS") // a directory to save screenshots in, for people
	shot := func(name string) {
		if shots == "" {
			return
		}
		data, err := p.Screenshot(true, &proto.PageCaptureScreenshot{Format: proto.PageCaptureScreenshotFormatPng})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(shots, name+".png"), data, 0o644))
	}
	title := func() string { return p.MustElement(`[data-testid="page-title"]`).MustText() }
	// submit clicks a form's button and waits for the page the form leads
	// to: the page before is marked, and the wait ends once a document
	// without the mark has loaded. (A navigation wait could end on a late
	// lifecycle event of the page before, on a busy machine, leaving the
	// test to read the old page's address.)
	submit := func(sel string) {
		p.MustEval(`() => { window.fleetStale = true }`)
		p.MustElement(sel).MustClick()
		require.Eventually(t, func() bool {
			v, err := p.Eval(`() => window.fleetStale !== true && document.readyState === "complete"`)
			return err == nil && v.Value.Bool()
		}, 30*time.Second, 20*time.Millisecond, "the page after %s loaded", sel)
	}
	signIn := func() {
		step()
		require.NoError(t, p.Navigate(c.Server.URL+"/"))
		p.MustWaitLoad()
		require.True(t, strings.HasPrefix(p.MustInfo().URL, c.Server.URL+"/signin"), p.MustInfo().URL)
		p.MustElement(`[data-testid="email"]`).MustInput(email)
		p.MustElement(`[data-testid="password"]`).MustInput(password)
		submit(`[data-testid="signin-submit"]`)
		require.Equal(t, c.Server.URL+auth.MFAPath, p.MustInfo().URL)
	}
	enterCode := func(code string) {
		step()
		p.MustElement(`[data-testid="code"]`).MustInput(code)
		submit(`[data-testid="mfa-submit"]`)
	}
	signOut := func() {
		step()
		submit(`[data-testid="who"] button`)
		require.True(t, strings.HasPrefix(p.MustInfo().URL, c.Server.URL+"/signin"))
	}

	// The sign-in page, then enrolment: QR code and the key on the page.
	require.NoError(t, p.Navigate(c.Server.URL+"/signin"))
	p.MustWaitLoad()
	shot("signin")
	signIn()
	require.True(t, p.MustHas(`[data-testid="totp-qr"]`))
	qrLoaded := p.MustEval(`() => { const i = document.querySelector('[data-testid="totp-qr"]'); return i.complete && i.naturalWidth > 0 }`).Bool()
	require.True(t, qrLoaded, "the server-rendered QR PNG displays")
	shot("enrol")
	secret := strings.ReplaceAll(p.MustElement(`[data-testid="totp-secret"]`).MustText(), " ", "")
	now := time.Now()
	first, err := totp.GenerateCode(secret, now)
	require.NoError(t, err)
	enterCode(first)
	require.Equal(t, "Overview", title())
	require.Contains(t, p.MustElement(`[data-testid="flash"]`).MustText(), "Two-factor authentication is set up")

	// Sign out, and in again with the next step's code: within the skew,
	// and above the step just used.
	signOut()
	signIn()
	next, err := totp.GenerateCode(secret, now.Add(30*time.Second))
	require.NoError(t, err)
	enterCode(next)
	require.Equal(t, "Overview", title())

	// The audit page shows what just happened.
	step()
	require.NoError(t, p.Navigate(c.Server.URL+"/audit"))
	p.MustWaitLoad()
	require.Equal(t, "Audit log", title())
	actions := map[string]int{}
	for _, row := range p.MustElements(`[data-testid="audit-row"]`) {
		actions[*row.MustAttribute("data-action")]++
	}
	for _, want := range []string{"signin.password_ok", "mfa.enrolled", "signin.succeeded", "signout"} {
		require.Positive(t, actions[want], "audit page shows %s: %v", want, actions)
	}
	require.Equal(t, 2, actions["signin.succeeded"])
	shot("audit")
	step()
	require.NoError(t, p.Navigate(c.Server.URL+"/admin/users"))
	p.MustWaitLoad()
	require.True(t, p.MustHas(`[data-testid="user-`+email+`"]`))
	shot("users")
	require.NoError(t, p.Navigate(c.Server.URL+"/account"))
	p.MustWaitLoad()
	shot("account")

	// A replayed code is refused, though still inside its time window.
	signOut()
	signIn()
	enterCode(next)
	require.Equal(t, c.Server.URL+auth.MFAPath, p.MustInfo().URL)
	require.Contains(t, p.MustElement(`[data-testid="mfa-error"]`).MustText(), "already used")
	shot("replay")
	// And the refused page still reaches nothing else.
	step()
	require.NoError(t, p.Navigate(c.Server.URL+"/audit"))
	p.MustWaitLoad()
	require.Equal(t, c.Server.URL+auth.MFAPath, p.MustInfo().URL)
}
