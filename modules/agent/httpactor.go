package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleetwright/fleetwright/modules/agent/store"
	"github.com/fleetwright/fleetwright/modules/agent/supervisor"
	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// runHTTPActor is the HTTP actor: no browser, so a large fleet fits on one
// host. It signs in over plain HTTP (password + TOTP, cookie jar), keeps the
// session warm, and books by firing the platform's booking request with the
// session's cookies and the traits' headers (in the profile's order); the
// deadline is checked by the transport right before the request's bytes
// are written.
func runHTTPActor(ctx context.Context, h *supervisor.Handle, env WorkerEnv) error {
	ad, guard, err := env.adapter(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	tr, err := env.traits()
	if err != nil {
		return err
	}
	sess, err := ad.NewSession(platform.SessionOptions{Traits: tr, Clock: env.Clock, Admit: env.Budget.admit,
		Dial: guard.DialContext})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a := &httpActor{env: env, sess: sess}
	// Registered before the sign-in, so once the panel hears
	// session_refreshed this worker can answer look-ups (a look-up before
	// that gets an incomplete answer, which decides nothing).
	unregister := env.Sessions.Register(env.Spec.Name, sess.Bookings)
	defer unregister()
	if err := a.signIn(ctx, "start"); err != nil {
		return err
	}

	grants := env.Claims.Grants(env.Spec.Name)
	warm := settingMS(env.Spec, SettingKeepWarmMS, 20*time.Second)
	tick := env.Clock.After(warm)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
			tick = env.Clock.After(warm)
			if err := a.keepWarm(ctx); err != nil {
				return err
			}
		case o := <-env.Claims.Offers():
			res, acted := actOn(ctx, h, env, ad, o, sess.Book)
			if err := a.after(ctx, o.Job.Key, res, acted); err != nil {
				return err
			}
		case g := <-grants:
			res, acted := actOnGrant(ctx, h, env, ad, g, sess.Book)
			if err := a.after(ctx, g.Job.Key, res, acted); err != nil {
				return err
			}
		}
	}
}

// after handles what a booking's answer asks of the actor: a captcha needs
// a person, an ended session a new sign-in.
func (a *httpActor) after(ctx context.Context, key string, res platform.BookResult, acted bool) error {
	if !acted {
		return nil
	}
	if res.Captcha {
		return a.env.needsPerson(ctx, "the booking of "+key+" was answered with a captcha", "")
	}
	if res.SignedOut {
		return a.signIn(ctx, "the session expired")
	}
	return nil
}

type httpActor struct {
	env  WorkerEnv
	sess platform.Session
	gen  int
}

// keepWarm checks the session and signs in again when it ended.
func (a *httpActor) keepWarm(ctx context.Context) error {
	if a.env.Budget.holding() {
		return nil // no request while the account's budget is spent
	}
	err := a.sess.Check(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, platform.ErrSignedOut):
		return a.signIn(ctx, "the session expired")
	default:
		a.env.Log.Warn("agent: session check failed", "err", err)
		return nil
	}
}

// signIn adopts a sibling's newer session or logs in with a fresh code,
// within the login retry cap.
func (a *httpActor) signIn(ctx context.Context, why string) error {
	tries := settingInt(a.env.Spec, SettingLoginTries, 3)
	var last error
	for i := 0; i < tries; i++ {
		var codes *platform.TOTP
		cs, gen, fresh, err := a.env.Sessions.Login(ctx, a.gen, a.env.Account.BoardURL, func(ctx context.Context, creds platform.Credentials) ([]store.Cookie, error) {
			codes = a.env.codes(creds)
			if err := a.sess.Login(ctx, creds, codes); err != nil {
				return nil, err
			}
			return toStoreCookies(a.sess.Cookies()), nil
		})
		if err == nil {
			a.gen = gen
			if fresh {
				a.env.signedIn(codes, why)
				return nil
			}
			a.sess.SetCookies(toHTTPCookies(cs))
			if err = a.sess.Check(ctx); err == nil {
				return nil
			}
			if !errors.Is(err, platform.ErrSignedOut) {
				last = err
				continue
			}
			// The stored session ended too: the next round logs in.
			last = err
			continue
		}
		last = err
		if errors.Is(err, errBoardNotBound) {
			// Nothing was sent; only a person (or the panel) can fix it.
			if a.env.credentialsNotSent(ctx, err) != nil {
				return nil // stopping
			}
			i = -1 // new credentials: a fresh round of tries
			continue
		}
		if ctx.Err() != nil || errors.Is(err, platform.ErrCredentials) {
			break
		}
		select {
		case <-a.env.Clock.After(time.Duration(i+1) * time.Second):
		case <-ctx.Done():
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("agent: sign in failed %d times: %w", tries, last)
}

var _ = wire.ResultUnknown
