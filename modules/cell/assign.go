package cell

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Assignment dispatch's use of a cell's Redis (docs/CLAIMS.md, "Dispatch
// modes"): every replica publishes the warm actors it holds per tenant
// (fw:warm:<tenant>:<replica>, a string with a short expiry, indexed in the
// set fw:warm:<tenant>), and a grant travels to the replica holding the
// chosen actor's connection on its own channel fw:grants:<replica>.
const (
	warmPrefix  = "fw:warm:"   // fw:warm:<tenant> (index) and fw:warm:<tenant>:<replica>
	grantPrefix = "fw:grants:" // fw:grants:<replica>
)

// Consumer is this replica's name in every cell (its consumer in the
// dispatch group, and the name its grants are addressed to).
func (m *Manager) Consumer() string { return m.cfg.Consumer }

// PublishWarm stores this replica's warm actors of tenant (an encoded list)
// in the tenant's cell for ttl. The index entry outlives it; readers skip
// replicas whose list expired.
func (m *Manager) PublishWarm(ctx context.Context, tenant string, body []byte, ttl time.Duration) error {
	c, err := m.cellOf(ctx, tenant)
	if err != nil {
		return err
	}
	if c.failing.Load() {
		return ErrFailing
	}
	idx := warmPrefix + tenant
	_, err = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, idx+":"+m.cfg.Consumer, body, ttl)
		p.SAdd(ctx, idx, m.cfg.Consumer)
		// A replica gone for good leaves its name; the index lives a
		// minute past the last publication of any replica.
		p.Expire(ctx, idx, time.Minute)
		return nil
	})
	if err != nil {
		m.fail(c, err)
		return fmt.Errorf("cell: %s: publish warm actors: %w", c.name, err)
	}
	return nil
}

// Warm returns every replica's published list of the tenant's warm actors
// (the ones not expired), keyed by replica.
func (m *Manager) Warm(ctx context.Context, tenant string) (map[string][]byte, error) {
	c, err := m.cellOf(ctx, tenant)
	if err != nil {
		return nil, err
	}
	if c.failing.Load() {
		return nil, ErrFailing
	}
	idx := warmPrefix + tenant
	replicas, err := c.rdb.SMembers(ctx, idx).Result()
	if err != nil {
		m.fail(c, err)
		return nil, fmt.Errorf("cell: %s: warm actors: %w", c.name, err)
	}
	out := map[string][]byte{}
	if len(replicas) == 0 {
		return out, nil
	}
	keys := make([]string, len(replicas))
	for i, r := range replicas {
		keys[i] = idx + ":" + r
	}
	vals, err := c.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		m.fail(c, err)
		return nil, fmt.Errorf("cell: %s: warm actors: %w", c.name, err)
	}
	var gone []any
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			gone = append(gone, replicas[i])
			continue
		}
		out[replicas[i]] = []byte(s)
	}
	if len(gone) > 0 {
		// Expired lists: forget their replicas (best effort; a replica
		// that publishes again adds itself back).
		_ = c.rdb.SRem(ctx, idx, gone...).Err()
	}
	return out, nil
}

// PublishGrant sends a grant (encoded) to the replica holding the chosen
// actor's connection, on the tenant's cell. It reports how many replicas
// received it (0: none subscribed: the grant was never delivered).
func (m *Manager) PublishGrant(ctx context.Context, tenant, replica string, body []byte) (int64, error) {
	c, err := m.cellOf(ctx, tenant)
	if err != nil {
		return 0, err
	}
	n, err := c.rdb.Publish(ctx, grantPrefix+replica, body).Result()
	if err != nil {
		m.fail(c, err)
		return 0, fmt.Errorf("cell: %s: publish grant: %w", c.name, err)
	}
	return n, nil
}

// Published is one grant to publish: the replica that holds the chosen
// actor's connection, and the grant's body.
type Published struct {
	Replica string
	Body    []byte
}

// PublishGrants publishes a batch's grants of one tenant in one round trip
// (a pipeline). It answers, per grant, how many replicas received it, and
// the error of each that failed (nil when none did).
func (m *Manager) PublishGrants(ctx context.Context, tenant string, grants []Published) ([]int64, []error) {
	ns, errs := make([]int64, len(grants)), make([]error, len(grants))
	c, err := m.cellOf(ctx, tenant)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return ns, errs
	}
	cmds := make([]*redis.IntCmd, len(grants))
	_, perr := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, g := range grants {
			cmds[i] = p.Publish(ctx, grantPrefix+g.Replica, g.Body)
		}
		return nil
	})
	if perr != nil {
		m.fail(c, perr)
	}
	for i, cmd := range cmds {
		if ns[i], err = cmd.Result(); err != nil {
			errs[i] = fmt.Errorf("cell: %s: publish grant: %w", c.name, err)
		}
	}
	return ns, errs
}

// isGrant reports whether a pub/sub channel carries grants for this replica.
func (m *Manager) isGrant(channel string) bool {
	return strings.HasPrefix(channel, grantPrefix)
}
