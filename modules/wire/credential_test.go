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
