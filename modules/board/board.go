// Package board is the sandbox freight load board (fleetwright --role=board):
// a realistic third-party platform to rehearse, demo and load-test against.
// It publishes loads, lets board accounts (password + TOTP) book them with a
// real board's semantics, keeps an append-only event log as the ground
// truth, answers the oracle (/_sandbox/stats), and has chaos switches a test
// can flip mid-run. See docs/BOARD.md.
package board

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"
	"golang.org/x/crypto/argon2"

	"github.com/fleetwright/fleetwright/app/clock"
)

// Board is the board's state and rules, independent of HTTP.
type Board struct {
	cfg Config
	clk clock.Clock
	log *slog.Logger
	st  *store

	ctx    context.Context // ends on Close: bounds holds, late commits, loops
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.RWMutex
	live     []liveLoad // by seq; expired ones pruned from the front
	loads    map[string]*Load
	loadSeq  int64
	accounts map[string]*account
	sessions map[string]*session
	// issued are the session tokens handed out, newest last (at most
	// maxIssued): a test's secret scan must know every cookie the board
	// gave, expired ones included.
	issued    []IssuedSession
	pending   map[string]*pending
	bookings  []*Booking
	holder    map[string]string // load id → the client that booked it first
	perClient map[[2]string]int // (client, load id) → accepted bookings
	idem      map[string]*idemEntry
	events    []*Event
	stats     Stats

	chaosMu   sync.Mutex
	chaos     Chaos
	lat       latency
	dice      *mrand.Rand
	stormWake chan struct{}

	pubMu    sync.Mutex
	rate     float64
	pubRand  *mrand.Rand // arrivals and content of published loads
	apiRand  *mrand.Rand // content of loads published by the API
	rateWake chan struct{}
}

type liveLoad struct {
	l    *Load
	json []byte // encoded once: the poll feed concatenates these
}

type account struct {
	Username  string
	Client    string
	CreatedAt time.Time
	salt      []byte
	hash      []byte
	secret    string
	lastStep  int64
}

type session struct {
	account   *account
	csrf      string
	expires   time.Time
	captchaOK time.Time
}

type pending struct {
	account *account
	expires time.Time
}

type idemEntry struct {
	loadID string
	res    bookResult
}

// Errors of the login and booking rules.
var (
	ErrBadCredentials = errors.New("board: invalid username or password")
	ErrTOTPInvalid    = errors.New("board: invalid one-time code")
	ErrTOTPReused     = errors.New("board: one-time code already used; wait for the next one")
	ErrAccountExists  = errors.New("board: account already exists")
)

const (
	totpPeriod = 30
	mfaTTL     = 5 * time.Minute
)

func newBoard(ctx context.Context, cfg Config, logger *slog.Logger, st *store) (*Board, error) {
	clk := cfg.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	if err := cfg.Chaos.validate(); err != nil {
		return nil, fmt.Errorf("board: chaos: %w", err)
	}
	lat, _ := parseLatency(cfg.Chaos.Latency)
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b := &Board{
		cfg: cfg, clk: clk, log: logger, st: st, ctx: bctx, cancel: cancel,
		loads: map[string]*Load{}, accounts: map[string]*account{}, sessions: map[string]*session{},
		pending: map[string]*pending{}, holder: map[string]string{}, perClient: map[[2]string]int{},
		idem: map[string]*idemEntry{}, stats: Stats{Clients: map[string]*ClientStats{}},
		chaos: cfg.Chaos, lat: lat, dice: seedRand(cfg.Seed, 2), stormWake: make(chan struct{}, 1),
		rate: cfg.Rate, pubRand: seedRand(cfg.Seed, 1), apiRand: seedRand(cfg.Seed, 3), rateWake: make(chan struct{}, 1),
	}
	snap, err := st.load(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	b.restore(snap)
	return b, nil
}

// restore rebuilds the in-memory state and the oracle's counters from what
// the store kept: the event log and the bookings are the truth.
func (b *Board) restore(snap *snapshot) {
	now := b.clk.Now()
	for _, l := range snap.loads {
		b.loads[l.ID] = l
		b.loadSeq = max(b.loadSeq, l.Seq)
		if l.ExpiresAt.After(now) {
			js, _ := json.Marshal(l)
			b.live = append(b.live, liveLoad{l: l, json: js})
		}
	}
	for _, a := range snap.accounts {
		b.accounts[a.Username] = a
	}
	for _, e := range snap.events {
		b.events = append(b.events, e)
		switch e.Type {
		case EvLoadPublished:
			b.stats.LoadsPublished++
		case EvBookingRequest:
			b.stats.BookingRequests++
			b.client(e.Client).BookingRequests++
		case EvBookingTaken:
			b.stats.TakenAnswers++
			b.client(e.Client).TakenAnswers++
		}
	}
	for _, bk := range snap.bookings {
		b.applyBooking(bk)
		if bk.IdempotencyKey != "" {
			body, _ := json.Marshal(map[string]any{"status": "confirmed", "booking": bk})
			b.idem[bk.Client+"\x00"+bk.IdempotencyKey] = &idemEntry{loadID: bk.LoadID, res: bookResult{Status: 201, Body: body, Booking: bk}}
		}
	}
}

func (b *Board) client(name string) *ClientStats {
	c := b.stats.Clients[name]
	if c == nil {
		c = &ClientStats{}
		b.stats.Clients[name] = c
	}
	return c
}

// applyBooking counts an accepted booking; the caller holds mu.
func (b *Board) applyBooking(bk *Booking) (duplicate bool) {
	b.bookings = append(b.bookings, bk)
	if _, ok := b.holder[bk.LoadID]; !ok {
		b.holder[bk.LoadID] = bk.Client
	}
	k := [2]string{bk.Client, bk.LoadID}
	b.perClient[k]++
	c := b.client(bk.Client)
	b.stats.ConfirmedBookings++
	c.ConfirmedBookings++
	if b.perClient[k] > 1 {
		b.stats.DuplicateConfirmations++
		c.DuplicateConfirmations++
		return true
	}
	return false
}

// emit appends to the event log; the caller holds mu. A failed write is
// logged and the in-memory log keeps the event: the oracle must not lose it.
func (b *Board) emit(e Event) *Event {
	e.Seq = int64(len(b.events)) + 1
	if e.At.IsZero() {
		e.At = b.clk.Now()
	}
	ev := &e
	b.events = append(b.events, ev)
	if err := b.st.putEvent(b.ctx, ev); err != nil {
		b.log.Error("board: event log write failed", "type", e.Type, "err", err)
	}
	return ev
}

// Events returns the log entries with seq > after, at most limit of them.
func (b *Board) Events(after int64, limit int) []*Event {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if after < 0 {
		after = 0
	}
	if after >= int64(len(b.events)) {
		return []*Event{}
	}
	end := int64(len(b.events))
	if limit > 0 && after+int64(limit) < end {
		end = after + int64(limit)
	}
	return append([]*Event(nil), b.events[after:end]...)
}

// ---- loads ----

// Publish puts n new loads on the board now. specs, when given, override
// fields of the generated loads one by one (len(specs) may exceed n).
func (b *Board) Publish(ctx context.Context, n int, specs []LoadSpec) ([]*Load, error) {
	if len(specs) > n {
		n = len(specs)
	}
	out := make([]*Load, 0, n)
	for i := 0; i < n; i++ {
		b.pubMu.Lock()
		l := generate(b.apiRand)
		b.pubMu.Unlock()
		if i < len(specs) {
			specs[i].apply(&l)
		}
		pl, err := b.publish(ctx, l)
		if err != nil {
			return out, err
		}
		out = append(out, pl)
	}
	return out, nil
}

func (b *Board) publish(ctx context.Context, l Load) (*Load, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clk.Now()
	b.loadSeq++
	l.Seq = b.loadSeq
	l.ID = loadID(l.Seq)
	l.PublishedAt = now
	l.ExpiresAt = now.Add(b.cfg.LoadTTL)
	day := now.Truncate(time.Hour).Add(time.Duration(2+int(l.Seq%46)) * time.Hour)
	l.PickupStart = day
	l.PickupEnd = day.Add(4 * time.Hour)
	if err := b.st.putLoad(ctx, &l); err != nil {
		b.loadSeq--
		return nil, err
	}
	js, _ := json.Marshal(&l)
	b.loads[l.ID] = &l
	b.live = append(b.live, liveLoad{l: &l, json: js})
	b.stats.LoadsPublished++
	b.emit(Event{At: now, Type: EvLoadPublished, LoadID: l.ID})
	return &l, nil
}

// SetRate changes the publisher's rate (loads per second; 0 stops it).
func (b *Board) SetRate(rate float64) error {
	if rate < 0 || rate > 10000 {
		return fmt.Errorf("board: rate must be between 0 and 10000 loads/s, got %v", rate)
	}
	b.pubMu.Lock()
	b.rate = rate
	b.pubMu.Unlock()
	select {
	case b.rateWake <- struct{}{}:
	default:
	}
	return nil
}

func (b *Board) publishRate() float64 {
	b.pubMu.Lock()
	defer b.pubMu.Unlock()
	return b.rate
}

// publisher draws exponential inter-arrival times (a Poisson process) from
// the seeded generator, so a run with the same seed publishes the same loads
// at the same offsets.
func (b *Board) publisher() {
	defer b.wg.Done()
	for {
		b.pubMu.Lock()
		rate := b.rate
		var wait time.Duration
		var l Load
		if rate > 0 {
			wait = time.Duration(b.pubRand.ExpFloat64() / rate * float64(time.Second))
			l = generate(b.pubRand)
		}
		b.pubMu.Unlock()
		if rate <= 0 {
			select {
			case <-b.rateWake:
				continue
			case <-b.ctx.Done():
				return
			}
		}
		select {
		case <-b.clk.After(wait):
			if _, err := b.publish(b.ctx, l); err != nil && b.ctx.Err() == nil {
				b.log.Error("board: publish failed", "err", err)
			}
		case <-b.rateWake:
		case <-b.ctx.Done():
			return
		}
	}
}

// janitor drops expired loads from the feed and expired sessions. It runs on
// wall time because it only tidies: every read checks expiry itself.
func (b *Board) janitor() {
	defer b.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			b.sweep()
		case <-b.ctx.Done():
			return
		}
	}
}

func (b *Board) sweep() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clk.Now()
	i := 0
	for i < len(b.live) && !b.live[i].l.ExpiresAt.After(now) {
		b.emit(Event{Type: EvLoadExpired, LoadID: b.live[i].l.ID})
		i++
	}
	if i > 0 {
		b.live = append([]liveLoad(nil), b.live[i:]...)
	}
	for k, s := range b.sessions {
		if !s.expires.After(now) {
			delete(b.sessions, k)
		}
	}
	for k, p := range b.pending {
		if !p.expires.After(now) {
			delete(b.pending, k)
		}
	}
}

// feed appends the JSON of live loads with seq > after (at most limit) to
// buf and returns it with the cursor to ask with next.
func (b *Board) feed(buf []byte, after int64, limit int) ([]byte, int64) {
	now := b.clk.Now()
	b.mu.RLock()
	defer b.mu.RUnlock()
	i := sort.Search(len(b.live), func(i int) bool { return b.live[i].l.Seq > after })
	next := after
	n := 0
	for ; i < len(b.live) && n < limit; i++ {
		ll := b.live[i]
		next = ll.l.Seq
		if !ll.l.ExpiresAt.After(now) {
			continue
		}
		if n > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, ll.json...)
		n++
	}
	if next < after {
		next = after
	}
	return buf, next
}

// ---- accounts, TOTP and sessions ----

// AccountSpec creates a board account. An empty TOTPSecret is generated.
type AccountSpec struct {
	Username   string `json:"username"`
	Password   string `json:"password"`
	Client     string `json:"client"`
	TOTPSecret string `json:"totp_secret,omitempty"`
}

// Account is a created account as the admin API answers it: the secret is
// shown so the fleet can be configured from a script.
type Account struct {
	Username   string    `json:"username"`
	Client     string    `json:"client"`
	TOTPSecret string    `json:"totp_secret,omitempty"`
	OTPAuthURL string    `json:"otpauth_url,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.@", r)) {
			return false
		}
	}
	return true
}

// CreateAccount adds a board account for a client.
func (b *Board) CreateAccount(ctx context.Context, spec AccountSpec) (Account, error) {
	if !validName(spec.Username) {
		return Account{}, fmt.Errorf("board: username must be 1-64 of letters, digits, - _ . @")
	}
	if !validName(spec.Client) {
		return Account{}, fmt.Errorf("board: client must be 1-64 of letters, digits, - _ . @")
	}
	if len(spec.Password) < 8 {
		return Account{}, fmt.Errorf("board: password must be at least 8 characters")
	}
	secret := strings.ToUpper(strings.TrimSpace(spec.TOTPSecret))
	if secret == "" {
		key, err := totp.Generate(totp.GenerateOpts{Issuer: "SandboxBoard", AccountName: spec.Username})
		if err != nil {
			return Account{}, fmt.Errorf("board: generate TOTP secret: %w", err)
		}
		secret = key.Secret()
	} else if !validBase32(secret) {
		return Account{}, fmt.Errorf("board: totp_secret must be base32")
	}
	a := &account{Username: spec.Username, Client: spec.Client, CreatedAt: b.clk.Now().UTC(), secret: secret, salt: randomBytes(16)}
	a.hash = hashPassword(spec.Password, a.salt)
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.accounts[a.Username]; ok {
		return Account{}, fmt.Errorf("%w: %s", ErrAccountExists, a.Username)
	}
	if err := b.st.putAccount(ctx, a); err != nil {
		return Account{}, err
	}
	b.accounts[a.Username] = a
	b.emit(Event{Type: EvAccountCreated, Client: a.Client, Account: a.Username})
	return Account{Username: a.Username, Client: a.Client, TOTPSecret: secret, CreatedAt: a.CreatedAt,
		OTPAuthURL: fmt.Sprintf("otpauth://totp/SandboxBoard:%s?secret=%s&issuer=SandboxBoard&period=30&digits=6&algorithm=SHA1", a.Username, secret)}, nil
}

// Accounts lists the accounts without secrets.
func (b *Board) Accounts() []Account {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]Account, 0, len(b.accounts))
	for _, a := range b.accounts {
		out = append(out, Account{Username: a.Username, Client: a.Client, CreatedAt: a.CreatedAt})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Username < out[j].Username })
	return out
}

func validBase32(s string) bool {
	for _, r := range strings.TrimRight(s, "=") {
		if !(r >= 'A' && r <= 'Z' || r >= '2' && r <= '7') {
			return false
		}
	}
	return len(s) >= 16
}

func hashPassword(pw string, salt []byte) []byte {
	// Light argon2id parameters: hundreds of test sessions log in on two cores.
	return argon2.IDKey([]byte(pw), salt, 1, 8*1024, 1, 32)
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("board: crypto/rand failed: " + err.Error())
	}
	return b
}

func randomToken() string { return base64.RawURLEncoding.EncodeToString(randomBytes(32)) }

// CheckPassword is the first login step; it returns a short-lived token for
// the TOTP step.
func (b *Board) CheckPassword(username, password string) (string, error) {
	b.mu.RLock()
	a := b.accounts[username]
	b.mu.RUnlock()
	salt := []byte("no-such-account!")
	var want []byte
	if a != nil {
		salt, want = a.salt, a.hash
	}
	got := hashPassword(password, salt) // hashed either way: no timing oracle for usernames
	b.mu.Lock()
	defer b.mu.Unlock()
	if a == nil || subtle.ConstantTimeCompare(got, want) != 1 {
		b.emit(Event{Type: EvLoginFailed, Detail: "password"})
		return "", ErrBadCredentials
	}
	tok := randomToken()
	b.pending[tok] = &pending{account: a, expires: b.clk.Now().Add(mfaTTL)}
	return tok, nil
}

// pendingAccount returns the account waiting for its TOTP step.
func (b *Board) pendingAccount(tok string) *account {
	b.mu.RLock()
	defer b.mu.RUnlock()
	p := b.pending[tok]
	if p == nil || !p.expires.After(b.clk.Now()) {
		return nil
	}
	return p.account
}

// CheckTOTP is the second login step. A code is accepted for the current
// 30 s step or one step either side, and only if its step is later than the
// last one this account used: a used code is refused (RFC 6238 §5.2).
func (b *Board) CheckTOTP(ctx context.Context, pendingToken, code string) (sessionToken string, err error) {
	a := b.pendingAccount(pendingToken)
	if a == nil {
		return "", ErrBadCredentials
	}
	now := b.clk.Now()
	code = strings.TrimSpace(code)
	matched := int64(-1)
	for _, skew := range []int64{0, -1, 1} {
		step := now.Unix()/totpPeriod + skew
		want, err := totp.GenerateCodeCustom(a.secret, time.Unix(step*totpPeriod, 0), totp.ValidateOpts{
			Period: totpPeriod, Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1})
		if err != nil {
			return "", fmt.Errorf("board: totp: %w", err)
		}
		if len(code) == len(want) && subtle.ConstantTimeCompare([]byte(code), []byte(want)) == 1 {
			matched = step
			break
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if matched < 0 {
		b.emit(Event{Type: EvLoginFailed, Client: a.Client, Account: a.Username, Detail: "totp"})
		return "", ErrTOTPInvalid
	}
	if matched <= a.lastStep {
		b.emit(Event{Type: EvTOTPRefused, Client: a.Client, Account: a.Username, Detail: "code already used"})
		return "", ErrTOTPReused
	}
	if err := b.st.setLastStep(ctx, a.Username, matched); err != nil {
		return "", err
	}
	a.lastStep = matched
	delete(b.pending, pendingToken)
	tok := randomToken()
	b.sessions[tok] = &session{account: a, csrf: randomToken(), expires: now.Add(b.cfg.SessionTTL)}
	if len(b.issued) >= maxIssued {
		b.issued = b.issued[1:]
	}
	b.issued = append(b.issued, IssuedSession{Token: tok, Account: a.Username})
	b.emit(Event{Type: EvLogin, Client: a.Client, Account: a.Username})
	return tok, nil
}

// SessionInfo is what a signed-in request knows about itself.
type SessionInfo struct {
	Account   string    `json:"account"`
	Client    string    `json:"client"`
	CSRFToken string    `json:"csrf_token"`
	ExpiresAt time.Time `json:"expires_at"`
	token     string
	captchaOK bool
}

func (b *Board) session(tok string) (SessionInfo, bool) {
	if tok == "" {
		return SessionInfo{}, false
	}
	now := b.clk.Now()
	b.mu.RLock()
	defer b.mu.RUnlock()
	s := b.sessions[tok]
	if s == nil || !s.expires.After(now) {
		return SessionInfo{}, false
	}
	return SessionInfo{Account: s.account.Username, Client: s.account.Client, CSRFToken: s.csrf,
		ExpiresAt: s.expires, token: tok, captchaOK: s.captchaOK.After(now)}, true
}

func (b *Board) logout(tok string) {
	b.mu.Lock()
	delete(b.sessions, tok)
	b.mu.Unlock()
}

// maxIssued bounds IssuedSessions.
const maxIssued = 100_000

// IssuedSession is a session cookie the board gave, and to which account.
type IssuedSession struct{ Token, Account string }

// IssuedSessions returns the session tokens (cookie values) this board
// issued, expired and logged-out ones included, the newest 100,000: what
// a secret scan of the clients' logs looks for.
func (b *Board) IssuedSessions() []IssuedSession {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return append([]IssuedSession(nil), b.issued...)
}

// SessionStorm expires the given fraction (0..1] of live sessions at once.
func (b *Board) SessionStorm(fraction float64) int {
	if fraction <= 0 || fraction > 1 {
		fraction = 1
	}
	b.chaosMu.Lock()
	defer b.chaosMu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	keys := make([]string, 0, len(b.sessions))
	for k := range b.sessions {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	n := 0
	for _, k := range keys {
		if fraction >= 1 || b.dice.Float64() < fraction {
			delete(b.sessions, k)
			n++
		}
	}
	b.emit(Event{Type: EvSessionStorm, Detail: fmt.Sprintf("expired %d of %d sessions", n, len(keys))})
	return n
}

func (b *Board) stormer() {
	defer b.wg.Done()
	for {
		every := time.Duration(b.Chaos().SessionStormEvery)
		if every <= 0 {
			select {
			case <-b.stormWake:
				continue
			case <-b.ctx.Done():
				return
			}
		}
		select {
		case <-b.clk.After(every):
			b.SessionStorm(1)
		case <-b.stormWake:
		case <-b.ctx.Done():
			return
		}
	}
}

// ---- chaos ----

// Chaos returns the current switches.
func (b *Board) Chaos() Chaos {
	b.chaosMu.Lock()
	defer b.chaosMu.Unlock()
	return b.chaos
}

// SetChaos replaces the switches after validating them.
func (b *Board) SetChaos(c Chaos) error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("board: chaos: %w", err)
	}
	lat, _ := parseLatency(c.Latency)
	b.chaosMu.Lock()
	b.chaos, b.lat = c, lat
	b.chaosMu.Unlock()
	js, _ := json.Marshal(c)
	b.mu.Lock()
	b.emit(Event{Type: EvChaosChanged, Detail: string(js)})
	b.mu.Unlock()
	select {
	case b.stormWake <- struct{}{}:
	default:
	}
	return nil
}

// roll reports true with probability p, from the seeded chaos dice.
func (b *Board) roll(p float64) bool {
	if p <= 0 {
		return false
	}
	b.chaosMu.Lock()
	defer b.chaosMu.Unlock()
	return b.dice.Float64() < p
}

func (b *Board) delay() time.Duration {
	b.chaosMu.Lock()
	defer b.chaosMu.Unlock()
	return b.lat.sample(b.dice)
}

// sleep waits d on the board's clock; false if ctx or the board ended first.
func (b *Board) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	select {
	case <-b.clk.After(d):
		return true
	case <-ctx.Done():
		return false
	case <-b.ctx.Done():
		return false
	}
}

// ---- stats ----

// Dialect is the face the board serves: DialectClassic or DialectHTML.
func (b *Board) Dialect() string { return b.cfg.Dialect }

// liveAfter returns the live loads with seq > after (at most limit) and the
// cursor to ask with next: the html dialect's feed.
func (b *Board) liveAfter(after int64, limit int) ([]*Load, int64) {
	now := b.clk.Now()
	b.mu.RLock()
	defer b.mu.RUnlock()
	i := sort.Search(len(b.live), func(i int) bool { return b.live[i].l.Seq > after })
	next := after
	var out []*Load
	for ; i < len(b.live) && len(out) < limit; i++ {
		l := b.live[i].l
		next = l.Seq
		if l.ExpiresAt.After(now) {
			out = append(out, l)
		}
	}
	return out, max(next, after)
}

// lastBooking is the newest booking of client on a load (nil: none).
func (b *Board) lastBooking(client, loadID string) *Booking {
	b.mu.RLock()
	defer b.mu.RUnlock()
	for i := len(b.bookings) - 1; i >= 0; i-- {
		if bk := b.bookings[i]; bk.Client == client && bk.LoadID == loadID {
			c := *bk
			return &c
		}
	}
	return nil
}

// Stats is the oracle's current answer.
func (b *Board) Stats() Stats {
	chaos := b.Chaos()
	rate := b.publishRate()
	now := b.clk.Now()
	b.mu.RLock()
	defer b.mu.RUnlock()
	s := b.stats
	s.AsOf = now
	s.Events = int64(len(b.events))
	s.Chaos = chaos
	s.IdempotencyKeys = b.cfg.IdempotencyKeys
	s.PublishRate = rate
	s.Dialect = b.cfg.Dialect
	for _, ll := range b.live {
		if ll.l.ExpiresAt.After(now) {
			s.LoadsLive++
		}
	}
	s.Clients = make(map[string]*ClientStats, len(b.stats.Clients))
	for k, v := range b.stats.Clients {
		c := *v
		s.Clients[k] = &c
	}
	return s
}

// BookingsAfter returns the client's bookings with an id above after, oldest
// first, at most limit; total counts all the client's bookings and more says
// whether any follow the page. Ids are dense from 1 in commit order.
func (b *Board) BookingsAfter(client string, after int64, limit int) (page []*Booking, total int, more bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	page = []*Booking{}
	for _, bk := range b.bookings {
		if bk.Client != client {
			continue
		}
		total++
		if bk.ID <= after {
			continue
		}
		if len(page) == limit {
			more = true
			continue
		}
		c := *bk
		page = append(page, &c)
	}
	return page, total, more
}

// Bookings returns every accepted booking (client "" for all clients).
func (b *Board) Bookings(client string) []*Booking {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := []*Booking{}
	for _, bk := range b.bookings {
		if client == "" || bk.Client == client {
			c := *bk
			out = append(out, &c)
		}
	}
	return out
}

// bookingsAt returns the client's bookings from offset (oldest first), at
// most limit, and the count of all the client's bookings.
func (b *Board) bookingsAt(client string, offset, limit int) (page []*Booking, total int) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	page = []*Booking{}
	for _, bk := range b.bookings {
		if bk.Client != client {
			continue
		}
		if total >= offset && len(page) < limit {
			c := *bk
			page = append(page, &c)
		}
		total++
	}
	return page, total
}
