package vault

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSealOpenBindsContext(t *testing.T) {
	key, err := Load("", filepath.Join(t.TempDir(), "k"), true)
	require.NoError(t, err)
	v, err := New(key)
	require.NoError(t, err)
	s := v.Seal([]byte("board-password"), "account-1")
	require.False(t, bytes.Contains(s, []byte("board-password")))
	pt, err := v.Open(s, "account-1")
	require.NoError(t, err)
	require.Equal(t, "board-password", string(pt))
	_, err = v.Open(s, "account-2")
	require.Error(t, err, "a sealed value moved to another row does not open")
	s[len(s)-1] ^= 1
	_, err = v.Open(s, "account-1")
	require.Error(t, err)
}

func TestKeyFileIsCreatedPrivateAndReused(t *testing.T) {
	f := filepath.Join(t.TempDir(), "secret.key")
	k1, err := Load("", f, true)
	require.NoError(t, err)
	st, err := os.Stat(f)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	k2, err := Load("", f, true)
	require.NoError(t, err)
	require.Equal(t, k1, k2)

	require.NoError(t, os.Chmod(f, 0o644))
	_, err = Load("", f, true)
	require.ErrorContains(t, err, "chmod 600")

	_, err = Load("not-a-key", "", false)
	require.ErrorContains(t, err, "64 hex digits")
	_, err = Load("", filepath.Join(t.TempDir(), "missing"), false)
	require.Error(t, err)
}
