// Package traits derives an account's browser traits from its account key:
// user agent, connection-signature profile and language, each
// SHA-256(per-parameter salt ‖ account key) mod the list's length. The same
// account looks the same on every start and every host; a fresh random set
// per start would give the automation away faster than having none (a real
// person does not change browser and language between visits).
//
// The lists are versioned and keep their length forever: an outdated entry is
// replaced in place, so one edit moves only the accounts on that entry and
// never remaps the fleet. Timezone is not drawn: it follows the account's
// configured region.
package traits

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strings"
	"time"
)

// Salts, one per parameter, so the three draws are independent. Never change
// them: that would remap every account.
const (
	SaltUserAgent = "fleetwright/traits/user-agent"
	SaltProfile   = "fleetwright/traits/connection-profile"
	SaltLanguage  = "fleetwright/traits/language"
)

// Combinations is how many distinct trait sets exist.
const Combinations = UserAgentCount * ProfileCount * LanguageCount

// Traits is what an account looks like to the platform.
type Traits struct {
	UserAgentIndex int
	UserAgent      string
	ProfileIndex   int
	Profile        Profile
	LanguageIndex  int
	Language       Language
	// Timezone is an IANA zone name from the account's region.
	Timezone string
}

// Key identifies the drawn combination (two accounts with the same Key
// collide).
func (t Traits) Key() [3]int { return [3]int{t.UserAgentIndex, t.ProfileIndex, t.LanguageIndex} }

// ErrNoAccountKey is returned for an empty account key.
var ErrNoAccountKey = errors.New("traits: empty account key")

// pick is SHA-256(salt ‖ key) read as a big-endian 256-bit number, mod n.
func pick(salt, key string, n int) int {
	sum := sha256.Sum256([]byte(salt + key))
	var x, m big.Int
	x.SetBytes(sum[:])
	return int(m.Mod(&x, big.NewInt(int64(n))).Int64())
}

// Indices returns the three list positions for an account key.
func Indices(accountKey string) (ua, profile, language int) {
	return pick(SaltUserAgent, accountKey, UserAgentCount),
		pick(SaltProfile, accountKey, ProfileCount),
		pick(SaltLanguage, accountKey, LanguageCount)
}

// For returns the traits of an account. region is the account's configured
// region (see Timezone).
func For(accountKey, region string) (Traits, error) {
	if strings.TrimSpace(accountKey) == "" {
		return Traits{}, ErrNoAccountKey
	}
	tz, err := Timezone(region)
	if err != nil {
		return Traits{}, err
	}
	u, p, l := Indices(accountKey)
	return Traits{
		UserAgentIndex: u, UserAgent: userAgents[u],
		ProfileIndex: p, Profile: profiles[p],
		LanguageIndex: l, Language: languages[l],
		Timezone: tz,
	}, nil
}

// regionZones maps the regions an operator can configure to their zone.
var regionZones = map[string]string{
	"us-east":     "America/New_York",
	"us-central":  "America/Chicago",
	"us-mountain": "America/Denver",
	"us-arizona":  "America/Phoenix",
	"us-west":     "America/Los_Angeles",
	"us-alaska":   "America/Anchorage",
	"us-hawaii":   "Pacific/Honolulu",
	"ca-east":     "America/Toronto",
	"ca-central":  "America/Winnipeg",
	"ca-west":     "America/Vancouver",
	"mx-central":  "America/Mexico_City",
	"eu-west":     "Europe/London",
	"eu-central":  "Europe/Berlin",
	"eu-east":     "Europe/Warsaw",
}

// Regions lists the named regions, sorted.
func Regions() []string {
	out := make([]string, 0, len(regionZones))
	for r := range regionZones {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// Timezone returns the IANA zone of a region: a named region (us-east, …) or
// an IANA zone name given directly (America/Chicago), which must be known to
// the system's zone database.
func Timezone(region string) (string, error) {
	if tz, ok := regionZones[strings.ToLower(strings.TrimSpace(region))]; ok {
		return tz, nil
	}
	if strings.Contains(region, "/") {
		if _, err := time.LoadLocation(region); err == nil {
			return region, nil
		}
	}
	return "", fmt.Errorf("traits: unknown region %q (use one of %s, or an IANA zone name)", region, strings.Join(Regions(), ", "))
}

// CollisionOdds is the birthday bound: the chance that at least two of n
// accounts draw the same combination of the Combinations possible.
func CollisionOdds(n int) float64 {
	if n < 2 {
		return 0
	}
	if n > Combinations {
		return 1
	}
	p := 1.0
	for i := 1; i < n; i++ {
		p *= 1 - float64(i)/float64(Combinations)
	}
	return 1 - p
}

// Collision is a group of accounts that drew the same combination.
type Collision struct {
	UserAgentIndex, ProfileIndex, LanguageIndex int
	// Accounts are the colliding account keys, sorted.
	Accounts []string
}

// Collisions finds the accounts that share a combination. A key listed twice
// is one account.
func Collisions(accountKeys []string) []Collision {
	groups := map[[3]int][]string{}
	seen := map[string]bool{}
	for _, k := range accountKeys {
		if k == "" || seen[k] {
			continue
		}
		seen[k] = true
		u, p, l := Indices(k)
		groups[[3]int{u, p, l}] = append(groups[[3]int{u, p, l}], k)
	}
	var out []Collision
	for key, accts := range groups {
		if len(accts) < 2 {
			continue
		}
		sort.Strings(accts)
		out = append(out, Collision{UserAgentIndex: key[0], ProfileIndex: key[1], LanguageIndex: key[2], Accounts: accts})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Accounts[0] < out[j].Accounts[0] })
	return out
}
