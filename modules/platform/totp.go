package platform

import (
	"context"
	"fmt"
	"time"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Step is the TOTP time step (RFC 6238 default, 30 s).
const Step = 30 * time.Second

// TOTP produces an account's one-time codes from its secret. Codes are
// secrets: they never reach a log or an error.
type TOTP struct {
	Secret wire.Secret
	Clock  clock.Clock
	// Margin is waited past a step boundary before the next code is used,
	// for clock error between the agent and the platform (default 1 s).
	Margin time.Duration
	// Waits counts how many times Next waited for a step (for reports).
	Waits int
}

func (t *TOTP) clk() clock.Clock {
	if t.Clock == nil {
		return clock.Real{}
	}
	return t.Clock
}

// Code is the code of the current step.
func (t *TOTP) Code() (string, error) {
	c, err := totp.GenerateCodeCustom(t.Secret.Reveal(), t.clk().Now(),
		totp.ValidateOpts{Period: uint(Step / time.Second), Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1})
	if err != nil {
		// The library's error names the problem, never the secret.
		return "", fmt.Errorf("platform: one-time code: %w", err)
	}
	return c, nil
}

// Next waits for the next time step and returns its code: what a worker
// does when the platform refuses a code as already used.
func (t *TOTP) Next(ctx context.Context) (string, error) {
	margin := t.Margin
	if margin <= 0 {
		margin = time.Second
	}
	now := t.clk().Now()
	wait := Step - time.Duration(now.UnixNano()%int64(Step)) + margin
	t.Waits++
	select {
	case <-t.clk().After(wait):
	case <-ctx.Done():
		return "", fmt.Errorf("platform: waiting for the next one-time code: %w", ctx.Err())
	}
	return t.Code()
}
