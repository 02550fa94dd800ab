package spec

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
)

func (v *validator) browser(s *Spec) {
	b := s.Browser
	if b == nil {
		return
	}
	base := scope{vars: []string{VarBase}}

	if b.SignIn.URL == "" {
		v.add("browser.sign_in.url", "missing; give the sign-in page (a path from the base URL, or absolute)")
	} else {
		v.pageURL("browser.sign_in.url", b.SignIn.URL, base)
	}
	if len(b.SignIn.Steps) == 0 {
		v.add("browser.sign_in.steps", "missing; list the sign-in forms (at least one)")
	}
	seen := map[string]bool{}
	otp := 0
	for i := range b.SignIn.Steps {
		st := &b.SignIn.Steps[i]
		p := fmt.Sprintf("browser.sign_in.steps[%d]", i)
		if st.Name == "" {
			v.add(p+".name", "missing; name the step (it names the step in errors)")
		} else if seen[st.Name] {
			v.add(p+".name", "%q names an earlier step too", st.Name)
		}
		seen[st.Name] = true
		sc := base.with(VarUsername, VarPassword)
		if st.OneTimeCode {
			otp++
			sc = sc.with(VarCode)
			if otp > 1 {
				v.add(p+".one_time_code", "only one step types the one-time code")
			}
		}
		var used []string
		for j, f := range st.Fields {
			fp := fmt.Sprintf("%s.fields[%d]", p, j)
			v.css(fp+".selector", f.Selector)
			used = append(used, v.template(fp+".value", f.Value, sc, true)...)
		}
		if st.OneTimeCode && !slices.Contains(used, VarCode) {
			v.add(p+".fields", "a one_time_code step must type {{.code}} into a field")
		}
		v.css(p+".submit", st.Submit)
		if st.CodeReused != nil {
			if !st.OneTimeCode {
				v.add(p+".code_reused", "only a one_time_code step has a \"code already used\" page")
			}
			v.pageCond(p+".code_reused", st.CodeReused, base)
		}
		for j := range st.Fail {
			fp := fmt.Sprintf("%s.fail[%d]", p, j)
			v.pageCond(fp+".when", &st.Fail[j].When, base)
			if !slices.Contains(failErrs, st.Fail[j].Error) {
				v.add(fp+".error", "%q: say credentials, code_refused, captcha or unavailable", st.Fail[j].Error)
			}
		}
		if st.Success.empty() {
			v.add(p+".success", "missing; say what page means the step worked (url_path, element, visible or text)")
		} else {
			v.pageCond(p+".success", &st.Success, base)
		}
	}

	j := &b.Jobs
	if j.URL == "" {
		v.add("browser.jobs.url", "missing; give the jobs view the page keeps open")
	} else {
		v.pageURL("browser.jobs.url", j.URL, base)
	}
	if len(j.Responses) == 0 {
		v.add("browser.jobs.responses", "missing; say which of the page's requests answer with jobs (url, method, a body condition)")
	}
	for i := range j.Responses {
		v.requestMatch(fmt.Sprintf("browser.jobs.responses[%d]", i), &j.Responses[i], http.MethodGet, base)
	}
	v.jsonPath("browser.jobs.items", j.Items, false)
	v.field("browser.jobs.server_time", j.ServerTime, kindTime, false)

	bk := &b.Booking
	if bk.Control == "" {
		v.add("browser.booking.control", "missing; give the CSS selector of one job's booking control, e.g. '[data-id={{css .key}}] button'")
	} else if used := v.template("browser.booking.control", bk.Control, base.with(VarKey), true); !slices.Contains(used, VarKey) {
		v.add("browser.booking.control", "the control's selector must name the job ({{css .key}}): a control found by position books another job when rows move")
	}
	v.requestMatch("browser.booking.request", &bk.Request, http.MethodPost, base)
	v.keyAt("browser.booking.key", &bk.Key)

	ps := &b.Page
	if len(ps.SignedOut) == 0 {
		v.add("browser.page.signed_out", "missing; say what a signed-out page looks like (e.g. - url_path: /login)")
	}
	for i := range ps.SignedOut {
		v.pageCond(fmt.Sprintf("browser.page.signed_out[%d]", i), &ps.SignedOut[i], base)
	}
	for i := range ps.Captcha {
		v.pageCond(fmt.Sprintf("browser.page.captcha[%d]", i), &ps.Captcha[i], base)
	}
	if ps.Ready != "" {
		v.css("browser.page.ready", ps.Ready)
	}

	var names []string
	for _, name := range sortedPV(b.Vars) {
		p := "browser.vars." + name
		if !varRe.MatchString(name) {
			v.add(p, "%q: name a value with lower case letters, digits and _", name)
		}
		v.css(p+".selector", b.Vars[name].Selector)
		names = append(names, name)
	}
	// The page sends the bookings look-up itself: the values its request
	// names must be ones the page gives.
	sc := base.with(VarVars, VarCursor, VarPage)
	sc.named = names
	check := &validator{loc: v.loc}
	r := s.Bookings.Request
	check.request("bookings.request", &r, sc)
	for _, e := range check.errs {
		if strings.Contains(e.Msg, ".vars.") {
			v.add("browser.vars", "the page sends bookings.request, whose %s: %s; read the value from the page here", e.Path, e.Msg)
		}
	}
}

func sortedPV(m map[string]PageValue) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (c *PageCond) empty() bool {
	return c.URLPath == "" && c.Element == "" && c.Visible == "" && c.Text == nil
}

func (v *validator) pageCond(p string, c *PageCond, sc scope) {
	if c.empty() {
		v.add(p, "an empty condition matches every page; give url_path, element, visible or text")
		return
	}
	if c.URLPath != "" && !strings.HasPrefix(c.URLPath, "/") {
		v.add(p+".url_path", "%q: a path starts with /", c.URLPath)
	}
	if c.Element != "" {
		v.css(p+".element", c.Element)
	}
	if c.Visible != "" {
		v.css(p+".visible", c.Visible)
	}
	if c.Text != nil {
		v.css(p+".text.selector", c.Text.Selector)
		v.match(p+".text", &c.Text.Match, sc)
	}
}

func (v *validator) pageURL(p, u string, sc scope) {
	v.template(p, u, sc, true)
	if !strings.HasPrefix(u, "/") && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "{{") {
		v.add(p, "%q: write a path from the base URL (/loads) or an absolute http(s) URL", u)
	}
}

func (v *validator) requestMatch(p string, r *RequestMatch, method string, sc scope) {
	if r.Method == "" {
		r.Method = method
	}
	if !slices.Contains(methods, r.Method) {
		v.add(p+".method", "%q: say GET, POST, PUT, PATCH or DELETE", r.Method)
	}
	switch {
	case r.URL == "":
		v.add(p+".url", "missing; give the request's URL (a path from the base URL or absolute; * for any run of characters)")
	case strings.Contains(r.URL, "?"):
		v.add(p+".url", "%q: leave the query out (the URL is matched without it); test the body with json, form or body", r.URL)
	case !strings.HasPrefix(r.URL, "/") && !strings.HasPrefix(r.URL, "http://") && !strings.HasPrefix(r.URL, "https://"):
		v.add(p+".url", "%q: write a path from the base URL (/api/loads) or an absolute http(s) URL", r.URL)
	}
	if r.JSON != nil {
		v.jsonPath(p+".json.path", r.JSON.Path, true)
		v.match(p+".json", &r.JSON.Match, sc)
	}
	if r.Form != nil {
		if r.Form.Name == "" {
			v.add(p+".form.name", "missing; give the form field's name")
		}
		v.match(p+".form", &r.Form.Match, sc)
	}
	if r.Body != nil {
		v.match(p+".body", r.Body, sc)
	}
	if (r.JSON != nil || r.Form != nil || r.Body != nil) && r.Method == http.MethodGet {
		v.add(p+".method", "a GET request has no body to test; say POST (or another method)")
	}
}

func (v *validator) keyAt(p string, k *KeyAt) {
	n := 0
	if k.JSON != "" {
		n++
		v.jsonPath(p+".json", k.JSON, true)
	}
	if k.Form != "" {
		n++
	}
	if k.Query != "" {
		n++
	}
	if k.Path != "" {
		n++
		if re, err := regexp.Compile(k.Path); err != nil {
			v.add(p+".path", "%q is not a valid regular expression: %v", k.Path, err)
		} else if re.NumSubexp() != 1 {
			v.add(p+".path", "%q has %d groups; give one: the key", k.Path, re.NumSubexp())
		}
	}
	switch {
	case n == 0:
		v.add(p, "missing; say where the booking request carries the job's key: json, form, query or path")
	case n > 1:
		v.add(p, "say one of json, form, query or path")
	}
}
