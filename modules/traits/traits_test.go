package traits

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The lists keep their length forever and have no empty or duplicate entry.
func TestListsHaveFixedLengthsAndDistinctEntries(t *testing.T) {
	require.Len(t, UserAgents(), 30)
	require.Len(t, Profiles(), 20)
	require.Len(t, Languages(), 12)
	require.Equal(t, 7200, Combinations)

	seen := map[string]bool{}
	for i, ua := range UserAgents() {
		require.NotEmpty(t, ua, "user agent %d", i)
		require.False(t, seen[ua], "duplicate user agent %d", i)
		seen[ua] = true
		require.True(t, strings.HasPrefix(ua, "Mozilla/5.0 (Windows NT 10.0; Win64; x64)"), "user agent %d must match the Windows profiles", i)
		require.Contains(t, ua, "Chrome/")
		require.NotContains(t, ua, "Mobile")
	}
	names := map[string]bool{}
	for i, p := range Profiles() {
		require.NotEmpty(t, p.Name, "profile %d", i)
		require.False(t, names[p.Name], "duplicate profile name %s", p.Name)
		names[p.Name] = true
		require.Equal(t, "Win32", p.Platform, p.Name)
		require.Equal(t, "Windows", p.ClientHintPlatform, p.Name)
		require.Positive(t, p.DeviceScaleFactor, p.Name)
		require.LessOrEqual(t, p.ViewportWidth, p.ScreenWidth, p.Name)
		require.Less(t, p.ViewportHeight, p.ScreenHeight, p.Name)
		require.Contains(t, p.HeaderOrder, "User-Agent", p.Name)
		require.Contains(t, p.HeaderOrder, "Accept-Language", p.Name)
		for h := range p.ExtraHeaders {
			require.Contains(t, p.HeaderOrder, h, "%s sends %s, so its order must place it", p.Name, h)
		}
	}
	tags := map[string]bool{}
	for i, l := range Languages() {
		require.NotEmpty(t, l.Tag, "language %d", i)
		require.False(t, tags[l.Tag])
		tags[l.Tag] = true
		require.True(t, strings.HasPrefix(l.AcceptLanguage, l.Tag+","), l.Tag)
		require.Equal(t, l.Tag, l.Locale)
	}
}

// Known accounts map to known triples (computed independently with Python's
// hashlib), and the first thousand accounts of a fleet keep their positions:
// changing a salt, a list length or the hash remaps the fleet and fails here.
func TestKnownAccountsKeepTheirTraits(t *testing.T) {
	known := map[string][3]int{
		"acct-0001":            {25, 2, 6},
		"acct-0042":            {5, 2, 8},
		"dispatch@example.com": {7, 12, 10},
	}
	for key, want := range known {
		u, p, l := Indices(key)
		require.Equal(t, want, [3]int{u, p, l}, key)
		tr, err := For(key, "us-central")
		require.NoError(t, err)
		require.Equal(t, want, tr.Key())
		require.Equal(t, UserAgents()[want[0]], tr.UserAgent)
		require.Equal(t, Profiles()[want[1]].Name, tr.Profile.Name)
		require.Equal(t, Languages()[want[2]].Tag, tr.Language.Tag)
		require.Equal(t, "America/Chicago", tr.Timezone)
	}
	h := sha256.New()
	for i := range 1000 {
		u, p, l := Indices(fmt.Sprintf("acct-%04d", i))
		fmt.Fprintf(h, "%d,%d,%d;", u, p, l)
	}
	require.Equal(t, "74e5074cee97a00e0892504eb9ba49e4fe5ccaa3a16d4395701219f8a39a520f", hex.EncodeToString(h.Sum(nil)),
		"the fleet's traits moved: lists must keep their length and the salts must not change")
}

func TestDrawsAreSpread(t *testing.T) {
	var ua [UserAgentCount]int
	var pr [ProfileCount]int
	var la [LanguageCount]int
	const n = 24000
	for i := range n {
		u, p, l := Indices(fmt.Sprintf("spread-%d", i))
		ua[u]++
		pr[p]++
		la[l]++
	}
	for i, c := range ua {
		require.InDelta(t, n/UserAgentCount, c, n/UserAgentCount*0.2, "user agent %d", i)
	}
	for i, c := range pr {
		require.InDelta(t, n/ProfileCount, c, n/ProfileCount*0.2, "profile %d", i)
	}
	for i, c := range la {
		require.InDelta(t, n/LanguageCount, c, n/LanguageCount*0.2, "language %d", i)
	}
}

func TestTimezoneFollowsRegion(t *testing.T) {
	tz, err := Timezone("us-east")
	require.NoError(t, err)
	require.Equal(t, "America/New_York", tz)
	tz, err = Timezone(" US-West ")
	require.NoError(t, err)
	require.Equal(t, "America/Los_Angeles", tz)
	_, err = Timezone("atlantis")
	require.ErrorContains(t, err, "unknown region")
	_, err = For("", "us-east")
	require.ErrorIs(t, err, ErrNoAccountKey)
	_, err = For("acct-0001", "mars")
	require.Error(t, err)
	// The same key in two regions draws the same set; only the zone differs.
	a, _ := For("acct-0001", "us-east")
	b, _ := For("acct-0001", "eu-central")
	require.Equal(t, a.Key(), b.Key())
	require.NotEqual(t, a.Timezone, b.Timezone)
}

func TestCollisionOdds(t *testing.T) {
	require.InDelta(t, 0.0261, CollisionOdds(20), 0.00005, "20 accounts of 7,200 combinations: 2.61 %")
	require.Equal(t, 0.0, CollisionOdds(0))
	require.Equal(t, 0.0, CollisionOdds(1))
	require.InDelta(t, 1.0/7200, CollisionOdds(2), 1e-12)
	require.Greater(t, CollisionOdds(100), 0.49)
	require.Less(t, CollisionOdds(100), 0.51)
	require.Equal(t, 1.0, CollisionOdds(7201))
	prev := 0.0
	for n := 2; n < 300; n++ {
		o := CollisionOdds(n)
		require.Greater(t, o, prev)
		prev = o
	}
}

func TestCollisionsFindsActualCollisions(t *testing.T) {
	var keys []string
	for i := range 200 {
		keys = append(keys, fmt.Sprintf("acct-%04d", i))
	}
	keys = append(keys, "acct-0016", "") // a repeated key is one account
	got := Collisions(keys)
	require.Equal(t, []Collision{
		{UserAgentIndex: 9, ProfileIndex: 17, LanguageIndex: 7, Accounts: []string{"acct-0016", "acct-0162"}},
		{UserAgentIndex: 20, ProfileIndex: 19, LanguageIndex: 11, Accounts: []string{"acct-0023", "acct-0158"}},
		{UserAgentIndex: 6, ProfileIndex: 1, LanguageIndex: 1, Accounts: []string{"acct-0044", "acct-0132"}},
		{UserAgentIndex: 20, ProfileIndex: 0, LanguageIndex: 9, Accounts: []string{"acct-0124", "acct-0140"}},
	}, got)
	for _, c := range got {
		a, _ := For(c.Accounts[0], "us-east")
		b, _ := For(c.Accounts[1], "us-east")
		require.Equal(t, a.Key(), b.Key())
	}
	require.Empty(t, Collisions(keys[:16]))
}
