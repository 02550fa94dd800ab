package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/modules/crawl"
)

// crawlCaptchaCommands are a tenant's captcha solver authorisation
// (docs/CRAWL.md, "Captchas"): none ships, so a captcha stops the page.
func crawlCaptchaCommands() []Command {
	captcha := func(name, summary string) Command {
		return Command{Name: "crawl captcha " + name, Summary: summary, Roles: panelRole, DB: true}
	}
	return []Command{
		define(captcha("show", "the captcha solver authorisation in force, if any"), tenantFlags, captchaShow),
		define(captcha("authorise", "record who authorised a solver, when, and the reference to the written permission (admin; audited); refused for a solver this binary does not have (none ships)"),
			func(s *config.Set, o *authoriseOptions) {
				tenantFlags(s, &o.tenantOption)
				s.String(&o.solver, "solver", "", "", "the solver adapter's name")
				s.String(&o.endpoint, "endpoint", "", "", "the solver's endpoint URL")
				s.String(&o.reference, "reference", "", "", "the reference to the written permission (contract, ticket, document)")
				s.Bool(&o.apiKeyStdin, "api-key-stdin", "", false, "read the solver's API key from the first line of standard input")
			}, captchaAuthorise),
		define(captcha("revoke", "end the authorisation in force (audited)"), tenantFlags, captchaRevoke),
	}
}

func captchaShow(ctx context.Context, c *Call, o *tenantOption) error {
	return withCrawl(ctx, c, o.tenant, func(svc *crawl.Service, tenant string) error {
		a, err := svc.Store.CaptchaAuthorisation(ctx, tenant)
		if errors.Is(err, crawl.ErrCaptchaNotAuthorised) {
			fmt.Fprintln(c.Stdout, "no captcha solver is authorised for this tenant: a captcha stops the page and a person must look")
			return nil
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(c.Stdout, "solver %s at %s, authorised by %s at %s, written permission: %s\n", a.Solver, a.Endpoint, a.AuthorisedBy,
			a.AuthorisedAt.UTC().Format(time.RFC3339), a.Reference)
		return nil
	})
}

type authoriseOptions struct {
	tenantOption
	solver, endpoint, reference string
	apiKeyStdin                 bool
}

func captchaAuthorise(ctx context.Context, c *Call, o *authoriseOptions) error {
	key := ""
	if o.apiKeyStdin {
		var err error
		if key, err = secretLine(c, "the API key"); err != nil {
			return err
		}
	}
	return withCrawl(ctx, c, o.tenant, func(svc *crawl.Service, tenant string) error {
		a, err := svc.Store.AuthoriseCaptcha(ctx, tenant, actor(), crawl.CaptchaAuthInput{Solver: o.solver, Endpoint: o.endpoint,
			Reference: o.reference, APIKey: key}, crawl.SolverNames(crawl.BuiltinSolvers))
		if err != nil {
			return err
		}
		fmt.Fprintf(c.Stdout, "solver %s authorised (%s), written permission: %s\n", a.Solver, a.ID, a.Reference)
		return nil
	})
}

func captchaRevoke(ctx context.Context, c *Call, o *tenantOption) error {
	return withCrawl(ctx, c, o.tenant, func(svc *crawl.Service, tenant string) error {
		if err := svc.Store.RevokeCaptcha(ctx, tenant, actor()); err != nil {
			return err
		}
		fmt.Fprintln(c.Stdout, "captcha solver authorisation revoked")
		return nil
	})
}
