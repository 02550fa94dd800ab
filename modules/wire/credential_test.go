package wire

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSealedCredentialsOpenOnlyForTheirAgent(t *testing.T) {
	agentKey, err := NewInstallKey()
	require.NoError(t, err)
	other, err := NewInstallKey()
	require.NoError(t, err)
	pub := InstallKeyString(agentKey.PublicKey())

	box, err := SealCredentials(pub, "ag_1", sampleCredentials())
	require.NoError(t, err)
	raw, err := json.Marshal(box)
	require.NoError(t, err)
	require.NotContains(t, string(raw), fixturePassword)
	require.NotContains(t, string(raw), fixtureTOTP)
	require.NotContains(t, string(raw), "dispatch42", "even the user name travels inside the box")

	got, err := box.Open(agentKey, "ag_1")
	require.NoError(t, err)
	require.Equal(t, "dispatch42", got.Username)
	require.Equal(t, fixturePassword, got.Password.Reveal())
	require.Equal(t, fixtureTOTP, got.TOTPSecret.Reveal())

	_, err = box.Open(other, "ag_1")
	require.ErrorIs(t, err, ErrSealedForAnother, "another installation's key does not open it")
	_, err = box.Open(agentKey, "ag_2")
	require.ErrorIs(t, err, ErrSealedForAnother, "the box is bound to its agent id")
	bad := *box
	bad.Box = strings.Repeat("A", len(bad.Box))
	_, err = bad.Open(agentKey, "ag_1")
	require.ErrorIs(t, err, ErrSealedForAnother, "a tampered box does not open")

	again, err := SealCredentials(pub, "ag_1", sampleCredentials())
	require.NoError(t, err)
	require.NotEqual(t, box.Box, again.Box, "every box uses a fresh one-time key")

	_, err = SealCredentials("not-a-key", "ag_1", sampleCredentials())
	require.Error(t, err)
	_, err = ParseInstallKey(b64.EncodeToString([]byte("short")))
	require.Error(t, err)
}

// TestCredentialsGoOnlyToTheirOrigins: credentials bound to a board's
// origin are sendable to that origin in any spelling and to nothing else;
// credentials bound to nothing are sendable nowhere.
func TestCredentialsGoOnlyToTheirOrigins(t *testing.T) {
	c := Credentials{Username: "u", Password: NewSecret("p"), Origins: []string{"http://127.0.0.1:8090"}}
	for _, ok := range []string{"http://127.0.0.1:8090", "HTTP://127.0.0.1:8090/login", "http://127.0.0.1:8090/loads?x=1"} {
		require.NoError(t, c.CheckOrigin(ok), ok)
	}
	for _, bad := range []string{"http://127.0.0.1:9995/login", "https://127.0.0.1:8090", "http://127.0.0.2:8090", "http://localhost:8090", "file:///etc/passwd", ""} {
		err := c.CheckOrigin(bad)
		require.ErrorIs(t, err, ErrOriginNotBound, bad)
		require.ErrorContains(t, err, "sealed for http://127.0.0.1:8090")
	}
	require.NoError(t, Credentials{Origins: []string{"https://board.example"}}.CheckOrigin("https://BOARD.example:443/x"))
	err := Credentials{Username: "u"}.CheckOrigin("http://127.0.0.1:8090")
	require.ErrorIs(t, err, ErrOriginNotBound)
	require.ErrorContains(t, err, "before protocol v5")
	require.Equal(t, "http://[::1]:81", Origin("http://[::1]:81/x"))
}
