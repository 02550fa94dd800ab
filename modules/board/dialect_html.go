package board

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	// The html dialect writes times in named zones: the zone database
	// ships in the binary, so a host without one serves the same times.
	_ "time/tzdata"
)

// The html dialect (--dialect=html) is a second face of the same board:
// the same store, booking rules, oracle and chaos switches behind an
// HTML-first site that differs from the classic one wherever it can.
// Sign-in is a server-rendered form with a CSRF token in a hidden field
// and a session cookie whose value rotates at every sign-in step; the feed
// is a JSON:API document (data[].attributes, links.next) the dashboard
// polls; booking is a form POST answered 303 to a confirmation page that
// carries the booking id, and a load already taken is answered 200 with an
// error banner; the bookings look-up pages by offset and limit with the
// total in meta; times are local wall-clock times with a zone name,
// weights in pounds and the rate per mile. Signed-out API answers are 200
// with a JSON:API errors document. docs/BOARD.md describes every route.

//go:embed templates/hb/*.html templates/hb/dashboard.js
var hbFS embed.FS

var (
	hbPages = template.Must(template.ParseFS(hbFS, "templates/hb/*.html"))
	hbJS    = func() template.JS {
		b, err := hbFS.ReadFile("templates/hb/dashboard.js")
		if err != nil {
			panic(err)
		}
		return template.JS(b)
	}()
)

// HTMLSessionCookie is the html dialect's one cookie: an anonymous session
// before sign-in, the pending second step after the password, the signed-in
// session after the code; its value changes at each of those steps.
const HTMLSessionCookie = "_hb_session"

// BoardZone is the zone of the html dialect's board-side times (posted,
// bookable until, booked at); pickup times are in the origin's zone.
const BoardZone = "America/Chicago"

// htmlTimeLayout is the wall-clock layout of the html dialect's times,
// followed by a space and the zone's name ("2026-12-02 07:50:12.345
// America/Chicago").
const htmlTimeLayout = "2006-01-02 15:04:05.000"

// pickupLayout is the wall-clock layout of pickup windows, whose zone is in
// the window's tz attribute.
const pickupLayout = "2006-01-02 15:04"

// jsonAPIType is the JSON:API media type.
const jsonAPIType = "application/vnd.api+json"

// preSession is an html dialect cookie before sign-in ends: the form's
// CSRF token, and after the password the pending second step.
type preSession struct {
	csrf    string
	pending string // CheckPassword's token ("" before the password)
	expires time.Time
}

type htmlHandler struct {
	*handler
	mu  sync.Mutex
	pre map[string]*preSession

	zoneOnce sync.Once
	board    *time.Location
}

var stateZones = map[string]string{
	"TX": "America/Chicago", "GA": "America/New_York", "IL": "America/Chicago", "TN": "America/Chicago",
	"CO": "America/Denver", "AZ": "America/Phoenix", "CA": "America/Los_Angeles", "OR": "America/Los_Angeles",
	"WA": "America/Los_Angeles", "MO": "America/Chicago", "OH": "America/New_York", "IN": "America/Indiana/Indianapolis",
	"NC": "America/New_York", "FL": "America/New_York", "UT": "America/Denver", "NE": "America/Chicago",
	"NJ": "America/New_York", "PA": "America/New_York",
}

var zoneCache sync.Map

func mustZone(name string) *time.Location {
	if l, ok := zoneCache.Load(name); ok {
		return l.(*time.Location)
	}
	l, err := time.LoadLocation(name)
	if err != nil {
		// The zone database ships in the binary (time/tzdata above).
		panic("board: time zone " + name + ": " + err.Error())
	}
	zoneCache.Store(name, l)
	return l
}

// wallClock is t as the html dialect writes it: local wall-clock time and
// the zone's name.
func wallClock(t time.Time, zone string) string {
	return t.In(mustZone(zone)).Format(htmlTimeLayout) + " " + zone
}

func originZone(p Place) string {
	if z, ok := stateZones[p.State]; ok {
		return z
	}
	return "UTC"
}

func (h *htmlHandler) routes() http.Handler {
	mux := http.NewServeMux()
	page := func(f http.HandlerFunc) http.HandlerFunc { return h.hbChaotic(f, true) }

	mux.HandleFunc("GET /{$}", page(func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/dashboard", http.StatusSeeOther) }))
	mux.HandleFunc("GET /signin", page(h.signinPage))
	mux.HandleFunc("POST /signin", page(h.signinPost))
	mux.HandleFunc("GET /signin/verify", page(h.verifyPage))
	mux.HandleFunc("POST /signin/verify", page(h.verifyPost))
	mux.HandleFunc("POST /signout", page(h.signout))
	mux.HandleFunc("GET /dashboard", page(h.dashboard))
	mux.HandleFunc("GET /verify-human", page(h.humanPage))
	mux.HandleFunc("POST /verify-human", page(h.humanPost))
	mux.HandleFunc("GET /loads/{id}/confirmation", page(h.confirmation))
	// The book form rolls its own 5xx after counting the request.
	mux.HandleFunc("POST /loads/{id}/book", h.hbChaotic(h.book, false))
	mux.HandleFunc("GET /api/v2/about", page(h.about))
	mux.HandleFunc("GET /api/v2/loads", page(h.feed))
	mux.HandleFunc("GET /api/v2/account/bookings", page(h.bookings))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })

	// The sandbox admin API and the oracle are the classic board's.
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

// hbChaotic is chaotic with the html dialect's 503: a page, or a JSON:API
// errors document under /api/.
func (h *htmlHandler) hbChaotic(next http.HandlerFunc, errs bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if d := h.b.delay(); d > 0 && !h.b.sleep(r.Context(), d) {
			return
		}
		if errs && h.b.roll(h.b.Chaos().ErrorRate) {
			h.unavailable(w, r)
			return
		}
		next(w, r)
	}
}

func (h *htmlHandler) unavailable(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Retry-After", "1")
	if strings.HasPrefix(r.URL.Path, "/api/") {
		apiErrors(w, http.StatusServiceUnavailable, "unavailable", "The service is busy. Try again shortly.")
		return
	}
	h.page(w, http.StatusServiceUnavailable, "error", hbData{Title: "Service unavailable", Banner: "The service is busy. Try again shortly.", Code: "unavailable"})
}

// hbData is what the html dialect's templates read.
type hbData struct {
	Title, Banner, Code, CSRF, Account, Client, Layout string
	LoadID, Confirmation, BookedAt                     string
	PollMS                                             int64
	Script                                             template.JS
}

func (h *htmlHandler) page(w http.ResponseWriter, status int, name string, d hbData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store, private")
	w.WriteHeader(status)
	if err := hbPages.ExecuteTemplate(w, name, d); err != nil {
		h.b.log.Error("board: render page", "dialect", DialectHTML, "page", name, "err", err)
	}
}

func apiErrors(w http.ResponseWriter, status int, code, title string) {
	writeAPI(w, status, map[string]any{"errors": []map[string]string{{"status": strconv.Itoa(status), "code": code, "title": title}}})
}

func writeAPI(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", jsonAPIType)
	w.Header().Set("Cache-Control", "no-store, private")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// signedOutAPI is the JSON:API answer to a request without a live session:
// HTTP 200 with an errors document, as some real boards do.
func signedOutAPI(w http.ResponseWriter) {
	apiErrors(w, http.StatusOK, "not_authenticated", "Your session has ended. Sign in again.")
}

func (h *htmlHandler) setSession(w http.ResponseWriter, value string, maxAge time.Duration) {
	c := &http.Cookie{Name: HTMLSessionCookie, Value: value, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode}
	if maxAge > 0 {
		c.MaxAge = int(maxAge / time.Second)
	} else {
		c.MaxAge = -1
	}
	http.SetCookie(w, c)
}

func (h *htmlHandler) auth(r *http.Request) (SessionInfo, bool) {
	return h.b.session(cookie(r, HTMLSessionCookie))
}

// newPre starts an anonymous (or pending) cookie with a fresh CSRF token.
func (h *htmlHandler) newPre(pending string) (string, *preSession) {
	now := h.b.clk.Now()
	tok := randomToken()
	p := &preSession{csrf: randomToken(), pending: pending, expires: now.Add(mfaTTL)}
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, v := range h.pre {
		if !v.expires.After(now) {
			delete(h.pre, k)
		}
	}
	h.pre[tok] = p
	return tok, p
}

// takePre returns the cookie's pre-sign-in state; drop removes it (its
// value is never accepted again: the cookie rotates).
func (h *htmlHandler) takePre(r *http.Request, drop bool) *preSession {
	tok := cookie(r, HTMLSessionCookie)
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.pre[tok]
	if p == nil || !p.expires.After(h.b.clk.Now()) {
		return nil
	}
	if drop {
		delete(h.pre, tok)
	}
	return p
}

func sameToken(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// ---- sign-in ----

func (h *htmlHandler) signinPage(w http.ResponseWriter, r *http.Request) {
	tok, p := h.newPre("")
	h.setSession(w, tok, mfaTTL)
	h.page(w, http.StatusOK, "signin", hbData{Title: "Sign in", CSRF: p.csrf})
}

// signinForm renders the sign-in form again with a banner, on a fresh
// anonymous cookie.
func (h *htmlHandler) signinForm(w http.ResponseWriter, status int, code, banner string) {
	tok, p := h.newPre("")
	h.setSession(w, tok, mfaTTL)
	h.page(w, status, "signin", hbData{Title: "Sign in", CSRF: p.csrf, Code: code, Banner: banner})
}

func (h *htmlHandler) signinPost(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	_ = r.ParseForm()
	p := h.takePre(r, true)
	if p == nil || p.pending != "" || !sameToken(r.PostFormValue("authenticity_token"), p.csrf) {
		h.signinForm(w, http.StatusUnprocessableEntity, "invalid_token", "The form expired. Sign in again.")
		return
	}
	pending, err := h.b.CheckPassword(r.PostFormValue("user[login]"), r.PostFormValue("user[password]"))
	if err != nil {
		// An error inside a 200, as many server-rendered sites answer.
		h.signinForm(w, http.StatusOK, "invalid_login", "Invalid login or password.")
		return
	}
	tok, _ := h.newPre(pending)
	h.setSession(w, tok, mfaTTL)
	http.Redirect(w, r, "/signin/verify", http.StatusSeeOther)
}

func (h *htmlHandler) verifyPage(w http.ResponseWriter, r *http.Request) {
	p := h.takePre(r, false)
	if p == nil || p.pending == "" {
		http.Redirect(w, r, "/signin", http.StatusSeeOther)
		return
	}
	h.page(w, http.StatusOK, "verify", hbData{Title: "Verify it is you", CSRF: p.csrf})
}

func (h *htmlHandler) verifyPost(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	_ = r.ParseForm()
	p := h.takePre(r, false)
	if p == nil || p.pending == "" || !sameToken(r.PostFormValue("authenticity_token"), p.csrf) {
		h.signinForm(w, http.StatusOK, "signin_expired", "Your sign-in expired. Start again.")
		return
	}
	tok, err := h.b.CheckTOTP(r.Context(), p.pending, r.PostFormValue("otp_attempt"))
	switch {
	case errors.Is(err, ErrBadCredentials):
		h.takePre(r, true)
		h.signinForm(w, http.StatusOK, "signin_expired", "Your sign-in expired. Start again.")
		return
	case errors.Is(err, ErrTOTPReused):
		h.page(w, http.StatusOK, "verify", hbData{Title: "Verify it is you", CSRF: p.csrf, Code: "otp_used",
			Banner: "That code has already been used. Wait for a new code."})
		return
	case errors.Is(err, ErrTOTPInvalid):
		h.page(w, http.StatusOK, "verify", hbData{Title: "Verify it is you", CSRF: p.csrf, Code: "otp_invalid",
			Banner: "That code is not right."})
		return
	case err != nil:
		h.page(w, http.StatusInternalServerError, "error", hbData{Title: "Error", Banner: "Sign-in failed.", Code: "error"})
		return
	}
	h.takePre(r, true)
	h.setSession(w, tok, h.b.cfg.SessionTTL)
	http.Redirect(w, r, "/dashboard", http.StatusSeeOther)
}

func (h *htmlHandler) signout(w http.ResponseWriter, r *http.Request) {
	if si, ok := h.auth(r); ok && sameToken(r.PostFormValue("authenticity_token"), si.CSRFToken) {
		h.b.logout(si.token)
	}
	h.setSession(w, "", 0)
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

// ---- pages ----

func (h *htmlHandler) dashboard(w http.ResponseWriter, r *http.Request) {
	si, ok := h.auth(r)
	if !ok {
		http.Redirect(w, r, "/signin", http.StatusSeeOther)
		return
	}
	h.page(w, http.StatusOK, "dashboard", hbData{Title: "Dashboard", Account: si.Account, Client: si.Client, CSRF: si.CSRFToken,
		Layout: h.b.Chaos().Layout, PollMS: h.b.cfg.PollInterval.Milliseconds(), Script: hbJS})
}

func (h *htmlHandler) humanPage(w http.ResponseWriter, r *http.Request) {
	si, ok := h.auth(r)
	if !ok {
		http.Redirect(w, r, "/signin", http.StatusSeeOther)
		return
	}
	h.page(w, http.StatusOK, "human", hbData{Title: "Security check", Account: si.Account, Client: si.Client, CSRF: si.CSRFToken})
}

func (h *htmlHandler) humanPost(w http.ResponseWriter, r *http.Request) {
	si, ok := h.auth(r)
	if !ok {
		http.Redirect(w, r, "/signin", http.StatusSeeOther)
		return
	}
	if !sameToken(r.PostFormValue("authenticity_token"), si.CSRFToken) || r.PostFormValue("confirm_human") != "1" {
		h.page(w, http.StatusOK, "human", hbData{Title: "Security check", Account: si.Account, Client: si.Client, CSRF: si.CSRFToken,
			Code: "not_confirmed", Banner: "Tick the box to confirm."})
		return
	}
	h.b.passCaptcha(si.token)
	http.Redirect(w, r, "/dashboard", http.StatusSeeOther)
}

// confirmation is the page a booking's 303 leads to: the client's newest
// booking of the load, with its confirmation number.
func (h *htmlHandler) confirmation(w http.ResponseWriter, r *http.Request) {
	si, ok := h.auth(r)
	if !ok {
		http.Redirect(w, r, "/signin", http.StatusSeeOther)
		return
	}
	id := r.PathValue("id")
	bk := h.b.lastBooking(si.Client, id)
	if bk == nil {
		h.page(w, http.StatusNotFound, "error", hbData{Title: "Not found", Banner: "No booking of this load.", Code: "not_found", Account: si.Account, Client: si.Client, CSRF: si.CSRFToken})
		return
	}
	h.page(w, http.StatusOK, "confirmation", hbData{Title: "Booking confirmed", Account: si.Account, Client: si.Client, CSRF: si.CSRFToken,
		LoadID: id, Confirmation: strconv.FormatInt(bk.ID, 10), BookedAt: wallClock(bk.BookedAt, BoardZone)})
}

// book is the booking form's target. Order as the classic book endpoint:
// sign-in and CSRF, count the request, the chaos switches (5xx, hold,
// captcha, late commit), the booking rules, the dropped-answer switch.
func (h *htmlHandler) book(w http.ResponseWriter, r *http.Request) {
	si, ok := h.auth(r)
	if !ok {
		http.Redirect(w, r, "/signin", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	_ = r.ParseForm()
	loadID := r.PathValue("id")
	d := hbData{Title: "Book load " + loadID, Account: si.Account, Client: si.Client, CSRF: si.CSRFToken, LoadID: loadID}
	if !sameToken(r.PostFormValue("authenticity_token"), si.CSRFToken) {
		d.Code, d.Banner = "invalid_token", "The form expired. Reload the page."
		h.page(w, http.StatusUnprocessableEntity, "load", d)
		return
	}
	key := r.PostFormValue("request_token")
	if len(key) > 200 {
		d.Code, d.Banner = "bad_request", "The request token is longer than 200 bytes."
		h.page(w, http.StatusBadRequest, "load", d)
		return
	}
	h.b.recordRequest(si, loadID)
	ch := h.b.Chaos()
	ev := Event{LoadID: loadID, Client: si.Client, Account: si.Account}
	if h.b.roll(max(ch.ErrorRate, ch.BookErrorRate)) {
		ev.Type = EvServerError
		h.b.note(ev)
		h.unavailable(w, r)
		return
	}
	work := context.WithoutCancel(r.Context())
	if ch.Hold > 0 && !h.b.sleep(work, time.Duration(ch.Hold)) {
		h.unavailable(w, r)
		return
	}
	if !si.captchaOK && h.b.roll(ch.CaptchaRate) {
		ev.Type = EvCaptchaShown
		h.b.note(ev)
		http.Redirect(w, r, "/verify-human?return_to="+url.QueryEscape("/dashboard"), http.StatusSeeOther)
		return
	}
	if h.b.roll(ch.LateCommitRate) {
		ev.Type, ev.Detail = EvLateCommit, time.Duration(ch.LateCommitDelay).String()
		h.b.note(ev)
		h.b.lateCommit(si, loadID, key, time.Duration(ch.LateCommitDelay))
		h.page(w, http.StatusGatewayTimeout, "error", hbData{Title: "Gateway timeout", Code: "timeout", Banner: "The booking service did not answer in time."})
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
		panic(http.ErrAbortHandler)
	}
	switch res.Status {
	case http.StatusCreated:
		http.Redirect(w, r, "/loads/"+url.PathEscape(loadID)+"/confirmation", http.StatusSeeOther)
	case http.StatusConflict:
		// A load already taken is a 200 with an error banner.
		d.Code, d.Banner = "already_booked", "Sorry, this load was just booked by another carrier."
		h.page(w, http.StatusOK, "load", d)
	case http.StatusGone:
		d.Code, d.Banner = "no_longer_available", "This load is no longer available."
		h.page(w, http.StatusOK, "load", d)
	case http.StatusNotFound:
		d.Code, d.Banner = "not_found", "There is no such load."
		h.page(w, http.StatusNotFound, "load", d)
	case http.StatusUnprocessableEntity:
		d.Code, d.Banner = "request_token_reused", "This request token was used for another load."
		h.page(w, http.StatusUnprocessableEntity, "load", d)
	default:
		d.Code, d.Banner = "error", "The booking was not saved."
		h.page(w, http.StatusInternalServerError, "load", d)
	}
}

// ---- JSON:API ----

func pageParam(r *http.Request, name string, def, lo, hi int64) (int64, bool) {
	v := r.URL.Query().Get("page[" + name + "]")
	if v == "" {
		return def, true
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, false
	}
	return n, true
}

func (h *htmlHandler) about(w http.ResponseWriter, r *http.Request) {
	writeAPI(w, http.StatusOK, map[string]any{"meta": map[string]any{
		"request_tokens_honoured": h.b.cfg.IdempotencyKeys, "server_time": wallClock(h.b.clk.Now(), BoardZone)}})
}

type apiResource struct {
	Type       string `json:"type"`
	ID         string `json:"id"`
	Attributes any    `json:"attributes"`
}

type loadAttrs struct {
	Reference     string     `json:"reference"`
	Origin        string     `json:"origin"`
	Destination   string     `json:"destination"`
	EquipmentType string     `json:"equipment_type"`
	WeightLbs     int        `json:"weight_lbs"`
	DistanceMi    int        `json:"distance_mi"`
	RatePerMile   string     `json:"rate_per_mile"`
	PostedAt      string     `json:"posted_at"`
	BookableUntil string     `json:"bookable_until"`
	Pickup        pickupAttr `json:"pickup"`
}

type pickupAttr struct {
	Opens  string `json:"opens"`
	Closes string `json:"closes"`
	TZ     string `json:"tz"`
}

// loadResource is a load as the html dialect's feed carries it.
func loadResource(l *Load) apiResource {
	z := originZone(l.Origin)
	perMile := 0.0
	if l.Miles > 0 {
		perMile = float64(l.RateUSD) / float64(l.Miles)
	}
	return apiResource{Type: "load", ID: l.ID, Attributes: loadAttrs{
		Reference: l.ID, Origin: l.Origin.City + ", " + l.Origin.State, Destination: l.Destination.City + ", " + l.Destination.State,
		EquipmentType: l.Equipment, WeightLbs: l.WeightLb, DistanceMi: l.Miles,
		RatePerMile: strconv.FormatFloat(math.Round(perMile*100)/100, 'f', 2, 64),
		PostedAt:    wallClock(l.PublishedAt, BoardZone), BookableUntil: wallClock(l.ExpiresAt, BoardZone),
		Pickup: pickupAttr{Opens: l.PickupStart.In(mustZone(z)).Format(pickupLayout), Closes: l.PickupEnd.In(mustZone(z)).Format(pickupLayout), TZ: z},
	}}
}

// feed is the loads feed: live loads after a cursor, oldest first, and
// links.next to ask with next (always present: a poll resumes from it).
func (h *htmlHandler) feed(w http.ResponseWriter, r *http.Request) {
	if _, ok := h.auth(r); !ok {
		signedOutAPI(w)
		return
	}
	after, ok1 := pageParam(r, "after", 0, 0, 1<<62)
	size, ok2 := pageParam(r, "size", 100, 1, 500)
	if !ok1 || !ok2 {
		apiErrors(w, http.StatusBadRequest, "bad_request", "page[after] must be ≥ 0 and page[size] 1..500")
		return
	}
	loads, next := h.b.liveAfter(after, int(size))
	data := make([]apiResource, 0, len(loads))
	for _, l := range loads {
		data = append(data, loadResource(l))
	}
	link := func(a int64) string {
		return fmt.Sprintf("/api/v2/loads?page%%5Bafter%%5D=%d&page%%5Bsize%%5D=%d", a, size)
	}
	writeAPI(w, http.StatusOK, map[string]any{"data": data,
		"links": map[string]string{"self": link(after), "next": link(next)},
		"meta":  map[string]any{"server_time": wallClock(h.b.clk.Now(), BoardZone), "count": len(data)}})
}

type bookingAttrs struct {
	LoadReference string `json:"load_reference"`
	BookedAt      string `json:"booked_at"`
	BookedBy      string `json:"booked_by"`
}

// bookings is the client's bookings by offset and limit, oldest first, with
// the total in meta: a walk from offset 0 whose items add up to the last
// page's total has seen every booking.
func (h *htmlHandler) bookings(w http.ResponseWriter, r *http.Request) {
	si, ok := h.auth(r)
	if !ok {
		signedOutAPI(w)
		return
	}
	offset, ok1 := pageParam(r, "offset", 0, 0, 1<<31)
	limit, ok2 := pageParam(r, "limit", 50, 1, 500)
	if !ok1 || !ok2 {
		apiErrors(w, http.StatusBadRequest, "bad_request", "page[offset] must be ≥ 0 and page[limit] 1..500")
		return
	}
	page, total := h.b.bookingsAt(si.Client, int(offset), int(limit))
	data := make([]apiResource, 0, len(page))
	for _, bk := range page {
		data = append(data, apiResource{Type: "booking", ID: strconv.FormatInt(bk.ID, 10), Attributes: bookingAttrs{
			LoadReference: bk.LoadID, BookedAt: wallClock(bk.BookedAt, BoardZone), BookedBy: bk.Account}})
	}
	writeAPI(w, http.StatusOK, map[string]any{"data": data,
		"meta": map[string]any{"total": total, "offset": offset, "limit": limit, "carrier": si.Client,
			"generated_at": wallClock(h.b.clk.Now(), BoardZone)}})
}
