// Package static embeds the console's assets and serves them under
// checksummed URLs (/static/{sum}/{name}), so browsers may cache them forever
// and a new build is fetched the moment it changes.
//
// htmx is vendored from the npm package htmx.org, version 2.0.11, unmodified.
package static

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/go-chi/chi/v5"
)

//go:embed *.js *.css *.svg
var files embed.FS

// Prefix is where the assets are mounted.
const Prefix = "/static/"

var sums = func() map[string]string {
	m := map[string]string{}
	entries, _ := fs.ReadDir(files, ".")
	for _, e := range entries {
		b, _ := files.ReadFile(e.Name())
		h := sha256.Sum256(b)
		m[e.Name()] = hex.EncodeToString(h[:])[:12]
	}
	return m
}()

// URL returns the cache-busting URL of an embedded asset. It panics on an
// unknown name so a typo fails the first render in tests, not in production.
func URL(name string) string {
	sum, ok := sums[name]
	if !ok {
		panic("static: no asset named " + name)
	}
	return Prefix + sum + "/" + name
}

// Mount serves the assets on r.
func Mount(r chi.Router) {
	r.Get(Prefix+"{sum}/{name}", func(w http.ResponseWriter, req *http.Request) {
		name := chi.URLParam(req, "name")
		sum, ok := sums[name]
		if !ok {
			http.NotFound(w, req)
			return
		}
		if chi.URLParam(req, "sum") != sum {
			// An old page asking for a previous build: send it to the current one.
			http.Redirect(w, req, URL(name), http.StatusFound)
			return
		}
		b, _ := files.ReadFile(name)
		ct := mime.TypeByExtension(path.Ext(name))
		if strings.HasSuffix(name, ".js") {
			ct = "text/javascript; charset=utf-8"
		}
		w.Header().Set("Content-Type", ct)
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(b)
	})
}
