package loop_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/loop"
)

type key struct{}

func TestStartRunsWithTheContextsValuesAndStopWaitsForTheEnd(t *testing.T) {
	got := make(chan any, 1)
	ended := make(chan struct{})
	l := loop.New(func(ctx context.Context) {
		got <- ctx.Value(key{})
		<-ctx.Done()
		close(ended)
	})
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "keys"))
	require.NoError(t, l.Start(parent))
	require.Equal(t, "keys", <-got)

	// The parent's cancellation does not end the loop: only Stop does.
	cancel()
	select {
	case <-ended:
		t.Fatal("the loop ended with its parent's context, not with Stop")
	case <-time.After(50 * time.Millisecond): // real time: proving something does not happen
	}
	l.Stop()
	select {
	case <-ended:
	default:
		t.Fatal("Stop returned before the function did")
	}
	l.Stop() // twice: nothing

	require.Error(t, l.Start(context.Background()), "a loop starts once")
}

func TestStopWithoutStartDoesNothing(t *testing.T) {
	loop.New(func(context.Context) { t.Fatal("ran") }).Stop()
	var nothing *loop.Loop
	nothing.Stop()
}
