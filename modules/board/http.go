package board

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

//go:embed templates/*.html templates/loads.js
var templateFS embed.FS

var (
	pages   = template.Must(template.ParseFS(templateFS, "templates/*.html"))
	loadsJS = func() template.JS {
		b, err := templateFS.ReadFile("templates/loads.js")
		if err != nil {
			panic(err)
		}
		return template.JS(b)
	}()
)

// Cookie names.
const (
	SessionCookie = "board_session"
	MFACookie     = "board_mfa"
)

type handler struct {
	b     *Board
	token string // sandbox admin token
	bufs  sync.Pool
}

// routes lists every endpoint of the board in one place.
func (h *handler) routes() http.Handler {
	mux := http.NewServeMux()
	page := func(f http.HandlerFunc) http.HandlerFunc { return h.chaotic(f, true) }

	mux.HandleFunc("GET /{$}", page(func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loads", http.StatusSeeOther) }))
	mux.HandleFunc("GET /login", page(h.loginPage))
	mux.HandleFunc("POST /login", page(h.loginPost))
	mux.HandleFunc("GET /login/totp", page(h.totpPage))
	mux.HandleFunc("POST /login/totp", page(h.totpPost))
	mux.HandleFunc("POST /logout", page(h.logout))
	mux.HandleFunc("GET /loads", page(h.loadsPage))
	mux.HandleFunc("GET /captcha", page(h.captchaPage))
	mux.HandleFunc("POST /captcha", page(h.captchaPost))
	mux.HandleFunc("GET /api/session", page(h.apiSession))
	mux.HandleFunc("GET /api/platform", page(h.apiPlatform))
	mux.HandleFunc("GET /api/loads", page(h.apiLoads))
	mux.HandleFunc("GET /api/bookings", page(h.apiBookings))
	// The book endpoint rolls its own 5xx after counting the request.
	mux.HandleFunc("POST /api/book", h.chaotic(h.apiBook, false))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })

	mux.HandleFunc("GET /_sandbox/{$}", h.sandboxPage)
	mux.HandleFunc("GET /_sandbox/stats", h.admin(h.sbStats))
	mux.HandleFunc("GET /_sandbox/events", h.admin(h.sbEvents))
	mux.HandleFunc("GET /_sandbox/accounts", h.admin(h.sbAccounts))
	mux.HandleFunc("POST /_sandbox/accounts", h.admin(h.sbCreateAccount))
	mux.HandleFunc("POST /_sandbox/loads", h.admin(h.sbPublish))
	mux.HandleFunc("GET /_sandbox/bookings", h.admin(h.sbBookings))
	mux.HandleFunc("POST /_sandbox/bookings", h.admin(h.sbInjectBooking))
	mux.HandleFunc("GET /_sandbox/chaos", h.admin(h.sbChaos))
	mux.HandleFunc("PATCH /_sandbox/chaos", h.admin(h.sbPatchChaos))
	mux.HandleFunc("POST /_sandbox/session-storm", h.admin(h.sbStorm))
	mux.HandleFunc("GET /_sandbox/publisher", h.admin(h.sbPublisher))
	mux.HandleFunc("PATCH /_sandbox/publisher", h.admin(h.sbPatchPublisher))
	return mux
}

// chaotic adds the latency switch to a board route and, when errs is set,
// the 5xx switch: a 503 answered before the handler runs has no effect.
func (h *handler) chaotic(next http.HandlerFunc, errs bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if d := h.b.delay(); d > 0 && !h.b.sleep(r.Context(), d) {
			return
		}
		ch := h.b.Chaos()
		// Connections stay alive whatever the switches say, as on a real
		// server: a dropped answer on a reused connection is exactly what
		// a client stack may resend behind its caller's back.
		if errs && h.b.roll(ch.ErrorRate) {
			unavailable(w, r)
			return
		}
		next(w, r)
	}
}

// connCount counts the requests one client connection has carried; the
// server puts one in every connection's context (Server.ConnContext).
type connCount struct{ n atomic.Int64 }

type connKey struct{}

// withConnCount is the server's ConnContext.
func withConnCount(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, &connCount{})
}

// countRequest counts a request on its connection (the outermost handler).
func countRequest(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(*connCount); ok {
			c.n.Add(1)
		}
		next.ServeHTTP(w, r)
	})
}

// connReused tells a request that came on a connection that had carried
// an earlier request.
func connReused(ctx context.Context) bool {
	c, ok := ctx.Value(connKey{}).(*connCount)
	return ok && c.n.Load() > 1
}

func unavailable(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Retry-After", "1")
	if strings.HasPrefix(r.URL.Path, "/api/") {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable"})
		return
	}
	http.Error(w, "503 Service Unavailable", http.StatusServiceUnavailable)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
	_, _ = w.Write([]byte("\n"))
}

// pageData is what every board page template reads.
type pageData struct {
	Title, Error, Account, Client, CSRF, Layout string
	PollMS                                      int64
	Script                                      template.JS
}

func (h *handler) render(w http.ResponseWriter, status int, name string, d pageData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if err := pages.ExecuteTemplate(w, name, d); err != nil {
		h.b.log.Error("board: render page", "page", name, "err", err)
	}
}

func setCookie(w http.ResponseWriter, name, value string, maxAge time.Duration) {
	c := &http.Cookie{Name: name, Value: value, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode}
	if maxAge > 0 {
		c.MaxAge = int(maxAge / time.Second)
	} else {
		c.MaxAge = -1
	}
	http.SetCookie(w, c)
}

func cookie(r *http.Request, name string) string {
	c, err := r.Cookie(name)
	if err != nil {
		return ""
	}
	return c.Value
}

func (h *handler) auth(r *http.Request) (SessionInfo, bool) {
	return h.b.session(cookie(r, SessionCookie))
}

// ---- sign-in pages ----

func (h *handler) loginPage(w http.ResponseWriter, r *http.Request) {
	h.render(w, http.StatusOK, "login", pageData{Title: "Sign in"})
}

func (h *handler) loginPost(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	tok, err := h.b.CheckPassword(r.PostFormValue("username"), r.PostFormValue("password"))
	if err != nil {
		w.Header().Set("X-Board-Error", "credentials")
		h.render(w, http.StatusUnauthorized, "login", pageData{Title: "Sign in", Error: "Invalid username or password."})
		return
	}
	setCookie(w, MFACookie, tok, mfaTTL)
	http.Redirect(w, r, "/login/totp", http.StatusSeeOther)
}

func (h *handler) totpPage(w http.ResponseWriter, r *http.Request) {
	if h.b.pendingAccount(cookie(r, MFACookie)) == nil {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	h.render(w, http.StatusOK, "totp", pageData{Title: "Verify"})
}

func (h *handler) totpPost(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	tok, err := h.b.CheckTOTP(r.Context(), cookie(r, MFACookie), r.PostFormValue("code"))
	switch {
	case errors.Is(err, ErrBadCredentials):
		w.Header().Set("X-Board-Error", "credentials")
		h.render(w, http.StatusUnauthorized, "login", pageData{Title: "Sign in", Error: "Your sign-in expired. Start again."})
		return
	case errors.Is(err, ErrTOTPReused):
		w.Header().Set("X-Board-Error", "totp_reused")
		h.render(w, http.StatusUnauthorized, "totp", pageData{Title: "Verify", Error: "This code was already used. Wait for the next code."})
		return
	case errors.Is(err, ErrTOTPInvalid):
		w.Header().Set("X-Board-Error", "totp_invalid")
		h.render(w, http.StatusUnauthorized, "totp", pageData{Title: "Verify", Error: "That code is not valid."})
		return
	case err != nil:
		http.Error(w, "sign-in failed", http.StatusInternalServerError)
		return
	}
	setCookie(w, MFACookie, "", 0)
	setCookie(w, SessionCookie, tok, h.b.cfg.SessionTTL)
	http.Redirect(w, r, "/loads", http.StatusSeeOther)
}

func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
	if si, ok := h.auth(r); ok && subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf_token")), []byte(si.CSRFToken)) == 1 {
		h.b.logout(si.token)
	}
	setCookie(w, SessionCookie, "", 0)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// ---- the loads page and its JSON ----

func (h *handler) loadsPage(w http.ResponseWriter, r *http.Request) {
	si, ok := h.auth(r)
	if !ok {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	h.render(w, http.StatusOK, "loads", pageData{Title: "Loads", Account: si.Account, Client: si.Client, CSRF: si.CSRFToken,
		Layout: h.b.Chaos().Layout, PollMS: h.b.cfg.PollInterval.Milliseconds(), Script: loadsJS})
}

func signedOut(w http.ResponseWriter) {
	writeJSON(w, http.StatusUnauthorized, map[string]any{"status": "signed_out", "signed_in": false, "complete": false})
}

func (h *handler) apiSession(w http.ResponseWriter, r *http.Request) {
	si, ok := h.auth(r)
	if !ok {
		signedOut(w)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"signed_in": true, "account": si.Account, "client": si.Client,
		"csrf_token": si.CSRFToken, "expires_at": si.ExpiresAt})
}

// apiPlatform states the board's booking rules a client may rely on (no
// sign-in needed): whether it honours the Idempotency-Key header.
func (h *handler) apiPlatform(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"idempotency_keys": h.b.cfg.IdempotencyKeys,
		"server_time": h.b.clk.Now().UTC()})
}

func queryInt(r *http.Request, name string, def, lo, hi int64) (int64, bool) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, true
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, false
	}
	return n, true
}

func (h *handler) apiLoads(w http.ResponseWriter, r *http.Request) {
	if _, ok := h.auth(r); !ok {
		signedOut(w)
		return
	}
	after, ok1 := queryInt(r, "after", 0, 0, 1<<62)
	limit, ok2 := queryInt(r, "limit", 500, 1, 2000)
	if !ok1 || !ok2 {
		writeJSON(w, http.StatusBadRequest, map[string]any{"status": "bad_request", "error": "after must be ≥ 0, limit 1..2000"})
		return
	}
	bp, _ := h.bufs.Get().(*[]byte)
	if bp == nil {
		b := make([]byte, 0, 64<<10)
		bp = &b
	}
	buf := (*bp)[:0]
	buf = append(buf, `{"server_time":"`...)
	buf = h.b.clk.Now().UTC().AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, `","after":`...)
	buf = strconv.AppendInt(buf, after, 10)
	buf = append(buf, `,"loads":[`...)
	buf, next := h.b.feed(buf, after, int(limit))
	buf = append(buf, `],"next_after":`...)
	buf = strconv.AppendInt(buf, next, 10)
	buf = append(buf, "}\n"...)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf)
	*bp = buf
	h.bufs.Put(bp)
}

// BookingsPage is the client's bookings answer. Complete is true only when
// the caller is signed in and Bookings holds every booking of the client,
// so an empty list can be told from a signed-out or partial page.
type BookingsPage struct {
	SignedIn bool      `json:"signed_in"`
	Complete bool      `json:"complete"`
	Client   string    `json:"client"`
	Account  string    `json:"account"`
	AsOf     time.Time `json:"as_of"`
	Page     int       `json:"page"`
	Pages    int       `json:"pages"`
	PerPage  int       `json:"per_page"`
	Total    int       `json:"total"`
	// With a cursor (?after=ID): the cursor asked with, the one to ask with
	// next, and whether another page follows.
	After     *int64     `json:"after,omitempty"`
	NextAfter *int64     `json:"next_after,omitempty"`
	More      *bool      `json:"more,omitempty"`
	Bookings  []*Booking `json:"bookings"`
}

func (h *handler) apiBookings(w http.ResponseWriter, r *http.Request) {
	si, ok := h.auth(r)
	if !ok {
		signedOut(w)
		return
	}
	page, ok1 := queryInt(r, "page", 1, 1, 1<<31)
	per, ok2 := queryInt(r, "per_page", 100, 1, 1000)
	if !ok1 || !ok2 {
		writeJSON(w, http.StatusBadRequest, map[string]any{"status": "bad_request", "error": "page must be ≥ 1, per_page 1..1000"})
		return
	}
	if r.URL.Query().Has("after") {
		h.apiBookingsAfter(w, r, si)
		return
	}
	all := h.b.Bookings(si.Client)
	out := BookingsPage{SignedIn: true, Client: si.Client, Account: si.Account, AsOf: h.b.clk.Now().UTC(), Total: len(all)}
	if r.URL.Query().Get("all") == "1" || r.URL.Query().Get("all") == "true" {
		out.Page, out.Pages, out.PerPage, out.Bookings = 1, 1, len(all), all
	} else {
		out.Page, out.PerPage = int(page), int(per)
		out.Pages = max(1, (len(all)+int(per)-1)/int(per))
		lo := min(len(all), (int(page)-1)*int(per))
		hi := min(len(all), lo+int(per))
		out.Bookings = all[lo:hi]
	}
	out.Complete = out.Pages == 1 && out.Page == 1
	writeJSON(w, http.StatusOK, out)
}

// apiBookingsAfter is the bookings list by cursor: the client's bookings with
// an id above after, oldest first, at most limit. Booking ids only grow and
// bookings are never removed, so walking from after=0 until more is false
// sees every booking that existed when the walk began, however many there
// are: the last page says complete.
func (h *handler) apiBookingsAfter(w http.ResponseWriter, r *http.Request, si SessionInfo) {
	after, ok1 := queryInt(r, "after", 0, 0, 1<<62)
	limit, ok2 := queryInt(r, "limit", 100, 1, 1000)
	if !ok1 || !ok2 {
		writeJSON(w, http.StatusBadRequest, map[string]any{"status": "bad_request", "error": "after must be ≥ 0, limit 1..1000"})
		return
	}
	page, total, more := h.b.BookingsAfter(si.Client, after, int(limit))
	next := after
	if len(page) > 0 {
		next = page[len(page)-1].ID
	}
	out := BookingsPage{SignedIn: true, Client: si.Client, Account: si.Account, AsOf: h.b.clk.Now().UTC(),
		Page: 1, Pages: 1, PerPage: int(limit), Total: total, After: &after, NextAfter: &next, More: &more,
		Bookings: page, Complete: !more}
	writeJSON(w, http.StatusOK, out)
}

// apiBook is the book endpoint. Order: sign-in and CSRF, count the request,
// then the chaos switches (5xx, hold, captcha, late commit), the booking
// rules, and last the dropped-response switch.
func (h *handler) apiBook(w http.ResponseWriter, r *http.Request) {
	si, ok := h.auth(r)
	if !ok {
		signedOut(w)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	var loadID, csrf string
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		var body struct {
			LoadID string `json:"load_id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"status": "bad_request", "error": "body must be JSON {\"load_id\": \"...\"}"})
			return
		}
		loadID = body.LoadID
	} else {
		loadID, csrf = r.PostFormValue("load_id"), r.PostFormValue("csrf_token")
	}
	if v := r.Header.Get("X-CSRF-Token"); v != "" {
		csrf = v
	}
	if subtle.ConstantTimeCompare([]byte(csrf), []byte(si.CSRFToken)) != 1 {
		writeJSON(w, http.StatusForbidden, map[string]any{"status": "csrf_failed", "error": "missing or wrong CSRF token"})
		return
	}
	if loadID == "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"status": "bad_request", "error": "load_id is required"})
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if len(key) > 200 {
		writeJSON(w, http.StatusBadRequest, map[string]any{"status": "bad_request", "error": "Idempotency-Key longer than 200 bytes"})
		return
	}
	h.b.recordRequest(si, loadID)
	ch := h.b.Chaos()
	ev := Event{LoadID: loadID, Client: si.Client, Account: si.Account}

	// One roll for both switches, so a seeded run without the booking
	// switch rolls the same dice as before it existed.
	if h.b.roll(max(ch.ErrorRate, ch.BookErrorRate)) {
		ev.Type = EvServerError
		h.b.note(ev)
		unavailable(w, r)
		return
	}
	// A held request carries on when the client goes away, like a real
	// server that already started the work.
	work := context.WithoutCancel(r.Context())
	if ch.Hold > 0 && !h.b.sleep(work, time.Duration(ch.Hold)) {
		unavailable(w, r)
		return
	}
	if !si.captchaOK && h.b.roll(ch.CaptchaRate) {
		ev.Type = EvCaptchaShown
		h.b.note(ev)
		writeJSON(w, http.StatusForbidden, map[string]any{"status": StatusCaptcha, "challenge_url": "/captcha",
			"error": "a person must complete the verification before this booking"})
		return
	}
	if h.b.roll(ch.LateCommitRate) {
		ev.Type, ev.Detail = EvLateCommit, time.Duration(ch.LateCommitDelay).String()
		h.b.note(ev)
		h.b.lateCommit(si, loadID, key, time.Duration(ch.LateCommitDelay))
		writeJSON(w, http.StatusGatewayTimeout, map[string]any{"status": "timeout", "error": "the booking service did not answer in time"})
		return
	}
	res := h.b.commit(work, si.Client, si.Account, loadID, key, "http")
	reused := connReused(r.Context())
	dropped := h.b.roll(ch.DropResponseRate)
	if !dropped && reused {
		dropped = h.b.roll(ch.DropReusedResponseRate)
	}
	if dropped {
		ev.Type, ev.BookingID, ev.Detail = EvResponseDropped, 0, strconv.Itoa(res.Status)
		if reused {
			ev.Detail += " reused connection"
		}
		if res.Booking != nil {
			ev.BookingID = res.Booking.ID
		}
		h.b.note(ev)
		// Closes the connection without a response; net/http does not log it.
		panic(http.ErrAbortHandler)
	}
	if res.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeRaw(w, res.Status, res.Body)
}

func (h *handler) captchaPage(w http.ResponseWriter, r *http.Request) {
	si, ok := h.auth(r)
	if !ok {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	h.render(w, http.StatusOK, "captcha", pageData{Title: "Verify", Account: si.Account, Client: si.Client, CSRF: si.CSRFToken})
}

func (h *handler) captchaPost(w http.ResponseWriter, r *http.Request) {
	si, ok := h.auth(r)
	if !ok {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf_token")), []byte(si.CSRFToken)) != 1 || r.PostFormValue("human") != "yes" {
		h.render(w, http.StatusForbidden, "captcha", pageData{Title: "Verify", Account: si.Account, Client: si.Client, CSRF: si.CSRFToken})
		return
	}
	h.b.passCaptcha(si.token)
	http.Redirect(w, r, "/loads", http.StatusSeeOther)
}
