package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/platform/engine"
	pspec "github.com/fleetwright/fleetwright/modules/platform/spec"
	"github.com/fleetwright/fleetwright/modules/traits"
	"github.com/fleetwright/fleetwright/modules/wire"
)

func platformCheckCommand() Command {
	return define(Command{Name: "platform check", Args: "FILE", MinArgs: 1, MaxArgs: 1, Roles: panelRole,
		Summary: "dry-run a spec against a platform with a test account (docs/ADAPTERS.md, \"Checking a spec\"): sign in, read the feed once, walk the bookings to the end, and print per field what each rule extracted; books nothing unless --book KEY"},
		func(s *config.Set, o *checkOptions) {
			s.String(&o.baseURL, "base-url", "", "", "the platform's base URL (https://board.example.com)")
			s.String(&o.accountFile, "account-file", "", "", "the test account's file: username, password, totp_secret (YAML, mode 0600; never printed)")
			s.String(&o.book, "book", "", "", "book this one load (its key) and show the result rule that read the answer")
			s.Duration(&o.timeout, "timeout", "", 15*time.Second, "bound each request")
		}, platformCheck)
}

type checkOptions struct {
	baseURL, accountFile, book string
	timeout                    time.Duration
}

// AccountFile is the test account a check signs in with (YAML). Its
// secrets are registered with the logging layer's redaction as soon as
// they are read and never printed.
type AccountFile struct {
	Username   string `yaml:"username"`
	Password   string `yaml:"password"`
	TOTPSecret string `yaml:"totp_secret"`
	// AccountKey is what the traits derive from (default: the username).
	AccountKey string `yaml:"account_key"`
	// Region gives the traits' time zone (default us-east).
	Region string `yaml:"region"`
}

// readAccountFile reads and checks an account file, naming what is wrong.
func readAccountFile(path string) (AccountFile, error) {
	var a AccountFile
	st, err := os.Stat(path)
	if err != nil {
		return a, fmt.Errorf("--account-file %s: %w", path, errors.Unwrap(err))
	}
	if st.Mode().Perm()&0o077 != 0 {
		return a, fmt.Errorf("--account-file %s is readable by others (mode %04o): it holds a password; chmod 600 %s", path, st.Mode().Perm(), path)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return a, fmt.Errorf("--account-file %s: %w", path, errors.Unwrap(err))
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&a); err != nil && !errors.Is(err, io.EOF) {
		// yaml's message names the line and the field, never a value.
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		var te *yaml.TypeError
		if errors.As(err, &te) {
			msg = strings.ReplaceAll(strings.Join(te.Errors, "; "), " in type cli.AccountFile", "")
		}
		return AccountFile{}, fmt.Errorf("--account-file %s: %s (it takes username, password, totp_secret, account_key, region)", path, msg)
	}
	logging.RegisterSecret(a.Password, a.TOTPSecret)
	var missing []string
	for _, f := range []struct{ name, v string }{{"username", a.Username}, {"password", a.Password}, {"totp_secret", a.TOTPSecret}} {
		if strings.TrimSpace(f.v) == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return AccountFile{}, fmt.Errorf("--account-file %s: %s missing (it takes username, password, totp_secret)", path, strings.Join(missing, ", "))
	}
	if a.AccountKey == "" {
		a.AccountKey = a.Username
	}
	if a.Region == "" {
		a.Region = "us-east"
	}
	return a, nil
}

func checkBaseURL(raw string) error {
	if raw == "" {
		return usagef("--base-url is required: the platform's address (https://board.example.com)")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("--base-url %q is not an http(s) address (https://board.example.com)", raw)
	}
	return nil
}

func platformCheck(ctx context.Context, c *Call, o *checkOptions) error {
	file := c.Args[0]
	src, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("%s: %w", file, errors.Unwrap(err))
	}
	if err := checkBaseURL(o.baseURL); err != nil {
		return err
	}
	if o.accountFile == "" {
		return usagef("--account-file is required: the test account to sign in with (docs/ADAPTERS.md, \"Checking a spec\")")
	}
	acct, err := readAccountFile(o.accountFile)
	if err != nil {
		return err
	}
	sp, err := pspec.Parse(file, src)
	var errs *pspec.Errors
	if errors.As(err, &errs) {
		printPlatformErrors(c.Stderr, errs)
		return exit(ExitFailed)
	}
	if err != nil {
		return err
	}
	ad, err := engine.New(sp, o.baseURL)
	if err != nil {
		return err
	}
	tr, err := traits.For(acct.AccountKey, acct.Region)
	if err != nil {
		return fmt.Errorf("--account-file %s: region: %w", o.accountFile, err)
	}
	r := ad.Check(ctx, engine.CheckOptions{
		Credentials: platform.Credentials{Username: acct.Username, Password: wire.NewSecret(acct.Password),
			TOTPSecret: wire.NewSecret(acct.TOTPSecret)},
		Session: platform.SessionOptions{Traits: tr, Timeout: o.timeout},
		Book:    o.book,
	})
	PrintCheck(c.Stdout, r)
	if !r.OK() {
		return exit(ExitFailed)
	}
	return nil
}

// PrintCheck writes a check's report as the CLI shows it.
func PrintCheck(w io.Writer, r engine.CheckReport) {
	fmt.Fprintf(w, "platform %q at %s\n", r.Platform, r.BaseURL)
	stage := func(name string, s engine.Stage, ok string) {
		switch {
		case s.Skipped != "":
			fmt.Fprintf(w, "%s: %s\n", name, s.Skipped)
		case s.Error != "":
			fmt.Fprintf(w, "%s: FAILED: %s\n", name, s.Error)
		default:
			fmt.Fprintf(w, "%s: ok%s\n", name, ok)
		}
	}
	field := func(f engine.FieldTrace) {
		v := fmt.Sprintf("%q", f.Value)
		if f.Empty {
			v = "(empty)"
		}
		fmt.Fprintf(w, "    %-13s %-44s %s", f.Field, f.Rule, v)
		if f.Error != "" {
			fmt.Fprintf(w, "  ← %s", f.Error)
		}
		fmt.Fprintln(w)
	}
	items := func(kind string, ts []engine.ItemTrace) {
		for _, it := range ts {
			fmt.Fprintf(w, "  %s %d:\n", kind, it.Index)
			for _, f := range it.Fields {
				field(f)
			}
		}
	}
	stage("sign in", r.SignIn, "")
	stage("feed", r.Feed.Stage, fmt.Sprintf(": %d item(s) at path %s on the first page", r.Feed.Count, r.Feed.Items))
	items("item", r.Feed.Traced)
	if r.Feed.Paging != nil {
		fmt.Fprintln(w, "  paging:")
		field(*r.Feed.Paging)
	}
	stage("bookings", r.Bookings.Stage, fmt.Sprintf(": complete, %d booking(s) on %d page(s), client %q", r.Bookings.Count, r.Bookings.Pages, r.Bookings.Client))
	items("booking", r.Bookings.Traced)
	if r.Book == nil {
		fmt.Fprintln(w, "book: not asked (--book KEY books one load)")
		return
	}
	b := r.Book
	if b.Skipped != "" {
		fmt.Fprintf(w, "book %s: %s\n", b.Key, b.Skipped)
		return
	}
	fmt.Fprintf(w, "book %s: HTTP %d, %s: %s", b.Key, b.Status, b.Rule, b.Result)
	if b.BookingID != "" {
		fmt.Fprintf(w, " (booking %s)", b.BookingID)
	}
	if b.Error != "" {
		fmt.Fprintf(w, ": %s", b.Error)
	}
	fmt.Fprintln(w)
}
