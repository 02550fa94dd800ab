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
