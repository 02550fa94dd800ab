package cell

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwright/fleetwright/app/logging"
)

// A cell's Redis is one server (redis://, rediss://, unix://) or a master
// watched by Sentinels, named in go-redis' failover form: the first
// Sentinel as the URL's host, the others as addr parameters, and the master
// name as master_name —
//
//	redis://:password@10.0.0.1:26379/0?master_name=fleet&addr=10.0.0.2:26379&addr=10.0.0.3:26379
//
// The URL's password is the master's and the Sentinels' both. A Sentinel
// cell's client asks the Sentinels for the master and follows a failover by
// itself; the cell fails (its sightings refused and counted) while no master
// answers, and resumes once the promoted one does.

// IsSentinel reports whether raw names Sentinels (it has a master_name).
func IsSentinel(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && u.Query().Get("master_name") != ""
}

// SentinelURL builds the failover URL of a master name and its Sentinels
// (host:port each; the default cell's --redis-sentinels and --redis-master).
func SentinelURL(master string, sentinels []string) (string, error) {
	if master == "" || len(sentinels) == 0 {
		return "", errors.New("cell: a Sentinel cell needs a master name and at least one Sentinel address")
	}
	q := url.Values{}
	q.Set("master_name", master)
	for _, s := range sentinels[1:] {
		q.Add("addr", s)
	}
	u := url.URL{Scheme: "redis", Host: sentinels[0], Path: "/0", RawQuery: q.Encode()}
	if _, err := parseFailover(u.String()); err != nil {
		return "", err
	}
	return u.String(), nil
}

// Tuning is what the panel sets on every cell's client.
type Tuning struct {
	PoolSize     int
	MinIdleConns int
	// Timeout bounds a dial, a read, a write and a wait for a connection.
	Timeout    time.Duration
	MaxRetries int
}

// OpenRedis returns a client for a cell's Redis URL (either form); a
// malformed URL is an error that never repeats the URL (it may hold a
// password).
func OpenRedis(raw string, tu Tuning) (*redis.Client, error) {
	if IsSentinel(raw) {
		o, err := parseFailover(raw)
		if err != nil {
			return nil, err
		}
		if tu.PoolSize > 0 {
			o.PoolSize = tu.PoolSize
		}
		o.MinIdleConns = tu.MinIdleConns
		if tu.Timeout > 0 {
			o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = tu.Timeout, tu.Timeout, tu.Timeout, tu.Timeout
		}
		if tu.MaxRetries != 0 {
			o.MaxRetries = tu.MaxRetries
		}
		return redis.NewFailoverClient(o), nil
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		return nil, errors.New("cell: the Redis URL is malformed (redis://, rediss:// or unix://, or a Sentinel URL with master_name)")
	}
	logging.RegisterSecret(o.Password)
	if tu.PoolSize > 0 {
		o.PoolSize = tu.PoolSize
	}
	o.MinIdleConns = tu.MinIdleConns
	if tu.Timeout > 0 {
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = tu.Timeout, tu.Timeout, tu.Timeout, tu.Timeout
	}
	if tu.MaxRetries != 0 {
		o.MaxRetries = tu.MaxRetries
	}
	return redis.NewClient(o), nil
}

func parseFailover(raw string) (*redis.FailoverOptions, error) {
	o, err := redis.ParseFailoverURL(raw)
	if err != nil {
		return nil, fmt.Errorf("cell: the Sentinel URL is malformed (%s); the form is redis://[:password@]sentinel:26379/0?master_name=NAME&addr=sentinel2:26379", sentinelHint(err))
	}
	if o.Password == "" {
		o.Password = o.SentinelPassword
	}
	logging.RegisterSecret(o.Password, o.SentinelPassword)
	return o, nil
}

// sentinelHint keeps go-redis' reason without anything of the URL.
func sentinelHint(err error) string {
	s := err.Error()
	switch {
	case strings.Contains(s, "unexpected option"):
		return "an unknown parameter"
	case strings.Contains(s, "addr param"):
		return "an addr parameter is not host:port"
	case strings.Contains(s, "database number"):
		return "the database number is not a number"
	case strings.Contains(s, "scheme"):
		return "the scheme must be redis or rediss"
	}
	return "unparsable"
}

// ErrUnknownMaster is a Sentinel URL whose master name no Sentinel knows.
var ErrUnknownMaster = errors.New("cell: unknown Sentinel master")

// CheckSentinels asks each Sentinel of a Sentinel URL for its master. It
// fails with ErrUnknownMaster (and what to change) when the Sentinels that
// answer know no master of that name, and with a plain error when none
// answers; a plain URL, or one Sentinel that names the master, is fine.
func CheckSentinels(ctx context.Context, raw string) error {
	if !IsSentinel(raw) {
		return nil
	}
	o, err := parseFailover(raw)
	if err != nil {
		return err
	}
	answered := 0
	var last error
	for _, addr := range o.SentinelAddrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, Username: o.SentinelUsername, Password: o.SentinelPassword,
			TLSConfig: o.TLSConfig, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1})
		_, err := sc.GetMasterAddrByName(ctx, o.MasterName).Result()
		_ = sc.Close()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, redis.Nil):
			answered++
		default:
			last = err
		}
	}
	if answered > 0 {
		return fmt.Errorf("%w: %d of the Sentinels (%s) answered and none watches a master named %q: "+
			"use the name of their `sentinel monitor` line (master_name in the cell's URL; --redis-master for the default cell)",
			ErrUnknownMaster, answered, strings.Join(o.SentinelAddrs, ", "), o.MasterName)
	}
	return fmt.Errorf("cell: none of the Sentinels (%s) answered (%v): check the addresses and that redis-sentinel runs",
		strings.Join(o.SentinelAddrs, ", "), last)
}

// SentinelQuorum asks the Sentinels of a Sentinel URL, one after another,
// whether enough of them agree to promote a replica (SENTINEL CKQUORUM):
// nil from the first that answers yes, else the last answer.
func SentinelQuorum(ctx context.Context, raw string) error {
	o, err := parseFailover(raw)
	if err != nil {
		return err
	}
	last := errors.New("cell: no Sentinel to ask")
	for _, addr := range o.SentinelAddrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, Username: o.SentinelUsername, Password: o.SentinelPassword,
			TLSConfig: o.TLSConfig, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1})
		err := sc.CkQuorum(ctx, o.MasterName).Err()
		_ = sc.Close()
		if err == nil {
			return nil
		}
		last = fmt.Errorf("cell: Sentinel %s: %w", addr, err)
	}
	return last
}
