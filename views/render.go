package views

import (
	"net/http"

	"github.com/a-h/templ"
)

// Render writes a console page or fragment with status. Pages of a signed-in
// console are private: never cached.
func Render(w http.ResponseWriter, r *http.Request, status int, c templ.Component) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = c.Render(r.Context(), w)
}

// RenderError writes the body of the console's error page (the layout's
// ErrorPage); the panel hands it to auth.Pages, which has set the headers
// and the status.
func RenderError(w http.ResponseWriter, r *http.Request, code int, title, msg string) {
	_ = ErrorPage(code, title, msg).Render(r.Context(), w)
}
