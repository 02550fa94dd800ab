package account

import (
	"bufio"
	"context"
	"crypto/rand"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
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

// common is built on first use: only the panel checks passwords, and every
// role's process (an agent's too) would otherwise pay for the map at start.
var common = sync.OnceValue(func() map[string]struct{} {
	m := map[string]struct{}{}
	sc := bufio.NewScanner(strings.NewReader(commonFile))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l != "" && !strings.HasPrefix(l, "#") {
			m[l] = struct{}{}
		}
	}
	return m
})

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
	if _, ok := common()[lower]; ok {
		return errors.New("this is one of the most common passwords; choose another")
	}
	local, _, _ := strings.Cut(strings.ToLower(email), "@")
	if lower == strings.ToLower(email) || (len(local) >= 4 && strings.Contains(lower, local)) {
		return errors.New("the password must not contain the email address")
	}
	return nil
}

// Each argon2id computation holds hashParams.Memory (19 MiB) for its
// duration, so how many run at once is bounded: a burst of sign-ins queues
// for a slot instead of exhausting memory. The slots are sized to memory
// (an eighth of GOMEMLIMIT, or of the machine's RAM), and never more than
// twice the CPUs, beyond which hashes only slow each other down.
var (
	hashSlots = make(chan struct{}, hashConcurrency())
	// hashInFlight counts computations running, for the tests and metrics.
	hashInFlight atomic.Int64
	// hashMaxSeen is the most hashInFlight has been (tests read it).
	hashMaxSeen atomic.Int64
)

// hashWait bounds the wait for a slot; past it the request answers 503.
const (
	hashWait      = 30 * time.Second
	hashBusyRetry = 5 * time.Second
)

var errHashBusy = errors.New("account: password hashing is saturated")

func hashConcurrency() int {
	limit := debug.SetMemoryLimit(-1)
	if limit == math.MaxInt64 {
		limit = totalMemory()
	}
	perHash := int64(hashParams.Memory) * 1024
	n := int(limit / 8 / perHash)
	return max(1, min(n, 2*runtime.GOMAXPROCS(0)))
}

// totalMemory reads MemTotal from /proc/meminfo (1 GiB when unreadable).
func totalMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					return kb * 1024
				}
			}
		}
	}
	return 1 << 30
}

// withHashSlot runs f holding one of the argon2id slots.
func withHashSlot(ctx context.Context, f func()) error {
	ctx, cancel := context.WithTimeout(ctx, hashWait)
	defer cancel()
	select {
	case hashSlots <- struct{}{}:
	case <-ctx.Done():
		return errHashBusy
	}
	n := hashInFlight.Add(1)
	for {
		m := hashMaxSeen.Load()
		if n <= m || hashMaxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	defer func() { hashInFlight.Add(-1); <-hashSlots }()
	f()
	return nil
}

func hashPassword(password string) (string, error) {
	var h string
	var err error
	if werr := withHashSlot(context.Background(), func() { h, err = argon2id.CreateHash(password, hashParams) }); werr != nil {
		return "", werr
	}
	if err != nil {
		return "", fmt.Errorf("account: hash password: %w", err)
	}
	return h, nil
}

// dummyHash is compared against when the account does not exist, so a
// wrong email takes as long as a wrong password. It is made once, when the
// panel's account service starts (New), not at package init: the hash
// holds 19 MiB and 50 ms of CPU that every other role (an agent process)
// would pay at start for nothing.
var dummyHash = sync.OnceValue(func() string {
	h, _ := argon2id.CreateHash("no such user: timing equaliser", hashParams)
	return h
})

// checkPassword compares password with hash (the dummy hash when the
// account does not exist). It fails with errHashBusy when no slot frees up.
func checkPassword(ctx context.Context, password, hash string) (bool, error) {
	if hash == "" {
		hash = dummyHash()
	}
	var ok bool
	var err error
	if werr := withHashSlot(ctx, func() { ok, err = argon2id.ComparePasswordAndHash(password, hash) }); werr != nil {
		return false, werr
	}
	return err == nil && ok, nil
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
