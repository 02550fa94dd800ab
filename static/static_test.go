package static

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"
)

func TestAssetsAreServedUnderTheirChecksum(t *testing.T) {
	r := chi.NewRouter()
	Mount(r)
	u := URL("htmx-2.0.11.min.js")
	require.Regexp(t, `^/static/[0-9a-f]{12}/htmx-2.0.11.min.js$`, u)

	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("GET", u, nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Header().Get("Cache-Control"), "immutable")
	require.True(t, strings.HasPrefix(rec.Header().Get("Content-Type"), "text/javascript"))
	require.Contains(t, rec.Body.String(), "htmx")

	rec = httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("GET", "/static/000000000000/htmx-2.0.11.min.js", nil))
	require.Equal(t, http.StatusFound, rec.Code, "a stale checksum is sent to the current file")
	require.Equal(t, u, rec.Header().Get("Location"))

	rec = httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("GET", "/static/x/nope.js", nil))
	require.Equal(t, http.StatusNotFound, rec.Code)
}

func TestUnknownAssetPanics(t *testing.T) {
	require.Panics(t, func() { URL("missing.css") })
}
