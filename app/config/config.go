// Package config declares command-line flags that fall back to FLEET_*
// environment variables. Flags win over the environment, the environment wins
// over the default, and every flag is listed in --help with its variable and
// default so an operator never has to read the code to configure a role.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// ErrHelp is returned by Parse when -h or --help was given.
var ErrHelp = flag.ErrHelp

// Set is a group of flags with environment fallbacks.
type Set struct {
	fs    *flag.FlagSet
	specs []*spec
	byKey map[string]*spec
}

type spec struct {
	name, env, def, usage string
	roles                 []string
	choices               []string
}

// New returns an empty set named for error messages.
func New(name string) *Set {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &Set{fs: fs, byKey: map[string]*spec{}}
}

func (s *Set) add(name, env, def, usage string, roles []string) *spec {
	sp := &spec{name: name, env: env, def: def, usage: usage, roles: roles}
	s.specs = append(s.specs, sp)
	s.byKey[name] = sp
	return sp
}

// Opt tags a flag with the roles that read it, for --help.
type Opt func(*spec)

// Roles names the roles (or subcommands) a flag applies to.
func Roles(r ...string) Opt { return func(sp *spec) { sp.roles = r } }

func apply(sp *spec, opts []Opt) {
	for _, o := range opts {
		o(sp)
	}
}

// String declares a string flag.
func (s *Set) String(p *string, name, env, def, usage string, opts ...Opt) {
	s.fs.StringVar(p, name, def, usage)
	apply(s.add(name, env, def, usage, nil), opts)
}

// Int declares an integer flag.
func (s *Set) Int(p *int, name, env string, def int, usage string, opts ...Opt) {
	s.fs.IntVar(p, name, def, usage)
	apply(s.add(name, env, strconv.Itoa(def), usage, nil), opts)
}

// Float declares a floating-point flag.
func (s *Set) Float(p *float64, name, env string, def float64, usage string, opts ...Opt) {
	s.fs.Float64Var(p, name, def, usage)
	apply(s.add(name, env, strconv.FormatFloat(def, 'g', -1, 64), usage, nil), opts)
}

// Bool declares a boolean flag.
func (s *Set) Bool(p *bool, name, env string, def bool, usage string, opts ...Opt) {
	s.fs.BoolVar(p, name, def, usage)
	apply(s.add(name, env, strconv.FormatBool(def), usage, nil), opts)
}

// Duration declares a duration flag (Go syntax: 250ms, 30s, 15m).
func (s *Set) Duration(p *time.Duration, name, env string, def time.Duration, usage string, opts ...Opt) {
	s.fs.DurationVar(p, name, def, usage)
	apply(s.add(name, env, def.String(), usage, nil), opts)
}

// Enum declares a string flag whose value must be one of choices.
func (s *Set) Enum(p *string, name, env, def string, choices []string, usage string, opts ...Opt) {
	*p = def
	s.fs.Func(name, usage, func(v string) error {
		for _, c := range choices {
			if v == c {
				*p = v
				return nil
			}
		}
		return fmt.Errorf("must be one of %s", strings.Join(choices, ", "))
	})
	sp := s.add(name, env, def, usage, nil)
	sp.choices = choices
	apply(sp, opts)
}

// List declares a repeatable string flag: each use appends, and a value
// may hold several items separated by commas (as its variable does).
func (s *Set) List(p *[]string, name, env, usage string, opts ...Opt) {
	s.fs.Func(name, usage, func(v string) error {
		for _, item := range strings.Split(v, ",") {
			if item = strings.TrimSpace(item); item != "" {
				*p = append(*p, item)
			}
		}
		return nil
	})
	apply(s.add(name, env, "", usage, nil), opts)
}

// Parse reads args, then fills every flag not given on the command line from
// its environment variable (looked up with getenv). It returns the remaining
// positional arguments. Errors are one line and name the flag or variable.
func (s *Set) Parse(args []string, getenv func(string) string) ([]string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if err := s.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, ErrHelp
		}
		return nil, fmt.Errorf("config: %s", flagError(err))
	}
	given := map[string]bool{}
	s.fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, sp := range s.specs {
		if given[sp.name] || sp.env == "" {
			continue
		}
		v, ok := lookup(getenv, sp.env)
		if !ok {
			continue
		}
		if err := s.fs.Set(sp.name, v); err != nil {
			return nil, fmt.Errorf("config: invalid value %q for %s (--%s): %s", v, sp.env, sp.name, firstLine(err.Error()))
		}
	}
	return s.fs.Args(), nil
}

func lookup(getenv func(string) string, key string) (string, bool) {
	v := getenv(key)
	return v, v != ""
}

// Given reports whether the flag was set on the command line or by its variable.
func (s *Set) Given(name string) bool {
	set := false
	s.fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

// flagError is the flag package's error in the words of --help: flags
// are written --name, an unknown one is called unknown.
func flagError(err error) string {
	msg := firstLine(err.Error())
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		return "unknown flag --" + strings.TrimLeft(name, "-")
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		return "--" + strings.TrimLeft(name, "-") + " needs a value"
	}
	return strings.Replace(msg, " for flag -", " for --", 1)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// PrintDefaults writes one line per flag: name, variable, default, roles and usage.
func (s *Set) PrintDefaults(w io.Writer) { s.PrintRole(w, "") }

// PrintRole is PrintDefaults for the flags role reads: those tagged with
// it and those every role reads ("" or "all": every flag).
func (s *Set) PrintRole(w io.Writer, role string) {
	var specs []*spec
	for _, sp := range s.specs {
		if role == "" || role == "all" || len(sp.roles) == 0 || slices.Contains(sp.roles, role) {
			specs = append(specs, sp)
		}
	}
	sort.SliceStable(specs, func(i, j int) bool { return specs[i].name < specs[j].name })
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  FLAG\tVARIABLE\tDEFAULT\tROLES\tMEANING")
	for _, sp := range specs {
		def := sp.def
		if def == "" {
			def = `""`
		}
		roles := "all"
		if len(sp.roles) > 0 {
			roles = strings.Join(sp.roles, ",")
		}
		usage := sp.usage
		if len(sp.choices) > 0 {
			usage += " (" + strings.Join(sp.choices, "|") + ")"
		}
		env := sp.env
		if env == "" {
			env = "-"
		}
		fmt.Fprintf(tw, "  --%s\t%s\t%s\t%s\t%s\n", sp.name, env, def, roles, usage)
	}
	tw.Flush()
}
