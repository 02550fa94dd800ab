package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/modules/platform/registry"
	pspec "github.com/fleetwright/fleetwright/modules/platform/spec"
	"github.com/fleetwright/fleetwright/modules/tenant"
)

// platformRegistryCommands are a tenant's platform specs: versions, the
// version each account runs, and the review of a real target
// (docs/ADAPTERS.md, "Platforms per tenant"; docs/LAW_REGISTER.md).
func platformRegistryCommands() []Command {
	cmd := func(name, summary string, min, max int, args string) Command {
		return Command{Name: "platform " + name, Args: args, Summary: summary, Roles: panelRole, DB: true, MinArgs: min, MaxArgs: max}
	}
	return []Command{
		define(cmd("apply", "store each spec file as its platform's next version for the tenant (unchanged text changes nothing; no account moves: platform use does that; audited)", 1, Many, "FILE…"),
			tenantFlags, func(ctx context.Context, c *Call, o *tenantOption) error {
				return withRegistry(ctx, c, o.tenant, func(st *registry.Store, tenant string) error { return platformApply(ctx, c, st, tenant) })
			}),
		define(cmd("list", "the tenant's platforms, their latest versions and reviews, and the version each account runs", 0, 0, ""),
			tenantFlags, func(ctx context.Context, c *Call, o *tenantOption) error {
				return withRegistry(ctx, c, o.tenant, func(st *registry.Store, tenant string) error { return platformList(ctx, c, st, tenant) })
			}),
		define(cmd("versions", "a platform's versions, newest first; --diff N prints version N against the one before it", 1, 1, "NAME"),
			func(s *config.Set, o *versionsOptions) {
				tenantFlags(s, &o.tenantOption)
				s.Int(&o.diff, "diff", "", 0, "print this version's diff against the one before it")
			}, func(ctx context.Context, c *Call, o *versionsOptions) error {
				return withRegistry(ctx, c, o.tenant, func(st *registry.Store, tenant string) error { return platformVersions(ctx, c, st, tenant, o.diff) })
			}),
		define(cmd("use", "move an account to a version of one of the tenant's platforms, or with --builtin back to the shipped sandbox (audited; its agents get the spec at once)", 1, 1, "ACCOUNT_KEY"),
			func(s *config.Set, o *useOptions) {
				tenantFlags(s, &o.tenantOption)
				s.String(&o.platform, "platform", "", "", "the platform's name")
				s.Int(&o.version, "version", "", 0, "the version (0: the latest)")
				s.Bool(&o.builtin, "builtin", "", false, "back to the sandbox built into the agent")
			}, func(ctx context.Context, c *Call, o *useOptions) error {
				return withRegistry(ctx, c, o.tenant, func(st *registry.Store, tenant string) error { return platformUse(ctx, c, st, tenant, o) })
			}),
		define(cmd("review", "record the review of a real target — who (you), when (now) and --reference to the written permission or legal advice — or --withdraw it (admin; audited; docs/LAW_REGISTER.md)", 1, 1, "NAME"),
			func(s *config.Set, o *reviewOptions) {
				tenantFlags(s, &o.tenantOption)
				s.String(&o.reference, "reference", "", "", "the reference to the written permission or legal advice (document, ticket, letter)")
				s.String(&o.note, "note", "", "", "an optional note")
				s.Bool(&o.withdraw, "withdraw", "", false, "withdraw the review in force: the platform's accounts claim nothing again")
			}, func(ctx context.Context, c *Call, o *reviewOptions) error {
				return withRegistry(ctx, c, o.tenant, func(st *registry.Store, tenant string) error { return platformReview(ctx, c, st, tenant, o) })
			}),
	}
}

// withRegistry runs fn with the platform registry on the panel's database
// and the id of the tenant slug names.
func withRegistry(ctx context.Context, c *Call, slug string, fn func(st *registry.Store, tenant string) error) error {
	if slug == "" {
		return usagef("--tenant is required")
	}
	err := withTenant(ctx, c, slug, func(pool *pgxpool.Pool, t tenant.Tenant) error {
		return fn(registry.New(pool), t.ID)
	})
	var errs *pspec.Errors
	if errors.As(err, &errs) {
		printPlatformErrors(c.Stderr, errs)
		return exit(ExitFailed)
	}
	var inv registry.Invalid
	if errors.As(err, &inv) {
		return usage(inv)
	}
	return err
}

func printPlatformErrors(w io.Writer, errs *pspec.Errors) {
	for _, fe := range errs.List {
		fmt.Fprintln(w, errs.Line(fe))
	}
	fmt.Fprintf(w, "%s: %d error(s)\n", errs.File, len(errs.List))
}

func platformApply(ctx context.Context, c *Call, st *registry.Store, tenant string) error {
	for _, f := range c.Args {
		src, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		v, changed, err := st.Apply(ctx, tenant, actor(), f, src)
		if err != nil {
			return err
		}
		gate := "a real target: accounts on it claim nothing until a review is recorded (fleetwright platform review " + v.Name + " --reference …)"
		if v.Shipped {
			gate = "the text of a shipped sandbox: needs no review"
		} else if p, err := st.ByID(ctx, tenant, v.PlatformID); err == nil && p.Review != nil {
			gate = "reviewed by " + p.Review.ReviewedBy + " (" + p.Review.Reference + ")"
		}
		if changed {
			fmt.Fprintf(c.Stdout, "%s: platform %q is now at version %d (digest %s); %s; no account moved (fleetwright platform use)\n",
				f, v.Name, v.Version, v.Digest[:12], gate)
		} else {
			fmt.Fprintf(c.Stdout, "%s: platform %q unchanged (version %d); %s\n", f, v.Name, v.Version, gate)
		}
	}
	return nil
}

func platformList(ctx context.Context, c *Call, st *registry.Store, tenant string) error {
	ps, err := st.Platforms(ctx, tenant)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PLATFORM\tLATEST\tREVIEW")
	for _, p := range ps {
		review := "none"
		if p.Review != nil {
			review = p.Review.ReviewedBy + " at " + p.Review.ReviewedAt.UTC().Format(time.RFC3339) + ": " + p.Review.Reference
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", p.Name, p.Latest, review)
	}
	fmt.Fprintln(tw)
	as, err := st.Accounts(ctx, tenant)
	if err != nil {
		return err
	}
	fmt.Fprintln(tw, "ACCOUNT\tPLATFORM\tVERSION\tCLAIMS")
	for _, a := range as {
		name, version, claims := "sandbox (built in)", "-", "yes"
		if !a.OnSandbox() {
			name, version = a.Platform, strconv.Itoa(a.Version)
			if a.Version < a.Latest {
				version += " (latest " + strconv.Itoa(a.Latest) + ")"
			}
		}
		if a.Held != "" {
			claims = "held: " + a.Held
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.Key, name, version, claims)
	}
	return tw.Flush()
}

type versionsOptions struct {
	tenantOption
	diff int
}

func platformNamed(ctx context.Context, st *registry.Store, tenant, name string) (registry.Platform, error) {
	p, err := st.ByName(ctx, tenant, name)
	if errors.Is(err, registry.ErrNoPlatform) {
		return p, fmt.Errorf("no platform named %q in this tenant (fleetwright platform list shows them; platform apply stores one)", name)
	}
	return p, err
}

func platformVersions(ctx context.Context, c *Call, st *registry.Store, tenant string, diff int) error {
	p, err := platformNamed(ctx, st, tenant, c.Args[0])
	if err != nil {
		return err
	}
	vs, err := st.Versions(ctx, tenant, p.ID)
	if err != nil {
		return err
	}
	if diff != 0 {
		for i, v := range vs {
			if v.Version != diff {
				continue
			}
			prev := ""
			if i+1 < len(vs) {
				prev = vs[i+1].Source
			}
			fmt.Fprintf(c.Stdout, "--- %s version %d\n+++ %s version %d\n", p.Name, diff-1, p.Name, diff)
			for _, l := range registry.Diff(prev, v.Source) {
				if l.Op != ' ' {
					fmt.Fprintf(c.Stdout, "%c%s\n", l.Op, l.Text)
				}
			}
			return nil
		}
		return fmt.Errorf("platform %q has no version %d (it has 1 to %d)", p.Name, diff, p.Latest)
	}
	tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tSTORED\tBY\tDIGEST\tREVIEW")
	for _, v := range vs {
		need := "needs the platform's review"
		if v.Shipped {
			need = "shipped sandbox: none needed"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", v.Version, v.CreatedAt.UTC().Format(time.RFC3339), v.CreatedBy, v.Digest[:12], need)
	}
	return tw.Flush()
}

type useOptions struct {
	tenantOption
	platform string
	version  int
	builtin  bool
}

func platformUse(ctx context.Context, c *Call, st *registry.Store, tenant string, o *useOptions) error {
	a, err := st.AccountByKey(ctx, tenant, c.Args[0])
	if errors.Is(err, registry.ErrNoAccount) {
		return fmt.Errorf("no account %q in this tenant", c.Args[0])
	}
	if err != nil {
		return err
	}
	if o.builtin == (o.platform != "") {
		return usagef("name a --platform (and --version), or --builtin for the shipped sandbox")
	}
	if o.builtin {
		if err := st.SetAccount(ctx, tenant, actor(), a.ID, "", 0); err != nil {
			return err
		}
		fmt.Fprintf(c.Stdout, "account %s runs the shipped sandbox (built into the agent)\n", a.Key)
		return nil
	}
	p, err := platformNamed(ctx, st, tenant, o.platform)
	if err != nil {
		return err
	}
	v := o.version
	if v == 0 {
		v = p.Latest
	}
	if err := st.SetAccount(ctx, tenant, actor(), a.ID, p.ID, v); errors.Is(err, registry.ErrNoVersion) {
		return fmt.Errorf("platform %q has no version %d (it has 1 to %d)", p.Name, v, p.Latest)
	} else if err != nil {
		return err
	}
	a, err = st.AccountByID(ctx, tenant, a.ID)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.Stdout, "account %s runs platform %q version %d", a.Key, p.Name, v)
	if a.Held != "" {
		fmt.Fprintf(c.Stdout, "; held: %s", a.Held)
	}
	fmt.Fprintln(c.Stdout)
	return nil
}

type reviewOptions struct {
	tenantOption
	reference, note string
	withdraw        bool
}

func platformReview(ctx context.Context, c *Call, st *registry.Store, tenant string, o *reviewOptions) error {
	p, err := platformNamed(ctx, st, tenant, c.Args[0])
	if err != nil {
		return err
	}
	if o.withdraw {
		if err := st.WithdrawReview(ctx, tenant, actor(), p.ID); errors.Is(err, registry.ErrNoReview) {
			return fmt.Errorf("platform %q has no review in force", p.Name)
		} else if err != nil {
			return err
		}
		fmt.Fprintf(c.Stdout, "review of %q withdrawn: its accounts claim nothing (unless it is a shipped sandbox)\n", p.Name)
		return nil
	}
	if strings.TrimSpace(o.reference) == "" {
		return usagef("--reference is required: the written permission or legal advice the review rests on")
	}
	r, err := st.RecordReview(ctx, tenant, actor(), p.ID, registry.ReviewInput{Reference: o.reference, Note: o.note})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.Stdout, "review of %q recorded by %s at %s: %s\n", p.Name, r.ReviewedBy, r.ReviewedAt.UTC().Format(time.RFC3339), r.Reference)
	return nil
}
