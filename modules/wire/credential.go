package wire

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

// Credentials reach an agent sealed to its installation key (protocol v4):
// an X25519 key pair the agent generates on its first start and keeps in its
// state; only the public half ever leaves it, in hello. The panel pins the
// public half at the agent's first welcome and from then on seals the
// account's credentials to the pinned key alone, so whoever holds a fresh
// token but not the agent's state (an operator who rotated the token and
// dialled the gateway himself) gets a box he cannot open, or nothing.

// Why a panel withheld credentials (Welcome.CredentialsWithheld,
// RotateCredentials.Withheld). Append-only.
const (
	// WithheldCleartext: the connection was not encrypted end to end
	// (no TLS on the panel or on the agent's leg to a trusted proxy) and did
	// not come from this machine.
	WithheldCleartext = "cleartext_transport"
	// WithheldKeyMismatch: hello carried another installation key than the
	// one pinned at the agent's first welcome. An admin accepts a new
	// installation on purpose (a lost state dir) from the console or the CLI.
	WithheldKeyMismatch = "installation_key_mismatch"
	// WithheldNoKey: the agent sent no installation key (it speaks a protocol
	// before v4, or its hello was built by something else than an agent).
	WithheldNoKey = "no_installation_key"
	// WithheldOtherBoard: the account's credentials are sealed for another
	// board than the one its row names now (the board was changed without
	// the credentials being entered again): they are opened for no board
	// but their own, and an admin enters them for the new one (v5).
	WithheldOtherBoard = "sealed_for_another_board"
)

// SealedCredentials is Credentials sealed to one agent's installation key:
// ECDH (X25519) between a one-time key and the agent's key, HKDF-SHA256 over
// the shared secret and both public keys, AES-256-GCM with the agent id as
// associated data. All three fields are unpadded base64url.
type SealedCredentials struct {
	// Ephemeral is the one-time public key of the sealing side.
	Ephemeral string `json:"ephemeral"`
	Nonce     string `json:"nonce"`
	Box       string `json:"box"`
}

var b64 = base64.RawURLEncoding

const sealInfo = "fleetwright credentials v4"

// NewInstallKey generates an agent's installation key.
func NewInstallKey() (*ecdh.PrivateKey, error) {
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("wire: installation key: %w", err)
	}
	return k, nil
}

// InstallKeyString is how an installation key's public half travels in hello
// and is stored by the panel.
func InstallKeyString(pub *ecdh.PublicKey) string { return b64.EncodeToString(pub.Bytes()) }

// ParseInstallKey reads a public installation key from hello.
func ParseInstallKey(s string) (*ecdh.PublicKey, error) {
	raw, err := b64.DecodeString(s)
	if err != nil {
		return nil, errors.New("wire: installation key is not base64url")
	}
	pub, err := ecdh.X25519().NewPublicKey(raw)
	if err != nil {
		return nil, fmt.Errorf("wire: installation key: %w", err)
	}
	return pub, nil
}

func sealKey(shared, eph, to []byte) ([]byte, error) {
	salt := append(append([]byte(nil), eph...), to...)
	return hkdf.Key(sha256.New, shared, salt, sealInfo, 32)
}

// SealCredentials seals c to the installation key to (base64url), bound to
// the agent id: a box made for one agent does not open as another's.
func SealCredentials(to string, agentID string, c Credentials) (*SealedCredentials, error) {
	pub, err := ParseInstallKey(to)
	if err != nil {
		return nil, err
	}
	eph, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("wire: seal: %w", err)
	}
	shared, err := eph.ECDH(pub)
	if err != nil {
		return nil, fmt.Errorf("wire: seal: %w", err)
	}
	key, err := sealKey(shared, eph.PublicKey().Bytes(), pub.Bytes())
	if err != nil {
		return nil, fmt.Errorf("wire: seal: %w", err)
	}
	aead, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize())
	_, _ = rand.Read(nonce)
	pt, err := json.Marshal(c.wire())
	if err != nil {
		return nil, fmt.Errorf("wire: seal: %w", err)
	}
	box := aead.Seal(nil, nonce, pt, []byte(agentID))
	clear(pt)
	return &SealedCredentials{Ephemeral: b64.EncodeToString(eph.PublicKey().Bytes()),
		Nonce: b64.EncodeToString(nonce), Box: b64.EncodeToString(box)}, nil
}

// ErrSealedForAnother: the box does not open with this key and agent id.
var ErrSealedForAnother = errors.New("wire: sealed credentials do not open with this agent's installation key")

// Open opens sealed credentials with the agent's private installation key.
func (s SealedCredentials) Open(priv *ecdh.PrivateKey, agentID string) (Credentials, error) {
	eph, err1 := b64.DecodeString(s.Ephemeral)
	nonce, err2 := b64.DecodeString(s.Nonce)
	box, err3 := b64.DecodeString(s.Box)
	if err := errors.Join(err1, err2, err3); err != nil {
		return Credentials{}, errors.New("wire: sealed credentials are not base64url")
	}
	epub, err := ecdh.X25519().NewPublicKey(eph)
	if err != nil {
		return Credentials{}, fmt.Errorf("wire: sealed credentials: %w", err)
	}
	shared, err := priv.ECDH(epub)
	if err != nil {
		return Credentials{}, ErrSealedForAnother
	}
	key, err := sealKey(shared, eph, priv.PublicKey().Bytes())
	if err != nil {
		return Credentials{}, fmt.Errorf("wire: open: %w", err)
	}
	aead, err := newGCM(key)
	if err != nil {
		return Credentials{}, err
	}
	if len(nonce) != aead.NonceSize() {
		return Credentials{}, errors.New("wire: sealed credentials: bad nonce")
	}
	pt, err := aead.Open(nil, nonce, box, []byte(agentID))
	if err != nil {
		return Credentials{}, ErrSealedForAnother
	}
	defer clear(pt)
	var w credentialsWire
	if err := json.Unmarshal(pt, &w); err != nil {
		return Credentials{}, errors.New("wire: sealed credentials: malformed content")
	}
	return Credentials{Username: w.Username, Password: NewSecret(w.Password), TOTPSecret: NewSecret(w.TOTPSecret)}, nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	blk, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("wire: cipher: %w", err)
	}
	aead, err := cipher.NewGCM(blk)
	if err != nil {
		return nil, fmt.Errorf("wire: cipher: %w", err)
	}
	return aead, nil
}
