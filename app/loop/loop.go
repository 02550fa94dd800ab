// Package loop gives a long-running function the shape River's client has:
// Start(ctx) runs it on a goroutine of its own, Stop() ends it and waits for
// it to return. Its owner then starts and stops its parts in an order it
// chooses, and a part that was never started stops as a no-op.
package loop

import (
	"context"
	"errors"
	"sync"
)

// Loop is one long-running function. The zero value is not usable; make
// one with New. A nil *Loop stops as a no-op, so an owner whose start
// failed half way can stop everything it holds.
type Loop struct {
	run func(ctx context.Context)

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a loop that runs run until its context ends.
func New(run func(ctx context.Context)) *Loop { return &Loop{run: run} }

// Start runs the function on its own goroutine with ctx's values but not
// its cancellation: the loop ends when Stop is called, so the owner decides
// when in its shutdown it ends (a panel stops its HTTP side before its
// background loops). A loop starts once.
func (l *Loop) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil {
		return errors.New("loop: already started")
	}
	ctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	l.done = make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		l.run(ctx)
	}(l.done)
	return nil
}

// Stop cancels the loop's context and waits for the function to return.
// Stopping a loop that never started, or twice, does nothing.
func (l *Loop) Stop() {
	if l == nil {
		return
	}
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}
