package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/proto"
	"github.com/tidwall/gjson"

	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/wire"
)

type browserSide struct{ a *Adapter }

var _ platform.Browser = (*browserSide)(nil)

func (b *browserSide) JobsURL() string { return b.a.url("/loads") }

func (b *browserSide) IsJobsRequest(method string, u *url.URL, _ []byte) bool {
	return method == "GET" && u.Host == b.a.base.Host && u.Path == "/api/loads"
}

func (b *browserSide) ParseJobs(body []byte) ([]wire.Job, error) {
	jobs, _, err := parseFeed(body)
	return jobs, err
}

// ServerTime implements platform.ServerTimer: the feed's server_time, its
// first field.
func (b *browserSide) ServerTime(body []byte) (time.Time, bool) {
	r := gjson.GetBytes(body, "server_time")
	if r.Type != gjson.String {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, r.Str)
	return t, err == nil
}

func (b *browserSide) IsSignedOutResponse(status int) bool { return status == 401 }

func (b *browserSide) BookRequestPattern() string { return "*/api/book*" }

func (b *browserSide) IsBookRequest(method string, u *url.URL, _ []byte) bool {
	return method == "POST" && u.Host == b.a.base.Host && u.Path == "/api/book"
}

func (b *browserSide) BookRequestKey(_ *url.URL, body []byte) string {
	var v struct {
		LoadID string `json:"load_id"`
	}
	if json.Unmarshal(body, &v) == nil && v.LoadID != "" {
		return v.LoadID
	}
	if q, err := url.ParseQuery(string(body)); err == nil {
		return q.Get("load_id")
	}
	return ""
}

func (b *browserSide) IdempotencyHeader() string { return "Idempotency-Key" }

func (b *browserSide) ParseBookResponse(status int, _ http.Header, body []byte) platform.BookResult {
	return parseBook(status, body)
}

func path(p *rod.Page) string {
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

// pageOrigin refuses to type the credentials (or a code) into a page whose
// origin they were not sealed for: the board's sign-in page redirected
// elsewhere.
func pageOrigin(p *rod.Page, creds platform.Credentials) error {
	info, err := p.Info()
	if err != nil {
		return fmt.Errorf("%w: read the sign-in page's address: %v", platform.ErrUnavailable, err)
	}
	if err := creds.CheckOrigin(info.URL); err != nil {
		return fmt.Errorf("sandbox: sign in: the page: %w", err)
	}
	return nil
}

// Login implements platform.Browser: the sign-in form, then the code form;
// a code refused as used is replaced by the next step's code. Nothing is
// typed unless the page's origin is one the credentials were sealed for.
func (b *browserSide) Login(ctx context.Context, page *rod.Page, creds platform.Credentials, codes *platform.TOTP) error {
	if err := creds.CheckOrigin(b.a.base.String()); err != nil {
		return fmt.Errorf("sandbox: sign in: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second+2*platform.Step)
	defer cancel()
	p := page.Context(ctx)
	if err := p.Navigate(b.a.url("/login")); err != nil {
		return fmt.Errorf("%w: open sign-in page: %v", platform.ErrUnavailable, err)
	}
	if err := p.WaitLoad(); err != nil {
		return fmt.Errorf("%w: sign-in page: %v", platform.ErrUnavailable, err)
	}
	if err := pageOrigin(p, creds); err != nil {
		return err
	}
	if err := submit(p, map[string]string{"#username": creds.Username, "#password": creds.Password.Reveal()}, "#login-submit"); err != nil {
		return err
	}
	if path(p) != "/login/totp" {
		return fmt.Errorf("sandbox: sign in as %s: %w", creds.Username, platform.ErrCredentials)
	}
	code, err := codes.Code()
	for attempt := 0; ; attempt++ {
		if err != nil {
			return err
		}
		if err := pageOrigin(p, creds); err != nil {
			return err
		}
		if err := submit(p, map[string]string{"#code": code}, "#totp-submit"); err != nil {
			return err
		}
		switch path(p) {
		case "/loads":
			return nil
		case "/login/totp":
			msg := ""
			if ok, el, _ := p.Has("p.err"); ok {
				msg, _ = el.Text()
			}
			if !strings.Contains(msg, "already used") {
				return fmt.Errorf("sandbox: %w", platform.ErrCodeRefused)
			}
			if attempt >= 2 {
				return fmt.Errorf("sandbox: %w (after %d waits)", platform.ErrCodeReused, attempt)
			}
			code, err = codes.Next(ctx)
		default:
			return fmt.Errorf("sandbox: sign-in step expired: %w", platform.ErrCredentials)
		}
	}
}

// submit fills fields and submits the form, waiting for the next page.
func submit(p *rod.Page, fields map[string]string, button string) error {
	for sel, v := range fields {
		el, err := p.Element(sel)
		if err != nil {
			return fmt.Errorf("%w: field %s: %v", platform.ErrUnavailable, sel, err)
		}
		if err := el.Input(v); err != nil {
			return fmt.Errorf("%w: type into %s: %v", platform.ErrUnavailable, sel, err)
		}
	}
	btn, err := p.Element(button)
	if err != nil {
		return fmt.Errorf("%w: button %s: %v", platform.ErrUnavailable, button, err)
	}
	wait := p.WaitNavigation(proto.PageLifecycleEventNameLoad)
	if _, err := btn.Eval(`() => this.click()`); err != nil {
		return fmt.Errorf("%w: submit: %v", platform.ErrUnavailable, err)
	}
	wait()
	return nil
}

// ClickBook implements platform.Browser. The booking control is found by
// the job's data-load-id in either layout (v1 "Book", v2 "Reserve") and
// clicked on that very element (a row inserted above it cannot shift the
// click onto another job).
func (b *browserSide) ClickBook(ctx context.Context, page *rod.Page, key string) error {
	sel := fmt.Sprintf(`[data-load-id=%s] button`, strconv.Quote(key))
	el, err := page.Context(ctx).Element(sel)
	if err != nil {
		return fmt.Errorf("sandbox: no booking button for %s on the page: %w", key, err)
	}
	if _, err := el.Eval(`() => this.click()`); err != nil {
		return fmt.Errorf("sandbox: click book for %s: %w", key, err)
	}
	return nil
}

// State implements platform.Browser.
func (b *browserSide) State(ctx context.Context, page *rod.Page) (platform.PageState, error) {
	p := page.Context(ctx)
	switch path(p) {
	case "/login", "/login/totp":
		return platform.PageSignedOut, nil
	case "/captcha":
		return platform.PageCaptcha, nil
	}
	res, err := p.Eval(`() => {
		const o = document.getElementById("overlay");
		if (o && getComputedStyle(o).display !== "none") return "captcha";
		if (location.pathname === "/loads" && !document.getElementById("board")) return "broken";
		return "ok"; }`)
	if err != nil {
		return platform.PageOK, fmt.Errorf("sandbox: page state: %w", err)
	}
	switch res.Value.Str() {
	case "captcha":
		return platform.PageCaptcha, nil
	case "broken":
		// The board answered the jobs view with an error page (503 under
		// its 5xx switch): no script polls the feed there.
		return platform.PageBroken, nil
	}
	return platform.PageOK, nil
}

// Bookings implements platform.Browser: the same JSON, fetched by the page.
func (b *browserSide) Bookings(ctx context.Context, page *rod.Page, cursor string) (platform.Bookings, error) {
	path, after, err := bookingsPath(cursor)
	if err != nil {
		return platform.Bookings{}, err
	}
	res, err := page.Context(ctx).Eval(`(path) => fetch(path, {credentials: "same-origin", headers: {Accept: "application/json"}})
		.then(r => r.text().then(t => ({status: r.status, body: t})))`, path)
	if err != nil {
		return platform.Bookings{}, fmt.Errorf("%w: bookings: %v", platform.ErrUnavailable, err)
	}
	switch st := res.Value.Get("status").Int(); st {
	case 200:
	case 401:
		return platform.Bookings{}, fmt.Errorf("sandbox: bookings: %w", platform.ErrSignedOut)
	default:
		return platform.Bookings{}, fmt.Errorf("%w: bookings: HTTP %d", platform.ErrUnavailable, st)
	}
	return parseBookings([]byte(res.Value.Get("body").Str()), after)
}
