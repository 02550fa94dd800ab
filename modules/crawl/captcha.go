package crawl

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// A captcha stops the page and asks a person: the page fails with
// "captcha", is not retried, and the run raises crawl.captcha. The seam
// below lets a captcha be solved instead, but only for a tenant with a
// recorded authorisation (who, when, and the reference to the written
// permission of the site's operator), audited before any use
// (docs/LAW_REGISTER.md). No solver adapter ships with Fleetwright: code
// that adds one registers its factory in Runner.Solvers.

// Solver solves one captcha.
type Solver interface {
	Solve(ctx context.Context, c wire.CaptchaChallenge) (wire.CaptchaSolution, error)
}

// SolverConfig is what a solver adapter is built with: the endpoint and
// API key of the authorisation, and an HTTP client that goes through the
// egress guard (the endpoint is data an admin typed, not an operator's
// flag).
type SolverConfig struct {
	Endpoint string
	APIKey   wire.Secret
	HTTP     *http.Client
}

// SolverFactory builds a solver adapter.
type SolverFactory func(SolverConfig) (Solver, error)

// BuiltinSolvers are the solver adapters this binary has: none. Third-party
// captcha defeat is not shipped (docs/LAW_REGISTER.md); the seam exists
// for an operator who holds the written permission and adds an adapter.
var BuiltinSolvers = map[string]SolverFactory{}

// CaptchaAuth is a tenant's recorded authorisation to solve captchas.
type CaptchaAuth struct {
	ID, Solver, Endpoint string
	// Reference points to the written permission (a contract, a ticket, a
	// letter from the site's operator).
	Reference    string
	AuthorisedBy string
	AuthorisedAt time.Time
	HasAPIKey    bool
	RevokedBy    *string
	RevokedAt    *time.Time

	apiKey wire.Secret
}

// CaptchaAuthInput records an authorisation.
type CaptchaAuthInput struct {
	Solver, Endpoint, Reference string
	APIKey                      string
}

// Errors of the captcha seam.
var (
	ErrCaptchaNotAuthorised = errors.New("crawl: solving captchas is not authorised for this tenant: a person must look (an admin records an authorisation with its written permission first; docs/CRAWL.md)")
	ErrNoSolver             = errors.New("crawl: no captcha solver adapter of that name is built into this binary (none ships with Fleetwright)")
)

var solverName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

func captchaContext(id string) string { return "crawl_captcha_auth:" + id }

// AuthoriseCaptcha records a tenant's authorisation to use a solver: who
// (by), when (the database's clock), and the reference to the written
// permission, in one transaction with its audit entry
// (crawl.captcha.authorise). known lists the solver adapters built in; an
// authorisation for another is refused. It replaces one in force
// (revoking it, audited). Admins only.
func (s *Store) AuthoriseCaptcha(ctx context.Context, tenant string, by audit.Entry, in CaptchaAuthInput, known []string) (CaptchaAuth, error) {
	in.Reference = strings.TrimSpace(in.Reference)
	switch {
	case !solverName.MatchString(in.Solver):
		return CaptchaAuth{}, fmt.Errorf("crawl: solver name %q: lower case letters, digits, '.', '_', '-'", in.Solver)
	case !contains(known, in.Solver):
		return CaptchaAuth{}, fmt.Errorf("%w: %q (built in: %s)", ErrNoSolver, in.Solver, listOrNone(known))
	case len(in.Reference) < 3:
		return CaptchaAuth{}, errors.New("crawl: an authorisation needs the reference to its written permission (a contract or ticket number, a document's location)")
	case in.Endpoint == "":
		return CaptchaAuth{}, errors.New("crawl: an authorisation needs the solver's endpoint URL")
	case in.APIKey != "" && s.vault == nil:
		return CaptchaAuth{}, errors.New("crawl: no vault to seal the solver's API key with")
	}
	if by.Actor == "" {
		return CaptchaAuth{}, errors.New("crawl: an authorisation needs the person who gives it")
	}
	var id string
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		if err := revokeCaptcha(ctx, tx, by); err != nil && !errors.Is(err, ErrCaptchaNotAuthorised) {
			return err
		}
		err := tx.QueryRow(ctx, `INSERT INTO crawl_captcha_auth (tenant_id, solver, endpoint, reference, authorised_by, authorised_by_id)
			VALUES (app_tenant(), $1, $2, $3, $4, NULLIF($5, '')::uuid) RETURNING id`, in.Solver, in.Endpoint, in.Reference, by.Actor, by.ActorID).Scan(&id)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23514" {
			return errors.New("crawl: the authorisation's reference is too short")
		}
		if err != nil {
			return fmt.Errorf("crawl: record captcha authorisation: %w", err)
		}
		if in.APIKey != "" {
			if _, err := tx.Exec(ctx, `UPDATE crawl_captcha_auth SET api_key = $2 WHERE id = $1`, id,
				s.vault.Seal([]byte(in.APIKey), captchaContext(id))); err != nil {
				return err
			}
		}
		e := by
		e.Action, e.Target = "crawl.captcha.authorise", "captcha_auth:"+id
		e.Detail = map[string]any{"solver": in.Solver, "endpoint": in.Endpoint, "reference": in.Reference, "api_key": in.APIKey != ""}
		return audit.Append(ctx, tx, e)
	})
	if err != nil {
		return CaptchaAuth{}, err
	}
	return s.captchaAuth(ctx, tenant, false)
}

// RevokeCaptcha ends the authorisation in force. Audited.
func (s *Store) RevokeCaptcha(ctx context.Context, tenant string, by audit.Entry) error {
	return db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error { return revokeCaptcha(ctx, tx, by) })
}

func revokeCaptcha(ctx context.Context, tx pgx.Tx, by audit.Entry) error {
	var id string
	err := tx.QueryRow(ctx, `UPDATE crawl_captcha_auth SET revoked_at = clock_timestamp(), revoked_by = $1
		WHERE revoked_at IS NULL RETURNING id`, by.Actor).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrCaptchaNotAuthorised
	}
	if err != nil {
		return fmt.Errorf("crawl: revoke captcha authorisation: %w", err)
	}
	by.Action, by.Target = "crawl.captcha.revoke", "captcha_auth:"+id
	return audit.Append(ctx, tx, by)
}

// CaptchaAuthorisation returns the authorisation in force (without its
// API key), or ErrCaptchaNotAuthorised.
func (s *Store) CaptchaAuthorisation(ctx context.Context, tenant string) (CaptchaAuth, error) {
	return s.captchaAuth(ctx, tenant, false)
}

// captchaAuth reads the authorisation in force. Only an authorisation
// whose audit entry exists counts: recorded and audited, or not at all.
func (s *Store) captchaAuth(ctx context.Context, tenant string, withKey bool) (CaptchaAuth, error) {
	var a CaptchaAuth
	var key []byte
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT c.id, c.solver, c.endpoint, c.reference, c.authorised_by, c.authorised_at, c.api_key
			FROM crawl_captcha_auth c WHERE c.revoked_at IS NULL
			AND EXISTS (SELECT 1 FROM audit_log l WHERE l.action = 'crawl.captcha.authorise' AND l.target = 'captcha_auth:' || c.id::text)`).
			Scan(&a.ID, &a.Solver, &a.Endpoint, &a.Reference, &a.AuthorisedBy, &a.AuthorisedAt, &key)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return CaptchaAuth{}, ErrCaptchaNotAuthorised
	}
	if err != nil {
		return CaptchaAuth{}, fmt.Errorf("crawl: captcha authorisation: %w", err)
	}
	a.HasAPIKey = key != nil
	if withKey && key != nil {
		if s.vault == nil {
			return CaptchaAuth{}, errors.New("crawl: no vault to open the solver's API key with")
		}
		pt, err := s.vault.Open(key, captchaContext(a.ID))
		if err != nil {
			return CaptchaAuth{}, fmt.Errorf("crawl: solver API key: %w", err)
		}
		a.apiKey = wire.NewSecret(string(pt))
		clear(pt)
	}
	return a, nil
}

// CaptchaUse says where a solver is about to be used.
type CaptchaUse struct {
	JobID, JobName, RunID, URL string
}

// SolveCaptcha solves a captcha for tenant with the solver its
// authorisation names. Without an authorisation in force it refuses
// (ErrCaptchaNotAuthorised). Each use is audited (crawl.captcha.solve,
// with the authorisation and its reference) before the solver is asked.
func (s *Store) SolveCaptcha(ctx context.Context, tenant string, solvers map[string]SolverFactory, client *http.Client,
	ch wire.CaptchaChallenge, use CaptchaUse) (wire.CaptchaSolution, error) {
	a, err := s.captchaAuth(ctx, tenant, true)
	if err != nil {
		return wire.CaptchaSolution{}, err
	}
	f := solvers[a.Solver]
	if f == nil {
		return wire.CaptchaSolution{}, fmt.Errorf("%w: %q", ErrNoSolver, a.Solver)
	}
	if err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		return audit.Append(ctx, tx, audit.Entry{Actor: "crawl", Action: "crawl.captcha.solve", Target: "crawl_run:" + use.RunID,
			Detail: map[string]any{"authorisation": a.ID, "reference": a.Reference, "solver": a.Solver, "job": use.JobName,
				"url": use.URL, "kind": ch.Kind}})
	}); err != nil {
		return wire.CaptchaSolution{}, fmt.Errorf("crawl: audit captcha use: %w", err)
	}
	sv, err := f(SolverConfig{Endpoint: a.Endpoint, APIKey: a.apiKey, HTTP: client})
	if err != nil {
		return wire.CaptchaSolution{}, fmt.Errorf("crawl: solver %s: %w", a.Solver, err)
	}
	sol, err := sv.Solve(ctx, ch)
	if err != nil {
		return wire.CaptchaSolution{}, fmt.Errorf("crawl: solver %s: %w", a.Solver, err)
	}
	if sol.Token == "" || sol.Field == "" {
		return wire.CaptchaSolution{}, fmt.Errorf("crawl: solver %s answered no token", a.Solver)
	}
	return sol, nil
}

// SolverNames lists the registered adapters' names.
func SolverNames(m map[string]SolverFactory) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func listOrNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}
