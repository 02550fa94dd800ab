package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/logging"
)

func setup(t *testing.T) (*httptest.Server, *Health, *bytes.Buffer) {
	var logs bytes.Buffer
	log := logging.New(&logs, logging.Options{Format: "json"})
	reg := prometheus.NewRegistry()
	h := NewHealth(reg)
	r := NewRouter(log, reg)
	Mount(r, h)
	r.Handle("/metrics", MetricsHandler(reg, ""))
	r.Get("/boom", func(http.ResponseWriter, *http.Request) {
		panic("handler exploded with pw-" + "live-secret-1234")
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv, h, &logs
}

func get(t *testing.T, url string) (int, string) {
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func TestReadinessFailsOnlyOnCriticalChecks(t *testing.T) {
	srv, h, _ := setup(t)
	h.Add(Check{Name: "postgres", Critical: true, Probe: func(context.Context) error { return nil }})
	h.Add(Check{Name: "redis:cell-a", Probe: func(context.Context) error { return errors.New("connection refused") }})

	code, _ := get(t, srv.URL+"/readyz")
	require.Equal(t, http.StatusOK, code, "a failing cell's Redis never fails readiness")
	code, body := get(t, srv.URL+"/readyz?verbose=1")
	require.Equal(t, http.StatusOK, code)
	var v struct {
		Ready  bool
		Checks []Result
	}
	require.NoError(t, json.Unmarshal([]byte(body), &v))
	require.True(t, v.Ready)
	require.Len(t, v.Checks, 2)
	require.Equal(t, "redis:cell-a", v.Checks[1].Name)
	require.False(t, v.Checks[1].OK)
	require.Contains(t, v.Checks[1].Error, "refused")

	_, metrics := get(t, srv.URL+"/metrics")
	require.Contains(t, metrics, `fleet_dependency_up{dependency="redis:cell-a"} 0`)
	require.Contains(t, metrics, `fleet_dependency_up{dependency="postgres"} 1`)

	h.Remove("postgres")
	h.Add(Check{Name: "postgres", Critical: true, Probe: func(context.Context) error { return errors.New("down") }})
	code, _ = get(t, srv.URL+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	code, _ = get(t, srv.URL+"/healthz")
	require.Equal(t, http.StatusOK, code, "liveness does not depend on Postgres")
}

func TestPanicBecomes500AndItsSecretIsRedacted(t *testing.T) {
	logging.RegisterSecret("pw-live-secret-1234")
	srv, _, logs := setup(t)
	code, body := get(t, srv.URL+"/boom")
	require.Equal(t, http.StatusInternalServerError, code)
	require.NotContains(t, body, "live-secret")
	require.Contains(t, logs.String(), "panic in handler")
	require.Contains(t, logs.String(), "goroutine", "the stack is logged")
	require.NotContains(t, logs.String(), "live-secret-1234")
	// The server keeps serving after a panic.
	code, _ = get(t, srv.URL+"/healthz")
	require.Equal(t, http.StatusOK, code)
}

func TestRequestIDsAndRouteMetrics(t *testing.T) {
	srv, _, _ := setup(t)
	get(t, srv.URL+"/healthz")
	_, metrics := get(t, srv.URL+"/metrics")
	require.True(t, strings.Contains(metrics, `fleet_http_requests_total{code="2xx",route="/healthz"} 1`), metrics)
}

func TestListenReportsABusyPort(t *testing.T) {
	s, err := Listen("127.0.0.1:0", http.NotFoundHandler(), logging.New(io.Discard, logging.Options{}))
	require.NoError(t, err)
	defer s.Shutdown(context.Background())
	_, err = Listen(s.Addr(), http.NotFoundHandler(), logging.New(io.Discard, logging.Options{}))
	require.ErrorContains(t, err, "choose another --listen")
}

func TestDiskCollectorReportsTheDataDirsFilesystem(t *testing.T) {
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	reg.MustRegister(DiskCollector(dir))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() != dir {
				t.Fatalf("path label %q", m.GetLabel()[0].GetValue())
			}
			vals[mf.GetName()] = m.GetGauge().GetValue()
		}
	}
	if vals["fleet_data_dir_size_bytes"] <= 0 || vals["fleet_data_dir_free_bytes"] <= 0 || vals["fleet_data_dir_free_bytes"] > vals["fleet_data_dir_size_bytes"] {
		t.Fatalf("free/size: %v", vals)
	}
}

// TestMetricsTokenIsRequiredWhenSet: with a token, /metrics answers 401
// to a request without it or with another, and the figures with it.
func TestMetricsTokenIsRequiredWhenSet(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_test_up"}))
	srv := httptest.NewServer(MetricsOnly(reg, "metrics-token-5c1f9e07a2"))
	t.Cleanup(srv.Close)
	for _, auth := range []string{"", "Bearer wrong", "metrics-token-5c1f9e07a2", "Bearer metrics-token-5c1f9e07a2x"} {
		req, _ := http.NewRequest("GET", srv.URL+"/metrics", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusUnauthorized, res.StatusCode, auth)
		require.NotContains(t, string(b), "fleet_")
	}
	req, _ := http.NewRequest("GET", srv.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer metrics-token-5c1f9e07a2")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, string(b), "fleet_test_up")
	code, _ := get(t, srv.URL+"/healthz")
	require.Equal(t, http.StatusNotFound, code, "a metrics listener serves metrics only")
}
