package assistant

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fleetwright/fleetwright/modules/assistant/store"
	"github.com/fleetwright/fleetwright/static"
	"github.com/fleetwright/fleetwright/views"
)

// CookieName carries the launch secret's digest after the first visit.
const CookieName = "fw_assistant"

// guard admits only requests for this launch: right Host (no DNS
// rebinding), the launch secret (query once, then a cookie), and for
// anything but GET/HEAD an Origin of this very address.
type guard struct {
	secret string
	hosts  map[string]bool
	origin map[string]bool
}

func newGuard(secret string, addr net.Addr) *guard {
	g := &guard{secret: secret, hosts: map[string]bool{}, origin: map[string]bool{}}
	_, port, _ := net.SplitHostPort(addr.String())
	host, _, _ := net.SplitHostPort(addr.String())
	names := []string{host, "localhost"}
	if host == "127.0.0.1" || host == "::1" {
		names = append(names, "127.0.0.1", "[::1]")
	}
	for _, h := range names {
		if strings.Contains(h, ":") && !strings.HasPrefix(h, "[") {
			h = "[" + h + "]"
		}
		g.hosts[h+":"+port] = true
		g.origin["http://"+h+":"+port] = true
	}
	return g
}

func (g *guard) cookieValue() string {
	h := sha256.Sum256([]byte("fleetwright-assistant-cookie:" + g.secret))
	return hex.EncodeToString(h[:])
}

func (g *guard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// The launch URL never leaks in a Referer to another site; same-origin
		// (not no-referrer) keeps Chromium sending a real Origin on our forms.
		h.Set("Referrer-Policy", "same-origin")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; form-action 'self'")
		h.Set("Cache-Control", "no-store")
		if !g.hosts[strings.ToLower(r.Host)] {
			http.Error(w, "403 forbidden: this assistant answers only to its own loopback address (Host "+r.Host+" refused: DNS rebinding?)", http.StatusForbidden)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			o := r.Header.Get("Origin")
			if o == "" || !g.origin[strings.ToLower(o)] {
				http.Error(w, "403 forbidden: a change must come from the assistant's own page (Origin missing or foreign)", http.StatusForbidden)
				return
			}
		}
		if k := r.URL.Query().Get("k"); k != "" {
			if subtle.ConstantTimeCompare([]byte(k), []byte(g.secret)) != 1 {
				http.Error(w, "401 unauthorized: wrong launch key; use the URL the assistant printed at start", http.StatusUnauthorized)
				return
			}
			http.SetCookie(w, &http.Cookie{Name: CookieName, Value: g.cookieValue(), Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
			q := r.URL.Query()
			q.Del("k")
			u := *r.URL
			u.RawQuery = q.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		c, err := r.Cookie(CookieName)
		if err != nil || subtle.ConstantTimeCompare([]byte(c.Value), []byte(g.cookieValue())) != 1 {
			http.Error(w, "401 unauthorized: open the assistant with the URL it printed at start (it carries this launch's key)", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ui holds the handlers.
type ui struct {
	r        *Runner
	endpoint string
}

func (u *ui) routes() http.Handler {
	m := chi.NewRouter()
	static.Mount(m)
	m.Get("/", u.home)
	m.Get("/fragments/tasks", u.tasksFragment)
	m.Get("/fragments/approvals", u.approvalsFragment)
	m.Post("/tasks", u.createTask)
	m.Get("/tasks/{id}", u.task)
	m.Get("/fragments/tasks/{id}", u.taskFragment)
	m.Get("/tasks/{id}/steps/{n}/screenshot.png", u.stepShot)
	m.Post("/tasks/{id}/resume", u.resume)
	m.Post("/tasks/{id}/stop", u.stop)
	m.Post("/tasks/{id}/label", u.label)
	m.Post("/tasks/{id}/answer", u.answer)
	m.Get("/approvals/{id}", u.approval)
	m.Get("/approvals/{id}/screenshot.png", u.approvalShot)
	m.Post("/approvals/{id}", u.decide)
	m.Post("/pause", u.pause)
	m.Get("/settings", u.settings)
	m.Post("/settings", u.saveSettings)
	m.Post("/secrets", u.addSecret)
	m.Post("/api/secrets", u.apiAddSecret)
	m.Get("/api/tasks", u.apiTasks)
	return m
}

func idParam(r *http.Request, name string) (int64, bool) {
	v, err := strconv.ParseInt(chi.URLParam(r, name), 10, 64)
	return v, err == nil && v > 0
}

func (u *ui) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusInternalServerError
	if errors.Is(err, store.ErrNotFound) {
		code = http.StatusNotFound
	}
	views.Render(w, r, code, views.ErrorPage(code, http.StatusText(code), err.Error()))
}

func (u *ui) bad(w http.ResponseWriter, r *http.Request, msg string) {
	views.Render(w, r, http.StatusBadRequest, views.ErrorPage(http.StatusBadRequest, "Bad request", msg))
}

func (u *ui) approvals(r *http.Request) ([]ApprovalView, error) {
	as, err := u.r.St.PendingApprovals(r.Context())
	if err != nil {
		return nil, err
	}
	out := make([]ApprovalView, 0, len(as))
	now := u.r.Clock.Now()
	for _, a := range as {
		v := ApprovalView{ID: a.ID, TaskID: a.TaskID, Status: a.Status, CreatedAt: a.CreatedAt, Now: now}
		_ = json.Unmarshal([]byte(a.Action), &v.Action)
		out = append(out, v)
	}
	return out, nil
}

// pendingByTask maps each task waiting for the person to its approval,
// so every "awaiting approval" links to the approval it waits for.
func pendingByTask(as []ApprovalView) map[int64]int64 {
	out := map[int64]int64{}
	for _, a := range as {
		if _, ok := out[a.TaskID]; !ok {
			out[a.TaskID] = a.ID
		}
	}
	return out
}

func (u *ui) home(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	ts, err := u.r.St.Tasks(ctx, 100)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	as, err := u.approvals(r)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	mode, reason, _ := u.r.Caller.Mode(ctx, u.r.ModelName)
	views.Render(w, r, http.StatusOK, homePage(HomeModel{Tasks: ts, Approvals: as, Pending: pendingByTask(as), Paused: u.r.setting(ctx, keyPaused, "") == "1",
		Endpoint: u.endpoint, Model: u.r.ModelName, Mode: mode + " (" + reason + ")", Panel: u.r.PanelState(), PanelLimits: u.r.PanelLimits(ctx)}))
}

func (u *ui) tasksFragment(w http.ResponseWriter, r *http.Request) {
	ts, err := u.r.St.Tasks(r.Context(), 100)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	as, err := u.approvals(r)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	views.Render(w, r, http.StatusOK, tasksTable(ts, pendingByTask(as)))
}

func (u *ui) approvalsFragment(w http.ResponseWriter, r *http.Request) {
	as, err := u.approvals(r)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	views.Render(w, r, http.StatusOK, approvalsList(as))
}

func (u *ui) createTask(w http.ResponseWriter, r *http.Request) {
	var urls []string
	for _, l := range strings.Split(r.FormValue("urls"), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			urls = append(urls, l)
		}
	}
	var lim store.Limits
	var perr error
	num := func(name string) int {
		v := strings.TrimSpace(r.FormValue(name))
		if v == "" {
			return 0
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			perr = errors.New(name + " must be a whole number of 0 or more")
		}
		return n
	}
	lim.Steps, lim.Tokens, lim.Tabs = num("max_steps"), num("max_tokens"), num("max_tabs")
	if v := strings.TrimSpace(r.FormValue("max_cost")); v != "" {
		if lim.CostUSD, perr = strconv.ParseFloat(v, 64); perr != nil || lim.CostUSD < 0 {
			perr = errors.New("max_cost must be a number of dollars")
		}
	}
	if v := strings.TrimSpace(r.FormValue("max_time")); v != "" {
		if lim.WallTime, perr = time.ParseDuration(v); perr != nil || lim.WallTime < 0 {
			perr = errors.New("max_time must be a duration like 10m")
		}
	}
	if perr != nil {
		u.bad(w, r, perr.Error())
		return
	}
	id, err := u.r.Submit(r.Context(), r.FormValue("goal"), urls, &lim)
	if err != nil {
		u.bad(w, r, err.Error())
		return
	}
	http.Redirect(w, r, "/tasks/"+strconv.FormatInt(id, 10), http.StatusSeeOther)
}

func (u *ui) taskModel(r *http.Request) (TaskModel, error) {
	id, ok := idParam(r, "id")
	if !ok {
		return TaskModel{}, store.ErrNotFound
	}
	t, err := u.r.St.Task(r.Context(), id)
	if err != nil {
		return TaskModel{}, err
	}
	steps, err := u.r.St.Steps(r.Context(), id)
	if err != nil {
		return TaskModel{}, err
	}
	as, err := u.approvals(r)
	if err != nil {
		return TaskModel{}, err
	}
	m := TaskModel{Task: t, Steps: steps, Now: u.r.Clock.Now()}
	for _, a := range as {
		if a.TaskID == id {
			m.Pending = append(m.Pending, a)
		}
	}
	if m.Done, err = u.r.St.Journal(r.Context(), id); err != nil {
		return TaskModel{}, err
	}
	return m, nil
}

func (u *ui) task(w http.ResponseWriter, r *http.Request) {
	m, err := u.taskModel(r)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	views.Render(w, r, http.StatusOK, taskPage(m))
}

func (u *ui) taskFragment(w http.ResponseWriter, r *http.Request) {
	m, err := u.taskModel(r)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	views.Render(w, r, http.StatusOK, taskBody(m))
}

func png(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "image/png")
	_, _ = w.Write(b)
}

func (u *ui) stepShot(w http.ResponseWriter, r *http.Request) {
	id, ok := idParam(r, "id")
	n, ok2 := idParam(r, "n")
	if !ok || !ok2 {
		http.NotFound(w, r)
		return
	}
	b, err := u.r.St.StepScreenshot(r.Context(), id, int(n))
	if err != nil || len(b) == 0 {
		http.NotFound(w, r)
		return
	}
	png(w, b)
}

func (u *ui) back(w http.ResponseWriter, r *http.Request, id int64) {
	http.Redirect(w, r, "/tasks/"+strconv.FormatInt(id, 10), http.StatusSeeOther)
}

func (u *ui) resume(w http.ResponseWriter, r *http.Request) {
	id, _ := idParam(r, "id")
	if err := u.r.Resume(r.Context(), id); err != nil {
		u.bad(w, r, err.Error())
		return
	}
	u.back(w, r, id)
}

func (u *ui) stop(w http.ResponseWriter, r *http.Request) {
	id, _ := idParam(r, "id")
	if err := u.r.Stop(r.Context(), id); err != nil {
		u.fail(w, r, err)
		return
	}
	u.back(w, r, id)
}

func (u *ui) label(w http.ResponseWriter, r *http.Request) {
	id, _ := idParam(r, "id")
	keep := r.FormValue("keep") == "1"
	note := strings.TrimSpace(r.FormValue("note"))
	if !keep && note == "" {
		u.bad(w, r, "say why the label goes: the decision is recorded with the task")
		return
	}
	if err := u.r.SetLabel(r.Context(), id, keep, note); err != nil {
		u.fail(w, r, err)
		return
	}
	u.back(w, r, id)
}

func (u *ui) answer(w http.ResponseWriter, r *http.Request) {
	id, _ := idParam(r, "id")
	if err := u.r.Answer(id, r.FormValue("answer")); err != nil {
		u.bad(w, r, err.Error())
		return
	}
	u.back(w, r, id)
}

func (u *ui) approvalView(r *http.Request) (ApprovalView, []byte, error) {
	id, ok := idParam(r, "id")
	if !ok {
		return ApprovalView{}, nil, store.ErrNotFound
	}
	a, err := u.r.St.Approval(r.Context(), id)
	if err != nil {
		return ApprovalView{}, nil, err
	}
	v := ApprovalView{ID: a.ID, TaskID: a.TaskID, Status: a.Status, CreatedAt: a.CreatedAt, DecidedAt: a.DecidedAt,
		Values: a.Values, Now: u.r.Clock.Now()}
	_ = json.Unmarshal([]byte(a.Action), &v.Action)
	js, err := u.r.St.Journal(r.Context(), a.TaskID)
	if err != nil {
		return ApprovalView{}, nil, err
	}
	for _, e := range js {
		if e.ApprovalID == a.ID {
			v.Done = append(v.Done, e)
		}
	}
	return v, a.Screenshot, nil
}

func (u *ui) approval(w http.ResponseWriter, r *http.Request) {
	v, _, err := u.approvalView(r)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	views.Render(w, r, http.StatusOK, approvalPage(v, nil))
}

func (u *ui) approvalShot(w http.ResponseWriter, r *http.Request) {
	_, b, err := u.approvalView(r)
	if err != nil || len(b) == 0 {
		http.NotFound(w, r)
		return
	}
	png(w, b)
}

func (u *ui) decide(w http.ResponseWriter, r *http.Request) {
	v, _, err := u.approvalView(r)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	if err := r.ParseForm(); err != nil {
		u.bad(w, r, err.Error())
		return
	}
	approve := false
	switch r.FormValue("decision") {
	case "approve":
		approve = true
	case "deny":
	default:
		u.bad(w, r, "decision must be approve or deny")
		return
	}
	edits := map[string]string{}
	if approve {
		for _, f := range v.Action.Fields {
			if f.Secret {
				continue
			}
			if nv, ok := r.PostForm["field."+f.Name]; ok && strings.ReplaceAll(nv[0], "\r\n", "\n") != f.Value {
				edits[f.Name] = strings.ReplaceAll(nv[0], "\r\n", "\n")
			}
		}
	}
	if err := u.r.Decide(r.Context(), v.ID, approve, edits); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			u.bad(w, r, "this action was already decided (or its task was interrupted): nothing changed")
			return
		}
		u.fail(w, r, err)
		return
	}
	u.back(w, r, v.TaskID)
}

func (u *ui) pause(w http.ResponseWriter, r *http.Request) {
	on := r.FormValue("on") == "1"
	if err := u.r.SetPaused(r.Context(), on); err != nil {
		u.fail(w, r, err)
		return
	}
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (u *ui) settingsModel(r *http.Request) (SettingsModel, error) {
	ctx := r.Context()
	s := u.r.setting
	names, err := u.r.St.Secrets(ctx)
	if err != nil {
		return SettingsModel{}, err
	}
	m := SettingsModel{Label: s(ctx, keyLabel, defaultLabelText), Phrases: s(ctx, keyRiskyPhrases, ""), Domains: s(ctx, keyRiskyDomains, ""),
		DayTokens: s(ctx, keyDayTokens, "0"), DaySteps: s(ctx, keyDaySteps, "0"), DayCost: s(ctx, keyDayCost, "0"), Defaults: u.r.Defaults}
	for n, sec := range names {
		m.Secrets = append(m.Secrets, SecretView{Name: n, Origins: sec.Origins, NoAsk: len(sec.NoAsk) > 0})
	}
	sort.Slice(m.Secrets, func(i, j int) bool { return m.Secrets[i].Name < m.Secrets[j].Name })
	return m, nil
}

func (u *ui) settings(w http.ResponseWriter, r *http.Request) {
	m, err := u.settingsModel(r)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	views.Render(w, r, http.StatusOK, settingsPage(m))
}

func (u *ui) saveSettings(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	for _, k := range []string{"day_tokens", "day_steps"} {
		if _, err := strconv.Atoi(strings.TrimSpace(r.FormValue(k))); err != nil {
			u.bad(w, r, k+" must be a whole number (0 for none)")
			return
		}
	}
	if _, err := strconv.ParseFloat(strings.TrimSpace(r.FormValue("day_cost")), 64); err != nil {
		u.bad(w, r, "day_cost must be a number of dollars (0 for none)")
		return
	}
	for k, v := range map[string]string{keyLabel: r.FormValue("label"), keyRiskyPhrases: r.FormValue("phrases"), keyRiskyDomains: r.FormValue("domains"),
		keyDayTokens: r.FormValue("day_tokens"), keyDaySteps: r.FormValue("day_steps"), keyDayCost: r.FormValue("day_cost")} {
		if err := u.r.St.SetSetting(ctx, k, strings.TrimSpace(strings.ReplaceAll(v, "\r\n", "\n"))); err != nil {
			u.fail(w, r, err)
			return
		}
	}
	http.Redirect(w, r, "/settings", http.StatusSeeOther)
}

func (u *ui) addSecret(w http.ResponseWriter, r *http.Request) {
	origins, err := SecretOrigins(r.FormValue("origins"))
	if err != nil {
		u.bad(w, r, err.Error())
		return
	}
	var noAsk []string
	if r.FormValue("no_ask") == "1" {
		noAsk = origins
	}
	if err := u.r.PutSecret(r.Context(), strings.TrimSpace(r.FormValue("name")), r.FormValue("value"), origins, noAsk); err != nil {
		u.bad(w, r, err.Error())
		return
	}
	http.Redirect(w, r, "/settings", http.StatusSeeOther)
}

// SecretJSON is a secret as POST /api/secrets takes it: the sites it
// belongs to are required; NoAsk are those of them where it is typed
// without asking the person each time.
type SecretJSON struct {
	Name    string   `json:"name"`
	Value   string   `json:"value"`
	Origins []string `json:"origins"`
	NoAsk   []string `json:"no_ask"`
}

func (u *ui) apiAddSecret(w http.ResponseWriter, r *http.Request) {
	var in SecretJSON
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&in); err != nil {
		http.Error(w, "assistant: the body must be JSON like {\"name\":\"bankpw\",\"value\":\"…\",\"origins\":[\"https://bank.example\"]}", http.StatusBadRequest)
		return
	}
	origins, err := SecretOrigins(strings.Join(in.Origins, "\n"))
	if err == nil {
		var noAsk []string
		if noAsk, err = SecretOrigins(strings.Join(in.NoAsk, "\n")); err == nil {
			err = u.r.PutSecret(r.Context(), strings.TrimSpace(in.Name), in.Value, origins, noAsk)
		}
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// TaskJSON is a task as /api/tasks lists it (for scripts and the eval).
type TaskJSON struct {
	ID         int64    `json:"id"`
	Goal       string   `json:"goal"`
	Status     string   `json:"status"`
	StopReason string   `json:"stop_reason"`
	Steps      int      `json:"steps"`
	Tokens     int      `json:"tokens"`
	CostUSD    float64  `json:"cost_usd"`
	Mode       string   `json:"mode"`
	Tabs       []string `json:"tabs"`
	Pending    []int64  `json:"pending_approvals"`
	Origin     string   `json:"origin,omitempty"`
}

func (u *ui) apiTasks(w http.ResponseWriter, r *http.Request) {
	ts, err := u.r.St.Tasks(r.Context(), 100)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	as, _ := u.r.St.PendingApprovals(r.Context())
	out := []TaskJSON{}
	for _, t := range ts {
		j := TaskJSON{ID: t.ID, Goal: t.Goal, Status: t.Status, StopReason: t.StopReason, Steps: t.Steps, Tokens: t.TokensIn + t.TokensOut,
			CostUSD: float64(t.CostMicro) / 1e6, Mode: t.Mode, Tabs: []string{}, Pending: []int64{}, Origin: t.Origin}
		for n := range t.Tabs {
			j.Tabs = append(j.Tabs, n)
		}
		for _, a := range as {
			if a.TaskID == t.ID {
				j.Pending = append(j.Pending, a.ID)
			}
		}
		out = append(out, j)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
