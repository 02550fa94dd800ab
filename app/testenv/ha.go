package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/migrations"
)

// The HA harness starts, on loopback, what an operator runs past one
// machine: a Patroni cluster of three Postgres members under one etcd, in
// synchronous_mode with synchronous_mode_strict, and a Redis master with one
// replica watched by three Sentinels. Each call starts its own (the tests
// that use them break them on purpose) and the test's cleanup stops every
// process and removes the files.
//
// One etcd, not three: the faults under test are Postgres's and Redis's, and
// a single etcd member is enough for Patroni's leader key. Losing it would
// demote the primary (Patroni without failsafe_mode), which stops claiming
// safely; three members would add two processes and nothing these tests
// look at.

// HA timings. Patroni's rule is loop_wait + 2 × retry_timeout ≤ ttl; a short
// ttl makes a failover take seconds, not the production default's half
// minute (docs/DEPLOY.md gives the settings for a real installation).
const (
	haTTL          = 10
	haLoopWait     = 1
	haRetryTimeout = 4
	haStartTimeout = 90 * time.Second
	// HAMaster is the Sentinel master name of HARedis.
	HAMaster = "fleet"
)

// PGMember is one Patroni member (and the Postgres it runs).
type PGMember struct {
	Name     string
	Port     int
	RestPort int
	dir      string
	conf     string
	log      string
	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
}

// Data is the member's data directory.
func (m *PGMember) Data() string { return filepath.Join(m.dir, "data") }

// Addr is host:port of the member's Postgres.
func (m *PGMember) Addr() string { return "127.0.0.1:" + strconv.Itoa(m.Port) }

// PGCluster is a running Patroni cluster of three members.
type PGCluster struct {
	t       testing.TB
	Scope   string
	Members []*PGMember
	etcd    *exec.Cmd
	etcdURL string
	dir     string
	creds   pgCredentials
	// DatabaseName is the panel's database in the cluster.
	DatabaseName string
	// OwnerURL, AppURL and SuperURL name every member, with
	// target_session_attrs=read-write: pgx connects to whichever is primary.
	OwnerURL, AppURL, SuperURL string
}

type pgCredentials struct{ super, repl, owner, app string }

// HAPostgres starts a Patroni cluster of three members under one etcd, waits
// for a leader and a synchronous standby, creates the panel's roles and
// database and applies the migrations. It fails t when any of it does not
// happen within 90 s.
func HAPostgres(t testing.TB) *PGCluster {
	t.Helper()
	for _, bin := range []string{"patroni", "etcd"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("testenv: %s not found: install the Debian packages patroni and etcd-server (make deps)", bin)
		}
	}
	binDir, err := pgBinDir()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	pgUser, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("testenv: the postgres system user is missing: install the Debian package postgresql")
	}
	uid, _ := strconv.Atoi(pgUser.Uid)
	gid, _ := strconv.Atoi(pgUser.Gid)
	dir, err := os.MkdirTemp(Dir(t), "ha-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	c := &PGCluster{t: t, Scope: filepath.Base(dir), dir: dir, DatabaseName: embedded.Database,
		creds: pgCredentials{super: secret(), repl: secret(), owner: secret(), app: secret()}}
	logging.RegisterSecret(c.creds.super, c.creds.repl, c.creds.owner, c.creds.app)
	t.Cleanup(c.stop)

	ports := freePorts(t, 8)
	c.etcdURL = "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	c.etcd = exec.Command("etcd", "--name", "e1", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", c.etcdURL, "--advertise-client-urls", c.etcdURL,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "e1="+peer, "--log-level", "warn")
	if err := startLogged(c.etcd, filepath.Join(dir, "etcd.log"), nil); err != nil {
		t.Fatalf("testenv: start etcd: %v", err)
	}
	for i := range 3 {
		m := &PGMember{Name: fmt.Sprintf("m%d", i+1), Port: ports[2+2*i], RestPort: ports[3+2*i]}
		m.dir = filepath.Join(dir, m.Name)
		m.conf = filepath.Join(m.dir, "patroni.yml")
		m.log = filepath.Join(m.dir, "patroni.log")
		if err := os.MkdirAll(m.dir, 0o700); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		if err := os.WriteFile(m.conf, []byte(c.patroniConfig(m, binDir)), 0o600); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		for _, p := range []string{m.dir, m.conf} {
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatalf("testenv: %v", err)
			}
		}
		c.Members = append(c.Members, m)
	}
	for i, m := range c.Members {
		if err := c.StartMember(m); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		if i == 0 {
			// The first member bootstraps the cluster; the others copy it.
			if _, err := c.WaitLeader(haStartTimeout); err != nil {
				t.Fatalf("testenv: %v\n%s", err, c.Logs())
			}
		}
	}
	if _, err := c.WaitSyncStandby(haStartTimeout); err != nil {
		t.Fatalf("testenv: %v\n%s", err, c.Logs())
	}
	hosts := make([]string, len(c.Members))
	for i, m := range c.Members {
		hosts[i] = m.Addr()
	}
	mk := func(role, pw, db string) string {
		u := url.URL{Scheme: "postgres", User: url.UserPassword(role, pw), Host: strings.Join(hosts, ","), Path: "/" + db,
			RawQuery: "target_session_attrs=read-write&connect_timeout=5"}
		return u.String()
	}
	c.SuperURL = mk(embedded.SuperRole, c.creds.super, "postgres")
	c.OwnerURL = mk(embedded.OwnerRole, c.creds.owner, c.DatabaseName)
	c.AppURL = mk(embedded.AppRole, c.creds.app, c.DatabaseName)
	ctx, cancel := context.WithTimeout(context.Background(), haStartTimeout)
	defer cancel()
	if err := c.bootstrap(ctx); err != nil {
		t.Fatalf("testenv: %v\n%s", err, c.Logs())
	}
	return c
}

func (c *PGCluster) patroniConfig(m *PGMember, binDir string) string {
	return fmt.Sprintf(`scope: %[1]s
name: %[2]s
log:
  level: WARNING
restapi:
  listen: 127.0.0.1:%[3]d
  connect_address: 127.0.0.1:%[3]d
etcd3:
  hosts: %[4]s
bootstrap:
  dcs:
    ttl: %[5]d
    loop_wait: %[6]d
    retry_timeout: %[7]d
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    synchronous_mode_strict: true
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        synchronous_commit: "on"
        max_connections: 300
        wal_level: replica
        hot_standby: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        wal_log_hints: "on"
        wal_keep_size: 128MB
        fsync: "off"
        full_page_writes: "on"
        logging_collector: "off"
        log_min_messages: warning
  initdb:
  - encoding: UTF8
  - locale: C.UTF-8
  - auth-local: scram-sha-256
  - auth-host: scram-sha-256
  pg_hba:
  - local all all scram-sha-256
  - host replication replicator 127.0.0.1/32 scram-sha-256
  - host all all 127.0.0.1/32 scram-sha-256
postgresql:
  listen: 127.0.0.1:%[8]d
  connect_address: 127.0.0.1:%[8]d
  data_dir: %[9]s
  bin_dir: %[10]s
  pgpass: %[11]s
  authentication:
    superuser:
      username: %[12]s
      password: %[13]s
    replication:
      username: replicator
      password: %[14]s
    rewind:
      username: %[12]s
      password: %[13]s
  parameters:
    unix_socket_directories: %[15]s
tags:
  nofailover: false
  noloadbalance: false
  clonefrom: false
`, c.Scope, m.Name, m.RestPort, strings.TrimPrefix(c.etcdURL, "http://"), haTTL, haLoopWait, haRetryTimeout,
		m.Port, m.Data(), binDir, filepath.Join(m.dir, "pgpass"), embedded.SuperRole, c.creds.super, c.creds.repl, m.dir)
}

// bootstrap creates the panel's roles and database on the primary, lets the
// schema owner read pg_stat_replication (the panel's durability check
// needs pg_read_all_stats) and applies the migrations.
func (c *PGCluster) bootstrap(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.SuperURL)
	if err != nil {
		return fmt.Errorf("testenv: connect to the cluster: %w", err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		fmt.Sprintf("CREATE ROLE %s LOGIN NOSUPERUSER NOCREATEROLE NOBYPASSRLS CREATEDB PASSWORD '%s'", embedded.OwnerRole, c.creds.owner),
		fmt.Sprintf("CREATE ROLE %s LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB NOBYPASSRLS NOINHERIT PASSWORD '%s'", embedded.AppRole, c.creds.app),
		// The durability check reads pg_stat_replication through a
		// SECURITY DEFINER function the schema owner owns (the application
		// role is NOINHERIT, so a granted role would give it nothing).
		"GRANT pg_read_all_stats TO " + embedded.OwnerRole,
		"CREATE DATABASE " + c.DatabaseName + " OWNER " + embedded.OwnerRole,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("testenv: bootstrap the cluster: %w", err)
		}
	}
	su := strings.Replace(c.SuperURL, "/postgres?", "/"+c.DatabaseName+"?", 1)
	if err := embedded.PrepareDatabase(ctx, su, embedded.OwnerRole, embedded.AppRole); err != nil {
		return err
	}
	pool, err := db.Open(ctx, c.OwnerURL, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	return db.Migrate(ctx, pool, migrations.FS, embedded.AppRole, "testenv", slog.New(slog.DiscardHandler))
}

// StartMember starts (or starts again) member m's Patroni, as the postgres
// system user (Postgres refuses root).
func (c *PGCluster) StartMember(m *PGMember) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.exited != nil {
		select {
		case <-m.exited:
		default:
			return nil
		}
	}
	pgUser, err := user.Lookup("postgres")
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(pgUser.Uid)
	gid, _ := strconv.Atoi(pgUser.Gid)
	cmd := exec.Command("patroni", m.conf)
	cmd.Dir = m.dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "LC_ALL=C.UTF-8", "HOME=" + m.dir, "PYTHONUNBUFFERED=1"}
	if err := startLogged(cmd, m.log, &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}); err != nil {
		return fmt.Errorf("testenv: start patroni %s: %w", m.Name, err)
	}
	m.cmd = cmd
	m.exited = make(chan struct{})
	done := m.exited
	go func() { _ = cmd.Wait(); close(done) }()
	return nil
}

// Kill SIGKILLs every process of member m: its Patroni and each process of
// its Postgres (the postmaster and every backend), as a host that dies does.
func (c *PGCluster) Kill(m *PGMember) {
	m.mu.Lock()
	cmd, exited := m.cmd, m.exited
	m.mu.Unlock()
	if cmd != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Process.Kill()
	}
	for _, pid := range processesUnder(m.Data()) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if exited != nil {
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
		}
	}
	// The postmaster's children notice its death by themselves; what is
	// still there is killed again.
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end) && len(processesUnder(m.Data())) > 0; {
		for _, pid := range processesUnder(m.Data()) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops member m's Patroni cleanly (it stops its Postgres first).
func (c *PGCluster) Stop(m *PGMember) {
	m.mu.Lock()
	cmd, exited := m.cmd, m.exited
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		c.Kill(m)
	}
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end) && len(processesUnder(m.Data())) > 0; {
		time.Sleep(50 * time.Millisecond)
	}
	for _, pid := range processesUnder(m.Data()) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// MemberState is one member as Patroni's REST API describes the cluster.
type MemberState struct {
	Name  string `json:"name"`
	Role  string `json:"role"` // leader, sync_standby, replica
	State string `json:"state"`
	Lag   any    `json:"lag"`
}

// State asks the running members for the cluster as Patroni sees it.
func (c *PGCluster) State() ([]MemberState, error) {
	var last error
	for _, m := range c.Members {
		if !m.running() {
			continue
		}
		hc := http.Client{Timeout: time.Second}
		resp, err := hc.Get("http://127.0.0.1:" + strconv.Itoa(m.RestPort) + "/cluster")
		if err != nil {
			last = err
			continue
		}
		var body struct {
			Members []MemberState `json:"members"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil {
			last = err
			continue
		}
		return body.Members, nil
	}
	if last == nil {
		last = fmt.Errorf("no member is running")
	}
	return nil, last
}

func (m *PGMember) running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.exited == nil {
		return false
	}
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// Member returns the member named name.
func (c *PGCluster) Member(name string) *PGMember {
	for _, m := range c.Members {
		if m.Name == name {
			return m
		}
	}
	return nil
}

func (c *PGCluster) waitRole(role string, timeout time.Duration, not *PGMember) (*PGMember, error) {
	deadline := time.Now().Add(timeout)
	var last []MemberState
	var lastErr error
	for time.Now().Before(deadline) {
		st, err := c.State()
		lastErr = err
		last = st
		for _, s := range st {
			if s.Role == role && s.State == "running" || s.Role == role && s.State == "streaming" {
				if m := c.Member(s.Name); m != nil && m != not && m.running() {
					return m, nil
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("testenv: no %s within %s (members %+v, %v)", role, timeout, last, lastErr)
}

// WaitLeader waits for a running leader and returns it.
func (c *PGCluster) WaitLeader(timeout time.Duration) (*PGMember, error) {
	return c.waitRole("leader", timeout, nil)
}

// WaitNewLeader waits for a leader other than old.
func (c *PGCluster) WaitNewLeader(old *PGMember, timeout time.Duration) (*PGMember, error) {
	return c.waitRole("leader", timeout, old)
}

// WaitSyncStandby waits for a synchronous standby that streams and returns it.
func (c *PGCluster) WaitSyncStandby(timeout time.Duration) (*PGMember, error) {
	return c.waitRole("sync_standby", timeout, nil)
}

// Logs returns the tail of every member's Patroni log and etcd's, for a
// failing test's output.
func (c *PGCluster) Logs() string {
	var b strings.Builder
	files := []string{filepath.Join(c.dir, "etcd.log")}
	for _, m := range c.Members {
		files = append(files, m.log)
	}
	for _, f := range files {
		body, _ := os.ReadFile(f)
		fmt.Fprintf(&b, "--- %s\n%s\n", f, tail(string(body), 30))
	}
	return b.String()
}

func (c *PGCluster) stop() {
	if c.t.Failed() {
		c.t.Logf("HA cluster logs:\n%s", c.Logs())
	}
	var wg sync.WaitGroup
	for _, m := range c.Members {
		wg.Add(1)
		go func() { defer wg.Done(); c.Stop(m) }()
	}
	wg.Wait()
	if c.etcd != nil && c.etcd.Process != nil {
		_ = c.etcd.Process.Kill()
		_ = c.etcd.Wait()
	}
	_ = os.RemoveAll(c.dir)
}

// RedisNode is one redis-server or redis-sentinel of HARedis.
type RedisNode struct {
	Port   int
	conf   string
	cmd    *exec.Cmd
	exited chan struct{}
}

// Addr is host:port of the node.
func (n *RedisNode) Addr() string { return "127.0.0.1:" + strconv.Itoa(n.Port) }

// HARedisSet is a Redis master, its replica and three Sentinels that watch
// it under the master name HAMaster.
type HARedisSet struct {
	t         testing.TB
	dir       string
	Data      []*RedisNode // [0] the first master, [1] its replica
	Sentinels []*RedisNode
}

// HARedis starts a master, a replica and three Sentinels (quorum two, a
// master down after 1 s) and waits until every Sentinel sees the replica.
func HARedis(t testing.TB) *HARedisSet {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-sentinel"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("testenv: %s not found: install the Debian packages redis-server and redis-sentinel (make deps)", bin)
		}
	}
	dir, err := os.MkdirTemp(Dir(t), "hared-")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	s := &HARedisSet{t: t, dir: dir}
	t.Cleanup(s.stop)
	ports := freePorts(t, 5)
	for i := range 2 {
		n := &RedisNode{Port: ports[i], conf: filepath.Join(dir, fmt.Sprintf("redis-%d.conf", i))}
		conf := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\nsave \"\"\nappendonly no\ndir %s\n", n.Port, dir)
		if i == 1 {
			conf += fmt.Sprintf("replicaof 127.0.0.1 %d\n", ports[0])
		}
		if err := os.WriteFile(n.conf, []byte(conf), 0o600); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		if err := n.start("redis-server", filepath.Join(dir, fmt.Sprintf("redis-%d.log", i))); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		s.Data = append(s.Data, n)
	}
	for i := range 3 {
		n := &RedisNode{Port: ports[2+i], conf: filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", i))}
		if err := os.WriteFile(n.conf, []byte(sentinelConf(n.Port, dir, ports[0])), 0o600); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		if err := n.start("redis-sentinel", filepath.Join(dir, fmt.Sprintf("sentinel-%d.log", i))); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		s.Sentinels = append(s.Sentinels, n)
	}
	if err := s.waitSentinels(30*time.Second, func(master string, replicas int, sentinels int) bool {
		return master == s.Data[0].Addr() && replicas >= 1 && sentinels >= 2
	}); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return s
}

func sentinelConf(port int, dir string, masterPort int) string {
	return fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode no
dir %s
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %s 1000
sentinel failover-timeout %s 5000
sentinel parallel-syncs %s 1
`, port, dir, HAMaster, masterPort, HAMaster, HAMaster, HAMaster)
}

func (n *RedisNode) start(bin, logFile string) error {
	cmd := exec.Command(bin, n.conf)
	if err := startLogged(cmd, logFile, nil); err != nil {
		return fmt.Errorf("testenv: start %s: %w", bin, err)
	}
	n.cmd = cmd
	n.exited = make(chan struct{})
	done := n.exited
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", n.Addr(), 200*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("testenv: %s did not listen on %s within 10 s", bin, n.Addr())
}

// Kill SIGKILLs the node.
func (n *RedisNode) Kill() {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	select {
	case <-n.exited:
	case <-time.After(10 * time.Second):
	}
}

// Restart starts a killed node again on the same port and configuration
// (a Sentinel rewrote a data node's replicaof when it promoted another).
func (n *RedisNode) Restart(bin string) error {
	n.Kill()
	return n.start(bin, n.conf+".log")
}

// URL is the cell URL of the set, in go-redis' failover form: the first
// Sentinel in the host, the others as addr parameters, and the master name.
func (s *HARedisSet) URL() string {
	return s.URLFor(HAMaster)
}

// URLFor is URL with another master name (to try one that does not exist).
func (s *HARedisSet) URLFor(master string) string {
	q := url.Values{}
	q.Set("master_name", master)
	for _, n := range s.Sentinels[1:] {
		q.Add("addr", n.Addr())
	}
	return "redis://" + s.Sentinels[0].Addr() + "/0?" + q.Encode()
}

// Master asks the Sentinels which node is the master now.
func (s *HARedisSet) Master() (*RedisNode, error) {
	var addr string
	err := s.waitSentinels(5*time.Second, func(master string, _, _ int) bool { addr = master; return master != "" })
	if err != nil {
		return nil, err
	}
	for _, n := range s.Data {
		if n.Addr() == addr {
			return n, nil
		}
	}
	return nil, fmt.Errorf("testenv: the Sentinels name %s, not one of the set's nodes", addr)
}

// WaitMaster waits until a majority of the Sentinels name a master other
// than old.
func (s *HARedisSet) WaitMaster(old *RedisNode, timeout time.Duration) (*RedisNode, error) {
	var addr string
	err := s.waitSentinels(timeout, func(master string, _, _ int) bool { addr = master; return master != "" && master != old.Addr() })
	if err != nil {
		return nil, err
	}
	for _, n := range s.Data {
		if n.Addr() == addr {
			return n, nil
		}
	}
	return nil, fmt.Errorf("testenv: the Sentinels name %s, not one of the set's nodes", addr)
}

// waitSentinels polls every Sentinel (SENTINEL MASTER over a plain RESP
// exchange) until ok holds for a majority of them.
func (s *HARedisSet) waitSentinels(timeout time.Duration, ok func(master string, replicas, sentinels int) bool) error {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		agree := 0
		for _, n := range s.Sentinels {
			info, err := sentinelMaster(n.Addr())
			if err != nil {
				last = err.Error()
				continue
			}
			port := info["port"]
			master := ""
			if info["ip"] != "" && !strings.Contains(info["flags"], "down") {
				master = info["ip"] + ":" + port
			}
			replicas, _ := strconv.Atoi(info["num-slaves"])
			sentinels, _ := strconv.Atoi(info["num-other-sentinels"])
			if ok(master, replicas, sentinels) {
				agree++
			} else {
				last = fmt.Sprintf("%s: %v", n.Addr(), info)
			}
		}
		if agree >= 2 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("testenv: the Sentinels did not agree within %s (last: %s)", timeout, last)
}

func (s *HARedisSet) stop() {
	for _, n := range append(append([]*RedisNode{}, s.Sentinels...), s.Data...) {
		n.Kill()
	}
	if s.t.Failed() {
		for _, f := range []string{"redis-0.log", "redis-1.log", "sentinel-0.log"} {
			b, _ := os.ReadFile(filepath.Join(s.dir, f))
			s.t.Logf("--- %s\n%s", f, tail(string(b), 20))
		}
	}
	_ = os.RemoveAll(s.dir)
}

// sentinelMaster runs SENTINEL MASTER <HAMaster> on one Sentinel.
func sentinelMaster(addr string) (map[string]string, error) {
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	cmd := fmt.Sprintf("*3\r\n$8\r\nSENTINEL\r\n$6\r\nMASTER\r\n$%d\r\n%s\r\n", len(HAMaster), HAMaster)
	if _, err := c.Write([]byte(cmd)); err != nil {
		return nil, err
	}
	buf := make([]byte, 8192)
	var all []byte
	for {
		n, err := c.Read(buf)
		all = append(all, buf[:n]...)
		if v, ok := parseRESPArray(all); ok {
			out := map[string]string{}
			for i := 0; i+1 < len(v); i += 2 {
				out[v[i]] = v[i+1]
			}
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// parseRESPArray parses a complete flat RESP array of bulk strings.
func parseRESPArray(b []byte) ([]string, bool) {
	s := string(b)
	if strings.HasPrefix(s, "-") {
		return nil, strings.Contains(s, "\r\n")
	}
	if !strings.HasPrefix(s, "*") {
		return nil, false
	}
	i := strings.Index(s, "\r\n")
	if i < 0 {
		return nil, false
	}
	n, _ := strconv.Atoi(s[1:i])
	s = s[i+2:]
	var out []string
	for range n {
		if !strings.HasPrefix(s, "$") {
			return nil, false
		}
		j := strings.Index(s, "\r\n")
		if j < 0 {
			return nil, false
		}
		l, _ := strconv.Atoi(s[1:j])
		if len(s) < j+2+l+2 {
			return nil, false
		}
		out = append(out, s[j+2:j+2+l])
		s = s[j+2+l+2:]
	}
	return out, true
}

// startLogged starts cmd in its own process group with its output in file.
func startLogged(cmd *exec.Cmd, file string, cred *syscall.Credential) error {
	f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	f.Close()
	return err
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("testenv: free port: %v", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return out
}

// pgBinDir is the newest Debian Postgres's bin directory (or FLEET_PG_BIN).
func pgBinDir() (string, error) {
	if d := os.Getenv("FLEET_PG_BIN"); d != "" {
		return d, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(matches, func(i, j int) bool {
		a, _ := strconv.Atoi(filepath.Base(filepath.Dir(matches[i])))
		b, _ := strconv.Atoi(filepath.Base(filepath.Dir(matches[j])))
		return a < b
	})
	if len(matches) == 0 {
		return "", fmt.Errorf("no /usr/lib/postgresql/*/bin: install the Debian package postgresql")
	}
	return matches[len(matches)-1], nil
}

// processesUnder lists the processes whose working directory is dir
// (Postgres changes to its data directory).
func processesUnder(dir string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd")); err == nil && cwd == dir {
			out = append(out, pid)
		}
	}
	return out
}

func secret() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// URLOf is url (one of the cluster's) naming only the given members.
func (c *PGCluster) URLOf(raw string, members ...*PGMember) string {
	u, err := url.Parse(raw)
	if err != nil {
		c.t.Fatalf("testenv: %v", err)
	}
	hosts := make([]string, len(members))
	for i, m := range members {
		hosts[i] = m.Addr()
	}
	u.Host = strings.Join(hosts, ",")
	return u.String()
}
