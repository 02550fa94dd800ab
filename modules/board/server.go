package board

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fleetwright/fleetwright/modules/board/catalog"
)

// Server is a running board: its HTTP listener plus the Board.
type Server struct {
	*Board
	srv   *http.Server
	ln    net.Listener
	url   string
	token string
	done  chan error
}

// URL is the board's base URL ("http://127.0.0.1:PORT").
func (s *Server) URL() string { return s.url }

// AdminToken is the sandbox admin bearer token.
func (s *Server) AdminToken() string { return s.token }

// Run serves the board until ctx ends, then shuts down gracefully.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	s, err := Start(ctx, cfg, logger)
	if err != nil {
		return err
	}
	logger.Info("board: serving", "url", s.URL(), "dialect", cfg.Dialect, "data", dataPath(cfg), "rate", cfg.Rate, "idempotency_keys", cfg.IdempotencyKeys)
	if cfg.CatalogHosts != "" {
		cat, err := StartCatalog(cfg, s.AdminToken(), logger)
		if err != nil {
			_ = s.Close()
			return err
		}
		defer cat.Close()
	}
	select {
	case <-ctx.Done():
	case err := <-s.done:
		_ = s.Close()
		return fmt.Errorf("board: serve: %w", err)
	}
	return s.Close()
}

// StartCatalog starts the crawl catalogue the configuration describes,
// its control endpoint guarded by the sandbox admin token.
func StartCatalog(cfg Config, token string, logger *slog.Logger) (*catalog.Server, error) {
	var hosts []string
	for _, h := range strings.Split(cfg.CatalogHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	cat, err := catalog.Start(catalog.Config{Hosts: hosts, Port: cfg.CatalogPort, Items: cfg.CatalogItems, Rate: cfg.CatalogRate,
		Burst: cfg.CatalogBurst, CrawlDelay: cfg.CatalogCrawlDelay, AdminToken: token, Clock: cfg.Clock, Logger: logger.With("component", "catalog")})
	if err != nil {
		return nil, fmt.Errorf("board: %w", err)
	}
	return cat, nil
}

func dataPath(cfg Config) string {
	switch {
	case cfg.Data != "":
		return cfg.Data
	case cfg.DataDir != "":
		return filepath.Join(cfg.DataDir, "board.sqlite")
	default:
		return "memory"
	}
}

// adminToken resolves the token: --admin-token-file, then Config.AdminToken,
// then FLEET_BOARD_ADMIN_TOKEN, then a generated one kept in the data dir.
func adminToken(cfg Config) (string, error) {
	if cfg.AdminTokenFile != "" {
		b, err := os.ReadFile(cfg.AdminTokenFile)
		if err != nil {
			return "", fmt.Errorf("board: read --admin-token-file: %w", err)
		}
		t := strings.TrimSpace(string(b))
		if len(t) < 16 {
			return "", fmt.Errorf("board: admin token in %s is shorter than 16 characters", cfg.AdminTokenFile)
		}
		return t, nil
	}
	t := cfg.AdminToken
	if t == "" {
		t = strings.TrimSpace(os.Getenv(EnvAdminToken))
	}
	if t != "" {
		if len(t) < 16 {
			return "", fmt.Errorf("board: admin token (%s) is shorter than 16 characters", EnvAdminToken)
		}
		return t, nil
	}
	if cfg.DataDir == "" {
		return "", fmt.Errorf("board: no sandbox admin token: set --admin-token-file or %s (or --data-dir to keep a generated one)", EnvAdminToken)
	}
	path := filepath.Join(cfg.DataDir, "board-admin-token")
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 16 {
		return strings.TrimSpace(string(b)), nil
	}
	t = randomToken()
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return "", fmt.Errorf("board: create data dir: %w", err)
	}
	if err := os.WriteFile(path, []byte(t+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("board: write generated admin token: %w", err)
	}
	return t, nil
}

// Start opens the store, restores state, seeds accounts, listens on
// cfg.Listen and starts the publisher. Close stops it all.
func Start(ctx context.Context, cfg Config, logger *slog.Logger) (*Server, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	def := Defaults()
	if cfg.LoadTTL <= 0 {
		cfg.LoadTTL = def.LoadTTL
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = def.SessionTTL
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = def.PollInterval
	}
	if cfg.Chaos.Layout == "" {
		cfg.Chaos.Layout = LayoutV1
	}
	switch cfg.Dialect {
	case "":
		cfg.Dialect = DialectClassic
	case DialectClassic, DialectHTML:
	default:
		return nil, fmt.Errorf("board: --dialect must be %s or %s, got %q", DialectClassic, DialectHTML, cfg.Dialect)
	}
	if cfg.Rate < 0 {
		return nil, fmt.Errorf("board: --rate must not be negative")
	}
	token, err := adminToken(cfg)
	if err != nil {
		return nil, err
	}
	path := dataPath(cfg)
	if path != "memory" {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("board: create data dir: %w", err)
		}
	}
	st, err := openStore(ctx, path)
	if err != nil {
		return nil, err
	}
	b, err := newBoard(ctx, cfg, logger, st)
	if err != nil {
		st.close()
		return nil, err
	}
	if cfg.SeedAccounts != "" {
		if err := b.seedAccounts(ctx, cfg.SeedAccounts); err != nil {
			b.cancel()
			st.close()
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		b.cancel()
		st.close()
		return nil, fmt.Errorf("board: listen on %s: %w", cfg.Listen, err)
	}
	h := &handler{b: b, token: token}
	routes := h.routes()
	if cfg.Dialect == DialectHTML {
		routes = (&htmlHandler{handler: h, pre: map[string]*preSession{}}).routes()
	}
	s := &Server{
		Board: b, ln: ln, token: token, url: "http://" + ln.Addr().String(), done: make(chan error, 1),
		srv: &http.Server{Handler: countRequest(routes), ConnContext: withConnCount, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)},
	}
	b.wg.Add(3)
	go b.publisher()
	go b.janitor()
	go b.stormer()
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.done <- err
		}
		close(s.done)
	}()
	return s, nil
}

// seedAccounts creates the accounts of a JSON file ([{username, password,
// client, totp_secret}]); existing usernames are left as they are.
func (b *Board) seedAccounts(ctx context.Context, path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("board: read --seed-accounts: %w", err)
	}
	var specs []AccountSpec
	if err := json.Unmarshal(raw, &specs); err != nil {
		return fmt.Errorf("board: --seed-accounts %s: want a JSON array of {username, password, client, totp_secret}: %w", path, err)
	}
	for i, sp := range specs {
		if _, err := b.CreateAccount(ctx, sp); err != nil {
			if errors.Is(err, ErrAccountExists) {
				continue
			}
			return fmt.Errorf("board: --seed-accounts %s: entry %d: %w", path, i, err)
		}
	}
	b.log.Info("board: seeded accounts", "file", path, "count", len(specs))
	return nil
}

// Kill stops the board the way a killed process stops: the listener and
// every connection are closed at once, requests in flight get no answer,
// held requests and pending late commits are abandoned (never committed),
// and the store is closed. What the store committed before is all a board
// started again on the same store knows. The load test's board_restart
// uses it.
func (s *Server) Kill() error {
	// Connections first, so nothing held can still be answered.
	err := s.srv.Close()
	s.cancel()
	s.wg.Wait()
	<-s.done
	if cerr := s.st.close(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("board: kill: %w", err)
	}
	return nil
}

// Close stops serving (waiting up to 5 s for requests in flight), stops the
// publisher and pending late commits, and closes the store.
func (s *Server) Close() error {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Held requests and late commits wait on the board's context: end it
	// after the grace period so Shutdown is not stuck behind a long hold.
	go func() {
		<-sctx.Done()
		s.cancel()
	}()
	err := s.srv.Shutdown(sctx)
	if err != nil {
		_ = s.srv.Close()
	}
	s.cancel()
	s.wg.Wait()
	<-s.done
	if cerr := s.st.close(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("board: shutdown: %w", err)
	}
	return nil
}
