package crawl

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/egress"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/crawl/spec"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Rotation policies of a proxy pool (docs/CRAWL.md, "Proxy pools").
const (
	// RotateSticky keeps each account (agent) on one proxy while it is
	// healthy (rendezvous hashing: a bench moves only that proxy's accounts).
	RotateSticky = "sticky"
	// RotateRoundRobin hands each page to the next healthy proxy.
	RotateRoundRobin = "round_robin"
	// RotateOnFailure uses one proxy until it fails, then the next.
	RotateOnFailure = "on_failure"
)

// Rotations lists the rotation policies.
var Rotations = []string{RotateSticky, RotateRoundRobin, RotateOnFailure}

// Proxy states.
const (
	ProxyActive  = "active"
	ProxyBenched = "benched" // failing: out of rotation until BenchedUntil, then on probation
	ProxyRemoved = "removed" // benched too often in a row: out until a person restores it
)

// maxCooldown caps a bench's cooldown, which doubles with each bench in a row.
const maxCooldown = time.Hour

// Pool is a tenant's proxy pool.
type Pool struct {
	ID, Name, Rotation string
	// Allow are the internal ranges its proxies may sit in (admin-set).
	Allow []string
	// BenchAfter failures in a row bench a proxy for Cooldown (doubled for
	// each bench in a row); RemoveAfter benches in a row remove it.
	BenchAfter, RemoveAfter int
	Cooldown                time.Duration
	UpdatedAt               time.Time
	Proxies                 []Proxy
}

// Health is a proxy's health.
type Health struct {
	State string
	// Score is the error score: each failure adds 1, every outcome halves
	// what was there (so it reads as "recent failures").
	Score float64
	// Failures in a row; Benches in a row.
	Failures, Benches int
	BenchedUntil      *time.Time
}

// Proxy is one proxy of a pool. Its password is never read back out of
// the store except to hand it, sealed, to an agent.
type Proxy struct {
	ID, PoolID, Scheme, Host string
	Port                     int
	Username                 string
	HasPassword              bool
	Health
	LastError        string
	LastOK, LastFail *time.Time
	ErrorsTotal      int64
	CreatedAt        time.Time

	password wire.Secret
}

// URL is the proxy's address, without credentials.
func (p Proxy) URL() string {
	return p.Scheme + "://" + net.JoinHostPort(p.Host, strconv.Itoa(p.Port))
}

// Eligible says whether the proxy may be handed a page at now: active, or
// benched with its cooldown over (on probation: one success restores it,
// one failure benches it again, longer).
func (h Health) Eligible(now time.Time) bool {
	switch h.State {
	case ProxyActive:
		return true
	case ProxyBenched:
		return h.BenchedUntil == nil || !now.Before(*h.BenchedUntil)
	}
	return false
}

// After is the health after one outcome through the proxy under the pool's
// rules.
func (h Health) After(ok bool, now time.Time, p Pool) Health {
	if h.State == ProxyRemoved {
		return h
	}
	h.Score /= 2
	if ok {
		h.Failures = 0
		if h.State == ProxyBenched {
			h.State, h.Benches, h.BenchedUntil = ProxyActive, 0, nil
		}
		if h.Score < 0.01 {
			h.Score = 0
		}
		return h
	}
	h.Score++
	h.Failures++
	probation := h.State == ProxyBenched
	if h.Failures < max(p.BenchAfter, 1) && !probation {
		return h
	}
	h.Failures = 0
	h.Benches++
	if h.Benches >= max(p.RemoveAfter, 1) {
		h.State, h.BenchedUntil = ProxyRemoved, nil
		return h
	}
	cool := maxCooldown
	if f := float64(p.Cooldown) * math.Pow(2, float64(h.Benches-1)); f < float64(maxCooldown) {
		cool = time.Duration(f)
	}
	until := now.Add(cool)
	h.State, h.BenchedUntil = ProxyBenched, &until
	return h
}

// PoolInput sets a pool's rotation and health rules.
type PoolInput struct {
	Name, Rotation          string
	BenchAfter, RemoveAfter int
	Cooldown                time.Duration
}

// ErrNoPool is a pool name the tenant does not have.
var ErrNoPool = errors.New("crawl: no such proxy pool")

// SetVault gives the store the panel's vault, which seals proxy passwords
// at rest. Without one, proxies with a password cannot be stored or used.
func (s *Store) SetVault(v *vault.Vault) { s.vault = v }

func proxyContext(id string) string { return "crawl_proxy:" + id }

// SetPool creates a pool or changes its rules. Audited.
func (s *Store) SetPool(ctx context.Context, tenant string, by audit.Entry, in PoolInput) (Pool, error) {
	if !spec.NameRE.MatchString(in.Name) {
		return Pool{}, fmt.Errorf("crawl: pool name %q: use lower case letters, digits, '.', '_' and '-' (at most 63)", in.Name)
	}
	if in.Rotation == "" {
		in.Rotation = RotateSticky
	}
	known := false
	for _, r := range Rotations {
		known = known || r == in.Rotation
	}
	if !known {
		return Pool{}, fmt.Errorf("crawl: rotation %q: use one of %s", in.Rotation, strings.Join(Rotations, ", "))
	}
	if in.BenchAfter == 0 {
		in.BenchAfter = 3
	}
	if in.RemoveAfter == 0 {
		in.RemoveAfter = 5
	}
	if in.Cooldown == 0 {
		in.Cooldown = 30 * time.Second
	}
	if in.BenchAfter < 1 || in.BenchAfter > 100 || in.RemoveAfter < 1 || in.RemoveAfter > 100 {
		return Pool{}, errors.New("crawl: bench_after and remove_after are from 1 to 100")
	}
	if in.Cooldown < 100*time.Millisecond || in.Cooldown > 24*time.Hour {
		return Pool{}, errors.New("crawl: cooldown is from 100ms to 24h")
	}
	var id string
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO crawl_proxy_pools (tenant_id, name, rotation, bench_after, remove_after, cooldown_ms)
			VALUES (app_tenant(), $1, $2, $3, $4, $5)
			ON CONFLICT (tenant_id, name) DO UPDATE SET rotation = EXCLUDED.rotation, bench_after = EXCLUDED.bench_after,
				remove_after = EXCLUDED.remove_after, cooldown_ms = EXCLUDED.cooldown_ms, updated_at = now()
			RETURNING id`, in.Name, in.Rotation, in.BenchAfter, in.RemoveAfter, in.Cooldown.Milliseconds()).Scan(&id); err != nil {
			return fmt.Errorf("crawl: set pool: %w", err)
		}
		by.Action, by.Target = "crawl.proxy_pool.set", "crawl_proxy_pool:"+id
		by.Detail = map[string]any{"name": in.Name, "rotation": in.Rotation, "bench_after": in.BenchAfter,
			"remove_after": in.RemoveAfter, "cooldown": in.Cooldown.String()}
		return audit.Append(ctx, tx, by)
	})
	if err != nil {
		return Pool{}, err
	}
	return s.Pool(ctx, tenant, in.Name)
}

// SetPoolAllow replaces the internal ranges a pool's proxies may sit in.
// Admins only (the CLI on the panel's host, or fleet.secrets in the
// console); audited as egress.proxy_allow.set.
func (s *Store) SetPoolAllow(ctx context.Context, tenant string, by audit.Entry, name string, allow []string) error {
	if _, err := egress.ParseAllow(allow); err != nil {
		return err
	}
	if allow == nil {
		allow = []string{}
	}
	return db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		var id string
		err := tx.QueryRow(ctx, `UPDATE crawl_proxy_pools SET allow = $2, updated_at = now() WHERE name = $1 RETURNING id`, name, allow).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNoPool
		}
		if err != nil {
			return fmt.Errorf("crawl: set pool allow list: %w", err)
		}
		by.Action, by.Target = "egress.proxy_allow.set", "crawl_proxy_pool:"+id
		by.Detail = map[string]any{"pool": name, "allow": allow}
		return audit.Append(ctx, tx, by)
	})
}

// ProxyInput is a proxy to add: its URL (http://, https:// or socks5://
// host:port, no credentials in it) and its credentials.
type ProxyInput struct {
	URL      string
	Username string
	Password string
}

// ParseProxyURL checks a proxy URL and returns scheme, host and port.
func ParseProxyURL(raw string) (scheme, host string, port int, err error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return "", "", 0, fmt.Errorf("crawl: proxy URL: %w", err)
	}
	if u.User != nil {
		return "", "", 0, errors.New("crawl: give the proxy's username and password separately, not in its URL (a URL ends up in logs and shell history)")
	}
	switch u.Scheme {
	case "http", "https", "socks5":
	default:
		return "", "", 0, fmt.Errorf("crawl: proxy URL %q: the scheme must be http, https or socks5", raw)
	}
	if u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", "", 0, fmt.Errorf("crawl: proxy URL %q: give scheme://host:port and nothing else", raw)
	}
	port = map[string]int{"http": 80, "https": 443, "socks5": 1080}[u.Scheme]
	if p := u.Port(); p != "" {
		if port, err = strconv.Atoi(p); err != nil || port < 1 || port > 65535 {
			return "", "", 0, fmt.Errorf("crawl: proxy URL %q: port %q is not from 1 to 65535", raw, p)
		}
	}
	return u.Scheme, strings.ToLower(u.Hostname()), port, nil
}

// AddProxy adds a proxy to a pool. The password is sealed by the vault and
// never shown again. Audited (without the password).
func (s *Store) AddProxy(ctx context.Context, tenant string, by audit.Entry, pool string, in ProxyInput) (Proxy, error) {
	scheme, host, port, err := ParseProxyURL(in.URL)
	if err != nil {
		return Proxy{}, err
	}
	if in.Password != "" && s.vault == nil {
		return Proxy{}, errors.New("crawl: no vault: proxy passwords are sealed at rest with the panel's secret key (FLEET_SECRET_KEY or --secret-key-file)")
	}
	if in.Password != "" && in.Username == "" && scheme != "socks5" {
		return Proxy{}, errors.New("crawl: a proxy password needs a username")
	}
	var out Proxy
	err = db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		var poolID string
		if err := tx.QueryRow(ctx, `SELECT id FROM crawl_proxy_pools WHERE name = $1`, pool).Scan(&poolID); errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w %q (crawl proxy pool NAME creates it)", ErrNoPool, pool)
		} else if err != nil {
			return err
		}
		var id string
		err := tx.QueryRow(ctx, `INSERT INTO crawl_proxies (tenant_id, pool_id, scheme, host, port, username)
			VALUES (app_tenant(), $1, $2, $3, $4, $5) RETURNING id`, poolID, scheme, host, port, in.Username).Scan(&id)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			return fmt.Errorf("crawl: pool %s has this proxy (%s://%s:%d, user %q) already", pool, scheme, host, port, in.Username)
		}
		if err != nil {
			return fmt.Errorf("crawl: add proxy: %w", err)
		}
		if in.Password != "" {
			if _, err := tx.Exec(ctx, `UPDATE crawl_proxies SET secret = $2 WHERE id = $1`, id,
				s.vault.Seal([]byte(in.Password), proxyContext(id))); err != nil {
				return fmt.Errorf("crawl: add proxy: %w", err)
			}
		}
		out = Proxy{ID: id, PoolID: poolID, Scheme: scheme, Host: host, Port: port, Username: in.Username, HasPassword: in.Password != "",
			Health: Health{State: ProxyActive}}
		by.Action, by.Target = "crawl.proxy.add", "crawl_proxy:"+id
		by.Detail = map[string]any{"pool": pool, "url": out.URL(), "username": in.Username, "password": in.Password != ""}
		return audit.Append(ctx, tx, by)
	})
	return out, err
}

// ErrNoProxy is a proxy id the tenant does not have.
var ErrNoProxy = errors.New("crawl: no such proxy")

// RemoveProxy deletes a proxy and its sealed credentials. Audited.
func (s *Store) RemoveProxy(ctx context.Context, tenant string, by audit.Entry, id string) error {
	defer func() {
		_, _ = alarm.Resolve(context.WithoutCancel(ctx), s.pool, tenant, AlarmProxyRemoved, id, by.Actor)
	}()
	return db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		var u string
		err := tx.QueryRow(ctx, `DELETE FROM crawl_proxies WHERE id::text = $1 RETURNING scheme || '://' || host || ':' || port`, id).Scan(&u)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNoProxy
		}
		if err != nil {
			return fmt.Errorf("crawl: remove proxy: %w", err)
		}
		by.Action, by.Target, by.Detail = "crawl.proxy.remove", "crawl_proxy:"+id, map[string]any{"url": u}
		return audit.Append(ctx, tx, by)
	})
}

// AlarmProxyRemoved: a proxy of a pool was benched too often in a row and
// is out of rotation until a person restores it.
const AlarmProxyRemoved = "crawl.proxy_removed"

// proxyRemovedAlarm raises AlarmProxyRemoved for the proxy.
func (s *Store) proxyRemovedAlarm(ctx context.Context, tenant, pool string, p Proxy, lastErr string) error {
	link := ""
	var slug string
	if s.pool.QueryRow(ctx, `SELECT slug FROM tenants WHERE id = $1`, tenant).Scan(&slug) == nil {
		link = "/t/" + slug + "/crawl/proxies"
	}
	_, err := alarm.Raise(ctx, s.pool, alarm.Alarm{Kind: AlarmProxyRemoved, Key: p.ID, Tenant: tenant, Severity: alarm.Warning,
		Summary: fmt.Sprintf("Proxy %s of pool %s removed after failing again and again", p.URL(), pool),
		Detail:  "benched too often in a row; it stays out of rotation until someone restores it. Last error: " + lastErr, Link: link})
	return err
}

// RestoreProxy puts a benched or removed proxy back into rotation with a
// clean health (and resolves its removal alarm). Audited.
func (s *Store) RestoreProxy(ctx context.Context, tenant string, by audit.Entry, id string) error {
	defer func() {
		_, _ = alarm.Resolve(context.WithoutCancel(ctx), s.pool, tenant, AlarmProxyRemoved, id, by.Actor)
	}()
	return db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE crawl_proxies SET state = 'active', score = 0, failures = 0, benches = 0, benched_until = NULL
			WHERE id::text = $1`, id)
		if err != nil {
			return fmt.Errorf("crawl: restore proxy: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return ErrNoProxy
		}
		by.Action, by.Target = "crawl.proxy.restore", "crawl_proxy:"+id
		return audit.Append(ctx, tx, by)
	})
}

const proxyCols = `p.id, p.pool_id, p.scheme, p.host, p.port, p.username, p.secret IS NOT NULL, p.state, p.score, p.failures,
	p.benches, p.benched_until, p.last_error, p.last_ok_at, p.last_fail_at, p.errors_total, p.created_at`

func scanProxy(row pgx.Row, secret *[]byte) (Proxy, error) {
	var p Proxy
	dest := []any{&p.ID, &p.PoolID, &p.Scheme, &p.Host, &p.Port, &p.Username, &p.HasPassword, &p.State, &p.Score, &p.Failures,
		&p.Benches, &p.BenchedUntil, &p.LastError, &p.LastOK, &p.LastFail, &p.ErrorsTotal, &p.CreatedAt}
	if secret != nil {
		dest = append(dest, secret)
	}
	err := row.Scan(dest...)
	return p, err
}

// Pools lists the tenant's pools with their proxies and health (no
// credentials).
func (s *Store) Pools(ctx context.Context, tenant string) ([]Pool, error) {
	return s.pools(ctx, tenant, "", false)
}

// Pool reads one pool by name (no credentials).
func (s *Store) Pool(ctx context.Context, tenant, name string) (Pool, error) {
	ps, err := s.pools(ctx, tenant, name, false)
	if err != nil {
		return Pool{}, err
	}
	if len(ps) == 0 {
		return Pool{}, fmt.Errorf("%w %q", ErrNoPool, name)
	}
	return ps[0], nil
}

// PoolForRun reads one pool with its proxies' passwords opened from the
// vault: what a run hands, sealed, to its agents.
func (s *Store) PoolForRun(ctx context.Context, tenant, name string) (Pool, error) {
	ps, err := s.pools(ctx, tenant, name, true)
	if err != nil {
		return Pool{}, err
	}
	if len(ps) == 0 {
		return Pool{}, fmt.Errorf("%w %q", ErrNoPool, name)
	}
	return ps[0], nil
}

func (s *Store) pools(ctx context.Context, tenant, name string, secrets bool) ([]Pool, error) {
	var out []Pool
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, name, rotation, allow, bench_after, remove_after, cooldown_ms, updated_at
			FROM crawl_proxy_pools WHERE $1 = '' OR name = $1 ORDER BY name`, name)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var p Pool
			var ms int64
			if err := rows.Scan(&p.ID, &p.Name, &p.Rotation, &p.Allow, &p.BenchAfter, &p.RemoveAfter, &ms, &p.UpdatedAt); err != nil {
				return err
			}
			p.Cooldown = time.Duration(ms) * time.Millisecond
			out = append(out, p)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for i := range out {
			pr, err := tx.Query(ctx, `SELECT `+proxyCols+`, p.secret FROM crawl_proxies p WHERE p.pool_id = $1 ORDER BY p.created_at, p.id`, out[i].ID)
			if err != nil {
				return err
			}
			for pr.Next() {
				var sealed []byte
				p, err := scanProxy(pr, &sealed)
				if err != nil {
					pr.Close()
					return err
				}
				if secrets && sealed != nil {
					if s.vault == nil {
						pr.Close()
						return errors.New("crawl: no vault to open the proxies' passwords with")
					}
					pt, err := s.vault.Open(sealed, proxyContext(p.ID))
					if err != nil {
						pr.Close()
						return fmt.Errorf("crawl: proxy %s: %w", p.URL(), err)
					}
					p.password = wire.NewSecret(string(pt))
					clear(pt)
				}
				out[i].Proxies = append(out[i].Proxies, p)
			}
			pr.Close()
			if err := pr.Err(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("crawl: proxy pools: %w", err)
	}
	return out, nil
}

// ProxyOutcome records one outcome through a proxy and returns its new
// health. A success on a healthy proxy writes nothing.
func (s *Store) ProxyOutcome(ctx context.Context, tenant, id string, ok bool, errMsg string, now time.Time) (Health, error) {
	var h Health
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		var p Pool
		var ms int64
		err := tx.QueryRow(ctx, `SELECT x.state, x.score, x.failures, x.benches, x.benched_until, p.bench_after, p.remove_after, p.cooldown_ms
			FROM crawl_proxies x JOIN crawl_proxy_pools p ON p.id = x.pool_id WHERE x.id = $1 FOR UPDATE OF x`, id).
			Scan(&h.State, &h.Score, &h.Failures, &h.Benches, &h.BenchedUntil, &p.BenchAfter, &p.RemoveAfter, &ms)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNoProxy
		}
		if err != nil {
			return err
		}
		p.Cooldown = time.Duration(ms) * time.Millisecond
		if ok && h.State == ProxyActive && h.Failures == 0 && h.Score == 0 {
			return nil
		}
		h = h.After(ok, now, p)
		if ok {
			_, err = tx.Exec(ctx, `UPDATE crawl_proxies SET state = $2, score = $3, failures = $4, benches = $5, benched_until = $6,
				last_ok_at = $7 WHERE id = $1`, id, h.State, h.Score, h.Failures, h.Benches, h.BenchedUntil, now)
		} else {
			_, err = tx.Exec(ctx, `UPDATE crawl_proxies SET state = $2, score = $3, failures = $4, benches = $5, benched_until = $6,
				last_fail_at = $7, last_error = left($8, 500), errors_total = errors_total + 1 WHERE id = $1`,
				id, h.State, h.Score, h.Failures, h.Benches, h.BenchedUntil, now, errMsg)
		}
		return err
	})
	if err != nil {
		return Health{}, fmt.Errorf("crawl: proxy outcome: %w", err)
	}
	return h, nil
}

// SetAgentEgress records the egress an agent's crawler was last handed
// (the fleet page's egress column): a proxy of a pool, or its own.
func (s *Store) SetAgentEgress(ctx context.Context, tenant, agentID, pool string, p *Proxy, at time.Time) error {
	label, proxyID := "direct (the account's own address)", (*string)(nil)
	if p != nil {
		label, proxyID = "proxy "+p.URL()+" (pool "+pool+")", &p.ID
	}
	return db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO crawl_agent_egress (tenant_id, agent_id, pool, proxy_id, label, at)
			VALUES (app_tenant(), $1, $2, $3, $4, $5)
			ON CONFLICT (tenant_id, agent_id) DO UPDATE SET pool = EXCLUDED.pool, proxy_id = EXCLUDED.proxy_id,
				label = EXCLUDED.label, at = EXCLUDED.at`, agentID, pool, proxyID, label, at)
		if err != nil {
			return fmt.Errorf("crawl: agent egress: %w", err)
		}
		return nil
	})
}

// pick chooses the proxy of pool for a page sent to agent at now, by the
// pool's rotation; nil when none is eligible. rr and cursor are the run's
// round-robin counter and on-failure position.
func (p Pool) pick(agent string, now time.Time, rr int, cursor string) *Proxy {
	var ok []int
	for i := range p.Proxies {
		if p.Proxies[i].Eligible(now) {
			ok = append(ok, i)
		}
	}
	if len(ok) == 0 {
		return nil
	}
	switch p.Rotation {
	case RotateRoundRobin:
		return &p.Proxies[ok[rr%len(ok)]]
	case RotateOnFailure:
		for _, i := range ok {
			if p.Proxies[i].ID == cursor {
				return &p.Proxies[i]
			}
		}
		// The current one is out: the next eligible after it, in order.
		after := -1
		for i := range p.Proxies {
			if p.Proxies[i].ID == cursor {
				after = i
			}
		}
		for _, i := range ok {
			if i > after {
				return &p.Proxies[i]
			}
		}
		return &p.Proxies[ok[0]]
	default: // sticky: rendezvous hashing of (agent, proxy)
		best, bestW := -1, uint64(0)
		for _, i := range ok {
			h := sha256.Sum256([]byte(agent + "\x00" + p.Proxies[i].ID))
			if w := binary.BigEndian.Uint64(h[:8]); best < 0 || w > bestW {
				best, bestW = i, w
			}
		}
		return &p.Proxies[best]
	}
}

// nextUsable is when a proxy of the pool is eligible again: the earliest
// end of a bench; zero when every proxy is removed (or there is none).
func (p Pool) nextUsable() time.Time {
	var t time.Time
	for _, x := range p.Proxies {
		if x.State == ProxyBenched && x.BenchedUntil != nil && (t.IsZero() || x.BenchedUntil.Before(t)) {
			t = *x.BenchedUntil
		}
	}
	return t
}

// wireProxy is how a page task names the proxy; the gateway seals the
// credentials to the agent's installation key before sending.
func (p Pool) wireProxy(x *Proxy) *wire.CrawlProxy {
	return &wire.CrawlProxy{ID: x.ID, URL: x.URL(), Allow: p.Allow,
		Credentials: wire.Credentials{Username: x.Username, Password: x.password}}
}
