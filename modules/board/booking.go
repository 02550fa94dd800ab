package board

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// bookResult is a booking answer: the HTTP status and JSON body the book
// endpoint sends, kept whole so an idempotent replay sends the same bytes.
type bookResult struct {
	Status  int
	Body    []byte
	Booking *Booking
	// Replayed marks an answer sent again for a repeated Idempotency-Key.
	Replayed bool
}

func jsonResult(status int, v any) bookResult {
	b, _ := json.Marshal(v)
	return bookResult{Status: status, Body: b}
}

// Book statuses in the JSON answer's "status" field.
const (
	StatusConfirmed = "confirmed"
	StatusTaken     = "taken"
	StatusExpired   = "expired"
	StatusNotFound  = "not_found"
	StatusCaptcha   = "captcha"
	StatusKeyReused = "idempotency_key_reused"
)

// recordRequest counts a booking request that reached the board.
func (b *Board) recordRequest(si SessionInfo, loadID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stats.BookingRequests++
	b.client(si.Client).BookingRequests++
	b.emit(Event{Type: EvBookingRequest, LoadID: loadID, Client: si.Client, Account: si.Account})
}

// commit applies the booking rules under the board's lock: the first client
// to book a load holds it, a later client is told it is taken, and the same
// client booking again gets a second accepted booking — unless it sent an
// Idempotency-Key the board already saw and the board honours keys.
func (b *Board) commit(ctx context.Context, client, acct, loadID, key, source string) bookResult {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clk.Now()
	var ik string
	if b.cfg.IdempotencyKeys && key != "" {
		ik = client + "\x00" + key
		if e := b.idem[ik]; e != nil {
			if e.loadID != loadID {
				return jsonResult(http.StatusUnprocessableEntity, map[string]any{"status": StatusKeyReused,
					"error": "this Idempotency-Key was used for another load"})
			}
			b.emit(Event{Type: EvIdempotentReplay, LoadID: loadID, Client: client, Account: acct})
			res := e.res
			res.Replayed = true
			return res
		}
	}
	l := b.loads[loadID]
	if l == nil {
		b.emit(Event{Type: EvBookingRefused, LoadID: loadID, Client: client, Account: acct, Detail: StatusNotFound})
		return jsonResult(http.StatusNotFound, map[string]any{"status": StatusNotFound, "load_id": loadID})
	}
	if !l.ExpiresAt.After(now) {
		b.emit(Event{Type: EvBookingRefused, LoadID: loadID, Client: client, Account: acct, Detail: StatusExpired})
		return jsonResult(http.StatusGone, map[string]any{"status": StatusExpired, "load_id": loadID})
	}
	if h, ok := b.holder[loadID]; ok && h != client {
		b.stats.TakenAnswers++
		b.client(client).TakenAnswers++
		b.emit(Event{Type: EvBookingTaken, LoadID: loadID, Client: client, Account: acct})
		res := jsonResult(http.StatusConflict, map[string]any{"status": StatusTaken, "load_id": loadID})
		if ik != "" {
			b.idem[ik] = &idemEntry{loadID: loadID, res: res}
		}
		return res
	}
	bk := &Booking{ID: int64(len(b.bookings)) + 1, LoadID: loadID, Client: client, Account: acct,
		BookedAt: now, Source: source}
	if ik != "" {
		bk.IdempotencyKey = key
	}
	if err := b.st.putBooking(ctx, bk); err != nil {
		b.log.Error("board: booking write failed", "load", loadID, "err", err)
		return jsonResult(http.StatusInternalServerError, map[string]any{"status": "error", "error": "booking not saved"})
	}
	dup := b.applyBooking(bk)
	detail := ""
	if dup {
		detail = "duplicate"
	}
	b.emit(Event{At: now, Type: EvBookingConfirmed, LoadID: loadID, Client: client, Account: acct, BookingID: bk.ID, Detail: detail})
	res := jsonResult(http.StatusCreated, map[string]any{"status": StatusConfirmed, "booking": bk})
	res.Booking = bk
	if ik != "" {
		b.idem[ik] = &idemEntry{loadID: loadID, res: res}
	}
	return res
}

// InjectBooking records an accepted booking directly, bypassing every rule,
// so a test can create the duplicate the fleet must never make.
func (b *Board) InjectBooking(ctx context.Context, username, loadID string) (*Booking, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.accounts[username]
	if a == nil {
		return nil, fmt.Errorf("board: no account %q", username)
	}
	if b.loads[loadID] == nil {
		return nil, fmt.Errorf("board: no load %q", loadID)
	}
	bk := &Booking{ID: int64(len(b.bookings)) + 1, LoadID: loadID, Client: a.Client, Account: a.Username,
		BookedAt: b.clk.Now(), Source: "injected"}
	if err := b.st.putBooking(ctx, bk); err != nil {
		return nil, err
	}
	dup := b.applyBooking(bk)
	detail := ""
	if dup {
		detail = "duplicate"
	}
	b.emit(Event{Type: EvBookingInjected, LoadID: loadID, Client: a.Client, Account: a.Username, BookingID: bk.ID, Detail: detail})
	c := *bk
	return &c, nil
}

// lateCommit commits after the chaos delay, long after the client got its
// 504. The board ending first abandons it (nothing is committed).
func (b *Board) lateCommit(si SessionInfo, loadID, key string, delay time.Duration) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		if !b.sleep(b.ctx, delay) {
			return
		}
		b.commit(b.ctx, si.Client, si.Account, loadID, key, "late_commit")
	}()
}

func (b *Board) passCaptcha(tok string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.sessions[tok]; s != nil {
		s.captchaOK = b.clk.Now().Add(5 * time.Minute)
		b.emit(Event{Type: EvCaptchaSolved, Client: s.account.Client, Account: s.account.Username})
	}
}

func (b *Board) note(e Event) {
	b.mu.Lock()
	b.emit(e)
	b.mu.Unlock()
}
