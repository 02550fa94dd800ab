package views

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/a-h/templ"
	"github.com/stretchr/testify/require"
)

func TestLayoutRendersNavigationFlashesAndContent(t *testing.T) {
	p := Page{Title: "Fleet <live>", User: "ops@example.com", Role: "admin", SignOutURL: "/signout",
		Nav:     []NavItem{{Section: "Fleet", Label: "Agents", Href: "/fleet", Active: true}, {Label: "Audit", Href: "/audit"}},
		Flashes: []Flash{{Kind: "ok", Text: "Saved"}}}
	body := templ.ComponentFunc(func(_ context.Context, w io.Writer) error {
		_, err := io.WriteString(w, `<p data-testid="body">content</p>`)
		return err
	})
	var b bytes.Buffer
	require.NoError(t, Layout(p).Render(templ.WithChildren(context.Background(), body), &b))
	html := b.String()
	require.Contains(t, html, `Fleet &lt;live&gt;`, "titles are escaped")
	require.Contains(t, html, `<a href="/fleet" class="active">Agents</a>`)
	require.Contains(t, html, `data-testid="flash">Saved`)
	require.Contains(t, html, `data-testid="body">content`)
	require.Contains(t, html, `action="/signout"`)
	require.Regexp(t, `/static/[0-9a-f]{12}/htmx-2.0.11.min.js`, html)
	require.Equal(t, 1, strings.Count(html, "<html"))
}

func TestErrorPage(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, ErrorPage(403, "Forbidden", "Your role cannot do this.").Render(context.Background(), &b))
	require.Contains(t, b.String(), `data-testid="error-page"`)
	require.Contains(t, b.String(), ">403<")
}

// TestWordsForTimesAndDurations: durations read like "15 min", never Go's
// "15m0s"; absolute times carry their zone.
func TestWordsForTimesAndDurations(t *testing.T) {
	for d, want := range map[time.Duration]string{
		45 * time.Second:                "45 s",
		15 * time.Minute:                "15 min",
		2 * time.Minute:                 "2 min",
		90 * time.Second:                "1 min 30 s",
		4*time.Minute + 59*time.Second:  "4 min 59 s",
		12*time.Minute + 30*time.Second: "12 min",
		2*time.Hour + 5*time.Minute:     "2 h 5 min",
		12 * time.Hour:                  "12 h",
		3*24*time.Hour + 4*time.Hour:    "3 d 4 h",
		-time.Second:                    "0 s",
	} {
		require.Equal(t, want, Duration(d), d.String())
	}
	at := time.Date(2026, 12, 2, 15, 4, 5, 0, time.FixedZone("CET", 3600))
	require.Equal(t, "2026-12-02 14:04:05 UTC", Stamp(at))
}
