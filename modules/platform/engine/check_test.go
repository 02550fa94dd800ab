package engine_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/board/boardtest"
	"github.com/fleetwright/fleetwright/modules/platform/engine"
	"github.com/fleetwright/fleetwright/modules/platform/spec"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// TestCheckTracesEveryFieldOverARealBoard: a check signs in, reads the
// feed once, walks the bookings to their end and reports per field what
// each rule extracted; it books only the one load named. A wrong path is a
// field reported empty (with the item that fails), a wrong password a
// failed sign-in — never a panic, and no secret in the report.
func TestCheckTracesEveryFieldOverARealBoard(t *testing.T) {
	ctx := context.Background()
	b := boardtest.Start(t)
	loads, err := b.Publish(ctx, 2, nil)
	require.NoError(t, err)
	// An account per check: a second sign-in within one 30 s step would
	// wait for the next code (the board refuses a reused one).
	n := 0
	account := func() (wire.Credentials, string) {
		n++
		user := fmt.Sprintf("check-%d", n)
		acct, err := b.CreateAccount(ctx, board.AccountSpec{Username: user, Password: password, Client: "acme"})
		require.NoError(t, err)
		return wire.Credentials{Username: user, Password: wire.NewSecret(password), TOTPSecret: wire.NewSecret(acct.TOTPSecret)}, acct.TOTPSecret
	}
	src, err := os.ReadFile("../../../examples/platforms/sandbox.yaml")
	require.NoError(t, err)
	check := func(src string, o engine.CheckOptions) engine.CheckReport {
		t.Helper()
		sp, err := spec.Parse("sandbox.yaml", []byte(src))
		require.NoError(t, err)
		ad, err := engine.New(sp, b.URL())
		require.NoError(t, err)
		if o.Credentials.Username == "" {
			o.Credentials, _ = account()
		}
		return ad.Check(ctx, o)
	}

	r := check(string(src), engine.CheckOptions{})
	require.True(t, r.OK(), "%+v", r)
	require.Equal(t, 2, r.Feed.Count)
	require.Len(t, r.Feed.Traced, 2)
	f := fields(r.Feed.Traced[0])
	require.Equal(t, loads[0].ID, f["key"].Value)
	require.Equal(t, "path id, required", f["key"].Rule)
	require.NotEmpty(t, f["published_at"].Value)
	require.Contains(t, f["origin"].Rule, "paths origin.city, origin.state")
	require.NotNil(t, r.Feed.Paging)
	require.False(t, r.Feed.Paging.Empty)
	require.True(t, r.Bookings.Complete)
	require.Zero(t, r.Bookings.Count)
	require.Nil(t, r.Book, "a check books nothing unless asked")
	require.Empty(t, b.Bookings("acme"), "the board saw no booking")

	// --book KEY: one booking, and the rule that read it.
	r = check(string(src), engine.CheckOptions{Book: loads[1].ID})
	require.True(t, r.OK(), "%+v", r.Book)
	require.Equal(t, "booking.results[0] (result: confirmed)", r.Book.Rule)
	require.Equal(t, string(wire.ResultConfirmed), r.Book.Result)
	require.NotEmpty(t, r.Book.BookingID)
	require.Len(t, b.Bookings("acme"), 1)

	// The bookings walk now finds it, field by field.
	r = check(string(src), engine.CheckOptions{})
	require.Equal(t, 1, r.Bookings.Count)
	require.Equal(t, loads[1].ID, fields(r.Bookings.Traced[0])["key"].Value)

	// A path that never matches: the field that came back empty.
	bad := strings.Replace(string(src), "key: {path: id, required: true}", "key: {path: ident, required: true}", 1)
	r = check(bad, engine.CheckOptions{})
	require.False(t, r.OK())
	require.True(t, r.SignIn.OK)
	require.Contains(t, r.Feed.Error, "field key (path ident) came back empty")
	k := fields(r.Feed.Traced[0])["key"]
	require.True(t, k.Empty)
	require.Contains(t, k.Error, "came back empty")

	// A changed answer shape on a time: named, not a stack trace.
	bad = strings.Replace(string(src), "published_at: {path: published_at, time: rfc3339, required: true}",
		"published_at: {path: published_at, time: epoch_ms, required: true}", 1)
	r = check(bad, engine.CheckOptions{})
	require.Contains(t, r.Feed.Error, "field published_at (path published_at)")

	// A wrong password: the sign-in fails, nothing else runs, no secret.
	wrong, totpSecret := account()
	wrong.Password = wire.NewSecret("not-the-password-77")
	r = check(string(src), engine.CheckOptions{Credentials: wrong, Book: loads[0].ID})
	require.False(t, r.OK())
	require.NotEmpty(t, r.SignIn.Error)
	require.NotEmpty(t, r.Feed.Skipped)
	require.NotEmpty(t, r.Book.Skipped)
	dump := fmt.Sprintf("%+v", r)
	require.NotContains(t, dump, "not-the-password-77")
	require.NotContains(t, dump, totpSecret)
}

func fields(it engine.ItemTrace) map[string]engine.FieldTrace {
	m := map[string]engine.FieldTrace{}
	for _, f := range it.Fields {
		m[f.Field] = f
	}
	return m
}
