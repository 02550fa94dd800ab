// Package vault encrypts secrets at rest (platform passwords, TOTP secrets)
// with AES-256-GCM under a key that lives outside the database: a database
// dump alone reveals none of them.
package vault

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// KeySize is the key length in bytes.
const KeySize = 32

// version prefixes every sealed value, so the scheme can change later.
const version byte = 1

// Vault seals and opens values.
type Vault struct {
	aead cipher.AEAD
}

// New returns a vault for a 32-byte key.
func New(key []byte) (*Vault, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("vault: key must be %d bytes, got %d", KeySize, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	return &Vault{aead: aead}, nil
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
	b, err := os.ReadFile(file)
	if err == nil {
		st, _ := os.Stat(file)
		if st != nil && st.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("vault: %s is readable by others (mode %o): chmod 600 %s", file, st.Mode().Perm(), file)
		}
		return ParseKey(string(b))
	}
	if !errors.Is(err, os.ErrNotExist) || !create {
		return nil, fmt.Errorf("vault: read secret key: %w", err)
	}
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("vault: create secret key: %w", err)
	}
	if _, err := f.WriteString(hex.EncodeToString(key) + "\n"); err != nil {
		f.Close()
		return nil, fmt.Errorf("vault: write secret key: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("vault: write secret key: %w", err)
	}
	return key, f.Close()
}

// Seal encrypts plaintext bound to context (e.g. the account id), so a
// sealed value copied onto another row does not open.
func (v *Vault) Seal(plaintext []byte, context string) []byte {
	nonce := make([]byte, v.aead.NonceSize())
	_, _ = rand.Read(nonce)
	out := append([]byte{version}, nonce...)
	return v.aead.Seal(out, nonce, plaintext, []byte(context))
}

// Open decrypts a value sealed with the same context.
func (v *Vault) Open(sealed []byte, context string) ([]byte, error) {
	n := v.aead.NonceSize()
	if len(sealed) < 1+n || sealed[0] != version {
		return nil, errors.New("vault: not a sealed value")
	}
	pt, err := v.aead.Open(nil, sealed[1:1+n], sealed[1+n:], []byte(context))
	if err != nil {
		return nil, errors.New("vault: cannot open: wrong key or tampered value")
	}
	return pt, nil
}
