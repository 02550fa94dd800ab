package vault

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// The key ring on disk is the key file (secret.key) and, while a rotation
// runs, its companion NextFile(secret.key) holding the new key. A vault
// loaded with LoadRing seals with the next key as soon as the file appears
// and opens with both, so every replica sharing the files follows a
// rotation without a restart; when the rotation is done the next key
// replaces the key file (an atomic rename) and the companion goes.

// NextFile is the file holding the key a rotation moves to.
func NextFile(file string) string { return file + ".next" }

// refreshEvery bounds how often Open looks at the files (Seal always does).
const refreshEvery = time.Second

type stamp struct {
	ok    bool
	ino   uint64
	size  int64
	mtime time.Time
}

func stampOf(file string) stamp {
	st, err := os.Stat(file)
	if err != nil {
		return stamp{}
	}
	s := stamp{ok: true, size: st.Size(), mtime: st.ModTime()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		s.ino = sys.Ino
	}
	return s
}

// source is where a ring vault reads its keys.
type source struct {
	file        string
	main, next  stamp
	lastChecked time.Time
}

// LoadRing returns a vault on the key ring of file: the key from envValue
// (FLEET_SECRET_KEY) when set — a fixed key, which a rotation cannot reach —
// else from file and NextFile(file), followed as they change. When neither
// exists and create is true it generates a key into file (mode 0600).
func LoadRing(envValue, file string, create bool) (*Vault, error) {
	if envValue != "" {
		k, err := ParseKey(envValue)
		if err != nil {
			return nil, err
		}
		return New(k)
	}
	if _, err := Load("", file, create); err != nil {
		return nil, err
	}
	v := &Vault{src: &source{file: file}}
	if err := v.reload(); err != nil {
		return nil, err
	}
	return v, nil
}

// reload reads the ring from the files.
func (v *Vault) reload() error {
	s := v.src
	main, next := stampOf(s.file), stampOf(NextFile(s.file))
	cur, nxt, err := ReadRing(s.file)
	if err != nil {
		return err
	}
	keys := [][]byte{cur}
	if nxt != nil {
		keys = [][]byte{nxt, cur}
	}
	r, err := newRing(keys...)
	if err != nil {
		return err
	}
	v.r.Store(r)
	s.main, s.next = main, next
	return nil
}

// refresh reloads the ring when a file changed; unless force it looks at
// most once per refreshEvery. A file caught half-replaced keeps the ring
// as it was until the next look.
func (v *Vault) refresh(force bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := v.src
	now := time.Now()
	if !force && now.Sub(s.lastChecked) < refreshEvery {
		return
	}
	s.lastChecked = now
	if stampOf(s.file) == s.main && stampOf(NextFile(s.file)) == s.next {
		return
	}
	_ = v.reload()
}

// Follows reports whether the vault follows a key file (LoadRing without
// FLEET_SECRET_KEY), so that a rotation reaches it.
func (v *Vault) Follows() bool { return v.src != nil }

// ReadRing reads the key file and, when a rotation is under way, the next
// key (nil otherwise).
func ReadRing(file string) (current, next []byte, err error) {
	current, err = readKeyFile(file)
	if err != nil {
		return nil, nil, fmt.Errorf("vault: read secret key: %w", err)
	}
	next, err = readKeyFile(NextFile(file))
	if errors.Is(err, os.ErrNotExist) {
		return current, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("vault: read next secret key: %w", err)
	}
	return current, next, nil
}

// WriteNext generates a new key into NextFile(file) (0600, written whole
// before it appears) and returns it.
func WriteNext(file string) ([]byte, error) {
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	if err := writeKeyFile(NextFile(file), k); err != nil {
		return nil, err
	}
	return k, nil
}

// Promote makes the next key the key file's and removes NextFile(file): the
// old key is gone from the ring. Each step is atomic, so a crash leaves
// either both keys, or the new key twice (Promote again finishes), or the
// new key alone.
func Promote(file string) error {
	_, next, err := ReadRing(file)
	if err != nil {
		return err
	}
	if next == nil {
		return nil
	}
	if err := writeKeyFile(file, next); err != nil {
		return err
	}
	if err := os.Remove(NextFile(file)); err != nil {
		return fmt.Errorf("vault: %w", err)
	}
	return syncDir(filepath.Dir(file))
}

// writeKeyFile writes k into file through a temporary file renamed over it,
// so a reader sees the old content or the new, never a part.
func writeKeyFile(file string, k []byte) error {
	dir := filepath.Dir(file)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(file)+".tmp*")
	if err != nil {
		return fmt.Errorf("vault: write secret key: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("vault: write secret key: %w", err)
	}
	if _, err := tmp.WriteString(hex.EncodeToString(k) + "\n"); err != nil {
		tmp.Close()
		return fmt.Errorf("vault: write secret key: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("vault: write secret key: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("vault: write secret key: %w", err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return fmt.Errorf("vault: write secret key: %w", err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("vault: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("vault: sync %s: %w", dir, err)
	}
	return nil
}
