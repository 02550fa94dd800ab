// Package registry is the panel's store of each tenant's platform specs
// (docs/ADAPTERS.md, "Platforms per tenant"): every version kept with its
// source, digest, who and when, diffs between versions, the version each
// account runs (moving one is an audited action, never automatic), and the
// recorded review a real target needs before it claims
// (docs/LAW_REGISTER.md). Every query runs in the tenant's transaction
// under row-level security; every change is audited in the transaction
// that makes it.
package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/examples/platforms"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/platform/engine"
	"github.com/fleetwright/fleetwright/modules/platform/spec"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Audit actions.
const (
	ActionApply          = "platform.apply"
	ActionAccount        = "platform.account"
	ActionReviewRecord   = "platform.review.record"
	ActionReviewWithdraw = "platform.review.withdraw"
)

// Errors.
var (
	ErrNoPlatform = errors.New("registry: no such platform in this tenant")
	ErrNoVersion  = errors.New("registry: no such version of this platform")
	ErrNoAccount  = errors.New("registry: no such account in this tenant")
	ErrNoReview   = errors.New("registry: this platform has no review in force")
)

// Invalid is a refused input, in words for the person who sent it.
type Invalid string

func (e Invalid) Error() string { return string(e) }

// Store keeps the tenants' platform specs.
type Store struct {
	pool *pgxpool.Pool
}

// New returns a store on the application role's pool.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Pool is the store's pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Digest is the hex SHA-256 of a spec's text (the protocol's
// platform.digest).
func Digest(src string) string {
	h := sha256.Sum256([]byte(src))
	return hex.EncodeToString(h[:])
}

// shipped maps the digest of each sandbox spec this build ships
// (examples/platforms, platforms.Sandboxes) to its file name.
var shipped = func() map[string]string {
	m := map[string]string{}
	for _, n := range platforms.Sandboxes {
		b, err := platforms.FS.ReadFile(n)
		if err == nil {
			m[Digest(string(b))] = path.Base(n)
		}
	}
	return m
}()

// Shipped reports whether src is the text of a sandbox spec this build
// ships (byte for byte): such a platform needs no review.
func Shipped(src string) bool {
	_, ok := shipped[Digest(src)]
	return ok
}

// ShippedSpecs are the sandbox specs this build ships, by file name.
func ShippedSpecs() map[string]string {
	out := map[string]string{}
	for _, n := range shipped {
		b, _ := platforms.FS.ReadFile(n)
		out[n] = string(b)
	}
	return out
}

// Platform is one of a tenant's platforms.
type Platform struct {
	ID        string
	Name      string
	Latest    int
	UpdatedAt time.Time
	// Review is the review in force (nil: none).
	Review *Review
}

// Version is one stored version of a platform's spec.
type Version struct {
	PlatformID string
	Name       string
	Version    int
	Source     string
	Digest     string
	// Shipped: the text is a sandbox spec this build ships (no review).
	Shipped   bool
	CreatedBy string
	CreatedAt time.Time
}

// Wire is the version as the protocol carries it to the agent.
func (v Version) Wire() *wire.PlatformSpec {
	return &wire.PlatformSpec{Name: v.Name, Version: v.Version, Digest: v.Digest, Source: v.Source}
}

// Review is a recorded review of a real target.
type Review struct {
	ID         string
	Reference  string
	Note       string
	ReviewedBy string
	ReviewedAt time.Time
}

// Apply stores a spec file as its platform's next version (a new platform
// at version 1). The same text as the latest version changes nothing.
// No account moves to the new version: that is SetAccount's. Audited.
func (s *Store) Apply(ctx context.Context, tenant string, by audit.Entry, file string, src []byte) (Version, bool, error) {
	sp, err := spec.Parse(file, src)
	if err != nil {
		return Version{}, false, err
	}
	// What the agent does with it: a spec the engine cannot build is
	// refused here, not at every agent (the base URL is the account's,
	// so any stands in).
	if _, err := engine.New(sp, "https://platform.invalid"); err != nil {
		return Version{}, false, Invalid(fmt.Sprintf("%s: the spec passes the schema but the engine cannot build it: %v", file, err))
	}
	text := string(src)
	v := Version{Name: sp.Name, Source: text, Digest: Digest(text), Shipped: Shipped(text), CreatedBy: by.Actor}
	changed := false
	err = db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		var cur string
		err := tx.QueryRow(ctx, `SELECT p.id, p.latest_version, v.source FROM platforms p
			JOIN platform_versions v ON v.platform_id = p.id AND v.version = p.latest_version
			WHERE p.name = $1 FOR UPDATE OF p`, sp.Name).Scan(&v.PlatformID, &v.Version, &cur)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			v.Version = 1
			if err := tx.QueryRow(ctx, `INSERT INTO platforms (tenant_id, name) VALUES (app_tenant(), $1) RETURNING id`, sp.Name).Scan(&v.PlatformID); err != nil {
				return fmt.Errorf("registry: create platform: %w", err)
			}
		case err != nil:
			return fmt.Errorf("registry: read platform: %w", err)
		case cur == text:
			return nil
		default:
			v.Version++
		}
		if err := tx.QueryRow(ctx, `INSERT INTO platform_versions (tenant_id, platform_id, version, source, digest, shipped, created_by, created_by_id)
			VALUES (app_tenant(), $1, $2, $3, $4, $5, $6, NULLIF($7, '')::uuid) RETURNING created_at`,
			v.PlatformID, v.Version, text, v.Digest, v.Shipped, by.Actor, by.ActorID).Scan(&v.CreatedAt); err != nil {
			return fmt.Errorf("registry: store version: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE platforms SET latest_version = $2, updated_at = now() WHERE id = $1`, v.PlatformID, v.Version); err != nil {
			return fmt.Errorf("registry: update platform: %w", err)
		}
		by.Action, by.Target = ActionApply, "platform:"+v.PlatformID
		by.Detail = map[string]any{"name": sp.Name, "version": v.Version, "digest": v.Digest, "shipped": v.Shipped}
		if err := audit.Append(ctx, tx, by); err != nil {
			return err
		}
		changed = true
		return nil
	})
	if err != nil {
		return Version{}, false, err
	}
	if !changed {
		got, err := s.Version(ctx, tenant, v.PlatformID, v.Version)
		return got, false, err
	}
	return v, true, nil
}

// Platforms lists the tenant's platforms by name, each with its review in
// force.
func (s *Store) Platforms(ctx context.Context, tenant string) ([]Platform, error) {
	var out []Platform
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT p.id, p.name, p.latest_version, p.updated_at,
			r.id, r.reference, r.note, r.reviewed_by, r.reviewed_at
			FROM platforms p LEFT JOIN platform_reviews r ON r.platform_id = p.id AND r.withdrawn_at IS NULL
			ORDER BY p.name`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var p Platform
			var rid, ref, note, rby *string
			var rat *time.Time
			if err := rows.Scan(&p.ID, &p.Name, &p.Latest, &p.UpdatedAt, &rid, &ref, &note, &rby, &rat); err != nil {
				return err
			}
			if rid != nil {
				p.Review = &Review{ID: *rid, Reference: *ref, Note: *note, ReviewedBy: *rby, ReviewedAt: *rat}
			}
			out = append(out, p)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("registry: list platforms: %w", err)
	}
	return out, nil
}

// ByName returns one of the tenant's platforms.
func (s *Store) ByName(ctx context.Context, tenant, name string) (Platform, error) {
	ps, err := s.Platforms(ctx, tenant)
	if err != nil {
		return Platform{}, err
	}
	for _, p := range ps {
		if p.Name == name {
			return p, nil
		}
	}
	return Platform{}, ErrNoPlatform
}

// ByID returns one of the tenant's platforms.
func (s *Store) ByID(ctx context.Context, tenant, id string) (Platform, error) {
	ps, err := s.Platforms(ctx, tenant)
	if err != nil {
		return Platform{}, err
	}
	for _, p := range ps {
		if p.ID == id {
			return p, nil
		}
	}
	return Platform{}, ErrNoPlatform
}

// Versions lists a platform's versions, newest first.
func (s *Store) Versions(ctx context.Context, tenant, platformID string) ([]Version, error) {
	var out []Version
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT v.platform_id, p.name, v.version, v.source, v.digest, v.shipped, v.created_by, v.created_at
			FROM platform_versions v JOIN platforms p ON p.id = v.platform_id
			WHERE v.platform_id::text = $1 ORDER BY v.version DESC`, platformID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var v Version
			if err := rows.Scan(&v.PlatformID, &v.Name, &v.Version, &v.Source, &v.Digest, &v.Shipped, &v.CreatedBy, &v.CreatedAt); err != nil {
				return err
			}
			out = append(out, v)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("registry: versions: %w", err)
	}
	return out, nil
}

// Version returns one version of a platform.
func (s *Store) Version(ctx context.Context, tenant, platformID string, version int) (Version, error) {
	vs, err := s.Versions(ctx, tenant, platformID)
	if err != nil {
		return Version{}, err
	}
	for _, v := range vs {
		if v.Version == version {
			return v, nil
		}
	}
	if len(vs) == 0 {
		return Version{}, ErrNoPlatform
	}
	return Version{}, ErrNoVersion
}

// Account is one of the tenant's accounts and the platform it runs.
type Account struct {
	ID       string
	Key      string
	BoardURL string
	// PlatformID, Platform and Version are empty and zero for an account
	// on the shipped sandbox.
	PlatformID string
	Platform   string
	Version    int
	Latest     int
	Shipped    bool
	SetBy      string
	SetAt      time.Time
	// Held says why the account claims nothing ("": it may claim as far
	// as its platform goes).
	Held string
}

// OnSandbox reports whether the account runs the agent's built-in sandbox.
func (a Account) OnSandbox() bool { return a.PlatformID == "" }

// HeldNoReview is the reason an account on an unreviewed real target
// claims nothing.
func HeldNoReview(platform string) string {
	return "platform " + platform + " is not a shipped sandbox and has no recorded review: it claims nothing until an admin records one (docs/LAW_REGISTER.md)"
}

// Accounts lists the tenant's accounts with the platform version each
// runs and, for one held by the review gate, why.
func (s *Store) Accounts(ctx context.Context, tenant string) ([]Account, error) {
	var out []Account
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT ac.id, ac.account_key, ac.board_url,
			COALESCE(p.id::text, ''), COALESCE(p.name, ''), COALESCE(ap.version, 0), COALESCE(p.latest_version, 0),
			COALESCE(v.shipped, true), COALESCE(ap.set_by, ''), COALESCE(ap.set_at, ac.created_at),
			ap.account_id IS NOT NULL AND NOT v.shipped
			  AND NOT EXISTS (SELECT 1 FROM platform_reviews r WHERE r.platform_id = ap.platform_id AND r.withdrawn_at IS NULL)
			FROM accounts ac
			LEFT JOIN account_platforms ap ON ap.account_id = ac.id
			LEFT JOIN platforms p ON p.id = ap.platform_id
			LEFT JOIN platform_versions v ON v.platform_id = ap.platform_id AND v.version = ap.version
			ORDER BY ac.account_key`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var a Account
			var held bool
			if err := rows.Scan(&a.ID, &a.Key, &a.BoardURL, &a.PlatformID, &a.Platform, &a.Version, &a.Latest,
				&a.Shipped, &a.SetBy, &a.SetAt, &held); err != nil {
				return err
			}
			if held {
				a.Held = HeldNoReview(a.Platform)
			}
			out = append(out, a)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("registry: accounts: %w", err)
	}
	return out, nil
}

// AccountByID returns one of the tenant's accounts with its platform.
func (s *Store) AccountByID(ctx context.Context, tenant, id string) (Account, error) {
	as, err := s.Accounts(ctx, tenant)
	if err != nil {
		return Account{}, err
	}
	for _, a := range as {
		if a.ID == id {
			return a, nil
		}
	}
	return Account{}, ErrNoAccount
}

// AccountByKey returns one of the tenant's accounts by its key.
func (s *Store) AccountByKey(ctx context.Context, tenant, key string) (Account, error) {
	as, err := s.Accounts(ctx, tenant)
	if err != nil {
		return Account{}, err
	}
	for _, a := range as {
		if a.Key == key {
			return a, nil
		}
	}
	return Account{}, ErrNoAccount
}

// SetAccount moves an account to a version of one of the tenant's
// platforms, or back to the shipped sandbox (platformID ""). The
// account's agents are sent their new configuration (with the spec) at
// once. Audited; a no-op move changes nothing and records nothing.
func (s *Store) SetAccount(ctx context.Context, tenant string, by audit.Entry, accountID, platformID string, version int) error {
	return db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		var key string
		var curP *string
		var curV *int
		err := tx.QueryRow(ctx, `SELECT ac.account_key, ap.platform_id::text, ap.version FROM accounts ac
			LEFT JOIN account_platforms ap ON ap.account_id = ac.id WHERE ac.id::text = $1 FOR UPDATE OF ac`, accountID).Scan(&key, &curP, &curV)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNoAccount
		}
		if err != nil {
			return fmt.Errorf("registry: read account: %w", err)
		}
		detail := map[string]any{"account": key}
		if curP != nil {
			detail["from_version"] = *curV
		}
		if platformID == "" {
			if curP == nil {
				return nil
			}
			if _, err := tx.Exec(ctx, `DELETE FROM account_platforms WHERE account_id = $1`, accountID); err != nil {
				return fmt.Errorf("registry: move account: %w", err)
			}
			detail["platform"] = "sandbox (built in)"
		} else {
			var name string
			err := tx.QueryRow(ctx, `SELECT p.name FROM platforms p JOIN platform_versions v ON v.platform_id = p.id
				WHERE p.id::text = $1 AND v.version = $2`, platformID, version).Scan(&name)
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrNoVersion
			}
			if err != nil {
				return fmt.Errorf("registry: read version: %w", err)
			}
			if curP != nil && *curP == platformID && *curV == version {
				return nil
			}
			if _, err := tx.Exec(ctx, `INSERT INTO account_platforms (tenant_id, account_id, platform_id, version, set_by)
				VALUES (app_tenant(), $1, $2, $3, $4)
				ON CONFLICT (account_id) DO UPDATE SET platform_id = EXCLUDED.platform_id, version = EXCLUDED.version,
				    set_by = EXCLUDED.set_by, set_at = now()`, accountID, platformID, version, by.Actor); err != nil {
				return fmt.Errorf("registry: move account: %w", err)
			}
			if curP != nil && *curP != platformID {
				delete(detail, "from_version")
				detail["from_platform"] = *curP
			}
			detail["platform"], detail["version"] = name, version
		}
		by.Action, by.Target, by.Detail = ActionAccount, "account:"+accountID, detail
		if err := audit.Append(ctx, tx, by); err != nil {
			return err
		}
		return tellAccountAgents(ctx, tx, accountID, by)
	})
}

// tellAccountAgents queues a configure command for the account's live
// agents in tx, woken at commit: the command reads the configuration (and
// the platform spec) when it is sent; agents not connected learn it at
// their next welcome.
func tellAccountAgents(ctx context.Context, tx pgx.Tx, accountID string, by audit.Entry) error {
	b, _ := json.Marshal(fleet.CommandBody{Reason: "platform changed"})
	rows, err := tx.Query(ctx, `INSERT INTO agent_commands (tenant_id, agent_id, kind, body, created_by)
		SELECT tenant_id, id, $2, $3, $4 FROM agents
		WHERE account_id = $1 AND retired_at IS NULL AND last_seen IS NOT NULL AND assistant_report IS NULL
		RETURNING agent_id::text`, accountID, fleet.CmdConfigure, b, by.Actor)
	if err != nil {
		return fmt.Errorf("registry: tell agents: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("registry: tell agents: %w", err)
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, id) FROM unnest($2::text[]) AS id`, fleet.NotifyChannel, ids); err != nil {
		return fmt.Errorf("registry: tell agents: %w", err)
	}
	return nil
}

// ReviewInput is what an admin records for a review.
type ReviewInput struct {
	// Reference points at the written permission or legal advice (a
	// document id, a ticket, a letter's date and sender).
	Reference string
	// Note is optional.
	Note string
}

// RecordReview records the review of a platform, lifting the review gate
// for the accounts that run it. A review already in force is replaced
// (withdrawn in the same transaction). Audited with the reference.
func (s *Store) RecordReview(ctx context.Context, tenant string, by audit.Entry, platformID string, in ReviewInput) (Review, error) {
	in.Reference, in.Note = strings.TrimSpace(in.Reference), strings.TrimSpace(in.Note)
	if len(in.Reference) < 3 {
		return Review{}, Invalid("the reference to the written permission or legal advice is required (at least 3 characters)")
	}
	if len(in.Reference) > 500 || len(in.Note) > 2000 {
		return Review{}, Invalid("the reference is at most 500 characters and the note at most 2000")
	}
	r := Review{Reference: in.Reference, Note: in.Note, ReviewedBy: by.Actor}
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		var name string
		err := tx.QueryRow(ctx, `SELECT name FROM platforms WHERE id::text = $1 FOR UPDATE`, platformID).Scan(&name)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNoPlatform
		}
		if err != nil {
			return fmt.Errorf("registry: read platform: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE platform_reviews SET withdrawn_by = $2, withdrawn_at = clock_timestamp()
			WHERE platform_id = $1 AND withdrawn_at IS NULL`, platformID, by.Actor+" (replaced)"); err != nil {
			return fmt.Errorf("registry: replace review: %w", err)
		}
		if err := tx.QueryRow(ctx, `INSERT INTO platform_reviews (tenant_id, platform_id, reference, note, reviewed_by, reviewed_by_id)
			VALUES (app_tenant(), $1, $2, $3, $4, NULLIF($5, '')::uuid) RETURNING id, reviewed_at`,
			platformID, in.Reference, in.Note, by.Actor, by.ActorID).Scan(&r.ID, &r.ReviewedAt); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "23514" {
				return Invalid("the reference to the written permission or legal advice is required")
			}
			return fmt.Errorf("registry: record review: %w", err)
		}
		by.Action, by.Target = ActionReviewRecord, "platform:"+platformID
		by.Detail = map[string]any{"name": name, "reference": in.Reference}
		if in.Note != "" {
			by.Detail["note"] = in.Note
		}
		if err := audit.Append(ctx, tx, by); err != nil {
			return err
		}
		return tellPlatformAgents(ctx, tx, platformID, by)
	})
	if err != nil {
		return Review{}, err
	}
	return r, nil
}

// WithdrawReview ends the review in force: the platform's accounts claim
// nothing again (unless it is a shipped sandbox) from the next statement
// on. Audited.
func (s *Store) WithdrawReview(ctx context.Context, tenant string, by audit.Entry, platformID string) error {
	return db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		var name, ref string
		err := tx.QueryRow(ctx, `UPDATE platform_reviews r SET withdrawn_by = $2, withdrawn_at = clock_timestamp()
			FROM platforms p WHERE p.id = r.platform_id AND r.platform_id::text = $1 AND r.withdrawn_at IS NULL
			RETURNING p.name, r.reference`, platformID, by.Actor).Scan(&name, &ref)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNoReview
		}
		if err != nil {
			return fmt.Errorf("registry: withdraw review: %w", err)
		}
		by.Action, by.Target = ActionReviewWithdraw, "platform:"+platformID
		by.Detail = map[string]any{"name": name, "reference": ref}
		if err := audit.Append(ctx, tx, by); err != nil {
			return err
		}
		return tellPlatformAgents(ctx, tx, platformID, by)
	})
}

// tellPlatformAgents sends a fresh configuration to the agents of every
// account on the platform (so an agent's view of its hold follows).
func tellPlatformAgents(ctx context.Context, tx pgx.Tx, platformID string, by audit.Entry) error {
	rows, err := tx.Query(ctx, `SELECT account_id::text FROM account_platforms WHERE platform_id::text = $1`, platformID)
	if err != nil {
		return fmt.Errorf("registry: tell agents: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("registry: tell agents: %w", err)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if err := tellAccountAgents(ctx, tx, id, by); err != nil {
			return err
		}
	}
	return nil
}

// Reviews lists a platform's reviews, newest first, withdrawn ones
// included (the record stays).
func (s *Store) Reviews(ctx context.Context, tenant, platformID string) ([]ReviewRecord, error) {
	var out []ReviewRecord
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, reference, note, reviewed_by, reviewed_at, COALESCE(withdrawn_by, ''), withdrawn_at
			FROM platform_reviews WHERE platform_id::text = $1 ORDER BY reviewed_at DESC`, platformID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r ReviewRecord
			if err := rows.Scan(&r.ID, &r.Reference, &r.Note, &r.ReviewedBy, &r.ReviewedAt, &r.WithdrawnBy, &r.WithdrawnAt); err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("registry: reviews: %w", err)
	}
	return out, nil
}

// ReviewRecord is a review as kept, with its withdrawal if any.
type ReviewRecord struct {
	Review
	WithdrawnBy string
	WithdrawnAt *time.Time
}

// ActionCheck is the audit action of a check run from the console (it
// opens an account's credentials and signs in with them).
const ActionCheck = "platform.check"

// AuditCheck records a check run from the console: who, against which
// account, with which version, whether it booked, and whether it passed.
func (s *Store) AuditCheck(ctx context.Context, tenant string, by audit.Entry, platformID string, detail map[string]any) error {
	return db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		by.Action, by.Target, by.Detail = ActionCheck, "platform:"+platformID, detail
		if platformID == "" {
			by.Target = "platform:sandbox (built in)"
		}
		return audit.Append(ctx, tx, by)
	})
}
