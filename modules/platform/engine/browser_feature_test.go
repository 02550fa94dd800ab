package engine_test

// The browser section's features over a real HTTP server in real Chromium,
// on a platform shaped nothing like the sandbox board: a sign-in that
// answers in place (a script, no new page), jobs in GraphQL answers told by
// their operation name, a booking request that carries its key in the URL's
// path, page values (a CSRF token) for the look-up the page sends.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-rod/rod/lib/proto"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/browser"
	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/platform/engine"
	"github.com/fleetwright/fleetwright/modules/platform/spec"
	"github.com/fleetwright/fleetwright/modules/wire"
)

const pageSignIn = `<html><body>
<form id="signin" onsubmit="return false">
<input id="email"><input id="pass" type="password"><button id="go" type="button">Go</button>
<p class="msg"></p>
<div id="mfa" style="display:none"><input id="otp"><button id="verify" type="button">Verify</button></div>
</form>
<script>
const msg = document.querySelector(".msg");
document.getElementById("go").onclick = () => fetch("/auth", {method: "POST", headers: {"Content-Type": "application/json"},
	body: JSON.stringify({email: email.value, pass: pass.value})}).then(r => {
	if (r.ok) { document.getElementById("mfa").style.display = "block"; } else { msg.textContent = "wrong email or password"; } });
document.getElementById("verify").onclick = () => fetch("/auth/otp", {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"},
	body: "otp=" + encodeURIComponent(otp.value)}).then(r => r.text().then(t => { if (r.ok) { location.href = "/app"; } else { msg.textContent = t; } }));
</script></body></html>`

const pageApp = `<html><head><meta name="csrf" content="C-123"></head><body><h2>Open loads</h2><ul id="jobs"></ul>
<script>
const ul = document.getElementById("jobs"); const seen = {};
function gql(op) { return fetch("/graphql", {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify({operationName: op, query: "{" + op + "}"})}); }
function poll() {
	gql("Me");
	gql("OpenLoads").then(r => r.json()).then(d => {
		for (const l of d.data.openLoads.items) {
			if (seen[l.id]) continue; seen[l.id] = 1;
			const li = document.createElement("li"); li.dataset.ref = l.id;
			const a = document.createElement("a"); a.className = "take"; a.href = "#"; a.textContent = "Take";
			a.onclick = (ev) => { ev.preventDefault(); fetch("/loads/" + encodeURIComponent(l.id) + "/take", {method: "POST",
				headers: {"Content-Type": "application/x-www-form-urlencoded"}, body: "confirm=1"}).then(r => r.json()).then(d => { if (d.captcha) location.href = "/verify"; }); };
			li.appendChild(a); ul.insertBefore(li, ul.firstChild);
		}
	});
}
setInterval(poll, 200); poll();
</script></body></html>`

const browserSection = `
browser:
  sign_in:
    url: /signin
    steps:
      - name: password
        navigates: false
        fields:
          - {selector: "#email", value: "{{.username}}"}
          - {selector: "#pass", value: "{{.password}}"}
        submit: "#go"
        fail:
          - when: {text: {selector: .msg, contains: wrong}}
            error: credentials
        success: {visible: "#mfa"}
      - name: code
        one_time_code: true
        navigates: false
        fields: [{selector: "#otp", value: "{{.code}}"}]
        submit: "#verify"
        fail:
          - when: {text: {selector: .msg, contains: invalid}}
            error: code_refused
        success: {url_path: /app, element: "#jobs"}
  jobs:
    url: /app
    responses:
      - {method: POST, url: /graphql, json: {path: operationName, equals: OpenLoads}}
    items: data.openLoads.items
  booking:
    control: "li[data-ref={{css .key}}] a.take"
    request: {url: "/loads/*/take", form: {name: confirm, equals: "1"}}
    key: {path: '^/loads/([^/]+)/take$'}
  page:
    captcha: [{text: {selector: h1, contains: Are you human}}]
    signed_out: [{element: "form#signin"}]
    ready: "#jobs"
  vars:
    csrf: {selector: 'meta[name=csrf]', attr: content}
`

func browserSpec(t *testing.T) *spec.Spec {
	t.Helper()
	over := sections{
		"sign_in": `
sign_in:
  steps:
    - name: password
      request: {method: POST, url: /login, json: '{"user":{{json .username}},"pass":{{json .password}}}'}
      success: {status: [200]}
      extract:
        token: {json: token}
        csrf: {json: csrf}
`,
		"booking": `
booking:
  request: {method: POST, url: /book, json: '{"id":{{json .key}}}'}
  results:
    - when: {status: [200], json: {path: result, equals: ok}}
      result: confirmed
      booking_id: {json: booking.id}
    - when: {status: [403], json: {path: captcha, equals: "true"}}
      result: captcha
`,
		"bookings": `
bookings:
  request: {url: /bookings, query: {after: "{{.cursor}}"}, headers: {X-CSRF: "{{.vars.csrf}}"}}
  paging: {kind: after, value: id}
  items: items
  fields:
    key: {path: job}
    booking_id: {path: id}
`,
	}
	var b strings.Builder
	b.WriteString("version: 1\nname: fake\n")
	for _, k := range []string{"sign_in", "session", "feed", "booking", "bookings", "idempotency"} {
		if v, ok := over[k]; ok {
			b.WriteString(v)
		} else {
			b.WriteString(defaults[k])
		}
	}
	b.WriteString(browserSection)
	s, err := spec.Parse("fake.yaml", []byte(b.String()))
	require.NoError(t, err, b.String())
	return s
}

// pageServer is the fake platform's web app.
type pageServer struct {
	mu      sync.Mutex
	captcha bool
	broken  bool
	csrf    []string
	takes   []string
}

func (ps *pageServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	signedIn := false
	if c, err := r.Cookie("sid"); err == nil && c.Value == "S1" {
		signedIn = true
	}
	html := func(status int, body string) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}
	switch {
	case r.Method == "GET" && r.URL.Path == "/signin":
		html(200, pageSignIn)
	case r.Method == "POST" && r.URL.Path == "/auth":
		var v struct{ Email, Pass string }
		_ = jsonDecode(r, &v)
		if v.Email != creds.Username || v.Pass != creds.Password.Reveal() {
			w.WriteHeader(403)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: "pending", Value: "1", Path: "/"})
		w.WriteHeader(204)
	case r.Method == "POST" && r.URL.Path == "/auth/otp":
		_ = r.ParseForm()
		if c, err := r.Cookie("pending"); err != nil || c.Value != "1" || len(r.PostForm.Get("otp")) != 6 {
			w.WriteHeader(400)
			_, _ = w.Write([]byte("invalid code"))
			return
		}
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: "S1", Path: "/"})
		w.WriteHeader(204)
	case r.Method == "GET" && r.URL.Path == "/app":
		switch {
		case !signedIn:
			http.Redirect(w, r, "/signin", http.StatusFound)
		case ps.broken:
			html(503, "<h1>Service unavailable</h1>")
		default:
			html(200, pageApp)
		}
	case r.Method == "GET" && r.URL.Path == "/verify":
		html(200, "<h1>Are you human?</h1>")
	case !signedIn:
		writeJSON(w, 401, map[string]any{"error": "signed_out"})
	case r.Method == "POST" && r.URL.Path == "/graphql":
		var v struct{ OperationName string }
		_ = jsonDecode(r, &v)
		if v.OperationName == "OpenLoads" {
			writeJSON(w, 200, map[string]any{"data": map[string]any{"openLoads": map[string]any{"items": []map[string]any{
				{"id": "L-1", "ts": 1_700_000_000_000}, {"id": `L"2 x`, "ts": 1_700_000_001_000}}}}})
			return
		}
		writeJSON(w, 200, map[string]any{"data": map[string]any{"me": map[string]any{"name": "u1"}}})
	case r.Method == "POST" && strings.HasPrefix(r.URL.Path, "/loads/"):
		ps.takes = append(ps.takes, r.URL.Path)
		if ps.captcha {
			writeJSON(w, 403, map[string]any{"captcha": true})
			return
		}
		writeJSON(w, 200, map[string]any{"result": "ok", "booking": map[string]any{"id": "B-9"}})
	case r.Method == "GET" && r.URL.Path == "/bookings":
		ps.csrf = append(ps.csrf, r.Header.Get("X-CSRF"))
		items := []map[string]any{}
		if r.URL.Query().Get("after") == "" {
			items = append(items, map[string]any{"id": "1", "job": `L"2 x`})
		}
		writeJSON(w, 200, map[string]any{"items": items})
	default:
		http.NotFound(w, r)
	}
}

func TestBrowserFeatures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ps := &pageServer{}
	srv := httptest.NewServer(ps)
	defer srv.Close()
	a, err := engine.New(browserSpec(t), srv.URL)
	require.NoError(t, err)
	bs := a.Browser()
	b, err := browser.Launch(ctx, browser.Options{})
	require.NoError(t, err)
	defer b.Close()
	c := credsFor(srv.URL)

	// A wrong password is told by the message the page shows in place.
	p0, err := b.Page(ctx)
	require.NoError(t, err)
	bad := c
	bad.Password = wire.NewSecret("wrong-pw-1")
	err = bs.Login(ctx, p0, bad, &platform.TOTP{Secret: c.TOTPSecret})
	require.ErrorIs(t, err, platform.ErrCredentials)
	require.NotContains(t, err.Error(), "wrong-pw-1")
	_ = p0.Close()

	// Credentials not sealed for the platform's origin are never typed.
	p0, err = b.Page(ctx)
	require.NoError(t, err)
	err = bs.Login(ctx, p0, credsFor("https://elsewhere.example"), &platform.TOTP{Secret: c.TOTPSecret})
	require.ErrorIs(t, err, wire.ErrOriginNotBound)
	_ = p0.Close()

	p, err := b.Page(ctx)
	require.NoError(t, err)
	defer p.Close()
	n := watchNet(t, ctx, p, bs)
	var mu sync.Mutex
	ops := map[string]bool{} // operation name → told as jobs
	pc := p.Context(ctx)
	go pc.EachEvent(func(e *proto.NetworkRequestWillBeSent) {
		if !strings.HasSuffix(e.Request.URL, "/graphql") {
			return
		}
		u, _ := url.Parse(e.Request.URL)
		op := "Me"
		if strings.Contains(e.Request.PostData, "OpenLoads") {
			op = "OpenLoads"
		}
		mu.Lock()
		ops[op] = bs.IsJobsRequest(e.Request.Method, u, []byte(e.Request.PostData))
		mu.Unlock()
	})()
	require.NoError(t, bs.Login(ctx, p, c, &platform.TOTP{Secret: c.TOTPSecret}))
	require.Equal(t, "/app", pagePath(t, p))
	st, err := bs.State(ctx, p)
	require.NoError(t, err)
	require.Equal(t, platform.PageOK, st)

	// Jobs: only the OpenLoads answers, read with the feed's fields.
	var jobs []wire.Job
	require.Eventually(t, func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		if len(n.jobs) == 0 {
			return false
		}
		jobs, err = bs.ParseJobs(n.jobs[0])
		require.NoError(t, err)
		return true
	}, 20*time.Second, 50*time.Millisecond)
	require.Len(t, jobs, 2)
	require.Equal(t, `L"2 x`, jobs[1].Key)
	require.True(t, time.UnixMilli(1_700_000_001_000).Equal(jobs[1].PublishedAt))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		_, me := ops["Me"]
		return me && ops["OpenLoads"]
	}, 10*time.Second, 50*time.Millisecond)
	mu.Lock()
	require.False(t, ops["Me"], "another operation at the same URL carries no jobs")
	mu.Unlock()

	// Booking: the control of the job whose key needs quoting; its request
	// is told by URL pattern and form field, its key read from the path.
	keys := make(chan string, 4)
	go pc.EachEvent(func(e *proto.FetchRequestPaused) {
		u, _ := url.Parse(e.Request.URL)
		body := []byte(e.Request.PostData)
		if bs.IsBookRequest(e.Request.Method, u, body) {
			keys <- bs.BookRequestKey(u, body)
		} else {
			keys <- "not a booking: " + e.Request.URL
		}
		_ = proto.FetchContinueRequest{RequestID: e.RequestID}.Call(pc)
	})()
	require.NoError(t, proto.FetchEnable{Patterns: []*proto.FetchRequestPattern{{URLPattern: bs.BookRequestPattern(), RequestStage: proto.FetchRequestStageRequest}}}.Call(p))
	require.NoError(t, bs.ClickBook(ctx, p, `L"2 x`))
	select {
	case k := <-keys:
		require.Equal(t, `L"2 x`, k)
	case <-time.After(20 * time.Second):
		t.Fatal("no booking request was paused")
	}
	var ans bookAnswer
	require.Eventually(t, func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		if len(n.book) == 0 {
			return false
		}
		ans = n.book[0]
		return true
	}, 20*time.Second, 50*time.Millisecond)
	r := bs.ParseBookResponse(ans.status, ans.header, ans.body)
	require.Equal(t, wire.ResultConfirmed, r.Result, r.Detail)
	require.Equal(t, "B-9", r.BookingID)

	// The look-up the page sends carries the page's CSRF value.
	bk, err := bs.Bookings(ctx, p, "")
	require.NoError(t, err)
	require.True(t, bk.Complete)
	require.NotEmpty(t, bk.Next)
	require.Equal(t, `L"2 x`, bk.Bookings[0].Key)
	bk, err = bs.Bookings(ctx, p, bk.Next)
	require.NoError(t, err)
	require.True(t, bk.Complete)
	require.Empty(t, bk.Next)
	ps.mu.Lock()
	require.Equal(t, []string{"C-123", "C-123"}, ps.csrf)
	ps.mu.Unlock()

	// A captcha answer sends the page to a verification page.
	ps.mu.Lock()
	ps.captcha = true
	ps.mu.Unlock()
	require.NoError(t, bs.ClickBook(ctx, p, "L-1"))
	require.Equal(t, "L-1", <-keys)
	require.Eventually(t, func() bool {
		st, err := bs.State(ctx, p)
		return err == nil && st == platform.PageCaptcha
	}, 20*time.Second, 50*time.Millisecond)
	require.NoError(t, proto.FetchDisable{}.Call(p))

	// The jobs view served as an error page is broken.
	ps.mu.Lock()
	ps.broken = true
	ps.mu.Unlock()
	require.NoError(t, p.Navigate(bs.JobsURL()))
	require.NoError(t, p.WaitLoad())
	st, err = bs.State(ctx, p)
	require.NoError(t, err)
	require.Equal(t, platform.PageBroken, st)

	// Signed out: the page shows the sign-in form; the look-up says so.
	require.NoError(t, proto.NetworkClearBrowserCookies{}.Call(p))
	require.NoError(t, p.Navigate(bs.JobsURL()))
	require.NoError(t, p.WaitLoad())
	st, err = bs.State(ctx, p)
	require.NoError(t, err)
	require.Equal(t, platform.PageSignedOut, st)
	_, err = bs.Bookings(ctx, p, "")
	require.ErrorIs(t, err, platform.ErrSignedOut)
}

// Where a booking request carries its key, and which requests carry jobs,
// for each way the schema says it.
func TestBrowserRequestMatching(t *testing.T) {
	base := browserSpec(t)
	with := func(edit func(b *spec.Browser)) platform.Browser {
		s := *base
		bc := *base.Browser
		edit(&bc)
		s.Browser = &bc
		a, err := engine.New(&s, "http://127.0.0.1:9")
		require.NoError(t, err)
		return a.Browser()
	}
	u := func(raw string) *url.URL {
		v, err := url.Parse(raw)
		require.NoError(t, err)
		return v
	}
	bs := with(func(*spec.Browser) {})
	require.Equal(t, "http://127.0.0.1:9/loads/*/take*", bs.BookRequestPattern())
	require.True(t, bs.IsBookRequest("POST", u("http://127.0.0.1:9/loads/A/take"), []byte("confirm=1")))
	require.False(t, bs.IsBookRequest("POST", u("http://127.0.0.1:9/loads/A/take"), []byte("confirm=0")), "the form field must match")
	require.False(t, bs.IsBookRequest("GET", u("http://127.0.0.1:9/loads/A/take"), nil), "the method must match")
	require.False(t, bs.IsBookRequest("POST", u("http://other.example/loads/A/take"), []byte("confirm=1")), "another origin never")
	require.Equal(t, "A", bs.BookRequestKey(u("http://127.0.0.1:9/loads/A/take"), nil))

	for _, c := range []struct {
		key  spec.KeyAt
		u    string
		body string
		want string
	}{
		{spec.KeyAt{JSON: "load.id"}, "http://127.0.0.1:9/book", `{"load":{"id":"J-1"}}`, "J-1"},
		{spec.KeyAt{JSON: "load.id"}, "http://127.0.0.1:9/book", `{"load":{"id":77}}`, "77"},
		{spec.KeyAt{JSON: "load"}, "http://127.0.0.1:9/book", `{"load":{"id":77}}`, ""},
		{spec.KeyAt{Form: "load_id"}, "http://127.0.0.1:9/book", "load_id=F-1&x=2", "F-1"},
		{spec.KeyAt{Query: "id"}, "http://127.0.0.1:9/book?id=Q-1", "", "Q-1"},
	} {
		k := c.key
		bs := with(func(b *spec.Browser) { b.Booking.Key = k })
		require.Equal(t, c.want, bs.BookRequestKey(u(c.u), []byte(c.body)), fmt.Sprintf("%+v", c.key))
	}

	eq := func(s string) *string { return &s }
	for _, c := range []struct {
		m      spec.RequestMatch
		method string
		u      string
		body   string
		want   bool
	}{
		{spec.RequestMatch{Method: "GET", URL: "/api/v*/loads"}, "GET", "http://127.0.0.1:9/api/v2/loads?x=1", "", true},
		{spec.RequestMatch{Method: "GET", URL: "/api/v*/loads"}, "GET", "http://127.0.0.1:9/api/v2/loads/old", "", false},
		{spec.RequestMatch{Method: "POST", URL: "/q", Form: &spec.HeaderMatch{Name: "op", Match: spec.Match{Equals: eq("loads")}}}, "POST", "http://127.0.0.1:9/q", "op=loads", true},
		{spec.RequestMatch{Method: "POST", URL: "/q", Form: &spec.HeaderMatch{Name: "op", Match: spec.Match{Equals: eq("loads")}}}, "POST", "http://127.0.0.1:9/q", "op=me", false},
		{spec.RequestMatch{Method: "POST", URL: "/q", Body: &spec.Match{Contains: "query Loads"}}, "POST", "http://127.0.0.1:9/q", `{"query":"query Loads {…}"}`, true},
		{spec.RequestMatch{Method: "POST", URL: "http://127.0.0.1:9/q", Body: &spec.Match{Contains: "query Loads"}}, "POST", "http://127.0.0.1:9/q", `{"query":"query Me"}`, false},
	} {
		m := c.m
		bs := with(func(b *spec.Browser) { b.Jobs.Responses = []spec.RequestMatch{m} })
		require.Equal(t, c.want, bs.IsJobsRequest(c.method, u(c.u), []byte(c.body)), fmt.Sprintf("%+v %s %s", c.m, c.u, c.body))
	}
}

func jsonDecode(r *http.Request, v any) error { return json.NewDecoder(r.Body).Decode(v) }
