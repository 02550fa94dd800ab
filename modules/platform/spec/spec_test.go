package spec_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/platform/spec"
)

func sandboxSrc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "examples", "platforms", "sandbox.yaml"))
	require.NoError(t, err)
	return string(b)
}

// Every shipped platform file is valid.
func TestExamplesAreValid(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "examples", "platforms", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		s, err := spec.Parse(filepath.Base(f), src)
		require.NoError(t, err, f)
		require.Equal(t, spec.Version, s.Version)
	}
}

// The sandbox's spec reads back with its defaults filled in.
func TestSandboxDefaults(t *testing.T) {
	s, err := spec.Parse("sandbox.yaml", []byte(sandboxSrc(t)))
	require.NoError(t, err)
	require.Equal(t, "sandbox", s.Name)
	require.Equal(t, "GET", s.Feed.Request.Method)
	require.Equal(t, "cookies", s.Session.Carry)
	require.Equal(t, 1, s.Feed.Paging.MaxPages)
	require.Equal(t, spec.OldestFirst, s.Bookings.Order)
	require.Equal(t, spec.TimeRFC3339, s.Feed.Fields.PublishedAt.Time)
	require.Len(t, s.SignIn.Steps, 2)
	require.True(t, s.SignIn.Steps[1].OneTimeCode)
	require.Equal(t, "30s", s.Idempotency.Read.Cache.D.String())
	require.Equal(t, "1s", s.Limits.PollInterval.D.String())
}

// lineOf is the 1-based line of the first occurrence of marker in src.
func lineOf(t *testing.T, src, marker string) int {
	t.Helper()
	i := strings.Index(src, marker)
	require.GreaterOrEqual(t, i, 0, "marker %q", marker)
	return strings.Count(src[:i], "\n") + 1
}

// Every validation error names its field path and line, in the form the
// command prints: file:line: field.path: what is wrong.
func TestErrorsNameFieldAndLine(t *testing.T) {
	base := sandboxSrc(t)
	cases := []struct {
		name     string
		old, new string // replace old with new in the sandbox spec
		path     string
		marker   string // the line the error is on (first occurrence, in the edited file)
		msg      string
	}{
		{"unknown field", "  poll_interval: 1s\n", "  poll_interval: 1s\n  poll_every: 2s\n", "limits.poll_every", "poll_every:", `unknown field "poll_every"`},
		{"unknown nested field", "      result: taken\n", "      result: taken\n      retry: true\n", "booking.results[1].retry", "retry: true", `unknown field "retry"`},
		{"unsupported version", "version: 1\n", "version: 7\n", "version", "version: 7", "version 7 is not supported; this build reads version 1"},
		{"missing version", "version: 1\n", "\n", "version", "# The sandbox", "missing; write `version: 1`"},
		{"text version", "version: 1\n", "version: one\n", "version", "version: one", "is not a version"},
		{"wrong type", "  requests_per_hour: 0\n", "  requests_per_hour: lots\n", "limits.requests_per_hour", "requests_per_hour: lots", "wrong type"},
		{"bad duration", "  poll_interval: 1s\n", "  poll_interval: soon\n", "limits.poll_interval", "poll_interval: soon", "not a duration"},
		{"bad name", "name: sandbox\n", "name: Sand Box\n", "name", "name: Sand", "lower case letters"},
		{"bad origin", "name: sandbox\n", "name: sandbox\norigins: [\"https://auth.example.com/login\"]\n", "origins[0]", "origins:", "is not an origin"},
		{"json path never matches", "next: next_after", "next: next_after..x", "feed.paging.next", "next: next_after..x", "can never match: an empty component"},
		{"json path unbalanced", "items: loads", "items: loads.#(id==\"x\"", "feed.items", "items: loads.#", `"(" is not closed`},
		{"unknown modifier", "booking_id: {json: booking.id}", "booking_id: {json: booking.id|@nope}", "booking.results[0].booking_id.json", "booking_id: {json: booking.id|@nope}", "@nope is not a gjson modifier"},
		{"template variable missing", `"{{.cursor}}"`, `"{{.cursour}}"`, "feed.request.query.after", "{{.cursour}}", "template variable .cursour does not exist here"},
		{"vars not extracted", `"{{.vars.csrf}}"`, `"{{.vars.xsrf}}"`, "booking.request.headers.X-CSRF-Token", "{{.vars.xsrf}}", "template variable .vars.xsrf does not exist: the earlier steps extract .csrf"},
		{"code outside its step", `username: "{{.username}}"`, `username: "{{.code}}"`, "sign_in.steps[0].request.form.username", `"{{.code}}"`, "template variable .code does not exist here"},
		{"broken template", `'{"load_id":{{json .key}}}'`, `'{"load_id":{{json .key}'`, "booking.request.json", `{{json .key}'`, "not a valid template"},
		{"range not allowed", `'{"load_id":{{json .key}}}'`, `'{{range .key}}x{{end}}{{json .key}}'`, "booking.request.json", `{{range`, "only {{.variable}}"},
		{"booking without key", `'{"load_id":{{json .key}}}'`, `'{"load_id":"x"}'`, "booking.request", "  request:\n    method: POST\n    url: /api/book", "must send the job's key"},
		{"paging without its variable", "      after: \"{{.cursor}}\"\n  paging:\n    kind: cursor", "      after: \"0\"\n  paging:\n    kind: cursor", "feed.request", "  request:\n    url: /api/loads", "paging kind cursor needs the request to send {{.cursor}}"},
		{"unknown paging kind", "kind: cursor", "kind: scroll", "feed.paging.kind", "kind: scroll", `"scroll": say cursor, after, page, link or offset`},
		{"offset without its variable", "    kind: after\n    start: \"0\"\n    value: id\n    more: more\n", "    kind: offset\n", "bookings.request", "  request:\n    url: /api/bookings", "paging kind offset needs the request to send {{.offset}}"},
		{"offset without size", "      after: \"{{.cursor}}\"\n      limit: \"200\"\n  paging:\n    kind: after\n    start: \"0\"\n    value: id\n    more: more\n    size: 200", "      offset: \"{{.offset}}\"\n      limit: \"200\"\n  paging:\n    kind: offset", "bookings.paging.size", "  paging:\n    kind: offset", "offset paging needs the page size"},
		{"zone twice", "pickup_end: {path: pickup_end, time: rfc3339}", "pickup_end: {path: pickup_end, time: layout, layout: '2006-01-02', zone: UTC, zone_in_value: true}", "feed.fields.pickup_end.zone", "pickup_end: {path: pickup_end, time: layout", "give one of zone, zone_path or zone_in_value"},
		{"cursor without next", "    next: next_after\n", "", "feed.paging.next", "  paging:\n    kind: cursor", "missing; give a JSON path"},
		{"unknown result", "result: taken", "result: gone", "booking.results[1].result", "result: gone", `"gone": say one of`},
		{"confirmed without id", "      booking_id: {json: booking.id}\n", "", "booking.results[0].booking_id", "    - when: {status: [201]", "missing; say where the booking id is"},
		{"no confirmed rule", "      result: confirmed\n      booking_id: {json: booking.id}\n", "      result: unknown\n", "booking.results", "  results:", "no rule says confirmed"},
		{"empty condition", "    - status: [401]\n", "    - {}\n", "session.signed_out[0]", "    - {}", "an empty condition matches every answer"},
		{"bad status", "status: [409]", "status: [4090]", "booking.results[1].when.status[0]", "status: [4090]", "4090 is not an HTTP status"},
		{"bad regexp", "    extract:\n      csrf: {json: csrf_token}", "    extract:\n      csrf: {regexp: 'csrf=(['}", "session.check.extract.csrf.regexp", "csrf: {regexp", "not a valid regular expression"},
		{"two extractor kinds", "csrf: {json: csrf_token}", "csrf: {json: csrf_token, header: X-CSRF}", "session.check.extract.csrf", "csrf: {json", "one of json, html, header or cookie"},
		{"bad selector", "csrf: {json: csrf_token}", "csrf: {html: 'input[name=csrf'}", "session.check.extract.csrf.html", "csrf: {html", "not a valid CSS selector"},
		{"unknown time format", "published_at: {path: published_at, time: rfc3339, required: true}", "published_at: {path: published_at, time: iso, required: true}", "feed.fields.published_at.time", "published_at: {path: published_at, time: iso", `"iso": say one of`},
		{"layout without layout", "published_at: {path: published_at, time: rfc3339, required: true}", "published_at: {path: published_at, time: layout, required: true}", "feed.fields.published_at.layout", "published_at: {path: published_at, time: layout", "missing; time: layout needs a Go layout"},
		{"bad zone", "pickup_end: {path: pickup_end, time: rfc3339}", "pickup_end: {path: pickup_end, time: layout, layout: '2006-01-02 15:04', zone: Mars/Olympus}", "feed.fields.pickup_end.zone", "pickup_end: {path: pickup_end, time: layout", "not a time zone name"},
		{"unknown unit", "weight: {path: weight_lb, unit: lb}", "weight: {path: weight_lb, unit: stone}", "feed.fields.weight.unit", "unit: stone", `"stone": say one of lb, kg, t`},
		{"unit missing", "rate: {path: rate_usd, unit: usd}", "rate: {path: rate_usd}", "feed.fields.rate.unit", "rate: {path: rate_usd}", "missing; say one of usd, cents"},
		{"rate per mile needs distance", "    distance: {path: miles, unit: mi}\n    rate: {path: rate_usd, unit: usd}", "    rate: {path: rate_per_mile, unit: usd_per_mile}", "feed.fields.rate.unit", "rate: {path: rate_per_mile", "needs feed.fields.distance"},
		{"missing key field", "    key: {path: id, required: true}\n", "", "feed.fields.key", "  fields:\n    published_at", "missing; say where the value is"},
		{"idempotency missing", "idempotency:\n  read:\n    request: {url: /api/platform}\n    path: idempotency_keys\n    cache: 30s\n", "", "idempotency", "# The sandbox", "missing; state honoured"},
		{"honoured without header", "  read:\n    request: {url: /api/platform}\n    path: idempotency_keys\n    cache: 30s\n", "  honoured: true\n", "idempotency.honoured", "honoured: true", "neither booking.idempotency_header nor the booking request"},
		{"second code step", "    - name: password\n", "    - name: password\n      one_time_code: true\n", "sign_in.steps[0].request", "      request:\n        method: POST\n        url: /login\n", "a one_time_code step must send {{.code}}"},
		{"code_reused outside the code step", "      success: {status: [200], url_path: /login/totp}\n", "      success: {status: [200], url_path: /login/totp}\n      code_reused: {status: [401]}\n", "sign_in.steps[0].code_reused", "code_reused: {status: [401]}", "only a one_time_code step"},
		{"unknown sign-in error", "error: code_refused", "error: wrong_code", "sign_in.steps[1].fail[0].error", "error: wrong_code", `"wrong_code": say credentials`},
		{"step without success", "      success: {status: [200], url_path: /loads}\n", "", "sign_in.steps[1].success", "    - name: code", "missing; say what answer means the step worked"},
		{"get with a body", "    request: {url: /api/session}", "    request: {url: /api/session, json: '{}'}", "session.check.request.method", "request: {url: /api/session, json", "a GET request sends no body"},
		{"bad order", "order: oldest_first", "order: random", "bookings.order", "order: random", `"random": say oldest_first or newest_first`},
		{"max_pages on a look-up", "    size: 200\n", "    size: 200\n    max_pages: 3\n", "bookings.paging.max_pages", "max_pages: 3", "only the feed reads several pages"},
		{"header carry without header", "  carry: cookies", "  carry: header", "session.header", "session:", "carry: header needs the header's name"},
		{"not yaml", "name: sandbox\n", "name: sandbox\n  oops: x\n", "", "  oops: x", "not valid YAML or JSON"},
		// The rest of the validator's refusals, one case each.
		{"negative poll interval", "poll_interval: 1s", "poll_interval: -1s", "limits.poll_interval", "poll_interval: -1s", "must not be negative"},
		{"negative request budget", "requests_per_hour: 0", "requests_per_hour: -5", "limits.requests_per_hour", "requests_per_hour: -5", "must not be negative"},
		{"step without a name", "    - name: code\n", "    - follow_redirects: true\n", "sign_in.steps[1].name", "    - follow_redirects: true", "missing; name the step"},
		{"two steps of one name", "    - name: code\n", "    - name: password\n", "sign_in.steps[1].name", "    - name: password\n      one_time_code", `"password" names an earlier step too`},
		{"two code steps", "      success: {status: [200], url_path: /login/totp}\n", "      success: {status: [200], url_path: /login/totp}\n    - name: again\n      one_time_code: true\n      request: {method: POST, url: /again, form: {code: \"{{.code}}\"}}\n      success: {status: [200]}\n", "sign_in.steps[2].one_time_code", "one_time_code: true\n      request:\n        method: POST\n        url: /login/totp", "only one step submits the one-time code"},
		{"unknown header carry", "  carry: cookies", "  carry: smoke", "session.carry", "carry: smoke", `"smoke": say cookies or header`},
		{"header with cookies", "  carry: cookies\n", "  carry: cookies\n  header: {name: Authorization, value: x}\n", "session.header", "  header: {name", "only with carry: header"},
		{"bad header name", "  carry: cookies\n", "  carry: header\n  header: {name: \"Auth orization\", value: \"Bearer {{.vars.csrf}}\"}\n", "session.header.name", "  header: {name", "is not a header name"},
		{"refresh without every", "  signed_out:\n", "  refresh:\n    request: {method: POST, url: /refresh}\n  signed_out:\n", "session.refresh.every", "  refresh:", "missing; say how often"},
		{"no signed-out answer", "  signed_out:\n    - status: [401]\n    - json: {path: signed_in, equals: \"false\"}\n", "", "session.signed_out", "session:", "missing; say what a signed-out answer looks like"},
		{"bad method", "        method: POST\n        url: /login\n", "        method: FETCH\n        url: /login\n", "sign_in.steps[0].request.method", "method: FETCH", `"FETCH": say GET, POST`},
		{"url neither path nor absolute", "    url: /api/book", "    url: api/book", "booking.request.url", "url: api/book", "write a path from the base URL"},
		{"two bodies", "    json: '{\"load_id\":{{json .key}}}'\n", "    json: '{\"load_id\":{{json .key}}}'\n    form: {a: b}\n", "booking.request", "  request:\n    method: POST\n    url: /api/book", "give one body"},
		{"raw body without its type", "    json: '{\"load_id\":{{json .key}}}'\n", "    body: 'load={{.key}}'\n", "booking.request.content_type", "  request:\n    method: POST\n    url: /api/book", "a raw body needs its content type"},
		{"bad request header name", "      X-CSRF-Token:", "      \"X CSRF\":", "booking.request.headers.X CSRF", "\"X CSRF\"", "is not a header name"},
		{"template declares a variable", `'{"load_id":{{json .key}}}'`, `'{{$k := .key}}{{json $k}}'`, "booking.request.json", "{{$k", "variables ($x :=) are not needed"},
		{"template with a field of a field", `'{"load_id":{{json .key}}}'`, `'{{.key.id}}'`, "booking.request.json", "{{.key.id}}", ".key has no field id"},
		{"template with vars alone", `'{"load_id":{{json .key}}}'`, `'{{json .key}}{{.vars}}'`, "booking.request.json", "{{.vars}}", "write an extracted value as {{.vars.NAME}}"},
		{"vars before any extract", `          username: "{{.username}}"`, `          username: "{{.vars.user}}"`, "sign_in.steps[0].request.form.username", "{{.vars.user}}", "no earlier step extracts a value"},
		{"unknown header carry status", "status: [401]}\n      result: signed_out", "status: [99]}\n      result: signed_out", "booking.results[5].when.status[0]", "status: [99]", "99 is not an HTTP status"},
		{"url_path without a slash", "url_path: /loads", "url_path: loads", "sign_in.steps[1].success.url_path", "url_path: loads", "a path starts with /"},
		{"bad match regexp", "equals: totp_reused", "matches: '(totp'", "sign_in.steps[1].code_reused.header.matches", "matches: '(totp'", "not a valid regular expression"},
		{"two match tests", "{name: X-Board-Error, equals: totp_reused}", "{name: X-Board-Error, equals: totp_reused, contains: totp}", "sign_in.steps[1].code_reused.header", "code_reused:", "say one of equals, contains, matches or exists"},
		{"body test without a test", "    - status: [401]\n", "    - body: {}\n", "session.signed_out[0].body", "    - body: {}", "say equals, contains, matches or exists"},
		{"html test without selector", "    - status: [401]\n", "    - html: {contains: Sign in}\n", "session.signed_out[0].html.selector", "    - html:", "missing; give a CSS selector"},
		{"bad extract name", "      csrf: {json: csrf_token}", "      CSRF: {json: csrf_token}", "session.check.extract.CSRF", "CSRF: {json", "name a value with lower case letters"},
		{"attr without html", "csrf: {json: csrf_token}", "csrf: {json: csrf_token, attr: value}", "session.check.extract.csrf.attr", "csrf: {json", "only with html"},
		{"regexp of two groups", "csrf: {json: csrf_token}", "csrf: {regexp: '(a)(b)'}", "session.check.extract.csrf.regexp", "csrf: {regexp", "has 2 groups"},
		{"extractor without a source", "csrf: {json: csrf_token}", "csrf: {optional: true}", "session.check.extract.csrf", "csrf: {optional", "say where the value is: json, html, header, cookie or regexp"},
		{"bad extract header", "csrf: {json: csrf_token}", "csrf: {header: \"X Y\"}", "session.check.extract.csrf.header", "csrf: {header", "is not a header name"},
		{"next on the wrong kind", "    value: id\n", "    value: id\n    next: next_after\n", "bookings.paging.next", "    next: next_after\n    more", "only paging kinds cursor and link read a next value"},
		{"value on the wrong kind", "    next: next_after\n  items: loads", "    next: next_after\n    value: seq\n  items: loads", "feed.paging.value", "value: seq", "only paging kind after reads an item's value"},
		{"pages on the wrong kind", "    next: next_after\n  items: loads", "    next: next_after\n    pages: meta.pages\n  items: loads", "feed.paging.pages", "pages: meta.pages", "only paging kind page reads a page count"},
		{"after without value", "    value: id\n", "", "bookings.paging.value", "  paging:\n    kind: after", "missing; give a JSON path"},
		{"negative size", "size: 200", "size: -1", "bookings.paging.size", "size: -1", "must not be negative"},
		{"too many pages a poll", "    next: next_after\n  items: loads", "    next: next_after\n    max_pages: 500\n  items: loads", "feed.paging.max_pages", "max_pages: 500", "between 1 and 100"},
		{"page kind with a bad start", "      after: \"{{.cursor}}\"\n      limit: \"200\"\n  paging:\n    kind: after\n    start: \"0\"\n    value: id\n", "      page: \"{{.page}}\"\n  paging:\n    kind: page\n    start: first\n", "bookings.paging.start", "start: first", "a page number starts at a whole number"},
		{"page kind without .page", "      after: \"{{.cursor}}\"\n      limit: \"200\"\n  paging:\n    kind: after\n    start: \"0\"\n    value: id\n", "      after: \"{{.cursor}}\"\n  paging:\n    kind: page\n", "bookings.request", "  request:\n    url: /api/bookings", "paging kind page needs the request to send {{.page}}"},
		{"missing items", "  items: bookings\n", "", "bookings.items", "bookings:", "missing; give a JSON path"},
		{"booking fields missing id", "    booking_id: {path: id}\n", "", "bookings.fields.booking_id", "  fields:\n    key: {path: load_id}", "missing; say where the value is"},
		{"path and paths", "origin: {paths: [origin.city, origin.state], join: \", \"}", "origin: {path: origin, paths: [origin.city]}", "feed.fields.origin", "origin: {path: origin", "give path or paths, not both"},
		{"field without a path", "equipment: {path: equipment}", "equipment: {required: true}", "feed.fields.equipment.path", "equipment: {required", "missing; give the value's JSON path"},
		{"join without paths", "equipment: {path: equipment}", "equipment: {path: equipment, join: \"/\"}", "feed.fields.equipment.join", "equipment: {path: equipment, join", "only with paths"},
		{"paths on a number", "weight: {path: weight_lb, unit: lb}", "weight: {paths: [a, b], unit: lb}", "feed.fields.weight.paths", "weight: {paths", "only a text field joins several values"},
		{"unit on text", "equipment: {path: equipment}", "equipment: {path: equipment, unit: lb}", "feed.fields.equipment.unit", "equipment: {path: equipment, unit", "only a weight, distance or rate has a unit"},
		{"time on text", "equipment: {path: equipment}", "equipment: {path: equipment, time: epoch_s}", "feed.fields.equipment", "equipment: {path: equipment, time", "only a time has time, layout, zone, zone_path or zone_in_value"},
		{"zone without layout", "pickup_end: {path: pickup_end, time: rfc3339}", "pickup_end: {path: pickup_end, zone: UTC}", "feed.fields.pickup_end.time", "pickup_end: {path: pickup_end, zone", "layout, zone, zone_path and zone_in_value need time: layout"},
		{"zone and zone_path", "pickup_end: {path: pickup_end, time: rfc3339}", "pickup_end: {path: pickup_end, time: layout, layout: '2006-01-02', zone: UTC, zone_path: tz}", "feed.fields.pickup_end.zone", "pickup_end: {path: pickup_end, time: layout", "give one of zone, zone_path or zone_in_value"},
		{"result without a condition", "    - when: {status: [401]}\n      result: signed_out", "    - result: signed_out", "booking.results[5].when", "    - result: signed_out", "missing; a rule needs a condition"},
		{"booking id on taken", "      result: taken\n", "      result: taken\n      booking_id: {json: id}\n", "booking.results[1].booking_id", "booking_id: {json: id}", "only a confirmed rule reads a booking id"},
		{"no result rules", "  results:\n", "  results: []\n  old_results:\n", "booking.old_results", "old_results:", "unknown field"},
		{"bad idempotency header", "idempotency_header: Idempotency-Key", "idempotency_header: \"Idempotency Key\"", "booking.idempotency_header", "idempotency_header:", "is not a header name"},
		{"honoured and read", "idempotency:\n  read:", "idempotency:\n  honoured: true\n  read:", "idempotency", "idempotency:\n  honoured", "say honoured or read, not both"},
		{"read without path", "    path: idempotency_keys\n", "", "idempotency.read.path", "  read:", "missing; give a JSON path"},
		{"negative cache", "cache: 30s", "cache: -1s", "idempotency.read.cache", "cache: -1s", "must not be negative"},
		{"bad every_page path", `path: next_after, exists: true`, `path: "next_after.", exists: true`, "bookings.every_page[2].json.path", `path: "next_after."`, "ends with a separator"},
		{"bad total path", "    when: {json: {path: complete, equals: \"true\"}}\n", "    total: \"meta.(\"\n", "bookings.complete.total", "total: \"meta.(\"", `"(" is not closed`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Contains(t, base, c.old, "the case edits the sandbox spec")
			src := strings.Replace(base, c.old, c.new, 1)
			if c.name == "honoured without header" {
				src = strings.Replace(src, "  idempotency_header: Idempotency-Key\n", "", 1)
			}
			_, err := spec.Parse("p.yaml", []byte(src))
			var errs *spec.Errors
			require.True(t, errors.As(err, &errs), "%v", err)
			line := lineOf(t, src, c.marker)
			if strings.HasPrefix(c.marker, "\n") {
				line++
			}
			var got []string
			for _, fe := range errs.List {
				got = append(got, errs.Line(fe))
			}
			want := "p.yaml:" + itoa(line) + ": " + pathOrDoc(c.path) + ": "
			found := false
			for _, g := range got {
				if strings.HasPrefix(g, want) && strings.Contains(g, c.msg) {
					found = true
				}
			}
			require.True(t, found, "want %q…%q in\n%s", want, c.msg, strings.Join(got, "\n"))
			require.Contains(t, err.Error(), want, "Error() carries the same lines")
		})
	}
}

func pathOrDoc(p string) string {
	if p == "" {
		return "(document)"
	}
	return p
}

func itoa(n int) string {
	const digits = "0123456789"
	if n < 10 {
		return digits[n : n+1]
	}
	return itoa(n/10) + digits[n%10:n%10+1]
}

func TestEmptyAndNonMapping(t *testing.T) {
	_, err := spec.Parse("e.yaml", []byte(""))
	require.ErrorContains(t, err, "e.yaml:1: (document): the file is empty")
	_, err = spec.Parse("l.yaml", []byte("- a\n- b\n"))
	require.ErrorContains(t, err, "l.yaml:1: (document): a platform is a mapping")
}

// JSON is YAML: the same spec written as JSON validates the same way.
func TestJSONInput(t *testing.T) {
	src := `{"version": 1, "name": "j", "sign_in": {"steps": [{"name": "a", "request": {"url": "/x"}, "success": {"status": [200]}}]},
	  "session": {"signed_out": [{"status": [401]}]},
	  "feed": {"request": {"url": "/f?p={{.page}}"}, "paging": {"kind": "page"}, "items": "data",
	           "fields": {"key": {"path": "id"}, "published_at": {"path": "t", "time": "epoch_ms"}}},
	  "booking": {"request": {"method": "POST", "url": "/b/{{.key}}"}, "results": [{"when": {"status": [200]}, "result": "confirmed", "booking_id": {"json": "id"}}]},
	  "bookings": {"request": {"url": "/bk", "headers": {"X-Page": "{{.page}}"}}, "paging": {"kind": "page", "pages": "meta.pages"}, "items": "data",
	               "fields": {"key": {"path": "job"}, "booking_id": {"path": "id"}}},
	  "idempotency": {"honoured": false}}`
	s, err := spec.Parse("j.json", []byte(src))
	require.NoError(t, err)
	require.Equal(t, "1", s.Feed.Paging.Start)
	_, err = spec.Parse("j.json", []byte(strings.Replace(src, `"items": "data",`, `"items": "data", "itemz": 1,`, 1)))
	require.ErrorContains(t, err, `j.json:3: feed.itemz: unknown field "itemz"`)
}

func TestCheckPath(t *testing.T) {
	for _, ok := range []string{"a", "a.b", "loads.#.id", `data.#(attributes.kind=="load")#.id`, "a\\.b", "links.next", "@this", "a|@reverse", "[a,b]", "{a,b}", "a.0.b", "a*", "a?c"} {
		require.NoError(t, spec.CheckPath(ok), ok)
	}
	for _, bad := range []string{".a", "a.", "a..b", "a.#(b==1", "a)", "a|", `a."b"`, "@frob", " a", "a\\"} {
		require.Error(t, spec.CheckPath(bad), bad)
	}
}
