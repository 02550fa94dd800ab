package claim

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Client is a platform client: the board and the client's name there. Every
// account of a tenant books as one (docs/CLAIMS.md, "One tenant, one
// platform client"); each attempt records the one it booked as.
type Client struct {
	Board, Name string
}

func (c Client) String() string { return fmt.Sprintf("client %q on %s", c.Name, c.Board) }

// ErrNoClient: no platform client is known for a job (no attempt recorded
// one, and the tenant's accounts name none, or several). Nothing is looked
// up, so nothing is decided; the job is retried.
var ErrNoClient = errors.New("claim: no single platform client known")

// ClientOf is the client a job's claim books as: the one its latest attempt
// recorded, else the tenant's one client (an attempt made before the rule,
// or by a holder that is no agent of the tenant).
func (s *Store) ClientOf(ctx context.Context, tenant, key string) (Client, error) {
	var c Client
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT rtrim(board_url, '/'), client FROM claim_attempts
			WHERE tenant_id = $1 AND target_job_key = $2 AND client IS NOT NULL
			ORDER BY token DESC LIMIT 1`, tenant, key).Scan(&c.Board, &c.Name)
		if err == nil || !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		cs, err := tenantClients(ctx, tx, tenant)
		if err != nil {
			return err
		}
		if len(cs) != 1 {
			return fmt.Errorf("%w for job %s (the tenant's accounts name %d)", ErrNoClient, key, len(cs))
		}
		c = cs[0]
		return nil
	})
	if err != nil && !errors.Is(err, ErrNoClient) {
		err = fmt.Errorf("claim: client of %s: %w", key, err)
	}
	return c, err
}

// Clients are the clients whose bookings the duplicate sweep reads for a
// tenant: the one its accounts book as, and any other its attempts since
// since recorded (a tenant that moved to another client or board).
func (s *Store) Clients(ctx context.Context, tenant string, since time.Time) ([]Client, error) {
	var out []Client
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		cs, err := tenantClients(ctx, tx, tenant)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT DISTINCT rtrim(board_url, '/'), client FROM claim_attempts
			WHERE tenant_id = $1 AND client IS NOT NULL AND leased_at >= $2`, tenant, since)
		if err != nil {
			return err
		}
		more, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Client, error) {
			var c Client
			return c, r.Scan(&c.Board, &c.Name)
		})
		if err != nil {
			return err
		}
		seen := map[Client]bool{}
		for _, c := range append(cs, more...) {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim: clients of the tenant: %w", err)
	}
	return out, nil
}

// tenantClients are the distinct clients the tenant's accounts book as
// (accounts that state none are left out).
func tenantClients(ctx context.Context, tx pgx.Tx, tenant string) ([]Client, error) {
	rows, err := tx.Query(ctx, `SELECT DISTINCT rtrim(board_url, '/'), client FROM accounts
		WHERE tenant_id = $1 AND client <> '' ORDER BY 1, 2`, tenant)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Client, error) {
		var c Client
		return c, r.Scan(&c.Board, &c.Name)
	})
}

// MaxLookupPages bounds one paged look-up (at 200 bookings a page, two
// million bookings): past it the look-up is incomplete and decides nothing.
const MaxLookupPages = 10000

// lookupAll asks for the client's bookings page by page: each answer's Next
// is the next request's Cursor, until an answer has none. The whole list is
// proven only when every page was: one incomplete or failed page makes the
// look-up incomplete, and nothing is decided on it. A v3 agent answers in
// one page (no Next), as before paging. The pages may come from different
// agents of the tenant: a cursor is the platform's and holds for any
// account of the same client. Each page has its own request id
// (req.RequestID, then "<id>.2", "<id>.3" …); the result carries the first.
//
// Only an answer of the client as is accepted: the gateway asks only agents
// whose account books as that client, and an answer whose platform names
// another client (v4 lookup_result.client) is refused as incomplete.
func (e *Engine) lookupAll(ctx context.Context, lk Lookuper, tenant string, as Client, req wire.Lookup) (wire.LookupResult, error) {
	id := req.RequestID
	out := wire.LookupResult{RequestID: id, Bookings: []wire.Booking{}}
	req.Cursor = ""
	for page := 1; ; page++ {
		if page > MaxLookupPages {
			out.Complete, out.Error = false, fmt.Sprintf("more than %d pages of bookings", MaxLookupPages)
			out.Next = ""
			return out, nil
		}
		req.RequestID = id
		if page > 1 {
			req.RequestID = id + "." + strconv.Itoa(page)
		}
		res, err := lk.Lookup(ctx, tenant, as, req)
		if err != nil {
			return out, err
		}
		if res.Client != "" && res.Client != as.Name {
			e.log.Warn("claim: a look-up was answered by another platform client; refused",
				"tenant", tenant, "want", as.Name, "answered", res.Client)
			out.Complete = false
			out.Error = fmt.Sprintf("answered as platform client %q, but the claim books as %q: refused", res.Client, as.Name)
			return out, nil
		}
		out.Client = as.Name
		if !res.Complete || res.Error != "" {
			out.Complete, out.Error = false, res.Error
			return out, nil
		}
		out.Bookings = append(out.Bookings, res.Bookings...)
		if res.Next == "" {
			out.Complete = true
			return out, nil
		}
		if res.Next == req.Cursor {
			out.Complete, out.Error = false, fmt.Sprintf("the look-up's cursor did not move (%s)", res.Next)
			return out, nil
		}
		req.Cursor = res.Next
	}
}
