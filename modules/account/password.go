package account

import (
	"bufio"
	"crypto/rand"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/alexedwards/argon2id"
)

// Password rules: OWASP's argon2id baseline (m=19 MiB, t=2, p=1), 8 to 128
// characters, and none of the most common passwords.
const (
	MinPassword = 8
	MaxPassword = 128
)

// hashParams are argon2id's parameters; hashes carry them, so raising them
// later still verifies old hashes.
var hashParams = &argon2id.Params{Memory: 19 * 1024, Iterations: 2, Parallelism: 1, SaltLength: 16, KeyLength: 32}

//go:embed common-passwords.txt
var commonFile string

var common = func() map[string]struct{} {
	m := map[string]struct{}{}
	sc := bufio.NewScanner(strings.NewReader(commonFile))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l != "" && !strings.HasPrefix(l, "#") {
			m[l] = struct{}{}
		}
	}
	return m
}()

// CheckPasswordRules returns why a password is refused, or nil. The message
// never repeats the password.
func CheckPasswordRules(password, email string) error {
	n := utf8.RuneCountInString(password)
	switch {
	case n < MinPassword:
		return fmt.Errorf("use at least %d characters", MinPassword)
	case n > MaxPassword:
		return fmt.Errorf("use at most %d characters", MaxPassword)
	}
	lower := strings.ToLower(password)
	if _, ok := common[lower]; ok {
		return errors.New("this is one of the most common passwords; choose another")
	}
	local, _, _ := strings.Cut(strings.ToLower(email), "@")
	if lower == strings.ToLower(email) || (len(local) >= 4 && strings.Contains(lower, local)) {
		return errors.New("the password must not contain the email address")
	}
	return nil
}

func hashPassword(password string) (string, error) {
	h, err := argon2id.CreateHash(password, hashParams)
	if err != nil {
		return "", fmt.Errorf("account: hash password: %w", err)
	}
	return h, nil
}

// dummyHash is compared against when the account does not exist, so a
// wrong email takes as long as a wrong password.
var dummyHash = func() string {
	h, _ := argon2id.CreateHash("no such user: timing equaliser", hashParams)
	return h
}()

func checkPassword(password, hash string) bool {
	if hash == "" {
		hash = dummyHash
	}
	ok, err := argon2id.ComparePasswordAndHash(password, hash)
	return err == nil && ok
}

// GeneratePassword returns a random one-time password of 20 characters from
// an alphabet without look-alikes (about 115 bits).
func GeneratePassword() string {
	const alphabet = "abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"
	b := make([]byte, 20)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
