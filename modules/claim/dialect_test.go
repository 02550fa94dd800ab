package claim_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/board/boardtest"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/platform/engine"
	"github.com/fleetwright/fleetwright/modules/platform/sandbox"
	"github.com/fleetwright/fleetwright/modules/platform/spec"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// dialect is one face of the sandbox board and the adapter an agent books
// through on it: the hand-written sandbox adapter on the classic dialect,
// the engine over examples/platforms/haulbridge.yaml on the html one.
type dialect struct {
	name    string
	factory platform.Factory
	// pagedSpec is the adapter's spec with the look-up asking two
	// bookings a page (nil: the hand-written adapter).
	pagedSpec *spec.Spec
}

// dialects are the board's two dialects; the key tests run over each.
func dialects(t testing.TB) []dialect {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "examples", "platforms", "haulbridge.yaml"))
	require.NoError(t, err)
	html, err := spec.Parse("haulbridge.yaml", src)
	require.NoError(t, err)
	paged, err := spec.Parse("haulbridge.yaml", src)
	require.NoError(t, err)
	// Two a page, so the engine's walk over pages runs in every test with
	// more than two bookings.
	size := strconv.Itoa(paged.Bookings.Paging.Size)
	for k, v := range paged.Bookings.Request.Query {
		if v == size {
			paged.Bookings.Request.Query[k] = strconv.Itoa(lookupPage)
		}
	}
	paged.Bookings.Paging.Size = lookupPage
	return []dialect{
		{name: board.DialectClassic, factory: sandbox.New},
		{name: board.DialectHTML, factory: engine.Factory(html), pagedSpec: paged},
	}
}

// session signs an account in through the dialect's adapter (on the html
// dialect the paged spec's: its bookings look-up asks two a page).
func (d dialect) session(t testing.TB, base, user, pw, secret string) platform.Session {
	t.Helper()
	f := d.factory
	if d.pagedSpec != nil {
		f = engine.Factory(d.pagedSpec)
	}
	ad, err := f(base)
	require.NoError(t, err)
	sess, err := ad.NewSession(platform.SessionOptions{})
	require.NoError(t, err)
	creds := wire.Credentials{Username: user, Password: wire.NewSecret(pw), TOTPSecret: wire.NewSecret(secret), Origins: []string{base}}
	require.NoError(t, sess.Login(context.Background(), creds, &platform.TOTP{Secret: creds.TOTPSecret}))
	return sess
}

// lookuper is the dialect's look-up, two bookings a page: raw HTTP on the
// classic dialect (c), the signed-in paged session on the html one.
func (d dialect) lookuper(c *boardtest.Client, sess platform.Session, base string, anyClient bool) claim.Lookuper {
	if d.pagedSpec == nil {
		return boardLookuper{c: c, anyClient: anyClient}
	}
	return &sessionLookuper{sess: sess, base: base, client: "acme", anyClient: anyClient}
}

// sessionLookuper answers look-ups through an adapter session (the
// agent's way), from the engine's cursor page by page; a page that proves
// nothing, or a signed-out one, is an answer with an error, never an
// empty list.
type sessionLookuper struct {
	sess      platform.Session
	base      string
	client    string
	anyClient bool
}

func (l *sessionLookuper) Lookup(ctx context.Context, tenant string, as claim.Client, q wire.Lookup) (wire.LookupResult, error) {
	res := wire.LookupResult{RequestID: q.RequestID}
	if !l.anyClient && (as.Name != l.client || strings.TrimRight(as.Board, "/") != strings.TrimRight(l.base, "/")) {
		return res, fmt.Errorf("no agent of %s (this one is client %q on %s)", as, l.client, l.base)
	}
	b, err := l.sess.Bookings(ctx, q.Cursor)
	if err != nil {
		res.Error = err.Error()
		return res, nil
	}
	if !b.Complete {
		res.Error = "the page proves nothing"
		return res, nil
	}
	res.Complete, res.Client, res.Next = true, b.Client, b.Next
	for _, bk := range b.Bookings {
		if len(q.Keys) > 0 && !slices.Contains(q.Keys, bk.Key) {
			continue
		}
		res.Bookings = append(res.Bookings, bk)
	}
	return res, nil
}
