package gate_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/assistant/browse"
	"github.com/fleetwright/fleetwright/modules/assistant/gate"
)

var plan = gate.Policy{Plan: map[string]bool{"studio.test": true}, Phrases: []string{"go live"}, Domains: []string{"bank.example"}}

func TestClickClassification(t *testing.T) {
	cases := []struct {
		name  string
		info  browse.ElementInfo
		risky bool
		why   string
	}{
		{"publish button", browse.ElementInfo{Tag: "button", Text: "Publish"}, true, "publish"},
		{"send", browse.ElementInfo{Tag: "button", Text: "Send message"}, true, "send"},
		{"buy link", browse.ElementInfo{Tag: "a", Text: "Buy now", Href: "http://studio.test/buy"}, true, "buy"},
		{"delete by aria label", browse.ElementInfo{Tag: "button", Label: "Delete post", Text: "🗑"}, true, "delete"},
		{"book", browse.ElementInfo{Tag: "button", Text: "Book this slot"}, true, "book"},
		{"upload", browse.ElementInfo{Tag: "button", Text: "Upload"}, true, "upload"},
		{"pay form", browse.ElementInfo{Tag: "button", Text: "Continue", Submits: true, FormMethod: "get", FormAction: "http://studio.test/next",
			Fields: []browse.Field{{Name: "cc", Autocomplete: "cc-number"}}}, true, "payment fields"},
		{"card by name", browse.ElementInfo{Tag: "button", Text: "Next", Submits: true, FormMethod: "get", FormAction: "http://studio.test/x",
			Fields: []browse.Field{{Name: "card_number"}}}, true, "payment fields"},
		{"post form", browse.ElementInfo{Tag: "button", Text: "Continue", Submits: true, FormMethod: "post", FormAction: "http://studio.test/step2"}, true, "POST"},
		{"outside link", browse.ElementInfo{Tag: "a", Text: "Read more", Href: "http://127.0.0.2:9/x"}, true, "not in the task's plan"},
		{"outside form", browse.ElementInfo{Tag: "button", Text: "Search", Submits: true, FormMethod: "get", FormAction: "http://evil.test/q"}, true, "not in the task's plan"},
		{"own phrase", browse.ElementInfo{Tag: "button", Text: "Go live"}, true, "risky phrase"},
		{"own domain", browse.ElementInfo{Tag: "a", Text: "Account", Href: "https://www.bank.example/"}, true, "your risky list"},
		{"save draft", browse.ElementInfo{Tag: "button", Text: "Save draft", Submits: true, FormMethod: "post", FormAction: "http://studio.test/drafts/save"}, false, ""},
		{"plain link", browse.ElementInfo{Tag: "a", Text: "Calendar", Href: "http://studio.test/calendar"}, false, ""},
		{"search get", browse.ElementInfo{Tag: "button", Text: "Search", Submits: true, FormMethod: "get", FormAction: "http://studio.test/search"}, false, ""},
		{"text box named post", browse.ElementInfo{Tag: "input", Type: "text", Label: "Title", Value: "Please publish me"}, false, ""},
		{"file input", browse.ElementInfo{Tag: "input", Type: "file", Label: "Attachment"}, true, "file upload"},
		{"download link", browse.ElementInfo{Tag: "a", Text: "Report", Href: "http://studio.test/report.csv", Download: true}, true, "downloads a file"},
	}
	for _, c := range cases {
		v := gate.Click(c.info, plan)
		require.Equal(t, c.risky, v.Risky, "%s: %v", c.name, v.Reasons)
		if c.risky {
			require.True(t, strings.Contains(strings.Join(v.Reasons, "; "), c.why), "%s: %v", c.name, v.Reasons)
		}
	}
}

func TestNavigateOutsideThePlanIsHeld(t *testing.T) {
	require.False(t, gate.Navigate("http://studio.test/brief", plan).Risky)
	require.True(t, gate.Navigate("http://studio.test:8080/brief", plan).Risky, "another port is another origin")
	v := gate.Navigate("http://127.0.0.2:8076/collect", plan)
	require.True(t, v.Risky)
	require.Contains(t, v.Reasons[0], "127.0.0.2:8076")
}

// Choosing an option is classified like a click on it.
func TestSelectIsClassifiedLikeAClick(t *testing.T) {
	cases := []struct {
		name   string
		info   browse.ElementInfo
		option string
		risky  bool
		why    string
	}{
		{"delete option", browse.ElementInfo{Tag: "select", Label: "Action"}, "Delete account", true, "delete"},
		{"send by label", browse.ElementInfo{Tag: "select", Label: "Send to"}, "Everyone", true, "send"},
		{"own phrase", browse.ElementInfo{Tag: "select", Label: "Status"}, "Go live", true, "risky phrase"},
		{"payment select", browse.ElementInfo{Tag: "select", Name: "cc-exp-month", Label: "Expiry month"}, "04", true, "payment"},
		{"sort order", browse.ElementInfo{Tag: "select", Label: "Sort by"}, "Newest", false, ""},
	}
	for _, c := range cases {
		v := gate.Select(c.info, c.option, plan)
		require.Equal(t, c.risky, v.Risky, "%s: %v", c.name, v.Reasons)
		if c.risky {
			require.Contains(t, strings.Join(v.Reasons, "; "), c.why, c.name)
		}
	}
}

func TestOrigin(t *testing.T) {
	for in, want := range map[string]string{
		"https://Bank.Example/login?x=1": "https://bank.example",
		"https://bank.example:443/":      "https://bank.example",
		"http://127.0.0.1:8080/a":        "http://127.0.0.1:8080",
		"http://[::1]:80/":               "http://[::1]",
		"bank.example":                   "",
		"javascript:alert(1)":            "",
		"ftp://bank.example/":            "",
	} {
		require.Equal(t, want, gate.Origin(in), in)
	}
}
