package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fleetwright/fleetwright/app/egress"
	"github.com/fleetwright/fleetwright/modules/agent/store"
	"github.com/fleetwright/fleetwright/modules/agent/supervisor"
	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/traits"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Worker kinds (WorkerSpec.Kind).
const (
	KindWatcher    = "watcher"
	KindActor      = "actor"
	KindHTTPActor  = "http_actor"
	defaultAdapter = "sandbox"
)

// DefaultKinds are the built-in worker kinds: the browser watcher (the
// platform listener), the browser actor and the HTTP actor.
func DefaultKinds() map[string]WorkerFunc {
	return map[string]WorkerFunc{
		KindWatcher:   runWatcher,
		KindActor:     runBrowserActor,
		KindHTTPActor: runHTTPActor,
		KindCrawler:   runCrawler,
	}
}

// Settings keys and defaults (docs/WORKERS.md).
const (
	SettingPlatform    = "platform"        // built-in platform's name when the panel sends no spec, default "sandbox"
	SettingMarginMS    = "lease_margin_ms" // safety margin subtracted from the lease, default 500
	SettingKeepWarmMS  = "keep_warm_ms"    // session check interval, default 20000 (HTTP), 1000 (browser)
	SettingLoginTries  = "login_retries"   // consecutive failed sign-ins before the worker fails, default 3
	SettingHardTimeout = "hard_timeout_ms" // action timeout when the lease carries none, default 15000
)

func settingMS(spec wire.WorkerSpec, key string, def time.Duration) time.Duration {
	v, ok := spec.Settings[key]
	if !ok {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return def
	}
	return time.Duration(n) * time.Millisecond
}

func settingInt(spec wire.WorkerSpec, key string, def int) int {
	n, err := strconv.Atoi(strings.TrimSpace(spec.Settings[key]))
	if err != nil || n <= 0 {
		return def
	}
	return n
}

// adapter builds the worker's platform adapter and the egress guard its
// board traffic dials through. It waits (sending nothing anywhere) while
// the account's credentials are not sealed for the board's origin — none
// yet, a panel before protocol v5, or a board URL that points elsewhere —
// and reports why (credentialsNotSent): the board URL alone never decides
// where the account's session goes.
//
// The adapter is built from a platform spec (Platforms): one that cannot
// be built — a digest that does not match, a spec that does not parse —
// is reported (event platform_refused, with the reason) and stops the
// worker as needs-person before anything is sent or claimed; a new spec
// from the panel starts it again.
func (env WorkerEnv) adapter(ctx context.Context) (platform.Adapter, *egress.Guard, error) {
	if env.Account.BoardURL == "" {
		return nil, nil, fmt.Errorf("agent: worker %s: the account has no board URL", env.Spec.Name)
	}
	ad, ps, err := env.Platforms.Adapter(env.Account, env.Spec.Settings[SettingPlatform])
	if err != nil {
		f := map[string]string{"reason": reason(err)}
		if ps != nil {
			f["platform"], f["version"], f["digest"] = ps.Name, strconv.Itoa(ps.Version), ps.Digest
		}
		env.Log.Error("agent: the account's platform cannot be built; claiming nothing", "err", err)
		env.event(wire.LevelError, "platform_refused",
			"not signing in or claiming: the account's platform cannot be built from its spec: "+f["reason"], f)
		return nil, nil, fmt.Errorf("agent: worker %s: %w: %w", env.Spec.Name, supervisor.ErrNeedsPerson, err)
	}
	origins, err := env.boundOrigins(ctx)
	if err != nil {
		return nil, nil, err
	}
	// The platform's origins (those the panel sealed the credentials for)
	// are the guard's only targets: a redirect, a link or a page script
	// pointing anywhere else, loopback and metadata addresses included,
	// is never dialled.
	only, err := egress.OnlyTargets(origins)
	if err != nil {
		return nil, nil, fmt.Errorf("agent: worker %s: %w", env.Spec.Name, err)
	}
	g, err := egress.New(egress.Config{Policy: egress.Policy{Only: only}, Logger: env.Log})
	if err != nil {
		return nil, nil, fmt.Errorf("agent: worker %s: %w", env.Spec.Name, err)
	}
	if gd, ok := ad.(platform.Guarded); ok {
		gd.SetDial(g.DialContext)
	}
	if m, ok := ad.(platform.Metered); ok && env.Budget != nil {
		// The adapter's own requests (outside a session) count too.
		m.SetAdmit(env.Budget.admit)
	}
	return ad, g, nil
}

// boundOrigins returns the origins the stored credentials were sealed for
// once the board's origin is one of them, waiting for new credentials
// (and saying why, once per wait) until it is.
func (env WorkerEnv) boundOrigins(ctx context.Context) ([]string, error) {
	for {
		changed := env.Sessions.Changed()
		creds, ok, err := env.Store.Credentials(ctx)
		if err != nil {
			return nil, fmt.Errorf("agent: worker %s: %w", env.Spec.Name, err)
		}
		var why error
		switch {
		case !ok:
			why = fmt.Errorf("%w: the panel has sent no credentials for this account yet: nothing is sent to %s", wire.ErrOriginNotBound, wire.Origin(env.Account.BoardURL))
		default:
			why = creds.CheckOrigin(env.Account.BoardURL)
		}
		if why == nil {
			return creds.Origins, nil
		}
		if err := env.waitCredentials(ctx, changed, why); err != nil {
			return nil, err
		}
	}
}

// traits are the account's traits; an account without a region gets UTC.
func (env WorkerEnv) traits() (traits.Traits, error) {
	region := env.Account.Region
	if region == "" {
		region = "Etc/UTC"
	}
	t, err := traits.For(env.Account.Key, region)
	if err != nil {
		return traits.Traits{}, fmt.Errorf("agent: worker %s: %w", env.Spec.Name, err)
	}
	return t, nil
}

func (env WorkerEnv) codes(creds platform.Credentials) *platform.TOTP {
	clk := env.PanelClock
	if clk == nil {
		clk = env.Clock
	}
	return &platform.TOTP{Secret: creds.TOTPSecret, Clock: clk}
}

func (env WorkerEnv) event(level, kind, msg string, fields map[string]string) {
	env.Event(wire.Event{Level: level, Kind: kind, Worker: env.Spec.Name, Message: msg, At: env.Clock.Now(), Fields: fields})
}

// signedIn reports a fresh sign-in (an OTP refresh) to the panel.
func (env WorkerEnv) signedIn(codes *platform.TOTP, why string) {
	env.event(wire.LevelInfo, "session_refreshed",
		"signed in to the platform with a fresh one-time code ("+why+")",
		map[string]string{"waited_for_next_code": strconv.FormatBool(codes != nil && codes.Waits > 0)})
}

// credentialsNotSent reports that the worker refused to send the account's
// credentials to its board (their origin is not one the panel sealed them
// for, or the panel named none) and waits until new credentials are stored
// (nil: try again) or the worker stops (ctx's error). Nothing is sent
// meanwhile. The event's message names both origins, never a secret.
func (env WorkerEnv) credentialsNotSent(ctx context.Context, why error) error {
	return env.waitCredentials(ctx, env.Sessions.Changed(), why)
}

func (env WorkerEnv) waitCredentials(ctx context.Context, changed <-chan struct{}, why error) error {
	env.Log.Error("agent: the account's credentials are not sent to this board", "board", wire.Origin(env.Account.BoardURL), "err", why)
	env.event(wire.LevelError, "credentials_not_sent", "not signing in: "+why.Error(),
		map[string]string{"board": wire.Origin(env.Account.BoardURL)})
	select {
	case <-changed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// needsPerson reports a captcha and parks the worker until a person
// restarts it (restart_worker) or the agent stops. Nothing tries to solve it.
func (env WorkerEnv) needsPerson(ctx context.Context, detail string, screenshot string) error {
	env.reportCaptcha(detail, screenshot)
	<-ctx.Done()
	return nil
}

// reportCaptcha sends the "needs a person" event (with a small screenshot
// when there is a page).
func (env WorkerEnv) reportCaptcha(detail string, screenshot string) {
	f := map[string]string{"reason": "captcha", "detail": detail}
	if screenshot != "" {
		f["screenshot_jpeg_base64"] = screenshot
	}
	env.event(wire.LevelError, "needs_person",
		"the platform shows a captcha: a person must complete it, then restart this worker; it waits and books nothing", f)
	env.Log.Warn("agent: captcha on the platform; the worker waits for a person")
}

func toStoreCookies(cs []*http.Cookie) []store.Cookie {
	out := make([]store.Cookie, 0, len(cs))
	for _, c := range cs {
		out = append(out, store.Cookie{Domain: c.Domain, Name: c.Name, Path: c.Path, Value: wire.NewSecret(c.Value),
			Expires: c.Expires, Secure: c.Secure, HTTPOnly: c.HttpOnly})
	}
	return out
}

func toHTTPCookies(cs []store.Cookie) []*http.Cookie {
	out := make([]*http.Cookie, 0, len(cs))
	for _, c := range cs {
		p := c.Path
		if p == "" {
			p = "/"
		}
		out = append(out, &http.Cookie{Name: c.Name, Value: c.Value.Reveal(), Path: p, Expires: c.Expires,
			Secure: c.Secure, HttpOnly: c.HTTPOnly})
	}
	return out
}

// ---- the actor protocol, shared by both actor kinds ----

// errCaptcha stops an actor until a person helps.
var errCaptcha = errors.New("agent: captcha")

// booker books one job with the worker's warm session, sending idemKey as
// the idempotency key and calling gate at the last moment before the
// request leaves.
type booker func(ctx context.Context, key, idemKey string, gate platform.Gate) platform.BookResult

// keysAgree checks the tenant's idempotency setting against the platform's
// own status (platform.CheckKeys). On a mismatch or a failed read it
// reports an error event (at most once a minute per worker) and says no.
func (env WorkerEnv) keysAgree(ctx context.Context, ad platform.Adapter, honoured bool) bool {
	err := platform.CheckKeys(ctx, ad, honoured)
	if err == nil {
		return true
	}
	if env.Claims.warnKeys(env.Spec.Name, env.Clock.Now()) {
		env.Log.Error("agent: refusing to claim", "err", err)
		env.event(wire.LevelError, "idempotency_mismatch", "refusing to claim: "+err.Error(), nil)
	}
	return false
}

// errDeadline is the gate's refusal.
var errDeadline = errors.New("agent: local lease deadline passed")

// actOn runs the actor protocol for one offer (issue 7 §3):
//  1. lease request, noting the local monotonic send time;
//  2. local deadline = send time + RemainingMillis − margin;
//  3. act request (the fenced LEASED → ACTING) — only while the deadline holds;
//  4. journal the operation id (failure: do not act, report NOT_SENT);
//  5. book, with the deadline checked once more by the gate at send;
//  6. journal and report the outcome (UNKNOWN for anything uncertain).
//
// It returns the booking result when an action happened.
func actOn(ctx context.Context, h *supervisor.Handle, env WorkerEnv, ad platform.Adapter, o wire.Offer, book booker) (platform.BookResult, bool) {
	worker := env.Spec.Name
	log := env.Log.With("key", o.Job.Key)
	// The offer in hand is the actor's task until it is done with it: an
	// actor stuck on it shows an old task and no completed operation, which
	// is what the panel calls hung.
	h.OldestTask(env.Clock.Now())
	defer h.OldestTask(time.Time{})
	if env.Paused() {
		return platform.BookResult{}, false
	}
	if why := env.Budget.reason(); why != "" {
		// New work is refused while the account's request budget is spent
		// (the request_limit_reached event says so once).
		log.Debug("agent: offer declined", "reason", why)
		return platform.BookResult{}, false
	}
	if env.Claims.speaks(wire.V4) && !env.keysAgree(ctx, ad, o.KeysHonoured) {
		// The tenant's setting and the platform disagree: claim nothing.
		return platform.BookResult{}, false
	}
	if !o.Job.ExpiresAt.IsZero() && !env.Clock.Now().Before(o.Job.ExpiresAt) {
		return platform.BookResult{}, false
	}
	margin := settingMS(env.Spec, SettingMarginMS, 500*time.Millisecond)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	lease, err := env.Claims.Lease(rctx, worker, o.Job.Key, o.OfferID)
	cancel()
	if err != nil {
		log.Debug("agent: lease request failed; skipping the offer", "err", err)
		return platform.BookResult{}, false
	}
	if !lease.Granted {
		return platform.BookResult{}, false
	}
	if lease.BookingKey != "" && !env.keysAgree(ctx, ad, lease.KeysHonoured) {
		// Checked again against the setting the lease was granted under;
		// the lease expires unused (released by the panel's sweep).
		return platform.BookResult{}, false
	}
	deadline := lease.Deadline(margin)
	gate := func() error {
		if !env.Clock.Now().Before(deadline) {
			return errDeadline
		}
		return nil
	}
	if gate() != nil || env.Paused() {
		log.Info("agent: lease granted too late to act; letting it expire")
		return platform.BookResult{}, false
	}
	rctx, cancel = context.WithTimeout(ctx, deadline.Sub(env.Clock.Now())+time.Second)
	ar, err := env.Claims.Act(rctx, worker, o.Job.Key, lease.Token)
	cancel()
	if err != nil {
		// The panel may have moved the claim to ACTING; without the answer
		// we do not act, and its sweeper settles the claim after the hard
		// timeout (UNKNOWN, reconciled: nothing was sent, so it releases).
		log.Warn("agent: no answer to the act request; not acting", "err", err)
		return platform.BookResult{}, false
	}
	if !ar.OK {
		log.Info("agent: the panel refused to start the action", "reason", ar.Reason)
		return platform.BookResult{}, false
	}
	opID := ar.OperationID
	if opID == "" {
		opID = lease.OperationID
	}
	out := wire.Outcome{Worker: worker, Key: o.Job.Key, Token: lease.Token, OperationID: opID}
	if err := env.Claims.begin(ctx, opID, o.Job.Key, worker, lease.Token); err != nil {
		log.Error("agent: the journal cannot be written; not acting", "err", err)
		out.Result, out.Detail = wire.ResultNotSent, "the agent's journal cannot be written (disk full?); not acting"
		if err := env.Claims.reportUnjournaled(ctx, out); err != nil {
			log.Warn("agent: could not report NOT_SENT", "err", err)
		}
		return platform.BookResult{}, false
	}
	// The job's booking key is the Idempotency-Key of every attempt; a v3
	// panel sends none, and then the operation id is (the old rule).
	idem := lease.BookingKey
	if idem == "" {
		idem = opID
	}
	res := bookAndReport(ctx, h, env, log, out, int64(lease.HardTimeoutMillis), idem, gate, book)
	log.Info("agent: acted", "result", res.Result, "detail", res.Detail)
	return res, true
}

// bookAndReport sends the booking request through the gate within the hard
// timeout, reports the outcome (queued in the outbox when the panel cannot
// be reached) and marks the operation completed. Offers and grants share it
// from the moment the journal holds the operation.
func bookAndReport(ctx context.Context, h *supervisor.Handle, env WorkerEnv, log *slog.Logger, out wire.Outcome,
	hardMS int64, idem string, gate func() error, book booker) platform.BookResult {
	hard := time.Duration(hardMS) * time.Millisecond
	if hard <= 0 {
		hard = settingMS(env.Spec, SettingHardTimeout, 15*time.Second)
	}
	// The claim is ACTING: its booking finishes even when the account's
	// request budget is spent (counted, never refused).
	actx, cancel := context.WithTimeout(mustSend(ctx), hard)
	res := book(actx, out.Key, idem, env.gateStop.wrap(gate))
	cancel()
	if res.Result == "" {
		res.Result = wire.ResultUnknown
	}
	out.Result, out.Detail = res.Result, res.Detail
	if !res.SentAt.IsZero() {
		t := res.SentAt
		out.SentAt = &t
	}
	if !res.ConfirmedAt.IsZero() {
		t := res.ConfirmedAt
		out.ConfirmedAt = &t
	}
	if err := env.Claims.Outcome(ctx, out); err != nil {
		log.Warn("agent: outcome queued; the panel will get it on reconnect", "err", err)
	}
	h.Completed(wire.Operation{ID: out.OperationID, JobKey: out.Key, Outcome: res.Result, FinishedAt: env.Clock.Now()})
	return res
}
