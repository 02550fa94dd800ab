package assistant

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/assistant/browse"
	"github.com/fleetwright/fleetwright/modules/assistant/gate"
	"github.com/fleetwright/fleetwright/modules/assistant/model"
	"github.com/fleetwright/fleetwright/modules/assistant/store"
)

// Settings keys.
const (
	keyPaused        = "paused"
	keyLabel         = "label_text"
	keyRiskyPhrases  = "risky_phrases"
	keyRiskyDomains  = "risky_domains"
	keyDayTokens     = "day_tokens"
	keyDayCost       = "day_cost_usd"
	keyDaySteps      = "day_steps"
	defaultLabelText = "AI-generated"
)

// Runner carries out tasks one at a time in the person's browser.
type Runner struct {
	St        *store.Store
	Clock     clock.Clock
	Caller    *model.Caller
	Model     model.Config
	ModelName string
	Browser   *browse.Session
	Vault     *vault.Vault
	Log       *slog.Logger
	// Defaults are the limits a new task gets.
	Defaults store.Limits
	// RiskySettle bounds the wait for an approved risky click's requests.
	RiskySettle time.Duration

	wake chan struct{}

	mu        sync.Mutex
	decisions map[int64]chan decision // approval id → decision
	answers   map[int64]chan string   // task id → answer to ask_person
	current   int64
	stopTask  map[int64]bool

	// panelPaused is the enrolling panel's pause (global, tenant or this
	// assistant's); panelReason says which.
	panelPaused atomic.Bool
	panelReason string
	// panelState describes the enrolment for the UI.
	panelState string
}

type decision struct {
	approve bool
	values  map[string]string
}

func (r *Runner) init() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.wake == nil {
		r.wake = make(chan struct{}, 1)
		r.decisions = map[int64]chan decision{}
		r.answers = map[int64]chan string{}
		r.stopTask = map[int64]bool{}
	}
}

// Recover runs at start: every journaled risky action without an outcome
// becomes UNKNOWN and stops its task for the person; other unfinished
// tasks become interrupted (resumable).
func (r *Runner) Recover(ctx context.Context) error {
	r.init()
	now := r.Clock.Now()
	open, err := r.St.Unfinished(ctx)
	if err != nil {
		return err
	}
	for _, e := range open {
		reason := fmt.Sprintf("UNKNOWN: the approved action (%s) was started at %s and the assistant stopped before its outcome was recorded. It may or may not have happened: check the site. The assistant will not do it again on its own.",
			e.What, e.StartedAt.Format(time.RFC3339))
		if err := r.St.SetStatus(ctx, e.TaskID, store.StatusUnknown, reason, now); err != nil {
			return err
		}
		if err := r.St.FinishRisky(ctx, e.OpID, "unknown", now); err != nil {
			return err
		}
		r.Log.Warn("assistant: risky action outcome unknown after restart", "task", e.TaskID, "op", e.OpID)
	}
	ids, err := r.St.MarkInterrupted(ctx, now)
	if err != nil {
		return err
	}
	for _, id := range ids {
		r.Log.Info("assistant: task interrupted by a restart", "task", id)
	}
	return nil
}

// Run takes queued tasks one at a time until ctx ends.
func (r *Runner) Run(ctx context.Context) {
	r.init()
	for {
		id, err := r.nextQueued(ctx)
		if err != nil {
			r.Log.Error("assistant: queue", "err", err)
		}
		if id != 0 {
			r.execute(ctx, id)
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-r.Clock.After(2 * time.Second):
		}
	}
}

func (r *Runner) nextQueued(ctx context.Context) (int64, error) {
	tasks, err := r.St.Tasks(ctx, 200)
	if err != nil {
		return 0, err
	}
	var id int64
	for _, t := range tasks {
		if t.Status == store.StatusQueued && (id == 0 || t.ID < id) {
			id = t.ID
		}
	}
	return id, nil
}

// Wake makes the runner look for queued work now.
func (r *Runner) Wake() {
	r.init()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Submit records a new task and queues it.
func (r *Runner) Submit(ctx context.Context, goal string, urls []string, lim *store.Limits) (int64, error) {
	return r.submit(ctx, goal, urls, lim, "")
}

// submit records a task, with who gave it when not the person (origin).
func (r *Runner) submit(ctx context.Context, goal string, urls []string, lim *store.Limits, origin string) (int64, error) {
	goal = strings.TrimSpace(goal)
	if goal == "" {
		return 0, errors.New("assistant: the task needs a goal")
	}
	if len(urls) == 0 {
		return 0, errors.New("assistant: the task needs at least one start URL (its sites are its plan)")
	}
	for _, u := range urls {
		if err := checkURL(u); err != nil {
			return 0, fmt.Errorf("assistant: %w", err)
		}
	}
	l := r.Defaults
	if lim != nil {
		l = lowest(l, *lim)
	}
	id, err := r.St.CreateTask(ctx, goal, urls, r.ModelName, l, r.Clock.Now())
	if err != nil {
		return 0, err
	}
	if origin != "" {
		if err := r.St.SetOrigin(ctx, id, origin); err != nil {
			return 0, err
		}
	}
	r.Wake()
	return id, nil
}

// Resume queues an interrupted, paused, stopped, failed or unknown task
// again from its last completed step.
func (r *Runner) Resume(ctx context.Context, id int64) error {
	t, err := r.St.Task(ctx, id)
	if err != nil {
		return err
	}
	switch t.Status {
	case store.StatusInterrupted, store.StatusPaused, store.StatusStopped, store.StatusFailed, store.StatusUnknown:
	default:
		return fmt.Errorf("assistant: task %d is %s and cannot be resumed", id, t.Status)
	}
	if err := r.St.SetStatus(ctx, id, store.StatusQueued, "resumed by the person after: "+t.Status+" "+t.StopReason, r.Clock.Now()); err != nil {
		return err
	}
	r.Wake()
	return nil
}

// Stop asks a task to stop at its next step (or now, if it is waiting).
func (r *Runner) Stop(ctx context.Context, id int64) error {
	r.mu.Lock()
	r.stopTask[id] = true
	r.mu.Unlock()
	t, err := r.St.Task(ctx, id)
	if err != nil {
		return err
	}
	if t.Status == store.StatusQueued || t.Status == store.StatusInterrupted || t.Status == store.StatusPaused {
		return r.St.SetStatus(ctx, id, store.StatusStopped, "stopped by the person", r.Clock.Now())
	}
	r.mu.Lock()
	for aid, ch := range r.decisions {
		if a, err := r.St.Approval(ctx, aid); err == nil && a.TaskID == id {
			select {
			case ch <- decision{approve: false}:
			default:
			}
		}
	}
	if ch, ok := r.answers[id]; ok {
		select {
		case ch <- "":
		default:
		}
	}
	r.mu.Unlock()
	return nil
}

// Decide records the person's decision on a held action. Only the UI
// calls it: nothing the model or a page produces reaches this function.
func (r *Runner) Decide(ctx context.Context, approvalID int64, approve bool, values map[string]string) error {
	r.init()
	status := "denied"
	if approve {
		status = "approved"
		if len(values) > 0 {
			status = "approved with edits"
		}
	}
	if err := r.St.Decide(ctx, approvalID, status, values, r.Clock.Now()); err != nil {
		return err
	}
	r.mu.Lock()
	ch := r.decisions[approvalID]
	r.mu.Unlock()
	if ch != nil {
		ch <- decision{approve: approve, values: values}
	}
	return nil
}

// Answer gives the person's answer to a task's question.
func (r *Runner) Answer(taskID int64, answer string) error {
	r.mu.Lock()
	ch := r.answers[taskID]
	r.mu.Unlock()
	if ch == nil {
		return errors.New("assistant: that task is not asking anything")
	}
	select {
	case ch <- answer:
		return nil
	default:
		return errors.New("assistant: already answered")
	}
}

// secretRule is where a stored secret may be typed.
type secretRule struct {
	origins map[string]bool // the origins it belongs to
	noAsk   map[string]bool // of those, where it is typed without asking
}

// secretContext binds a sealed secret to its name and origins: origins
// changed in the state file behind the UI's back no longer open it.
func secretContext(name string, origins, noAsk []string) string {
	if len(origins) == 0 {
		return "assistant-secret:" + name // stored before secrets named origins
	}
	return "assistant-secret:" + name + "\norigins:" + strings.Join(origins, " ") + "\nno-ask:" + strings.Join(noAsk, " ")
}

// secrets opens the stored secrets (name → value, name → where it may be
// typed) and registers their values with the log redactor.
func (r *Runner) secrets(ctx context.Context) (map[string]string, map[string]secretRule, error) {
	sealed, err := r.St.Secrets(ctx)
	if err != nil {
		return nil, nil, err
	}
	out := map[string]string{}
	rules := map[string]secretRule{}
	for name, sec := range sealed {
		v, err := r.Vault.Open(sec.Sealed, secretContext(name, sec.Origins, sec.NoAsk))
		if err != nil {
			return nil, nil, fmt.Errorf("assistant: secret %s: %w (its origins were changed outside the assistant: store it again)", name, err)
		}
		out[name] = string(v)
		logging.RegisterSecret(string(v))
		rule := secretRule{origins: map[string]bool{}, noAsk: map[string]bool{}}
		for _, o := range sec.Origins {
			rule.origins[o] = true
		}
		for _, o := range sec.NoAsk {
			rule.noAsk[o] = true
		}
		rules[name] = rule
	}
	return out, rules, nil
}

// SecretOrigins parses the origins a secret belongs to (one a line or
// separated by spaces or commas): each must be an http(s) URL; only its
// origin is kept.
func SecretOrigins(text string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, f := range strings.FieldsFunc(text, func(r rune) bool { return r == '\n' || r == '\r' || r == ' ' || r == ',' || r == '\t' }) {
		o := gate.Origin(f)
		if o == "" {
			return nil, fmt.Errorf("assistant: %q is not a site: give the address it is typed on, like https://bank.example", f)
		}
		if !seen[o] {
			seen[o] = true
			out = append(out, o)
		}
	}
	sort.Strings(out)
	return out, nil
}

// PutSecret seals and stores a secret under a placeholder name. It may be
// typed only on pages of origins, and on those in noAsk (a subset) without
// the person approving each time.
func (r *Runner) PutSecret(ctx context.Context, name, value string, origins, noAsk []string) error {
	if !tabName.MatchString(name) {
		return fmt.Errorf("assistant: secret name %q must be lower-case letters, digits, - or _", name)
	}
	if value == "" {
		return errors.New("assistant: the secret's value is empty")
	}
	if len(origins) == 0 {
		return fmt.Errorf("assistant: secret %s needs the site(s) it belongs to (like https://bank.example): it is typed on no other", name)
	}
	in := map[string]bool{}
	for _, o := range origins {
		in[o] = true
	}
	for _, o := range noAsk {
		if !in[o] {
			return fmt.Errorf("assistant: secret %s: %s is not one of its sites, so it cannot be typed there without asking", name, o)
		}
	}
	logging.RegisterSecret(value)
	return r.St.PutSecret(ctx, store.Secret{Name: name, Sealed: r.Vault.Seal([]byte(value), secretContext(name, origins, noAsk)), Origins: origins, NoAsk: noAsk})
}

// scrub replaces every secret value in s with its placeholder.
func scrub(s string, secrets map[string]string) string {
	names := make([]string, 0, len(secrets))
	for n := range secrets {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return len(secrets[names[i]]) > len(secrets[names[j]]) })
	for _, n := range names {
		if v := secrets[n]; v != "" {
			s = strings.ReplaceAll(s, v, "{{secret:"+n+"}}")
		}
	}
	return s
}

// run is one task's execution state.
type run struct {
	task    store.Task
	msgs    []model.Message
	cur     string // current tab name
	plan    map[string]bool
	secrets map[string]string
	rules   map[string]secretRule
	// tainted holds the tabs a secret was typed into (name → secret):
	// their text is withheld from the model until the assistant loads a
	// new page in them.
	tainted map[string]string
	n       int // steps recorded
	started time.Time
	prior   time.Duration // wall time of earlier runs
	label   string
	policy  gate.Policy
}

func (r *Runner) setting(ctx context.Context, key, def string) string {
	v, ok, err := r.St.Setting(ctx, key)
	if err != nil || !ok {
		return def
	}
	return v
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func (r *Runner) execute(ctx context.Context, id int64) {
	t, err := r.St.Task(ctx, id)
	if err != nil {
		r.Log.Error("assistant: load task", "task", id, "err", err)
		return
	}
	r.mu.Lock()
	r.current = id
	delete(r.stopTask, id)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.current = 0
		r.mu.Unlock()
		r.Browser.SetAllow(nil)
	}()
	now := r.Clock.Now()
	if err := r.St.SetStatus(ctx, id, store.StatusRunning, "", now); err != nil {
		r.Log.Error("assistant: start task", "task", id, "err", err)
		return
	}
	ru := &run{task: t, plan: map[string]bool{}, started: now, label: r.setting(ctx, keyLabel, defaultLabelText)}
	for _, u := range t.StartURLs {
		if h := gate.Host(u); h != "" {
			ru.plan[h] = true
		}
	}
	ru.policy = gate.Policy{Plan: ru.plan, Phrases: lines(r.setting(ctx, keyRiskyPhrases, "")), Domains: lines(r.setting(ctx, keyRiskyDomains, ""))}
	r.Browser.SetAllow(func(h string) bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return ru.plan[h]
	})
	ru.tainted = map[string]string{}
	// A resumed task keeps its tainted tabs (an attached Chrome keeps them
	// open across a restart of the assistant).
	_ = json.Unmarshal([]byte(r.setting(ctx, taintKey(id), "{}")), &ru.tainted)
	if ru.secrets, ru.rules, err = r.secrets(ctx); err != nil {
		r.end(ctx, ru, store.StatusFailed, err.Error())
		return
	}
	steps, err := r.St.Steps(ctx, id)
	if err != nil {
		r.end(ctx, ru, store.StatusFailed, err.Error())
		return
	}
	ru.n = len(steps)
	for _, s := range steps {
		ru.prior += time.Duration(s.Millis) * time.Millisecond
	}
	saved, err := r.St.Messages(ctx, id)
	if err != nil {
		r.end(ctx, ru, store.StatusFailed, err.Error())
		return
	}
	for _, b := range saved {
		var m model.Message
		if err := json.Unmarshal([]byte(b), &m); err == nil {
			ru.msgs = append(ru.msgs, m)
		}
	}
	if len(ru.msgs) == 0 {
		ru.msgs = r.opening(ru)
	} else {
		r.closeDangling(ru)
	}
	// Tabs the task remembers but the browser lost (a restart) are dropped.
	if tabs, err := r.Browser.Tabs(); err == nil {
		live := map[string]bool{}
		for _, tb := range tabs {
			live[tb.ID] = true
		}
		for name, tid := range ru.task.Tabs {
			if !live[tid] {
				delete(ru.task.Tabs, name)
			}
		}
		for name := range ru.task.Tabs {
			if ru.cur == "" {
				ru.cur = name
			}
		}
	}
	mode, reason, _ := r.Caller.Mode(ctx, r.ModelName)
	_ = r.St.SetMode(ctx, id, mode+" ("+reason+")")
	r.loop(ctx, ru)
}

func (r *Runner) opening(ru *run) []model.Message {
	var b strings.Builder
	fmt.Fprintf(&b, "Task: %s\nStart URLs (the task's plan): %s\n", ru.task.Goal, strings.Join(ru.task.StartURLs, " "))
	if len(ru.secrets) > 0 {
		names := make([]string, 0, len(ru.secrets))
		for n := range ru.secrets {
			names = append(names, "{{secret:"+n+"}}")
		}
		sort.Strings(names)
		fmt.Fprintf(&b, "Secrets you may type: %s\n", strings.Join(names, ", "))
	}
	return []model.Message{{Role: "system", Content: systemPrompt}, {Role: "user", Content: b.String()}}
}

// closeDangling gives a tool call that a restart cut off its result, so
// the conversation resumes from the last completed step.
func (r *Runner) closeDangling(ru *run) {
	last := ru.msgs[len(ru.msgs)-1]
	if last.Role != "assistant" || len(last.ToolCalls) == 0 {
		return
	}
	res := "Interrupted by a restart: this action may not have completed. Read the page again before going on."
	if ru.task.Status == store.StatusUnknown || strings.Contains(ru.task.StopReason, "UNKNOWN") {
		res = "UNKNOWN outcome: the assistant stopped while this approved action was running; it may or may not have happened. The person resumed the task after checking. Do not repeat it."
	}
	ru.msgs = append(ru.msgs, model.Message{Role: "tool", ToolName: last.ToolCalls[0].Name, ToolCallID: last.ToolCalls[0].ID, Content: res})
}

func (r *Runner) saveMessages(ctx context.Context, ru *run) error {
	bodies := make([]string, len(ru.msgs))
	for i, m := range ru.msgs {
		m.Content = scrub(m.Content, ru.secrets)
		b, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("assistant: save conversation: %w", err)
		}
		bodies[i] = scrub(string(b), ru.secrets)
	}
	return r.St.SaveMessages(ctx, ru.task.ID, bodies)
}

func (r *Runner) end(ctx context.Context, ru *run, status, reason string) {
	if err := r.St.SetStatus(ctx, ru.task.ID, status, scrub(reason, ru.secrets), r.Clock.Now()); err != nil {
		r.Log.Error("assistant: end task", "task", ru.task.ID, "err", err)
	}
	r.Log.Info("assistant: task ended", "task", ru.task.ID, "status", status, "reason", scrub(reason, ru.secrets))
}

func taintKey(task int64) string { return fmt.Sprintf("tainted_tabs_%d", task) }

// saveTaint records the task's tainted tabs (tab → secret name).
func (r *Runner) saveTaint(ctx context.Context, ru *run) error {
	b, _ := json.Marshal(ru.tainted)
	return r.St.SetSetting(ctx, taintKey(ru.task.ID), string(b))
}

func (r *Runner) stopRequested(id int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopTask[id]
}

// outcome is what one tool call did.
type outcome struct {
	result string
	shot   []byte
	status string // set when the task ends or waits
	reason string
}

func (r *Runner) loop(ctx context.Context, ru *run) {
	tools := Tools()
	for {
		if ctx.Err() != nil {
			return // the process is stopping: the task stays "running" and becomes interrupted at the next start
		}
		if r.stopRequested(ru.task.ID) {
			r.end(ctx, ru, store.StatusStopped, "stopped by the person")
			return
		}
		if r.setting(ctx, keyPaused, "") == "1" {
			r.end(ctx, ru, store.StatusPaused, "paused: the pause switch is on")
			return
		}
		if r.panelPaused.Load() {
			r.mu.Lock()
			why := r.panelReason
			r.mu.Unlock()
			r.end(ctx, ru, store.StatusPaused, why)
			return
		}
		reason, err := r.limit(ctx, ru)
		if err != nil {
			r.end(ctx, ru, store.StatusFailed, err.Error())
			return
		}
		if reason != "" {
			r.end(ctx, ru, store.StatusStopped, reason)
			return
		}
		start := r.Clock.Now()
		turn, err := r.Caller.Next(ctx, r.ModelName, ru.msgs, tools, func(c model.ToolCall) error { _, err := Check(c); return err })
		if turn.Switched {
			_ = r.St.SetMode(ctx, ru.task.ID, model.ModeStructured+" ("+turn.Reason+")")
			r.Log.Warn("assistant: model moved to structured output", "model", r.ModelName, "reason", turn.Reason)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			ru.n++
			_ = r.St.AddStep(ctx, store.Step{TaskID: ru.task.ID, N: ru.n, Tool: "(model)", Args: "{}", Error: scrub(err.Error(), ru.secrets),
				TokensIn: turn.TokensIn, TokensOut: turn.TokensOut, CostMicro: r.Model.CostMicro(turn.TokensIn, turn.TokensOut),
				Millis: r.Clock.Since(start).Milliseconds(), Mode: turn.Mode, CreatedAt: r.Clock.Now()})
			r.end(ctx, ru, store.StatusFailed, "the model gave no usable action: "+err.Error())
			return
		}
		if turn.Call.ID == "" {
			turn.Call.ID = fmt.Sprintf("call_%d", ru.n+1)
			turn.Message.ToolCalls[0].ID = turn.Call.ID
		}
		ru.msgs = append(ru.msgs, turn.Message)
		// The call is saved before it runs: after a crash it is known.
		if err := r.saveMessages(ctx, ru); err != nil {
			r.end(ctx, ru, store.StatusFailed, err.Error())
			return
		}
		args, _ := Check(turn.Call)
		out := r.do(ctx, ru, turn.Call.Name, args)
		if ctx.Err() != nil && out.status == "" {
			return
		}
		ru.n++
		st := store.Step{TaskID: ru.task.ID, N: ru.n, Tool: turn.Call.Name, Args: scrub(string(turn.Call.Arguments), ru.secrets),
			Result: scrub(out.result, ru.secrets), Screenshot: out.shot, TokensIn: turn.TokensIn, TokensOut: turn.TokensOut,
			CostMicro: r.Model.CostMicro(turn.TokensIn, turn.TokensOut), Millis: r.Clock.Since(start).Milliseconds(), Mode: turn.Mode, CreatedAt: r.Clock.Now()}
		if turn.Repairs > 0 || turn.Switched {
			st.Mode = fmt.Sprintf("%s, %d model calls, %d repairs", turn.Mode, turn.Calls, turn.Repairs)
		}
		if err := r.St.AddStep(ctx, st); err != nil {
			r.end(ctx, ru, store.StatusFailed, err.Error())
			return
		}
		ru.msgs = append(ru.msgs, model.Message{Role: "tool", ToolName: turn.Call.Name, ToolCallID: turn.Call.ID, Content: scrub(out.result, ru.secrets)})
		if err := r.saveMessages(ctx, ru); err != nil {
			r.end(ctx, ru, store.StatusFailed, err.Error())
			return
		}
		if err := r.St.SetTabs(ctx, ru.task.ID, ru.task.Tabs); err != nil {
			r.end(ctx, ru, store.StatusFailed, err.Error())
			return
		}
		if out.status != "" {
			r.end(ctx, ru, out.status, out.reason)
			return
		}
		if err := r.St.SetStatus(ctx, ru.task.ID, store.StatusRunning, "", r.Clock.Now()); err != nil {
			return
		}
	}
}

func newOpID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// SetLabel records the person's decision on the AI-generated label of a
// task's drafts (removing it needs a note; both are kept with the task).
func (r *Runner) SetLabel(ctx context.Context, id int64, keep bool, note string) error {
	if _, err := r.St.Task(ctx, id); err != nil {
		return err
	}
	r.Log.Info("assistant: AI-generated label decision", "task", id, "keep", keep, "note", note)
	return r.St.SetLabel(ctx, id, keep, note)
}

// SetPaused turns the pause switch: a running task stops at its next step.
func (r *Runner) SetPaused(ctx context.Context, on bool) error {
	v := ""
	if on {
		v = "1"
	}
	if err := r.St.SetSetting(ctx, keyPaused, v); err != nil {
		return err
	}
	if !on {
		tasks, err := r.St.Tasks(ctx, 200)
		if err != nil {
			return err
		}
		for _, t := range tasks {
			if t.Status == store.StatusPaused {
				if err := r.Resume(ctx, t.ID); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// lowest combines two sets of limits: for each, the lower non-zero one.
func lowest(a, b store.Limits) store.Limits {
	mi := func(x, y int) int {
		if x == 0 || (y != 0 && y < x) {
			return y
		}
		return x
	}
	a.Steps, a.Tokens, a.Tabs = mi(a.Steps, b.Steps), mi(a.Tokens, b.Tokens), mi(a.Tabs, b.Tabs)
	if a.CostUSD == 0 || (b.CostUSD != 0 && b.CostUSD < a.CostUSD) {
		a.CostUSD = b.CostUSD
	}
	if a.WallTime == 0 || (b.WallTime != 0 && b.WallTime < a.WallTime) {
		a.WallTime = b.WallTime
	}
	return a
}
