// Package vault encrypts secrets at rest (platform passwords, TOTP secrets)
// with AES-256-GCM under a key that lives outside the database: a database
// dump alone reveals none of them.
//
// A vault holds a key ring: the key it seals with and every key it still
// opens with. Each sealed value names the key that sealed it (its key id),
// so a rotation can tell which values still need the new key and when the
// old one is no longer used (ring.go).
package vault

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
)

// KeySize is the key length in bytes.
const KeySize = 32

// The first byte of every sealed value says its layout:
//   - legacyVersion: version, nonce, ciphertext (sealed before key ids;
//     opened by trying every key of the ring);
//   - version: version, key id (IDSize bytes), nonce, ciphertext.
const (
	legacyVersion byte = 1
	version       byte = 2
)

// IDSize is the length in bytes of a key id inside a sealed value.
const IDSize = 8

type key struct {
	id   string // hex of IDSize bytes
	aead cipher.AEAD
}

// ring is one immutable set of keys; seal is the one that seals.
type ring struct {
	keys []key
	seal int
}

// Vault seals and opens values. It is safe for concurrent use; a vault
// loaded from a key file (LoadRing) follows changes of the file and of its
// ".next" companion without a restart.
type Vault struct {
	r   atomic.Pointer[ring]
	src *source // nil: a fixed key
	mu  sync.Mutex
}

// KeyID is the id of key as sealed values name it: the first bytes of a
// hash of the key, which reveals nothing of the key itself.
func KeyID(k []byte) string {
	h := sha256.Sum256(append([]byte("fleetwright vault key id\x00"), k...))
	return hex.EncodeToString(h[:IDSize])
}

func newKey(k []byte) (key, error) {
	if len(k) != KeySize {
		return key{}, fmt.Errorf("vault: key must be %d bytes, got %d", KeySize, len(k))
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return key{}, fmt.Errorf("vault: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return key{}, fmt.Errorf("vault: %w", err)
	}
	return key{id: KeyID(k), aead: aead}, nil
}

// newRing builds a ring that seals with the first key and opens with all.
func newRing(keys ...[]byte) (*ring, error) {
	r := &ring{}
	seen := map[string]bool{}
	for _, k := range keys {
		kk, err := newKey(k)
		if err != nil {
			return nil, err
		}
		if !seen[kk.id] {
			seen[kk.id] = true
			r.keys = append(r.keys, kk)
		}
	}
	return r, nil
}

// New returns a vault for a 32-byte key.
func New(k []byte) (*Vault, error) {
	r, err := newRing(k)
	if err != nil {
		return nil, err
	}
	v := &Vault{}
	v.r.Store(r)
	return v, nil
}

// ParseKey accepts a key as 64 hex digits or standard base64.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if b, err := hex.DecodeString(s); err == nil && len(b) == KeySize {
		return b, nil
	}
	if b, err := base64.StdEncoding.DecodeString(s); err == nil && len(b) == KeySize {
		return b, nil
	}
	return nil, errors.New("vault: the secret key must be 32 bytes as 64 hex digits or base64 (generate one with: openssl rand -hex 32)")
}

// Load returns the key from envValue (FLEET_SECRET_KEY) when set, else from
// file; when neither exists and create is true it generates a key into file
// (mode 0600).
func Load(envValue, file string, create bool) ([]byte, error) {
	if envValue != "" {
		return ParseKey(envValue)
	}
	if file == "" {
		return nil, errors.New("vault: no secret key: set FLEET_SECRET_KEY or --secret-key-file")
	}
	k, err := readKeyFile(file)
	if err == nil {
		return k, nil
	}
	if !errors.Is(err, os.ErrNotExist) || !create {
		return nil, fmt.Errorf("vault: read secret key: %w", err)
	}
	k = make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("vault: create secret key: %w", err)
	}
	if _, err := f.WriteString(hex.EncodeToString(k) + "\n"); err != nil {
		f.Close()
		return nil, fmt.Errorf("vault: write secret key: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("vault: write secret key: %w", err)
	}
	return k, f.Close()
}

// readKeyFile reads one key file, refusing one others may read.
func readKeyFile(file string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	st, _ := os.Stat(file)
	if st != nil && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("vault: %s is readable by others (mode %o): chmod 600 %s", file, st.Mode().Perm(), file)
	}
	k, err := ParseKey(string(b))
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, file)
	}
	return k, nil
}

// Seal encrypts plaintext bound to context (e.g. the account id), so a
// sealed value copied onto another row does not open. It seals with the
// ring's sealing key and names that key in the value.
func (v *Vault) Seal(plaintext []byte, context string) []byte {
	if v.src != nil {
		// A seal always follows the files: a value sealed with a key a
		// rotation has moved past would have to be found again.
		v.refresh(true)
	}
	r := v.r.Load()
	k := r.keys[r.seal]
	nonce := make([]byte, k.aead.NonceSize())
	_, _ = rand.Read(nonce)
	id, _ := hex.DecodeString(k.id)
	out := make([]byte, 0, 1+IDSize+len(nonce)+len(plaintext)+k.aead.Overhead())
	out = append(out, version)
	out = append(out, id...)
	out = append(out, nonce...)
	return k.aead.Seal(out, nonce, plaintext, []byte(context))
}

// Open decrypts a value sealed with the same context, with whichever key of
// the ring sealed it.
func (v *Vault) Open(sealed []byte, context string) ([]byte, error) {
	id, legacy, err := SealedKeyID(sealed)
	if err != nil {
		return nil, err
	}
	if v.src != nil {
		v.refresh(false)
	}
	pt, found, err := v.r.Load().open(sealed, id, legacy, context)
	if !found && v.src != nil {
		// A key this vault has not seen yet: another process may have
		// just added it to the ring.
		v.refresh(true)
		pt, found, err = v.r.Load().open(sealed, id, legacy, context)
	}
	if !found {
		return nil, fmt.Errorf("vault: cannot open: sealed with key %s, which is not in this secret key ring (%s)", id, v.describe())
	}
	return pt, err
}

func (r *ring) open(sealed []byte, id string, legacy bool, context string) (pt []byte, found bool, err error) {
	for _, k := range r.keys {
		n := k.aead.NonceSize()
		if legacy {
			if len(sealed) < 1+n {
				return nil, true, errors.New("vault: not a sealed value")
			}
			if pt, err := k.aead.Open(nil, sealed[1:1+n], sealed[1+n:], []byte(context)); err == nil {
				return pt, true, nil
			}
			continue
		}
		if k.id != id {
			continue
		}
		if len(sealed) < 1+IDSize+n {
			return nil, true, errors.New("vault: not a sealed value")
		}
		pt, err := k.aead.Open(nil, sealed[1+IDSize:1+IDSize+n], sealed[1+IDSize+n:], []byte(context))
		if err != nil {
			return nil, true, errors.New("vault: cannot open: wrong key or tampered value")
		}
		return pt, true, nil
	}
	if legacy {
		// Sealed before key ids: no key of the ring opens it, which is
		// either the wrong key or a tampered value.
		return nil, true, errors.New("vault: cannot open: wrong key or tampered value")
	}
	return nil, false, nil
}

// SealedKeyID returns the id of the key that sealed a value; legacy is true
// for a value sealed before values named their key (id is then "").
func SealedKeyID(sealed []byte) (id string, legacy bool, err error) {
	switch {
	case len(sealed) > 0 && sealed[0] == legacyVersion:
		return "", true, nil
	case len(sealed) > 1+IDSize && sealed[0] == version:
		return hex.EncodeToString(sealed[1 : 1+IDSize]), false, nil
	}
	return "", false, errors.New("vault: not a sealed value")
}

// SealingKeyID is the id of the key Seal uses now.
func (v *Vault) SealingKeyID() string {
	if v.src != nil {
		v.refresh(true)
	}
	r := v.r.Load()
	return r.keys[r.seal].id
}

// KeyIDs are the ids of every key the vault opens with, the sealing key first.
func (v *Vault) KeyIDs() []string {
	if v.src != nil {
		v.refresh(true)
	}
	r := v.r.Load()
	out := []string{r.keys[r.seal].id}
	for i, k := range r.keys {
		if i != r.seal {
			out = append(out, k.id)
		}
	}
	return out
}

func (v *Vault) describe() string {
	ids := v.KeyIDs()
	s := "keys " + strings.Join(ids, ", ")
	if v.src != nil {
		s += " from " + v.src.file + " and " + NextFile(v.src.file)
	}
	return s
}
