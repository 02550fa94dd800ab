package spec_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/platform/spec"
)

// The sandbox's browser section reads back with its defaults filled in.
func TestSandboxBrowserSection(t *testing.T) {
	s, err := spec.Parse("sandbox.yaml", []byte(sandboxSrc(t)))
	require.NoError(t, err)
	b := s.Browser
	require.NotNil(t, b)
	require.Len(t, b.SignIn.Steps, 2)
	require.True(t, b.SignIn.Steps[1].OneTimeCode)
	require.Equal(t, "GET", b.Jobs.Responses[0].Method)
	require.Equal(t, "POST", b.Booking.Request.Method)
	require.Equal(t, "load_id", b.Booking.Key.JSON)
	require.Equal(t, spec.TimeRFC3339, b.Jobs.ServerTime.Time)

	// A spec without a browser section is a platform over HTTP only.
	i := strings.Index(sandboxSrc(t), "\nbrowser:")
	require.Positive(t, i)
	s, err = spec.Parse("http.yaml", []byte(sandboxSrc(t)[:i]))
	require.NoError(t, err)
	require.Nil(t, s.Browser)
}

// Every refusal of the browser section names its field path and line.
func TestBrowserErrorsNameFieldAndLine(t *testing.T) {
	base := sandboxSrc(t)
	cases := []struct {
		name, old, new, path, marker, msg string
	}{
		{"unknown field", "    ready: \"#board\"\n", "    ready: \"#board\"\n    loading: \"#spinner\"\n", "browser.page.loading", "loading:", `unknown field "loading"`},
		{"sign-in without url", "    url: /login\n    steps:", "    steps:", "browser.sign_in.url", "  sign_in:\n    steps:\n      - name: password\n        fields", "missing; give the sign-in page"},
		{"sign-in url not a path", "    url: /login\n    steps:", "    url: login\n    steps:", "browser.sign_in.url", "url: login", "write a path from the base URL"},
		{"bad field selector", `selector: "#username"`, `selector: "#user["`, "browser.sign_in.steps[0].fields[0].selector", `selector: "#user["`, "not a valid CSS selector"},
		{"field without a value", `{selector: "#password", value: "{{.password}}"}`, `{selector: "#password"}`, "browser.sign_in.steps[0].fields[1].value", `{selector: "#password"}`, "missing"},
		{"code outside its step", `value: "{{.username}}"`, `value: "{{.code}}"`, "browser.sign_in.steps[0].fields[0].value", `value: "{{.code}}"`, "template variable .code does not exist here"},
		{"code step without the code", `value: "{{.code}}"`, `value: "123"`, "browser.sign_in.steps[1].fields", "        fields:\n          - {selector: \"#code\"", "must type {{.code}}"},
		{"step without submit", "        submit: \"#login-submit\"\n", "", "browser.sign_in.steps[0].submit", "      - name: password\n        fields:\n          - {selector: \"#username\"", "missing; give a CSS selector"},
		{"step without success", "        success: {url_path: /login/totp}\n", "", "browser.sign_in.steps[0].success", "      - name: password\n        fields:\n          - {selector: \"#username\"", "missing; say what page means the step worked"},
		{"empty page condition", "          - when: {url_path: /login}\n            error: credentials\n      - name: code", "          - when: {}\n            error: credentials\n      - name: code", "browser.sign_in.steps[0].fail[0].when", "when: {}", "an empty condition matches every page"},
		{"unknown sign-in error", "            error: code_refused", "            error: nope", "browser.sign_in.steps[1].fail[0].error", "error: nope", `"nope": say credentials`},
		{"code_reused outside the code step", "        success: {url_path: /login/totp}\n", "        success: {url_path: /login/totp}\n        code_reused: {url_path: /x}\n", "browser.sign_in.steps[0].code_reused", "code_reused: {url_path: /x}", "only a one_time_code step"},
		{"page path without slash", "      - url_path: /captcha", "      - url_path: captcha", "browser.page.captcha[0].url_path", "url_path: captcha", "a path starts with /"},
		{"text match two tests", "text: {selector: p.err, contains: already used}", "text: {selector: p.err, contains: already used, equals: x}", "browser.sign_in.steps[1].code_reused.text", "code_reused: {url_path: /login/totp, text", "say one of equals, contains, matches or exists"},
		{"jobs without url", "    url: /loads\n", "", "browser.jobs.url", "  jobs:\n    responses", "missing; give the jobs view"},
		{"jobs without responses", "    responses:\n      - {method: GET, url: /api/loads}\n", "", "browser.jobs.responses", "  jobs:\n    url: /loads", "missing; say which of the page's requests"},
		{"response url with a query", "url: /api/loads}", "url: \"/api/loads?after=1\"}", "browser.jobs.responses[0].url", "url: \"/api/loads?after", "leave the query out"},
		{"response bad method", "{method: GET, url: /api/loads}", "{method: FETCH, url: /api/loads}", "browser.jobs.responses[0].method", "method: FETCH", `"FETCH": say GET`},
		{"body test on a GET", "{method: GET, url: /api/loads}", "{method: GET, url: /api/loads, json: {path: operationName, equals: Loads}}", "browser.jobs.responses[0].method", "{method: GET, url: /api/loads, json", "a GET request has no body to test"},
		{"bad body path", "{method: GET, url: /api/loads}", "{method: POST, url: /graphql, json: {path: \"operationName.\", equals: Loads}}", "browser.jobs.responses[0].json.path", "url: /graphql", "ends with a separator"},
		{"form without name", "{method: GET, url: /api/loads}", "{method: POST, url: /api/loads, form: {equals: x}}", "browser.jobs.responses[0].form.name", "url: /api/loads, form", "missing; give the form field's name"},
		{"bad items path", "    server_time:", "    items: \"data..loads\"\n    server_time:", "browser.jobs.items", "items: \"data..loads\"", "can never match"},
		{"server time not a time", "server_time: {path: server_time, time: rfc3339}", "server_time: {path: server_time, time: iso}", "browser.jobs.server_time.time", "server_time: {path: server_time, time: iso}", `"iso": say one of`},
		{"control without the key", `control: "[data-load-id={{css .key}}] button"`, `control: "tr:first-child button"`, "browser.booking.control", "control:", "must name the job"},
		{"control with another variable", `control: "[data-load-id={{css .key}}] button"`, `control: "[data-load-id={{css .cursor}}] button"`, "browser.booking.control", "control:", "template variable .cursor does not exist here"},
		{"booking without control", "    control: \"[data-load-id={{css .key}}] button\"\n", "", "browser.booking.control", "  booking:\n    request: {method: POST", "missing; give the CSS selector"},
		{"booking request without url", "request: {method: POST, url: /api/book}", "request: {method: POST}", "browser.booking.request.url", "request: {method: POST}", "missing; give the request's URL"},
		{"key nowhere", "    key: {json: load_id}\n", "", "browser.booking.key", "  booking:\n    control", "missing; say where the booking request carries"},
		{"key two places", "key: {json: load_id}", "key: {json: load_id, form: load_id}", "browser.booking.key", "key: {json", "say one of json, form, query or path"},
		{"key path without a group", "key: {json: load_id}", "key: {path: '/api/book/[0-9]+'}", "browser.booking.key.path", "key: {path: '/api", "has 0 groups"},
		{"no signed-out page", "    signed_out:\n      - url_path: /login\n      - url_path: /login/totp\n", "", "browser.page.signed_out", "  page:\n    captcha", "missing; say what a signed-out page looks like"},
		{"bad ready selector", "ready: \"#board\"", "ready: \"#board[\"", "browser.page.ready", "ready:", "not a valid CSS selector"},
		{"bad page var name", "    ready: \"#board\"\n", "    ready: \"#board\"\n  vars:\n    CSRF: {selector: 'meta[name=csrf-token]', attr: content}\n", "browser.vars.CSRF", "CSRF:", "name a value with lower case letters"},
		{"bookings uses a value the page lacks", "      limit: \"200\"\n", "      limit: \"200\"\n    headers: {X-CSRF-Token: \"{{.vars.csrf}}\"}\n", "browser.vars", "browser:", "read the value from the page here"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Contains(t, base, c.old, "the case edits the sandbox spec")
			src := strings.Replace(base, c.old, c.new, 1)
			_, err := spec.Parse("p.yaml", []byte(src))
			var errs *spec.Errors
			require.True(t, errors.As(err, &errs), "%v", err)
			line := lineOf(t, src, c.marker)
			var got []string
			for _, fe := range errs.List {
				got = append(got, errs.Line(fe))
			}
			want := "p.yaml:" + itoa(line) + ": " + c.path + ": "
			found := false
			for _, g := range got {
				if strings.HasPrefix(g, want) && strings.Contains(g, c.msg) {
					found = true
				}
			}
			require.True(t, found, "want %q…%q in\n%s", want, c.msg, strings.Join(got, "\n"))
		})
	}
}

// A selector built with css matches the key whatever its characters.
func TestCSSString(t *testing.T) {
	require.Equal(t, `"L-1"`, spec.CSSString("L-1"))
	require.Equal(t, `"a\"b\\c"`, spec.CSSString(`a"b\c`))
	require.Equal(t, `"x\a y"`, spec.CSSString("x\ny"))
}
