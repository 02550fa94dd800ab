package account

import (
	"bytes"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"image/png"
	"time"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"
)

// TOTP: 30-second steps, six digits, SHA-1 (what every authenticator app
// reads), one step of skew either way.
const (
	totpPeriod = 30
	totpSkew   = 1
)

var totpOpts = totp.ValidateOpts{Period: totpPeriod, Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1}

// newTOTPKey makes a fresh secret for email.
func newTOTPKey(issuer, email string) (*otp.Key, error) {
	k, err := totp.Generate(totp.GenerateOpts{Issuer: issuer, AccountName: email, Period: totpPeriod,
		Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1})
	if err != nil {
		return nil, fmt.Errorf("account: totp: %w", err)
	}
	return k, nil
}

// totpURL rebuilds the otpauth URL of a stored secret.
func totpURL(issuer, email, secret string) (*otp.Key, error) {
	k, err := totp.Generate(totp.GenerateOpts{Issuer: issuer, AccountName: email, Period: totpPeriod,
		Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1, Secret: mustBase32(secret)})
	if err != nil {
		return nil, fmt.Errorf("account: totp: %w", err)
	}
	return k, nil
}

func mustBase32(s string) []byte {
	b, err := base32NoPad.DecodeString(s)
	if err != nil {
		return nil
	}
	return b
}

// qrDataURL renders the key's QR code as a PNG data URL, on the server.
func qrDataURL(k *otp.Key) (string, error) {
	img, err := k.Image(220, 220)
	if err != nil {
		return "", fmt.Errorf("account: qr: %w", err)
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		return "", fmt.Errorf("account: qr: %w", err)
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes()), nil
}

// matchStep returns the time step whose code equals code, within the skew
// around now, or 0. The caller refuses steps at or below the last accepted
// one (replay).
func matchStep(secret, code string, now time.Time) int64 {
	if len(code) != 6 {
		return 0
	}
	cur := now.Unix() / totpPeriod
	for d := int64(-totpSkew); d <= totpSkew; d++ {
		step := cur + d
		want, err := totp.GenerateCodeCustom(secret, time.Unix(step*totpPeriod, 0), totpOpts)
		if err != nil {
			return 0
		}
		if subtle.ConstantTimeCompare([]byte(want), []byte(code)) == 1 {
			return step
		}
	}
	return 0
}
