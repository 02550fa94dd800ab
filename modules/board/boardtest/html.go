package boardtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"time"

	"github.com/PuerkitoBio/goquery"
)

// HTMLClient is one signed-in session of a board serving the html dialect,
// over plain HTTP the way a browser's forms use it.
type HTMLClient struct {
	HTTP *http.Client
	Base string
	CSRF string
}

// HTMLPage is one answer of the html dialect: the status, where the
// redirects ended, the banner's code (data-code) and the parsed page.
type HTMLPage struct {
	Status int
	Path   string
	Code   string
	Doc    *goquery.Document
	Body   string
}

// Text is the trimmed text of the first element sel finds.
func (p *HTMLPage) Text(sel string) string { return strings.TrimSpace(p.Doc.Find(sel).First().Text()) }

func (c *HTMLClient) do(ctx context.Context, method, path string, form url.Values) (*HTMLPage, error) {
	var rd io.Reader
	if form != nil {
		rd = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, rd)
	if err != nil {
		return nil, err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("boardtest: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("boardtest: %s %s: %w", method, path, err)
	}
	doc, _ := goquery.NewDocumentFromReader(strings.NewReader(string(raw)))
	p := &HTMLPage{Status: resp.StatusCode, Path: resp.Request.URL.Path, Doc: doc, Body: string(raw)}
	p.Code, _ = doc.Find(".flash[data-code]").First().Attr("data-code")
	return p, nil
}

// Get fetches a page (following redirects).
func (c *HTMLClient) Get(ctx context.Context, path string) (*HTMLPage, error) {
	return c.do(ctx, http.MethodGet, path, nil)
}

// Post posts a form (following a 303 as a browser does).
func (c *HTMLClient) Post(ctx context.Context, path string, form url.Values) (*HTMLPage, error) {
	return c.do(ctx, http.MethodPost, path, form)
}

func hiddenToken(p *HTMLPage) string {
	v, _ := p.Doc.Find(`input[name="authenticity_token"]`).First().Attr("value")
	return v
}

// NewHTMLClient is a client with an empty cookie jar.
func NewHTMLClient(base string) *HTMLClient {
	jar, _ := cookiejar.New(nil)
	return &HTMLClient{HTTP: &http.Client{Jar: jar, Timeout: 30 * time.Second}, Base: base}
}

// LoginHTML signs in to an html-dialect board through its forms: the
// sign-in page's hidden token, the password, then the code (waiting for the
// next 30 s step when the board says the code was used).
func LoginHTML(ctx context.Context, base, username, password, secret string, now func() time.Time) (*HTMLClient, error) {
	if now == nil {
		now = time.Now
	}
	c := NewHTMLClient(base)
	p, err := c.Get(ctx, "/signin")
	if err != nil {
		return nil, err
	}
	p, err = c.Post(ctx, "/signin", url.Values{"authenticity_token": {hiddenToken(p)}, "user[login]": {username}, "user[password]": {password}})
	if err != nil {
		return nil, err
	}
	if p.Path != "/signin/verify" {
		return nil, fmt.Errorf("boardtest: html sign-in: password refused (HTTP %d, %s)", p.Status, p.Code)
	}
	for {
		p, err = c.Post(ctx, "/signin/verify", url.Values{"authenticity_token": {hiddenToken(p)}, "otp_attempt": {Code(secret, now())}})
		if err != nil {
			return nil, err
		}
		if p.Path == "/dashboard" && p.Status == http.StatusOK {
			break
		}
		if p.Code != "otp_used" {
			return nil, fmt.Errorf("boardtest: html sign-in: code refused (HTTP %d, %s)", p.Status, p.Code)
		}
		wait := time.Duration(30-now().Unix()%30)*time.Second + 50*time.Millisecond
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, fmt.Errorf("boardtest: waiting for the next TOTP step: %w", ctx.Err())
		}
	}
	c.CSRF, _ = p.Doc.Find(`meta[name="csrf-token"]`).Attr("content")
	return c, nil
}

// Book submits the booking form of loadID (with a request token when key
// is set), following the 303 as a browser does.
func (c *HTMLClient) Book(ctx context.Context, loadID, key string) (*HTMLPage, error) {
	f := url.Values{"authenticity_token": {c.CSRF}}
	if key != "" {
		f.Set("request_token", key)
	}
	return c.Post(ctx, "/loads/"+url.PathEscape(loadID)+"/book", f)
}

// API fetches a JSON:API document; the status comes back with it.
func (c *HTMLClient) API(ctx context.Context, path string, v any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Base+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/vnd.api+json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, fmt.Errorf("boardtest: GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return resp.StatusCode, fmt.Errorf("boardtest: GET %s: HTTP %d: %w", path, resp.StatusCode, err)
	}
	return resp.StatusCode, nil
}
