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

// TestLegacyValuesStillOpen: a value sealed before values named their key
// (version 1: version, nonce, ciphertext) opens with the same key.
func TestLegacyValuesStillOpen(t *testing.T) {
	key := bytes.Repeat([]byte{7}, KeySize)
	v, err := New(key)
	require.NoError(t, err)
	k, err := newKey(key)
	require.NoError(t, err)
	nonce := make([]byte, k.aead.NonceSize())
	legacy := k.aead.Seal(append([]byte{1}, nonce...), nonce, []byte("old-secret"), []byte("ctx"))
	pt, err := v.Open(legacy, "ctx")
	require.NoError(t, err)
	require.Equal(t, "old-secret", string(pt))
	id, isLegacy, err := SealedKeyID(legacy)
	require.NoError(t, err)
	require.True(t, isLegacy)
	require.Empty(t, id)

	other, err := New(bytes.Repeat([]byte{8}, KeySize))
	require.NoError(t, err)
	_, err = other.Open(legacy, "ctx")
	require.ErrorContains(t, err, "wrong key")
}

// TestRingFollowsTheFilesWithoutARestart is what a replica sees while
// another process rotates the key: it opens values sealed with the next key
// the moment the file appears, seals with it from then on, and once the
// next key replaces the key file it still opens everything sealed since.
func TestRingFollowsTheFilesWithoutARestart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "secret.key")
	replica, err := LoadRing("", file, true)
	require.NoError(t, err)
	require.True(t, replica.Follows())
	oldID := replica.SealingKeyID()
	before := replica.Seal([]byte("p1"), "c1")
	id, _, err := SealedKeyID(before)
	require.NoError(t, err)
	require.Equal(t, oldID, id)

	// The rotating process writes the next key and seals with it.
	next, err := WriteNext(file)
	require.NoError(t, err)
	st, err := os.Stat(NextFile(file))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	rotator, err := LoadRing("", file, false)
	require.NoError(t, err)
	require.Equal(t, KeyID(next), rotator.SealingKeyID())
	resealed := rotator.Seal([]byte("p1"), "c1")

	pt, err := replica.Open(resealed, "c1")
	require.NoError(t, err, "a replica opens a value sealed with the next key without a restart")
	require.Equal(t, "p1", string(pt))
	during := replica.Seal([]byte("p2"), "c2")
	id, _, _ = SealedKeyID(during)
	require.Equal(t, KeyID(next), id, "a replica seals with the next key once it exists")
	_, err = rotator.Open(before, "c1")
	require.NoError(t, err, "both keys open while the rotation runs")

	require.NoError(t, Promote(file))
	_, err = os.Stat(NextFile(file))
	require.ErrorIs(t, err, os.ErrNotExist)
	cur, nxt, err := ReadRing(file)
	require.NoError(t, err)
	require.Nil(t, nxt)
	require.Equal(t, next, cur)
	require.Equal(t, []string{KeyID(next)}, replica.KeyIDs(), "the old key is gone from the replica's ring")
	pt, err = replica.Open(during, "c2")
	require.NoError(t, err)
	require.Equal(t, "p2", string(pt))
	_, err = replica.Open(before, "c1")
	require.ErrorContains(t, err, "sealed with key "+oldID+", which is not in this secret key ring")

	// Promote again (a crash after it finished) changes nothing.
	require.NoError(t, Promote(file))
	fresh, err := LoadRing("", file, false)
	require.NoError(t, err)
	_, err = fresh.Open(resealed, "c1")
	require.NoError(t, err)
}

// TestPromoteCrashHalfWay: a crash after the key file was replaced but
// before the next file was removed leaves the new key twice; the ring
// opens with it and Promote finishes.
func TestPromoteCrashHalfWay(t *testing.T) {
	file := filepath.Join(t.TempDir(), "secret.key")
	_, err := Load("", file, true)
	require.NoError(t, err)
	next, err := WriteNext(file)
	require.NoError(t, err)
	require.NoError(t, writeKeyFile(file, next))
	v, err := LoadRing("", file, false)
	require.NoError(t, err)
	require.Equal(t, []string{KeyID(next)}, v.KeyIDs())
	require.NoError(t, Promote(file))
	_, err = os.Stat(NextFile(file))
	require.ErrorIs(t, err, os.ErrNotExist)
}
