package assistant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/fleetwright/fleetwright/modules/assistant/browse"
	"github.com/fleetwright/fleetwright/modules/assistant/gate"
	"github.com/fleetwright/fleetwright/modules/assistant/store"
)

// Action is what the approval screen shows: exactly what will happen.
type Action struct {
	Kind     string         `json:"kind"` // click, navigate, open_tab
	Tab      string         `json:"tab"`
	PageURL  string         `json:"page_url"`
	Element  int            `json:"element,omitempty"`
	Text     string         `json:"text"`
	Target   string         `json:"target"`
	Method   string         `json:"method,omitempty"`
	Reasons  []string       `json:"reasons"`
	Fields   []ActionField  `json:"fields,omitempty"`
	Labelled *bool          `json:"labelled,omitempty"`
	Info     map[string]any `json:"-"`
}

// ActionField is one value the action would submit (secrets shown by name).
type ActionField struct {
	Name    string `json:"name"`
	Label   string `json:"label"`
	Value   string `json:"value"`
	Payment bool   `json:"payment"`
	Secret  bool   `json:"secret"`
}

func (r *Runner) do(ctx context.Context, ru *run, name string, args any) outcome {
	out, err := r.doTool(ctx, ru, name, args)
	if err != nil {
		out.result = "error: " + err.Error()
	}
	for _, b := range r.Browser.Blocked() {
		if len(ru.tainted) > 0 {
			// A page holding a secret could spell it into the path of a
			// request it knows will be refused: only the site is told.
			o := gate.Origin(strings.Fields(b)[0])
			if o == "" {
				o = "an address"
			}
			b = o + " (its path withheld: a secret was typed in this task)"
		}
		out.result += "\n(the browser refused a request to " + b + ")"
	}
	return out
}

// taintNote is what the model gets instead of a tainted tab's text.
func taintNote(ru *run, tab string) string {
	return fmt.Sprintf("tab %s: its text, title and address are withheld from you because {{secret:%s}} was typed into it, and the page could echo it in any form (reversed, spaced out, encoded). To read on, load a page in it with navigate, or open another tab.", tab, ru.tainted[tab])
}

// tabLine describes a tab to the model: a tainted tab by its site only.
func tabLine(ru *run, name string, t browse.Tab) string {
	if _, ok := ru.tainted[name]; ok {
		return fmt.Sprintf("(withheld: a secret was typed into it) at a page of %s", gate.Origin(t.URL))
	}
	return fmt.Sprintf("%q at %s", t.Title, t.URL)
}

func (r *Runner) tab(ru *run) (string, error) {
	if ru.cur == "" {
		return "", errors.New("no tab is open: open_tab first")
	}
	id, ok := ru.task.Tabs[ru.cur]
	if !ok {
		return "", fmt.Errorf("tab %q is not open", ru.cur)
	}
	return id, nil
}

func (r *Runner) shot(ru *run) []byte {
	id, err := r.tab(ru)
	if err != nil {
		return nil
	}
	b, _ := r.Browser.Screenshot(id)
	return b
}

var placeholder = regexp.MustCompile(`\{\{(secret|draft):([a-z][a-z0-9_-]{0,31})\}\}`)

// secretNames lists the secrets text asks for, once each, in order.
func secretNames(text string) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range placeholder.FindAllStringSubmatch(text, -1) {
		if m[1] == "secret" && !seen[m[2]] {
			seen[m[2]] = true
			out = append(out, m[2])
		}
	}
	return out
}

// destinations are the origins a value typed into an element can reach:
// the page's and, in a form, every URL the form can be sent to.
func destinations(info browse.ElementInfo) []string {
	out := []string{gate.Origin(info.PageURL)}
	if info.InForm {
		targets := info.FormTargets
		if len(targets) == 0 {
			targets = []string{info.FormAction}
		}
		for _, t := range targets {
			o := gate.Origin(t)
			if o == "" {
				o = t // javascript:, data: and the like: no origin a secret names
			}
			out = append(out, o)
		}
	}
	return out
}

// refuseSecrets says why the named secrets may not go to dests ("" when
// every one of them belongs to every destination). It names secrets and
// origins, never values.
func refuseSecrets(ru *run, names, dests []string) string {
	for _, n := range names {
		rule, ok := ru.rules[n]
		if !ok {
			continue // expand says there is no such secret
		}
		for _, d := range dests {
			if rule.origins[d] {
				continue
			}
			belongs := "no site (it was stored before secrets named theirs: store it again with its site)"
			if len(rule.origins) > 0 {
				belongs = strings.Join(sortedKeys(rule.origins), ", ")
			}
			where := "this page is on " + d
			if d != dests[0] {
				where = "this field's form is sent to " + d
			}
			if d == "" {
				where = "this page has no web origin"
			}
			return fmt.Sprintf("refused to type {{secret:%s}}: it belongs to %s, and %s. Nothing was typed", n, belongs, where)
		}
	}
	return ""
}

// askSecrets lists the named secrets the person has not allowed on every
// destination without asking.
func askSecrets(ru *run, names, dests []string) []string {
	var out []string
	for _, n := range names {
		for _, d := range dests {
			if !ru.rules[n].noAsk[d] {
				out = append(out, n)
				break
			}
		}
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// expand fills placeholders at typing time. It reports whether a draft was
// used. Callers have checked the secrets' origins (refuseSecrets).
func (r *Runner) expand(ctx context.Context, ru *run, text string) (string, bool, error) {
	drafts, err := r.St.Drafts(ctx, ru.task.ID)
	if err != nil {
		return "", false, err
	}
	var missing error
	usedDraft := false
	out := placeholder.ReplaceAllStringFunc(text, func(m string) string {
		p := placeholder.FindStringSubmatch(m)
		if p[1] == "secret" {
			v, ok := ru.secrets[p[2]]
			if !ok {
				missing = fmt.Errorf("there is no secret named %s", p[2])
			}
			return v
		}
		v, ok := drafts[p[2]]
		if !ok {
			missing = fmt.Errorf("there is no draft named %s", p[2])
		}
		usedDraft = true
		return v
	})
	return out, usedDraft, missing
}

// refused ends the task: a secret was asked for where it does not belong.
// A page that asks for it is an attack or a mistake; either way the
// person decides what happens next, not the model.
func refused(why string) outcome {
	return outcome{status: store.StatusStopped, reason: why, result: why}
}

func (r *Runner) doTool(ctx context.Context, ru *run, name string, args any) (outcome, error) {
	switch a := args.(type) {
	case noArgs:
		switch name {
		case "list_tabs":
			return outcome{result: r.listTabs(ru)}, nil
		case "read_page":
			return r.readPage(ctx, ru)
		case "screenshot":
			return outcome{result: "screenshot saved with this step", shot: r.shot(ru)}, nil
		}
	case openTabArgs:
		if _, ok := ru.task.Tabs[a.Name]; ok {
			return outcome{}, fmt.Errorf("a tab named %s is already open: switch_tab to it", a.Name)
		}
		if l, note := r.tabLimit(ctx, ru); l > 0 && len(ru.task.Tabs) >= l {
			return outcome{status: store.StatusStopped, reason: fmt.Sprintf("limit reached: open tabs (%d of %d%s)", len(ru.task.Tabs), l, note), result: "the tab limit stops the task"}, nil
		}
		if v := gate.Navigate(a.URL, ru.policy); v.Risky {
			ok, o := r.hold(ctx, ru, Action{Kind: "open_tab", Tab: a.Name, Target: a.URL, Text: "open a tab at " + a.URL, Reasons: v.Reasons}, nil)
			if !ok {
				return o, nil
			}
			r.allowHost(ru, a.URL)
		}
		t, err := r.Browser.Open(ctx, a.URL)
		if t.ID != "" {
			ru.task.Tabs[a.Name] = t.ID
			ru.cur = a.Name
		}
		if err != nil {
			return outcome{}, err
		}
		delete(ru.tainted, a.Name) // a reused name is a new tab
		_ = r.saveTaint(ctx, ru)
		return outcome{result: fmt.Sprintf("opened tab %s: %q at %s", a.Name, t.Title, t.URL), shot: r.shot(ru)}, nil
	case tabArgs:
		id, ok := ru.task.Tabs[a.Name]
		if !ok {
			return outcome{}, fmt.Errorf("no tab named %s; tabs: %s", a.Name, r.listTabs(ru))
		}
		if name == "close_tab" {
			delete(ru.task.Tabs, a.Name)
			delete(ru.tainted, a.Name)
			_ = r.saveTaint(ctx, ru)
			if ru.cur == a.Name {
				ru.cur = ""
			}
			if err := r.Browser.CloseTab(id); err != nil && !errors.Is(err, browse.ErrNoTab) {
				return outcome{}, err
			}
			return outcome{result: "closed tab " + a.Name}, nil
		}
		t, err := r.Browser.Switch(id)
		if err != nil {
			return outcome{}, err
		}
		ru.cur = a.Name
		return outcome{result: fmt.Sprintf("current tab: %s: %s", a.Name, tabLine(ru, a.Name, t)), shot: r.shot(ru)}, nil
	case navigateArgs:
		id, err := r.tab(ru)
		if err != nil {
			return outcome{}, err
		}
		if v := gate.Navigate(a.URL, ru.policy); v.Risky {
			ok, o := r.hold(ctx, ru, Action{Kind: "navigate", Tab: ru.cur, Target: a.URL, Text: "load " + a.URL, Reasons: v.Reasons}, nil)
			if !ok {
				return o, nil
			}
			r.allowHost(ru, a.URL)
		}
		t, err := r.Browser.Navigate(ctx, id, a.URL)
		if err != nil {
			return outcome{}, err
		}
		// A page the assistant loaded afresh (a GET the model chose, not
		// the page's own doing) never held the secret typed before.
		delete(ru.tainted, ru.cur)
		_ = r.saveTaint(ctx, ru)
		return outcome{result: fmt.Sprintf("tab %s now at %s: %q", ru.cur, t.URL, t.Title), shot: r.shot(ru)}, nil
	case elementArgs:
		id, err := r.tab(ru)
		if err != nil {
			return outcome{}, err
		}
		if name == "extract" {
			if _, ok := ru.tainted[ru.cur]; ok {
				return outcome{result: taintNote(ru, ru.cur)}, nil
			}
			s, err := r.Browser.Extract(ctx, id, a.Element)
			if err != nil {
				return outcome{}, err
			}
			var b strings.Builder
			for _, l := range lines(s) {
				f, _ := Flag(scrub(l, ru.secrets))
				b.WriteString(f + "\n")
			}
			return outcome{result: Wrap("element text", strings.TrimSpace(b.String()))}, nil
		}
		return r.click(ctx, ru, id, a.Element)
	case typeArgs:
		id, err := r.tab(ru)
		if err != nil {
			return outcome{}, err
		}
		info, err := r.Browser.Info(ctx, id, a.Element)
		if err != nil {
			return outcome{}, err
		}
		if names := secretNames(a.Text); len(names) > 0 {
			dests := destinations(info)
			if why := refuseSecrets(ru, names, dests); why != "" {
				return refused(why), nil
			}
			if ask := askSecrets(ru, names, dests); len(ask) > 0 {
				act := Action{Kind: "type", Tab: ru.cur, PageURL: info.PageURL, Element: a.Element,
					Text:   fmt.Sprintf("type %s into [%d] %s on %s", a.Text, a.Element, firstNonEmpty(info.Label, info.Name, info.ID, info.Tag), dests[0]),
					Target: strings.Join(info.FormTargets, ", "), Method: strings.ToUpper(info.FormMethod)}
				if !info.InForm {
					act.Target = dests[0] + " (the page itself: no form)"
				}
				for _, n := range ask {
					act.Reasons = append(act.Reasons, fmt.Sprintf("it types the stored secret {{secret:%s}} into a page of %s", n, dests[0]))
				}
				ok, o := r.hold(ctx, ru, act, func() ([]byte, error) { return r.Browser.Highlighted(ctx, id, a.Element) })
				if !ok {
					return o, nil
				}
				// The page must still be what the person approved.
				again, err := r.Browser.Info(ctx, id, a.Element)
				if err != nil || again.PageURL != info.PageURL || strings.Join(destinations(again), " ") != strings.Join(dests, " ") {
					return outcome{result: "the page changed after the approval; nothing was typed. Read the page again."}, nil
				}
			}
			ru.tainted[ru.cur] = names[0]
			if err := r.saveTaint(ctx, ru); err != nil {
				return outcome{}, err
			}
		}
		text, _, err := r.expand(ctx, ru, a.Text)
		if err != nil {
			return outcome{}, err
		}
		labelled := false
		if fresh, err := r.St.Task(ctx, ru.task.ID); err == nil {
			ru.task.KeepLabel = fresh.KeepLabel
		}
		if (info.Tag == "textarea" || (info.Tag != "input" && info.Tag != "select")) && ru.task.KeepLabel && ru.label != "" {
			// Content the model wrote goes out marked (EU AI Act Art. 50);
			// only the person can turn this off, per task, on the record.
			text = strings.TrimRight(text, "\n") + "\n\n" + ru.label
			labelled = true
		}
		if err := r.Browser.Type(ctx, id, a.Element, text); err != nil {
			return outcome{}, err
		}
		res := fmt.Sprintf("typed %d characters into [%d] %s", len([]rune(text)), a.Element, info.Label)
		if labelled {
			res += " (with the label “" + ru.label + "”)"
		}
		return outcome{result: res, shot: r.shot(ru)}, nil
	case selectArgs:
		id, err := r.tab(ru)
		if err != nil {
			return outcome{}, err
		}
		info, err := r.Browser.Info(ctx, id, a.Element)
		if err != nil {
			return outcome{}, err
		}
		if v := gate.Select(info, a.Value, ru.policy); v.Risky {
			act := Action{Kind: "select", Tab: ru.cur, PageURL: info.PageURL, Element: a.Element,
				Text: fmt.Sprintf("choose %q in [%d] %s", a.Value, a.Element, firstNonEmpty(info.Label, info.Name, info.ID)), Target: info.PageURL, Reasons: v.Reasons}
			ok, o := r.hold(ctx, ru, act, func() ([]byte, error) { return r.Browser.Highlighted(ctx, id, a.Element) })
			if !ok {
				return o, nil
			}
		}
		if err := r.Browser.Select(ctx, id, a.Element, a.Value); err != nil {
			return outcome{}, err
		}
		return outcome{result: fmt.Sprintf("selected %q in [%d]", a.Value, a.Element), shot: r.shot(ru)}, nil
	case scrollArgs:
		id, err := r.tab(ru)
		if err != nil {
			return outcome{}, err
		}
		if err := r.Browser.Scroll(ctx, id, a.Direction == "down"); err != nil {
			return outcome{}, err
		}
		return outcome{result: "scrolled " + a.Direction, shot: r.shot(ru)}, nil
	case draftArgs:
		if err := r.St.SaveDraft(ctx, ru.task.ID, a.Name, scrub(a.Text, ru.secrets)); err != nil {
			return outcome{}, err
		}
		return outcome{result: fmt.Sprintf("draft %s saved (%d characters); type it with {{draft:%s}}", a.Name, len([]rune(a.Text)), a.Name)}, nil
	case askArgs:
		return r.ask(ctx, ru, a.Question)
	case finishArgs:
		return outcome{result: "finished", status: store.StatusDone, reason: a.Summary}, nil
	}
	return outcome{}, fmt.Errorf("tool %s is not available", name)
}

func (r *Runner) listTabs(ru *run) string {
	names := make([]string, 0, len(ru.task.Tabs))
	for n := range ru.task.Tabs {
		names = append(names, n)
	}
	sort.Strings(names)
	tabs, _ := r.Browser.Tabs()
	byID := map[string]browse.Tab{}
	for _, t := range tabs {
		byID[t.ID] = t
	}
	if len(names) == 0 {
		return "no tabs open"
	}
	var b strings.Builder
	for _, n := range names {
		t := byID[ru.task.Tabs[n]]
		cur := ""
		if n == ru.cur {
			cur = " (current)"
		}
		fmt.Fprintf(&b, "%s%s: %s\n", n, cur, tabLine(ru, n, t))
	}
	return strings.TrimSpace(b.String())
}

func (r *Runner) allowHost(ru *run, target string) {
	if h := gate.Host(target); h != "" {
		r.mu.Lock()
		ru.plan[h] = true
		r.mu.Unlock()
	}
}

func (r *Runner) readPage(ctx context.Context, ru *run) (outcome, error) {
	id, err := r.tab(ru)
	if err != nil {
		return outcome{}, err
	}
	if _, ok := ru.tainted[ru.cur]; ok {
		return outcome{result: taintNote(ru, ru.cur), shot: r.shot(ru)}, nil
	}
	v, err := r.Browser.Read(ctx, id)
	if err != nil {
		return outcome{}, err
	}
	var b strings.Builder
	flagged := 0
	for _, it := range v.Items {
		if it.N == 0 {
			t, f := Flag(scrub(it.Text, ru.secrets))
			if f {
				flagged++
			}
			b.WriteString(t + "\n")
			continue
		}
		line := fmt.Sprintf("[%d] %s %q", it.N, it.Role, scrub(it.Text, ru.secrets))
		if it.Value != "" {
			line += fmt.Sprintf(" value=%q", scrub(it.Value, ru.secrets))
		}
		if it.Placeholder != "" {
			line += fmt.Sprintf(" placeholder=%q", it.Placeholder)
		}
		if t, f := Flag(line); f {
			flagged++
			line = t
		}
		b.WriteString(line + "\n")
	}
	head := fmt.Sprintf("tab %s: %q at %s (%d passages hidden from people were left out; %d flagged)", ru.cur, scrub(v.Title, ru.secrets), v.URL, v.Hidden, flagged)
	return outcome{result: head + "\n" + Wrap("page", strings.TrimSpace(b.String())), shot: r.shot(ru)}, nil
}

func (r *Runner) click(ctx context.Context, ru *run, id string, n int) (outcome, error) {
	info, err := r.Browser.Info(ctx, id, n)
	if err != nil {
		return outcome{}, err
	}
	v := gate.Click(info, ru.policy)
	if !v.Risky {
		if err := r.Browser.Click(ctx, id, n, 10*time.Second); err != nil {
			return outcome{}, err
		}
		t, _ := r.Browser.Switch(id)
		if _, ok := ru.tainted[ru.cur]; ok {
			return outcome{result: fmt.Sprintf("clicked [%d]; tab %s %s", n, ru.cur, tabLine(ru, ru.cur, t)), shot: r.shot(ru)}, nil
		}
		return outcome{result: fmt.Sprintf("clicked [%d] %s; tab %s at %s", n, firstNonEmpty(info.Text, info.Label, info.Value), ru.cur, t.URL), shot: r.shot(ru)}, nil
	}
	act := Action{Kind: "click", Tab: ru.cur, PageURL: info.PageURL, Element: n, Text: firstNonEmpty(info.Text, info.Label, info.Value, info.Title),
		Target: v.Target, Method: strings.ToUpper(info.FormMethod), Reasons: v.Reasons}
	if act.Target == "" {
		act.Target = info.PageURL + " (script on the page; requests it makes are limited to the task's sites)"
	}
	for _, f := range info.Fields {
		val := scrub(f.Value, ru.secrets)
		act.Fields = append(act.Fields, ActionField{Name: f.Name, Label: f.Label, Value: val, Payment: gate.PaymentField(f), Secret: val != f.Value})
		if ru.label != "" && (f.Type == "textarea") {
			l := strings.Contains(f.Value, ru.label)
			act.Labelled = &l
		}
	}
	ok, o := r.hold(ctx, ru, act, func() ([]byte, error) { return r.Browser.Highlighted(ctx, id, n) })
	if !ok {
		return o, nil
	}
	d := o.reason // the approved values, JSON
	var values map[string]string
	_ = json.Unmarshal([]byte(d), &values)
	if fresh, err := r.St.Task(ctx, ru.task.ID); err == nil {
		ru.task.KeepLabel = fresh.KeepLabel
	}
	for name, val := range values {
		for _, f := range info.Fields {
			// An edited content field keeps the label unless the person
			// removed it for the task (a recorded decision), not by editing.
			if f.Name == name && f.Type == "textarea" && ru.task.KeepLabel && ru.label != "" && !strings.Contains(val, ru.label) {
				val = strings.TrimRight(val, "\n") + "\n\n" + ru.label
			}
		}
		if why := refuseSecrets(ru, secretNames(val), destinations(info)); why != "" {
			return refused(why), nil
		}
		full, _, err := r.expand(ctx, ru, val)
		if err != nil {
			return outcome{}, err
		}
		if err := r.Browser.SetField(ctx, id, n, name, full); err != nil {
			return outcome{}, err
		}
	}
	// The page must still be what the person approved.
	again, err := r.Browser.Info(ctx, id, n)
	if err != nil || again.Text != info.Text || again.FormAction != info.FormAction || again.Href != info.Href {
		return outcome{result: "the page changed after the approval; nothing was done. Read the page again."}, nil
	}
	r.allowHost(ru, v.Target)
	op := newOpID()
	what := fmt.Sprintf("click [%d] %q on %s → %s", n, act.Text, info.PageURL, act.Target)
	if err := r.St.BeginRisky(ctx, op, ru.task.ID, o.approvalID(), scrub(what, ru.secrets), r.Clock.Now()); err != nil {
		return outcome{status: store.StatusFailed, reason: err.Error(), result: "the action could not be journaled, so it was not done"}, nil
	}
	settle := r.RiskySettle
	if settle <= 0 {
		settle = 30 * time.Second
	}
	// Its writes leave once, sent by the session, never resent by Chromium.
	cerr := r.Browser.ClickOnce(ctx, id, n, settle)
	res := "done"
	if cerr != nil {
		res = "unknown: " + cerr.Error()
	}
	if err := r.St.FinishRisky(ctx, op, res, r.Clock.Now()); err != nil {
		return outcome{status: store.StatusFailed, reason: err.Error()}, nil
	}
	if cerr != nil {
		return outcome{status: store.StatusUnknown, reason: "UNKNOWN: the approved action " + what + " failed midway: " + cerr.Error() + "; check the site", result: "the approved click may or may not have happened"}, nil
	}
	t, _ := r.Browser.Switch(id)
	if _, ok := ru.tainted[ru.cur]; ok {
		return outcome{result: fmt.Sprintf("approved by the person and done: clicked [%d]; tab %s %s", n, ru.cur, tabLine(ru, ru.cur, t)), shot: r.shot(ru)}, nil
	}
	return outcome{result: fmt.Sprintf("approved by the person and done: clicked [%d] %s; tab %s at %s", n, act.Text, ru.cur, t.URL), shot: r.shot(ru)}, nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// approvalID is carried in outcome.status for an approved hold.
func (o outcome) approvalID() int64 {
	var id int64
	fmt.Sscan(o.status, &id)
	return id
}

// hold records the action for the person and waits for the decision. It
// returns true when approved (outcome.reason holds the edited values as
// JSON, outcome.status the approval id), else the outcome to report.
func (r *Runner) hold(ctx context.Context, ru *run, act Action, shoot func() ([]byte, error)) (bool, outcome) {
	var shot []byte
	if shoot != nil {
		shot, _ = shoot()
	} else {
		shot = r.shot(ru)
	}
	b, _ := json.Marshal(act)
	// The status first: whoever sees the pending approval sees the task
	// waiting for it.
	_ = r.St.SetStatus(ctx, ru.task.ID, store.StatusWaiting, "approval: "+scrub(act.Text, ru.secrets), r.Clock.Now())
	aid, err := r.St.AddApproval(ctx, ru.task.ID, scrub(string(b), ru.secrets), shot, r.Clock.Now())
	if err != nil {
		return false, outcome{status: store.StatusFailed, reason: err.Error()}
	}
	ch := make(chan decision, 1)
	r.mu.Lock()
	r.decisions[aid] = ch
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.decisions, aid)
		r.mu.Unlock()
	}()
	r.Log.Info("assistant: risky action held for approval", "task", ru.task.ID, "approval", aid, "kind", act.Kind, "reasons", strings.Join(act.Reasons, "; "))
	var d decision
	select {
	case <-ctx.Done():
		return false, outcome{}
	case d = <-ch:
	}
	_ = r.St.SetStatus(ctx, ru.task.ID, store.StatusRunning, "", r.Clock.Now())
	if r.stopRequested(ru.task.ID) {
		return false, outcome{result: "the person stopped the task", status: store.StatusStopped, reason: "stopped by the person"}
	}
	if !d.approve {
		return false, outcome{result: "The person DENIED this action (" + act.Text + "). It was not done. Do not try it again or another way; finish or ask the person.", shot: shot}
	}
	v, _ := json.Marshal(d.values)
	return true, outcome{status: fmt.Sprint(aid), reason: string(v)}
}

func (r *Runner) ask(ctx context.Context, ru *run, q string) (outcome, error) {
	ch := make(chan string, 1)
	r.mu.Lock()
	r.answers[ru.task.ID] = ch
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.answers, ru.task.ID)
		r.mu.Unlock()
	}()
	_ = r.St.SetStatus(ctx, ru.task.ID, store.StatusAsking, q, r.Clock.Now())
	select {
	case <-ctx.Done():
		return outcome{}, ctx.Err()
	case a := <-ch:
		if r.stopRequested(ru.task.ID) {
			return outcome{result: "the person stopped the task", status: store.StatusStopped, reason: "stopped by the person"}, nil
		}
		_ = r.St.SetStatus(ctx, ru.task.ID, store.StatusRunning, "", r.Clock.Now())
		return outcome{result: "The person answered: " + a}, nil
	}
}
