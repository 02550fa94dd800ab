// Package boardtest starts an in-process sandbox board for the tests of any
// package, and signs board accounts in over plain HTTP the way a worker does.
package boardtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"

	"github.com/fleetwright/fleetwright/modules/board"
)

// AdminToken is the sandbox admin token of boards started by Start.
const AdminToken = "boardtest-admin-token-0123456789"

// Start runs a board on 127.0.0.1:0 in memory with the publisher off, lets
// mod adjust the config, and closes it when the test ends. Use s.URL() and
// s.AdminToken() to reach it over HTTP, or the embedded *board.Board.
func Start(t testing.TB, mod ...func(*board.Config)) *board.Server {
	t.Helper()
	cfg := board.Defaults()
	cfg.Listen = "127.0.0.1:0"
	cfg.Rate = 0
	cfg.AdminToken = AdminToken
	for _, m := range mod {
		m(&cfg)
	}
	s, err := board.Start(context.Background(), cfg, nil)
	if err != nil {
		t.Fatalf("boardtest: start board: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("boardtest: close board: %v", err)
		}
	})
	return s
}

// Code is the TOTP code of secret at time at.
func Code(secret string, at time.Time) string {
	c, err := totp.GenerateCodeCustom(secret, at, totp.ValidateOpts{Period: 30, Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1})
	if err != nil {
		panic("boardtest: totp: " + err.Error())
	}
	return c
}

// Client is one signed-in board session over plain HTTP (a cookie jar).
type Client struct {
	HTTP    *http.Client
	Base    string
	Account string
	Client  string
	CSRF    string
}

// Login signs in with password and TOTP. If the board refuses the code as
// already used, it waits for the next 30 s step (as a real worker must),
// within ctx. now is the clock the code is computed from (time.Now if nil).
func Login(ctx context.Context, base, username, password, secret string, now func() time.Time) (*Client, error) {
	if now == nil {
		now = time.Now
	}
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	post := func(path string, form url.Values) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(form.Encode()))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return hc.Do(req)
	}
	resp, err := post("/login", url.Values{"username": {username}, "password": {password}})
	if err != nil {
		return nil, fmt.Errorf("boardtest: login: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/login/totp" {
		return nil, fmt.Errorf("boardtest: login: password refused (HTTP %d, %s)", resp.StatusCode, resp.Header.Get("X-Board-Error"))
	}
	for {
		resp, err = post("/login/totp", url.Values{"code": {Code(secret, now())}})
		if err != nil {
			return nil, fmt.Errorf("boardtest: totp: %w", err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && resp.Request.URL.Path == "/loads" {
			break
		}
		if resp.Header.Get("X-Board-Error") != "totp_reused" {
			return nil, fmt.Errorf("boardtest: totp refused (HTTP %d, %s)", resp.StatusCode, resp.Header.Get("X-Board-Error"))
		}
		wait := time.Duration(30-now().Unix()%30)*time.Second + 50*time.Millisecond
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, fmt.Errorf("boardtest: waiting for the next TOTP step: %w", ctx.Err())
		}
	}
	c := &Client{HTTP: hc, Base: base}
	var si struct {
		Account, Client string
		CSRFToken       string `json:"csrf_token"`
	}
	if err := c.GetJSON(ctx, "/api/session", &si); err != nil {
		return nil, err
	}
	c.Account, c.Client, c.CSRF = si.Account, si.Client, si.CSRFToken
	return c, nil
}

// GetJSON fetches path and decodes a 200 answer into v.
func (c *Client) GetJSON(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Base+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("boardtest: GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("boardtest: GET %s: HTTP %d", path, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Book posts a booking of loadID (with an Idempotency-Key when key is set)
// and returns the HTTP status and decoded body. A dropped response is an error.
func (c *Client) Book(ctx context.Context, loadID, key string) (int, map[string]any, error) {
	body, _ := json.Marshal(map[string]string{"load_id": loadID})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Base+"/api/book", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-CSRF-Token", c.CSRF)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := map[string]any{}
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out, nil
}

// Admin calls the sandbox admin API with the board's token and decodes the
// JSON answer into out (may be nil). It returns the HTTP status.
func Admin(ctx context.Context, s *board.Server, method, path string, in, out any) (int, error) {
	var rd io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.URL()+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+s.AdminToken())
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp.StatusCode, fmt.Errorf("boardtest: %s %s: decode: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}
