package claim_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/claim"
)

const benchRacers = 72

// BenchmarkClaimLease72: 72 actors race for every job, as when one offer
// reaches every matching warm actor at once. b.N is the number of jobs; each
// is attempted by all 72 (exactly one wins). Reported: granted leases per
// second and lease statements per second (attempts), through the store's
// path (tenant scope, lease and refusal diagnosis in one round trip).
func BenchmarkClaimLease72(b *testing.B) { benchLease72(b) }

func benchLease72(b *testing.B) {
	bd := setupB(b)
	ctx := context.Background()
	agents := make([]string, 8)
	for i := range agents {
		agents[i] = uuid()
	}
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = fmt.Sprintf("B-%d-%d", time.Now().UnixNano(), i)
		bd.job(b, bd.tenant, keys[i])
	}
	var granted, attempts atomic.Int64
	start := make(chan struct{})
	var wg sync.WaitGroup
	for r := range benchRacers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for _, k := range keys {
				_, err := bd.store.Lease(ctx, claim.LeaseRequest{Tenant: bd.tenant, Key: k, Holder: holderN(agents, r), For: time.Minute})
				attempts.Add(1)
				if err == nil {
					granted.Add(1)
				}
			}
		}()
	}
	b.ResetTimer()
	t0 := time.Now()
	close(start)
	wg.Wait()
	el := time.Since(t0)
	b.StopTimer()
	if granted.Load() != int64(b.N) {
		b.Fatalf("granted %d leases for %d jobs", granted.Load(), b.N)
	}
	b.ReportMetric(float64(granted.Load())/el.Seconds(), "leases/s")
	b.ReportMetric(float64(attempts.Load())/el.Seconds(), "attempts/s")
}

// BenchmarkClaimLeaseUncontended: the same path with one actor per job
// (every attempt wins): the cost of a granted lease alone.
func BenchmarkClaimLeaseUncontended(b *testing.B) {
	bd := setupB(b)
	ctx := context.Background()
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = fmt.Sprintf("U-%d", i)
		bd.job(b, bd.tenant, keys[i])
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	t0 := time.Now()
	for r := range benchRacers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := claim.Holder{Agent: uuid(), Worker: fmt.Sprint(r)}
			for {
				i := next.Add(1) - 1
				if i >= int64(len(keys)) {
					return
				}
				if _, err := bd.store.Lease(ctx, claim.LeaseRequest{Tenant: bd.tenant, Key: keys[i], Holder: h, For: time.Minute}); err != nil {
					panic(err)
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "leases/s")
}

// BenchmarkPgbenchBareInsert runs pgbench on the same server: 72 clients,
// each transaction the bare INSERT … ON CONFLICT DO NOTHING of a fresh key
// (one durable insert), for 5 seconds. The figure is what Postgres itself
// allows here; docs/BENCHMARKS.md states the lease path as a ratio of it.
func BenchmarkPgbenchBareInsert(b *testing.B) {
	bd := setupB(b)
	ctx := context.Background()
	_, err := bd.db.Owner.Exec(ctx, `CREATE TABLE bench_claims (tenant_id int, k bigint, PRIMARY KEY (tenant_id, k))`)
	require.NoError(b, err)
	dir := b.TempDir()
	script := filepath.Join(dir, "insert.sql")
	require.NoError(b, os.WriteFile(script, []byte("\\set k random(1, 1000000000)\nINSERT INTO bench_claims VALUES (1, :k) ON CONFLICT DO NOTHING;\n"), 0o644))
	bin, err := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
	require.NoError(b, err)
	require.NotEmpty(b, bin, "pgbench (Debian package postgresql) is needed")
	for i := 0; i < b.N; i++ {
		out, err := exec.Command(bin[len(bin)-1], "-n", "-c", strconv.Itoa(benchRacers), "-j", "2", "-T", "5", "-f", script, bd.db.OwnerURL).CombinedOutput()
		require.NoError(b, err, string(out))
		m := regexp.MustCompile(`tps = ([0-9.]+)`).FindSubmatch(out)
		require.NotNil(b, m, string(out))
		tps, _ := strconv.ParseFloat(string(m[1]), 64)
		b.ReportMetric(tps, "inserts/s")
	}
}
