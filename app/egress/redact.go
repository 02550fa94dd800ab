package egress

import (
	"errors"
	"net/url"
	"slices"
	"strings"
)

// RedactEndpoint prints a configured endpoint (a webhook URL) as scheme and
// host only: receivers put their tokens in the path or the query
// (https://hooks.example.com/services/T0/B1/XyZ, …?token=…), so neither
// may reach a log, an error that is stored or a page.
func RedactEndpoint(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return "(malformed URL)"
	}
	if u.Path == "" && u.RawQuery == "" && u.Fragment == "" && u.User == nil {
		return u.Scheme + "://" + u.Host
	}
	return u.Scheme + "://" + u.Host + "/…"
}

// RedactError returns err with every trace of endpoint's path, query,
// fragment and user info removed from its text: the *url.Error an HTTP
// client returns quotes the whole URL ("Post \"https://…/T0/B1/XyZ\": …").
// What went wrong (the dial error, the guard's refusal, the status) stays;
// errors.As and errors.Is still see the original chain.
func RedactError(err error, endpoint string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) && ue.URL != "" {
		msg = strings.ReplaceAll(msg, ue.URL, RedactEndpoint(ue.URL))
	}
	msg = strings.ReplaceAll(msg, endpoint, RedactEndpoint(endpoint))
	if u, perr := url.Parse(endpoint); perr == nil {
		// Any part left, in any of its spellings, goes too (longest first,
		// so a part is never half replaced).
		var parts []string
		add := func(s string) {
			if len(s) > 1 {
				parts = append(parts, s)
			}
		}
		add(u.RequestURI())
		add(u.EscapedPath())
		add(u.Path)
		add(u.RawQuery)
		if q, err := url.QueryUnescape(u.RawQuery); err == nil {
			add(q)
		}
		add(u.Fragment)
		if u.User != nil {
			add(u.User.String())
		}
		// Single segments and values from 8 characters on (a token's
		// length; shorter words like "hooks" would only garble the text).
		for _, seg := range strings.Split(u.Path, "/") {
			if len(seg) >= 8 {
				add(seg)
			}
		}
		for _, vs := range u.Query() {
			for _, v := range vs {
				if len(v) >= 8 {
					add(v)
				}
			}
		}
		slices.SortFunc(parts, func(a, b string) int { return len(b) - len(a) })
		for _, p := range parts {
			if p == "/" {
				continue
			}
			msg = strings.ReplaceAll(msg, p, "…")
		}
	}
	return &redacted{msg: msg, err: err}
}

type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }
