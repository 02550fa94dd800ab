package views

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

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
