package audit

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/vault"
)

// Client addresses (issue 15, item 7). A sealed audit entry never changes,
// yet a client's address must not be kept past its retention. So the
// chained row holds only HMAC-SHA256(key of the month, address) as
// "YYYY-MM:<hex>" (column ip_mac, hashed into the chain), and the clear
// address lives beside the chain in audit_addresses. Retention deletes the
// clear rows, and once no tenant keeps addresses of a month any longer, that
// month's key: from then on the hash links to nothing, and neither deletion
// touches what the chain covers, so `audit verify` keeps passing.

// MonthOf is the key month (UTC, "YYYY-MM") of a time.
func MonthOf(t time.Time) string { return t.UTC().Format("2006-01") }

// maxAddress is the longest client address stored; anything longer is no
// address a network stack produced and is cut.
const maxAddress = 100

// NormalizeAddress is the form an address is stored and keyed in: an IP in
// its canonical text (IPv4-mapped IPv6 unmapped, zone kept), without a
// port; anything that is no IP is kept trimmed, so nothing is lost.
func NormalizeAddress(s string) string {
	s = strings.TrimSpace(s)
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().String()
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return a.Unmap().String()
	}
	if len(s) > maxAddress {
		s = s[:maxAddress]
	}
	return s
}

// AddressKeys are the monthly keys client addresses are hashed with: 32
// random bytes per calendar month (UTC), stored in audit_address_keys sealed
// with the panel's secret key, created on demand. Only the current month's
// key is held in memory.
type AddressKeys struct {
	pool  *pgxpool.Pool
	vault *vault.Vault
	clock clock.Clock

	mu    sync.Mutex
	month string
	key   []byte
}

// NewAddressKeys returns the keys of pool's database, sealed with v; clk
// decides the month (nil: the wall clock).
func NewAddressKeys(pool *pgxpool.Pool, v *vault.Vault, clk clock.Clock) *AddressKeys {
	if clk == nil {
		clk = clock.Real{}
	}
	return &AddressKeys{pool: pool, vault: v, clock: clk}
}

type keysKey struct{}

// WithAddressKeys returns ctx carrying k: Append, in a transaction made
// under that context, hashes client addresses with k. The panel gives its
// keys to every request (Middleware) and to the retention run; a process
// without the panel's secret key has none, and its entries keep addresses
// only beside the chain.
func WithAddressKeys(ctx context.Context, k *AddressKeys) context.Context {
	if k == nil {
		return ctx
	}
	return context.WithValue(ctx, keysKey{}, k)
}

// AddressKeysFrom returns the keys ctx carries (nil: none).
func AddressKeysFrom(ctx context.Context) *AddressKeys {
	k, _ := ctx.Value(keysKey{}).(*AddressKeys)
	return k
}

// Middleware gives k to every request below it (WithAddressKeys).
func (k *AddressKeys) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(WithAddressKeys(r.Context(), k)))
	})
}

var unkeyedOnce sync.Once

// keyContext binds a sealed key to its month: a key copied onto another
// month's row does not open.
func keyContext(month string) string { return "audit_address_key:" + month }

// Ensure creates the keys of the current and the next month if they do not
// exist yet, so that appending never has to create one at a month's turn.
func (k *AddressKeys) Ensure(ctx context.Context) error {
	now := k.clock.Now().UTC()
	for _, m := range []string{MonthOf(now), MonthOf(time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, time.UTC))} {
		if _, err := k.create(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// create stores a new key for month unless one exists, in its own committed
// statement, and returns the month's key as stored.
func (k *AddressKeys) create(ctx context.Context, month string) ([]byte, error) {
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("audit: address key: %w", err)
	}
	if _, err := k.pool.Exec(ctx, `INSERT INTO audit_address_keys (month, sealed) VALUES ($1, $2) ON CONFLICT (month) DO NOTHING`,
		month, k.vault.Seal(fresh, keyContext(month))); err != nil {
		return nil, fmt.Errorf("audit: address key of %s: %w", month, err)
	}
	// Ours, or the one another process stored first.
	var sealed []byte
	if err := k.pool.QueryRow(ctx, `SELECT sealed FROM audit_address_keys WHERE month = $1`, month).Scan(&sealed); err != nil {
		return nil, fmt.Errorf("audit: address key of %s: %w", month, err)
	}
	return k.open(month, sealed)
}

func (k *AddressKeys) open(month string, sealed []byte) ([]byte, error) {
	key, err := k.vault.Open(sealed, keyContext(month))
	if err != nil {
		return nil, fmt.Errorf("audit: the client-address key of %s does not open with this secret key: start the panel with the secret key it was sealed with (--secret-key-file, FLEET_SECRET_KEY); if that key is lost, see docs/OPERATIONS.md, \"Client addresses in audit entries\": %w", month, err)
	}
	return key, nil
}

// keyOf returns month's key: from memory, else as stored (read in the
// caller's transaction, which sees only committed keys since keys are
// never created in it), else created in a statement of its own.
func (k *AddressKeys) keyOf(ctx context.Context, tx pgx.Tx, month string) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.month == month {
		return k.key, nil
	}
	var sealed []byte
	var key []byte
	err := tx.QueryRow(ctx, `SELECT sealed FROM audit_address_keys WHERE month = $1`, month).Scan(&sealed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		key, err = k.create(ctx, month)
	case err == nil:
		key, err = k.open(month, sealed)
	default:
		err = fmt.Errorf("audit: address key of %s: %w", month, err)
	}
	if err != nil {
		return nil, err
	}
	k.month, k.key = month, key
	return key, nil
}

// mac is the keyed hash of a (normalised) address in the current month.
func (k *AddressKeys) mac(ctx context.Context, tx pgx.Tx, addr string) (string, error) {
	month := MonthOf(k.clock.Now())
	key, err := k.keyOf(ctx, tx, month)
	if err != nil {
		return "", err
	}
	return month + ":" + macHex(key, addr), nil
}

func macHex(key []byte, addr string) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(addr))
	return hex.EncodeToString(h.Sum(nil))
}

// forget drops a cached key of a month before month.
func (k *AddressKeys) forget(before string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.month != "" && k.month < before {
		k.month, k.key = "", nil
	}
}

// addressMac is the keyed hash of addr for the chained row, "" when this
// process holds no address keys for the transaction's database (a process
// without the panel's secret key): the address is then kept in clear
// beside the chain only, never in the chained row, and a warning is
// logged once.
func addressMac(ctx context.Context, tx pgx.Tx, addr string) (string, error) {
	k := AddressKeysFrom(ctx)
	if k == nil {
		unkeyedOnce.Do(func() {
			slog.Warn("audit: this context carries no address keys (audit.WithAddressKeys), so audit entries keep client addresses only beside the chain, not hashed into it")
		})
		return "", nil
	}
	return k.mac(ctx, tx, addr)
}

// DeleteAddressKeysBefore deletes the keys of every month before month
// ("YYYY-MM") and forgets them in the keys ctx carries; it returns the months
// deleted. From then on the keyed hashes of those months cannot be linked
// to an address by anyone, with or without the panel's secret key.
func DeleteAddressKeysBefore(ctx context.Context, pool *pgxpool.Pool, month string) ([]string, error) {
	if _, err := time.Parse("2006-01", month); err != nil {
		return nil, fmt.Errorf("audit: delete address keys: %q is not a month (YYYY-MM)", month)
	}
	rows, err := pool.Query(ctx, `DELETE FROM audit_address_keys WHERE month < $1 RETURNING month`, month)
	if err != nil {
		return nil, fmt.Errorf("audit: delete address keys: %w", err)
	}
	months, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("audit: delete address keys: %w", err)
	}
	if k := AddressKeysFrom(ctx); k != nil {
		k.forget(month)
	}
	return months, nil
}

// ShownAddress is what a page shows for an entry's client address: the
// clear address while it is kept (beside the chain, or in the entry itself
// for entries written before keyed hashes), else "expired" with the month
// and the start of the keyed hash, which still tells two entries of one
// month from one address apart from others.
func ShownAddress(clear, legacy, mac string) string {
	switch {
	case clear != "":
		return clear
	case legacy != "":
		return legacy
	case mac != "":
		month, h, _ := strings.Cut(mac, ":")
		if len(h) > 12 {
			h = h[:12]
		}
		return "expired (" + month + " " + h + "…)"
	}
	return ""
}
