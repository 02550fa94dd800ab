package board

import (
	"bufio"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
)

// admin guards a sandbox route with the bearer token.
func (h *handler) admin(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(h.token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandbox"`)
			writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "sandbox admin token required (Authorization: Bearer …)"})
			return
		}
		next(w, r)
	}
}

func badRequest(w http.ResponseWriter, err error) {
	writeJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		badRequest(w, errors.New("invalid JSON body: "+err.Error()))
		return false
	}
	return true
}

func (h *handler) sandboxPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pages.ExecuteTemplate(w, "sandbox", nil); err != nil {
		h.b.log.Error("board: render sandbox page", "err", err)
	}
}

func (h *handler) sbStats(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, h.b.Stats())
}

// sbEvents exports the event log: ?after=SEQ&limit=N, as one JSON object
// ({"events": [...], "next_after": SEQ}) or, with ?format=ndjson, one event
// per line.
func (h *handler) sbEvents(w http.ResponseWriter, r *http.Request) {
	after, ok1 := queryInt(r, "after", 0, 0, 1<<62)
	limit, ok2 := queryInt(r, "limit", 0, 0, 1<<31)
	if !ok1 || !ok2 {
		badRequest(w, errors.New("after and limit must be non-negative integers"))
		return
	}
	evs := h.b.Events(after, int(limit))
	next := after
	if len(evs) > 0 {
		next = evs[len(evs)-1].Seq
	}
	if r.URL.Query().Get("format") == "ndjson" {
		w.Header().Set("Content-Type", "application/x-ndjson")
		bw := bufio.NewWriter(w)
		enc := json.NewEncoder(bw)
		for _, e := range evs {
			_ = enc.Encode(e)
		}
		_ = bw.Flush()
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"events": evs, "next_after": next})
}

func (h *handler) sbAccounts(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"accounts": h.b.Accounts()})
}

func (h *handler) sbCreateAccount(w http.ResponseWriter, r *http.Request) {
	var spec AccountSpec
	if !decode(w, r, &spec) {
		return
	}
	a, err := h.b.CreateAccount(r.Context(), spec)
	if errors.Is(err, ErrAccountExists) {
		writeJSON(w, http.StatusConflict, map[string]any{"error": err.Error()})
		return
	}
	if err != nil {
		badRequest(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, a)
}

func (h *handler) sbPublish(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Count int        `json:"count"`
		Loads []LoadSpec `json:"loads"`
	}
	if !decode(w, r, &req) {
		return
	}
	if req.Count < 0 || req.Count > 10000 || len(req.Loads) > 10000 || (req.Count == 0 && len(req.Loads) == 0) {
		badRequest(w, errors.New("give count (1..10000) or loads"))
		return
	}
	loads, err := h.b.Publish(r.Context(), req.Count, req.Loads)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": err.Error(), "loads": loads})
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"loads": loads})
}

func (h *handler) sbBookings(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"bookings": h.b.Bookings(r.URL.Query().Get("client"))})
}

func (h *handler) sbInjectBooking(w http.ResponseWriter, r *http.Request) {
	var req struct {
		LoadID  string `json:"load_id"`
		Account string `json:"account"`
	}
	if !decode(w, r, &req) {
		return
	}
	bk, err := h.b.InjectBooking(r.Context(), req.Account, req.LoadID)
	if err != nil {
		badRequest(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"booking": bk})
}

func (h *handler) sbChaos(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, h.b.Chaos())
}

// sbPatchChaos changes only the switches present in the body.
func (h *handler) sbPatchChaos(w http.ResponseWriter, r *http.Request) {
	c := h.b.Chaos()
	if !decode(w, r, &c) {
		return
	}
	if err := h.b.SetChaos(c); err != nil {
		badRequest(w, err)
		return
	}
	writeJSON(w, http.StatusOK, h.b.Chaos())
}

func (h *handler) sbStorm(w http.ResponseWriter, r *http.Request) {
	req := struct {
		Fraction float64 `json:"fraction"`
	}{Fraction: 1}
	if r.ContentLength != 0 && !decode(w, r, &req) {
		return
	}
	if req.Fraction <= 0 || req.Fraction > 1 {
		badRequest(w, errors.New("fraction must be in (0, 1]"))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"expired": h.b.SessionStorm(req.Fraction)})
}

func (h *handler) sbPublisher(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"rate": h.b.publishRate()})
}

func (h *handler) sbPatchPublisher(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Rate *float64 `json:"rate"`
	}
	if !decode(w, r, &req) {
		return
	}
	if req.Rate == nil {
		badRequest(w, errors.New("rate is required"))
		return
	}
	if err := h.b.SetRate(*req.Rate); err != nil {
		badRequest(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"rate": h.b.publishRate()})
}
