package account

import (
	"net/http"
	"net/url"

	"github.com/a-h/templ"
)

func render(w http.ResponseWriter, r *http.Request, status int, c templ.Component) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	// Pages of a signed-in console are private and never cached.
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = c.Render(r.Context(), w)
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }
