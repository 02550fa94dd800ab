package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/PuerkitoBio/goquery"
	"github.com/go-rod/rod"

	"github.com/fleetwright/fleetwright/modules/crawl/extract"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// A page that shows a captcha is not solved here: the crawler reports the
// challenge and the panel decides (a person looks, or — only under the
// tenant's recorded authorisation — a solver answers). With an answer in the
// page task, the captcha's form is submitted with the token in the field
// the solver named.

var captchaMarks = []string{"g-recaptcha", "h-captcha", "data-captcha", "cf-challenge", `id="captcha"`, `class="captcha"`}

func looksLikeCaptcha(b []byte) bool {
	head := strings.ToLower(string(b[:min(len(b), 64<<10)]))
	for _, m := range captchaMarks {
		if strings.Contains(head, m) {
			return true
		}
	}
	return false
}

// captchaSel finds the element that holds a captcha widget.
const captchaSel = ".g-recaptcha, .h-captcha, [data-sitekey], [data-captcha], #captcha, .captcha"

// challengeOf describes the captcha on a page.
func challengeOf(body []byte, pageURL string) *wire.CaptchaChallenge {
	ch := &wire.CaptchaChallenge{Kind: "unknown", PageURL: pageURL}
	doc, err := goquery.NewDocumentFromReader(bytes.NewReader(body))
	if err != nil {
		return ch
	}
	w := doc.Find(captchaSel).First()
	switch {
	case w.HasClass("g-recaptcha"):
		ch.Kind = "recaptcha"
	case w.HasClass("h-captcha"):
		ch.Kind = "hcaptcha"
	}
	ch.SiteKey, _ = w.Attr("data-sitekey")
	return ch
}

// captchaForm is the form around the captcha widget: where and how to
// send it, with its other fields.
func captchaForm(body []byte, base *url.URL) (method string, action *url.URL, fields url.Values, err error) {
	doc, err := goquery.NewDocumentFromReader(bytes.NewReader(body))
	if err != nil {
		return "", nil, nil, fmt.Errorf("agent: crawl: captcha page: %w", err)
	}
	form := doc.Find(captchaSel).First().Closest("form")
	if form.Length() == 0 {
		return "", nil, nil, errors.New("agent: crawl: the captcha is not inside a form: nothing to submit the solution with")
	}
	method = strings.ToUpper(strings.TrimSpace(form.AttrOr("method", "GET")))
	if method != http.MethodPost {
		method = http.MethodGet
	}
	action, err = base.Parse(form.AttrOr("action", ""))
	if err != nil {
		return "", nil, nil, fmt.Errorf("agent: crawl: captcha form action: %w", err)
	}
	fields = url.Values{}
	form.Find("input[name], textarea[name], select[name]").Each(func(_ int, s *goquery.Selection) {
		typ := strings.ToLower(s.AttrOr("type", ""))
		if typ == "submit" || typ == "button" || typ == "file" || ((typ == "checkbox" || typ == "radio") && s.AttrOr("checked", "-") == "-") {
			return
		}
		fields.Add(s.AttrOr("name", ""), s.AttrOr("value", ""))
	})
	return method, action, fields, nil
}

// submitCaptcha sends the captcha's form with the solution (HTTP mode) and
// returns the answer's body, for extraction like any page.
func (c *crawler) submitCaptcha(ctx context.Context, gd *guarded, t wire.PageTask, body []byte, res *wire.PageResult) ([]byte, string, error) {
	base, err := url.Parse(firstNonEmpty(res.FinalURL, t.URL))
	if err != nil {
		return nil, "", fmt.Errorf("agent: crawl: %w", err)
	}
	method, action, fields, err := captchaForm(body, base)
	if err != nil {
		return nil, "", err
	}
	if action.Scheme != "http" && action.Scheme != "https" || !extract.DomainAllowed(t.AllowedDomains, action.Hostname()) {
		return nil, "", fmt.Errorf("agent: crawl: the captcha form posts outside the allowed domains (%s)", action.Hostname())
	}
	fields.Set(t.Solution.Field, t.Solution.Token)
	var req *http.Request
	if method == http.MethodPost {
		req, err = http.NewRequestWithContext(ctx, method, action.String(), strings.NewReader(fields.Encode()))
		if err == nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
	} else {
		action.RawQuery = fields.Encode()
		req, err = http.NewRequestWithContext(ctx, method, action.String(), nil)
	}
	if err != nil {
		return nil, "", fmt.Errorf("agent: crawl: %w", err)
	}
	req.Header.Set("User-Agent", c.ua)
	req.Header.Set("Accept-Language", c.lang)
	req.Header.Set("Referer", base.String())
	resp, err := gd.client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	res.Status, res.FinalURL = resp.StatusCode, resp.Request.URL.String()
	limit := t.MaxBytes
	if limit <= 0 {
		limit = 5 << 20
	}
	out, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, "", fmt.Errorf("agent: crawl: read body: %w", err)
	}
	if int64(len(out)) > limit {
		return nil, "", fmt.Errorf("agent: crawl: the page is larger than %d bytes (limits.page_bytes)", limit)
	}
	res.Bytes += int64(len(out))
	return out, resp.Header.Get("Content-Type"), nil
}

// submitCaptchaInPage puts the solution into the captcha's form in the
// browser and submits it; the page then loads the answer.
func submitCaptchaInPage(page *rod.Page, s *wire.CaptchaSolution) error {
	_, err := page.Eval(`(field, token) => {
		const w = document.querySelector(".g-recaptcha, .h-captcha, [data-sitekey], [data-captcha], #captcha, .captcha");
		const form = w && w.closest("form");
		if (!form) { throw new Error("the captcha is not inside a form"); }
		let el = form.querySelector("[name='" + CSS.escape(field) + "']");
		if (!el) { el = document.createElement("textarea"); el.name = field; el.style.display = "none"; form.appendChild(el); }
		el.value = token;
		HTMLFormElement.prototype.submit.call(form);
	}`, s.Field, s.Token)
	if err != nil {
		return fmt.Errorf("agent: crawl: submit the captcha's form: %w", err)
	}
	return nil
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
