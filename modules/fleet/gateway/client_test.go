package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/factory"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/fleet/gateway"
	"github.com/fleetwright/fleetwright/modules/wire"
)

func accountIn(key, board, client string) fleet.AccountInput {
	return fleet.AccountInput{Key: key, BoardURL: board, Client: client, Username: "user-" + key,
		Password: "pw-" + key + "-Secret!", TOTPSecret: "JBSWY3DPEHPK3PXP"}
}

// TestOneTenantOnePlatformClient (issue 11, item 8): every account of a
// tenant books as the same client on the same board. A new account or a
// change that would break it is refused with an error naming the account
// it conflicts with — by the store, and by the database whatever path
// writes; a whole tenant moves in one step; two accounts created at once
// with different clients cannot both pass.
func TestOneTenantOnePlatformClient(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	const boardX, boardY = "http://127.0.0.1:8101", "http://127.0.0.1:8102"
	_, err := b.store.CreateAccount(ctx, b.tenant, accountIn("acme-1", boardX, "acme"), ops)
	require.NoError(t, err)

	_, err = b.store.CreateAccount(ctx, b.tenant, accountIn("acme-2", boardX, "beta"), ops)
	require.ErrorIs(t, err, fleet.ErrOtherClient)
	require.ErrorContains(t, err, `account acme-1 books as client "acme" on `+boardX)
	_, err = b.store.CreateAccount(ctx, b.tenant, accountIn("acme-2", boardY, "acme"), ops)
	require.ErrorIs(t, err, fleet.ErrOtherClient, "another board is another client")
	require.ErrorContains(t, err, "acme-1")
	_, err = b.store.CreateAccount(ctx, b.tenant, accountIn("acme-2", boardX, ""), ops)
	require.ErrorContains(t, err, "platform client is required")
	id2, err := b.store.CreateAccount(ctx, b.tenant, accountIn("acme-2", boardX+"/", "acme"), ops)
	require.NoError(t, err, "the same board with a trailing slash")

	// Changing one account away from the others is refused and changes nothing.
	err = b.store.SetPlatform(ctx, b.tenant, id2, boardX, "beta", nil, ops)
	require.ErrorIs(t, err, fleet.ErrOtherClient)
	require.ErrorContains(t, err, "acme-1")
	clients := func() map[string]string {
		f, err := b.store.List(ctx, b.tenant)
		require.NoError(t, err)
		out := map[string]string{}
		for _, a := range f.Accounts {
			out[a.Key] = a.Client + "@" + a.BoardURL
		}
		return out
	}
	require.Equal(t, map[string]string{"acme-1": "acme@" + boardX, "acme-2": "acme@" + boardX + "/"}, clients())

	// The database keeps the rule whatever path writes (here, a script as
	// the application role).
	err = db.InTenant(ctx, b.db.App, b.tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO accounts (tenant_id, account_key, board_url, username, client, secret_box)
			VALUES ($1, 'rogue', $2, 'u', 'gamma', '\x00')`, b.tenant, boardX)
		return err
	})
	require.ErrorContains(t, err, "account acme-1 books as client")
	err = db.InTenant(ctx, b.db.App, b.tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE accounts SET client = 'gamma' WHERE account_key = 'acme-2'`)
		return err
	})
	require.ErrorContains(t, err, "account acme-1 books as client")

	// The whole tenant moves at once, audited with what it was.
	require.ErrorContains(t, b.store.SetPlatform(ctx, b.tenant, "", boardY, "beta", nil, ops), "account acme-1 moves to another board (http://127.0.0.1:8102): enter its username, password and TOTP secret again")
	relogin := map[string]fleet.Credentials{"acme-1": {Username: "u1", Password: "pw-1-Secret!", TOTPSecret: "JBSWY3DPEHPK3PXP"},
		"acme-2": {Username: "u2", Password: "pw-2-Secret!", TOTPSecret: "JBSWY3DPEHPK3PXP"}}
	require.NoError(t, b.store.SetPlatform(ctx, b.tenant, "", boardY, "beta", relogin, ops))
	require.Equal(t, map[string]string{"acme-1": "beta@" + boardY, "acme-2": "beta@" + boardY}, clients())
	var n int
	require.NoError(t, db.InTenant(ctx, b.db.App, b.tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'fleet.account.platform'
			AND detail->>'client' = 'beta' AND detail->'before' @> '[{"client": "acme"}]'`).Scan(&n)
	}))
	require.Equal(t, 1, n)
	require.NoError(t, b.store.SetPlatform(ctx, b.tenant, "", boardY, "beta", nil, ops), "no change")

	// Two accounts of a new tenant created at once with different clients:
	// one passes, the others are refused.
	other := factory.Tenant(t, b.db, "delta", "Delta")
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = b.store.CreateAccount(ctx, other, accountIn(fmt.Sprintf("d-%d", i), boardX, fmt.Sprintf("client-%d", i)), ops)
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		} else {
			require.ErrorIs(t, err, fleet.ErrOtherClient)
		}
	}
	require.Equal(t, 1, ok)
}

// TestLookupsComeOnlyFromTheClaimsOwnClient (issue 11, item 8): an attempt
// records the client its holder's account books as. After the tenant moves
// to another client, that attempt's look-ups go only to an agent of its own
// client (none is left: nothing is decided), never to the agent now set to
// the new one. And an agent whose account is set to a client the platform
// does not sign it in as is refused by the engine: the duplicate sweep
// records nothing from its answer.
func TestLookupsComeOnlyFromTheClaimsOwnClient(t *testing.T) {
	f := startLookupFleet(t)
	ctx := context.Background()
	boardURL := strings.TrimRight(f.board.URL(), "/")
	// A lease by the agent of acme-1 records client acme on the attempt.
	_, err := f.eng.PutFilter(ctx, ops, f.tenant, claim.Filter{Name: "everything", Enabled: true})
	require.NoError(t, err)
	now := time.Now()
	_, err = f.eng.Store().RecordJob(ctx, claim.QueuedJob{Tenant: f.tenant, Cell: "default",
		Job: wire.Job{Key: "LD-OWN", PublishedAt: now, ExpiresAt: now.Add(time.Hour)}, SeenAt: now, QueuedAt: now})
	require.NoError(t, err)
	fl, err := f.store.List(ctx, f.tenant)
	require.NoError(t, err)
	require.Len(t, fl.Agents, 1)
	lr := f.eng.Lease(ctx, f.tenant, claim.Holder{Agent: fl.Agents[0].ID, Worker: "http_actor-1"},
		wire.LeaseRequest{RequestID: "l-own", Worker: "http_actor-1", Key: "LD-OWN"})
	require.True(t, lr.Granted, lr.Reason)
	acme := claim.Client{Board: boardURL, Name: "acme"}
	as, err := f.eng.Store().ClientOf(ctx, f.tenant, "LD-OWN")
	require.NoError(t, err)
	require.Equal(t, acme, as)

	// Two bookings of one load by client acme: a duplicate, on the board.
	loads, err := f.board.Publish(ctx, 1, nil)
	require.NoError(t, err)
	for range 2 {
		_, err := f.board.InjectBooking(ctx, "acme-1", loads[0].ID)
		require.NoError(t, err)
	}

	// The tenant is set to client beta; the agent still signs in as acme.
	require.NoError(t, f.store.SetPlatform(ctx, f.tenant, "", f.board.URL(), "beta", nil, ops))
	as, err = f.eng.Store().ClientOf(ctx, f.tenant, "LD-OWN")
	require.NoError(t, err)
	require.Equal(t, acme, as, "the attempt keeps the client it booked as")
	_, err = f.g.Lookup(ctx, f.tenant, acme, wire.Lookup{RequestID: wire.NewID(), Keys: []string{"LD-OWN"}})
	require.ErrorIs(t, err, gateway.ErrNoAgent, "no agent of acme is left to ask; the one set to beta is not asked")

	// The agent set to beta answers as acme (the platform says so): refused.
	require.NoError(t, f.eng.DuplicateSweep(ctx))
	n, _, err := f.eng.Store().DuplicateConfirmations(ctx, f.tenant)
	require.NoError(t, err)
	require.Zero(t, n, "another client's answer is no evidence")

	// Set back to acme, the same sweep finds the duplicate.
	require.NoError(t, f.store.SetPlatform(ctx, f.tenant, "", f.board.URL(), "acme", nil, ops))
	require.NoError(t, f.eng.DuplicateSweep(ctx))
	n, dups, err := f.eng.Store().DuplicateConfirmations(ctx, f.tenant)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, loads[0].ID, dups[0].Key)
}
