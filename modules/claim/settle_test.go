package claim_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/claim"
)

// cutProxy forwards a Postgres Unix socket and, when armed, cuts the next
// connection that sends something: after the server answered (the batch
// ran and committed, its answer never reaches the panel) or before
// forwarding (the statement never ran).
type cutProxy struct {
	dir       string
	target    string
	mode      atomic.Int32 // 0 pass, 1 cut after the server answers, 2 cut before forwarding
	cuts      atomic.Int32
	listener  net.Listener
	wg        sync.WaitGroup
	closeOnce sync.Once
}

const (
	passAll = iota
	cutAfterAnswer
	cutBeforeSend
)

func newCutProxy(t *testing.T, appURL string) (*cutProxy, string) {
	t.Helper()
	u, err := url.Parse(appURL)
	require.NoError(t, err)
	q := u.Query()
	port := q.Get("port")
	if port == "" {
		port = "5432"
	}
	p := &cutProxy{target: filepath.Join(q.Get("host"), ".s.PGSQL."+port)}
	p.dir, err = os.MkdirTemp("", "cut-")
	require.NoError(t, err)
	p.listener, err = net.Listen("unix", filepath.Join(p.dir, ".s.PGSQL."+port))
	require.NoError(t, err)
	t.Cleanup(func() { p.listener.Close(); p.wg.Wait(); os.RemoveAll(p.dir) })
	go p.serve()
	q.Set("host", p.dir)
	u.RawQuery = q.Encode()
	return p, u.String()
}

func (p *cutProxy) serve() {
	for {
		c, err := p.listener.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.pipe(c) }()
	}
}

func (p *cutProxy) pipe(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("unix", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	// A connection is cut only once it is ready (its startup done): the
	// pool's idle connection carries the next statement.
	cut := make(chan struct{})
	armedAnswer := atomic.Bool{}
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 && armedAnswer.Load() {
				// The server answered the batch: its commit is done. Drop the
				// answer and the connection.
				p.cuts.Add(1)
				close(cut)
				client.Close()
				server.Close()
				return
			}
			if n > 0 {
				if _, werr := client.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				client.Close()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			switch p.mode.Load() {
			case cutBeforeSend:
				if p.mode.CompareAndSwap(cutBeforeSend, passAll) {
					p.cuts.Add(1)
					return
				}
			case cutAfterAnswer:
				// pgx prepares a batch's statements in a round trip of their
				// own first: the cut waits for the one that executes them.
				if hasExecute(buf[:n]) && p.mode.CompareAndSwap(cutAfterAnswer, passAll) {
					armedAnswer.Store(true)
				}
			}
			if _, werr := server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = err
			if errors.Is(err, io.EOF) {
				return
			}
			select {
			case <-cut:
			default:
			}
			return
		}
	}
}

// hasExecute reports whether a chunk of frontend messages (starting at a
// message boundary, as pgx writes them) holds an Execute message.
func hasExecute(b []byte) bool {
	for len(b) >= 5 {
		n := int(b[1])<<24 | int(b[2])<<16 | int(b[3])<<8 | int(b[4])
		if b[0] == 'E' {
			return true
		}
		if n < 4 || len(b) < 1+n {
			return false
		}
		b = b[1+n:]
	}
	return false
}

// storeVia is a store whose pool goes through the proxy; one connection, so
// the cut one is the one the statement runs on.
func storeVia(t *testing.T, url string) (*claim.Store, *pgxpool.Pool) {
	t.Helper()
	pool, err := db.Open(context.Background(), url, 1)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return claim.NewStore(pool, nil), pool
}

// TestLeaseLostAnswerSettledByReadBack: the connection dies after the lease
// committed and before its answer arrives. The store does not run the lease
// again (a second run would find the job held — by this very lease — and
// the worker would never act on what it won): it reads the row back by the
// operation id it chose and answers with that lease.
func TestLeaseLostAnswerSettledByReadBack(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	proxy, url := newCutProxy(t, b.db.AppURL)
	st, _ := storeVia(t, url)
	h := claim.Holder{Agent: uuid(), Worker: "actor-1"}

	b.job(t, b.tenant, "L-1")
	proxy.mode.Store(cutAfterAnswer)
	l, err := st.Lease(ctx, claim.LeaseRequest{Tenant: b.tenant, Key: "L-1", Holder: h, For: time.Minute})
	require.NoError(t, err, "a committed lease whose answer was lost is read back")
	require.EqualValues(t, 1, proxy.cuts.Load(), "the connection was cut once")
	require.Positive(t, l.Token)
	require.Greater(t, l.Remaining, 30*time.Second)
	c, err := b.store.Get(ctx, b.tenant, "L-1")
	require.NoError(t, err)
	require.Equal(t, claim.Leased, c.State)
	require.Equal(t, l.Token, c.Token)
	require.Equal(t, l.OperationID, c.OperationID)
	require.Equal(t, 1, c.Attempts, "the lease statement ran once")

	// The act statement, cut the same way, is read back too: the worker
	// may act, and the claim is ACTING once.
	proxy.mode.Store(cutAfterAnswer)
	g, err := st.StartActing(ctx, b.tenant, "L-1", l.Token, h, time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 2, proxy.cuts.Load())
	require.Equal(t, l.OperationID, g.OperationID)
	c, err = b.store.Get(ctx, b.tenant, "L-1")
	require.NoError(t, err)
	require.Equal(t, claim.Acting, c.State)

	// Cut before the statement reached the server: nothing is in the
	// database, and the answer is "not granted" (never a lease).
	b.job(t, b.tenant, "L-2")
	proxy.mode.Store(cutBeforeSend)
	_, err = st.Lease(ctx, claim.LeaseRequest{Tenant: b.tenant, Key: "L-2", Holder: h, For: time.Minute})
	require.ErrorIs(t, err, claim.ErrCommitLost)
	require.EqualValues(t, 3, proxy.cuts.Load())
	_, err = b.store.Get(ctx, b.tenant, "L-2")
	require.Error(t, err, "no claim row for a statement that never ran")
}

// TestGrantBatchLostAnswerNotRegranted: a grant batch whose answer is lost
// after its commit is read back whole; none of its jobs is granted again.
func TestGrantBatchLostAnswerNotRegranted(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	proxy, url := newCutProxy(t, b.db.AppURL)
	st, _ := storeVia(t, url)
	h := claim.Holder{Agent: uuid(), Worker: "actor-1"}
	var reqs []claim.GrantRequest
	for _, k := range []string{"G-1", "G-2"} {
		reqs = append(reqs, claim.GrantRequest{Job: queued(b.tenant, k), Holder: h, SendWithin: time.Minute, HardTimeout: time.Minute})
	}
	b.job(t, b.tenant, "G-2")
	_, err := b.store.Lease(ctx, claim.LeaseRequest{Tenant: b.tenant, Key: "G-2", Holder: claim.Holder{Agent: uuid(), Worker: "other"}, For: time.Minute})
	require.NoError(t, err, "G-2 is held by another worker: the batch's grant of it is refused")
	proxy.mode.Store(cutAfterAnswer)
	res, err := st.GrantBatch(ctx, b.tenant, reqs)
	require.NoError(t, err)
	require.EqualValues(t, 1, proxy.cuts.Load())
	require.NoError(t, res[0].Err)
	require.Positive(t, res[0].Grant.Token)
	require.Equal(t, "held", reason(t, res[1].Err))
	c, err := b.store.Get(ctx, b.tenant, "G-1")
	require.NoError(t, err)
	require.Equal(t, claim.Acting, c.State)
	require.Equal(t, res[0].Grant.OperationID, c.OperationID)
	require.Equal(t, 1, c.Attempts)
}

// queued is a queued job as the dispatcher hands it to a grant.
func queued(tenant, key string) claim.QueuedJob {
	now := time.Now()
	return claim.QueuedJob{Tenant: tenant, Cell: "default", Job: wireJob{Key: key, ExpiresAt: now.Add(10 * time.Minute),
		Origin: "Dallas, TX", Destination: "Atlanta, GA", Equipment: "Dry Van", RateCents: 100000},
		SeenAt: now.Add(-20 * time.Millisecond), QueuedAt: now.Add(-10 * time.Millisecond)}
}
