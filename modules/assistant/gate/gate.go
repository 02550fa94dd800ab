// Package gate classifies every browser action before it runs. A risky
// action (one that publishes, sends, posts, buys, pays, deletes, books or
// uploads; any submission of a form with payment fields; anything that
// would reach a domain not in the task's plan; anything matching the
// person's own list) is held until the person approves it. The gate is
// code, not prompt: nothing the model or a page says reaches it except the
// element's own properties, and its verdict cannot be lifted by the model.
package gate

import (
	"net/url"
	"regexp"
	"strings"

	"github.com/fleetwright/fleetwright/modules/assistant/browse"
)

// Policy is what the gate knows beyond the element.
type Policy struct {
	// Plan is the set of hosts (host[:port]) the task may reach.
	Plan map[string]bool
	// Phrases and Domains are the person's own risky list.
	Phrases []string
	Domains []string
}

// Verdict says whether an action is held and why.
type Verdict struct {
	Risky   bool
	Reasons []string
	// Target is the URL the action would reach, when known.
	Target string
}

func (v *Verdict) add(reason string) {
	v.Risky = true
	for _, r := range v.Reasons {
		if r == reason {
			return
		}
	}
	v.Reasons = append(v.Reasons, reason)
}

// riskyVerbs are the words of actions with effects outside the page.
var riskyVerbs = regexp.MustCompile(`(?i)\b(publish(es|ed|ing)?|post(ed|ing)?|send|sends|sent|submit|tweet|share|buy|purchase|order|place order|checkout|check out|pay|payment|donate|transfer|delete|remove|erase|destroy|book|reserve|upload|subscribe|confirm|go live|schedule)\b`)

// safePhrases are buttons that submit a form but only keep it local.
var safePhrases = regexp.MustCompile(`(?i)^\s*(save( as)? draft|search|preview|next|previous|back|cancel|filter|sort|apply filters?)\s*$`)

var paymentName = regexp.MustCompile(`(?i)(card.?num|cc.?num|credit.?card|\bcard\b|cvv|cvc|csc|security.?code|iban|expir|exp.?date|routing|account.?number)`)

// PaymentField reports whether a form field takes payment data.
func PaymentField(f browse.Field) bool {
	if strings.HasPrefix(strings.ToLower(f.Autocomplete), "cc-") {
		return true
	}
	return paymentName.MatchString(f.Name) || paymentName.MatchString(f.Label)
}

// Host returns the plan key of a URL ("" when it has none).
func Host(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	return browse.Host(u)
}

// Click classifies a click on the element.
func Click(info browse.ElementInfo, p Policy) Verdict {
	var v Verdict
	words := strings.Join([]string{info.Text, info.Label, info.Title, info.Value, info.ID, info.Name, info.DataAction}, " ")
	if info.Tag == "input" && (info.Type == "text" || info.Type == "" || info.Type == "search" || info.Type == "email") {
		// Clicking into a text box does nothing; its value is no verb.
		words = strings.Join([]string{info.Label, info.ID}, " ")
	}
	if m := riskyVerbs.FindString(words); m != "" && !safePhrases.MatchString(info.Text+info.Value) {
		v.add("its text says " + strings.ToLower(m))
	}
	for _, ph := range p.Phrases {
		if ph = strings.TrimSpace(ph); ph != "" && strings.Contains(strings.ToLower(words+" "+info.FormText), strings.ToLower(ph)) {
			v.add("matches your risky phrase “" + ph + "”")
		}
	}
	if info.Submits {
		v.Target = info.FormAction
		if info.FormMethod == "post" && !safePhrases.MatchString(info.Text+info.Value) {
			v.add("it submits a form (POST)")
		}
		if m := riskyVerbs.FindString(info.FormText + " " + pathOf(info.FormAction)); m != "" {
			v.add("its form says " + strings.ToLower(m))
		}
		for _, f := range info.Fields {
			if PaymentField(f) {
				v.add("the form has payment fields")
				break
			}
			if f.Type == "file" && f.Value != "" {
				v.add("the form uploads a file")
			}
		}
	}
	if info.Tag == "input" && info.Type == "file" {
		v.add("it opens a file upload")
	}
	if info.Download {
		v.add("it downloads a file")
	}
	if info.Href != "" && !strings.HasPrefix(strings.ToLower(info.Href), "javascript:") {
		v.Target = info.Href
	}
	if v.Target != "" {
		checkTarget(&v, v.Target, p)
	}
	return v
}

// Select classifies choosing option in a select, like a click on that
// option: its words (the select's label and the option's text), the
// person's phrases, and a select that uploads or sits in a payment form.
func Select(info browse.ElementInfo, option string, p Policy) Verdict {
	var v Verdict
	words := strings.Join([]string{option, info.Label, info.Title, info.ID, info.Name, info.DataAction}, " ")
	if m := riskyVerbs.FindString(words); m != "" {
		v.add("its text says " + strings.ToLower(m))
	}
	for _, ph := range p.Phrases {
		if ph = strings.TrimSpace(ph); ph != "" && strings.Contains(strings.ToLower(words+" "+info.FormText), strings.ToLower(ph)) {
			v.add("matches your risky phrase “" + ph + "”")
		}
	}
	if PaymentField(browse.Field{Name: info.Name, Label: info.Label}) {
		v.add("it is a payment field")
	}
	return v
}

func pathOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.NewReplacer("/", " ", "-", " ", "_", " ").Replace(u.Path)
}

// Navigate classifies loading a URL (navigate or open a tab).
func Navigate(target string, p Policy) Verdict {
	v := Verdict{Target: target}
	checkTarget(&v, target, p)
	return v
}

func checkTarget(v *Verdict, target string, p Policy) {
	h := Host(target)
	if h == "" {
		return
	}
	if !p.Plan[h] {
		v.add("it reaches " + h + ", a domain not in the task's plan")
	}
	for _, d := range p.Domains {
		d = strings.ToLower(strings.TrimSpace(d))
		if d != "" && (h == d || strings.HasSuffix(h, "."+d) || strings.HasPrefix(h, d+":")) {
			v.add("it reaches " + h + ", on your risky list")
		}
	}
}

// Origin returns the origin of an http(s) URL (scheme://host[:port],
// lower-case, the scheme's default port left out), or "" when it has none.
// A stored secret names the origins it belongs to in this form.
func Origin(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return ""
	}
	h := strings.ToLower(u.Hostname())
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	if p := u.Port(); p != "" && !(u.Scheme == "http" && p == "80") && !(u.Scheme == "https" && p == "443") {
		h += ":" + p
	}
	return u.Scheme + "://" + h
}
