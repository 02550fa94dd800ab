package gateway_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"html"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/assistant"
	"github.com/fleetwright/fleetwright/modules/assistant/eval"
	"github.com/fleetwright/fleetwright/modules/assistant/model/stub"
	"github.com/fleetwright/fleetwright/modules/assistant/store"
	"github.com/fleetwright/fleetwright/modules/fleet/gateway"
)

// testCA is a private CA made for one test, like Caddy's "tls internal".
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// leaf issues the panel's certificate for 127.0.0.1.
func (ca *testCA) leaf(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "panel.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// An enrolled assistant dials a panel served over TLS with a certificate
// from a private CA: with --panel-ca-file naming that CA it is welcomed;
// without it, or with another CA's file, the handshake fails before its
// token leaves (the panel gets no request) and its home page says what to
// do; a missing file stops it at start, naming the path and what to give.
func TestAssistantTrustsThePanelsPrivateCAFromItsFile(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	var inst string
	require.NoError(t, b.db.App.QueryRow(ctx, "SELECT id::text FROM installation").Scan(&inst))
	g := gateway.New(b.store, nil, gateway.Config{ReplicaID: newUUID(t, b), InstallationID: inst, PollEvery: time.Hour},
		testenv.Logger(t).With("replica", "tls"))
	var requests atomic.Int64 // HTTP requests past the TLS handshake
	r := chi.NewRouter()
	r.Get("/agent/ws", func(w http.ResponseWriter, req *http.Request) { requests.Add(1); g.ServeHTTP(w, req) })
	ca, other := newTestCA(t, "Fleetwright Test Root"), newTestCA(t, "Somebody Else's Root")
	srv := httptest.NewUnstartedServer(r)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the point
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.leaf(t)}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); g.Listen(lctx, b.db.AppURL) }()
	t.Cleanup(func() { g.CloseAll(); srv.Close(); cancel(); <-done })
	require.True(t, strings.HasPrefix(srv.URL, "https://127.0.0.1:"))

	id, token := b.agent(t, "assistant-tls")
	dir := testenv.SharedTempDir(t) // the browser's user reaches the profile under it
	tok := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tok, []byte(token+"\n"), 0o600))
	caFile, otherFile := filepath.Join(dir, "panel-ca.pem"), filepath.Join(dir, "other-ca.pem")
	require.NoError(t, os.WriteFile(caFile, ca.pem, 0o644))
	require.NoError(t, os.WriteFile(otherFile, other.pem, 0o644))
	h, err := eval.StartStudio()
	require.NoError(t, err)
	t.Cleanup(h.Close)
	ms := httptest.NewServer(stub.New(stub.Script{}, nil).Handler())
	t.Cleanup(ms.Close)
	cfg := assistant.Config{ModelURL: ms.URL, Model: "stub", StateDir: filepath.Join(dir, "state"), Panel: srv.URL, TokenFile: tok,
		ReportEvery: 200 * time.Millisecond, Limits: store.Limits{Steps: 10, WallTime: 5 * time.Minute, Tabs: 4},
		EgressAllow: []string{"127.0.0.1/32"}, EgressPorts: []string{eval.Port(h.StudioURL)}}
	panelState := func() string {
		_, home, err := h.Get("/")
		require.NoError(t, err)
		i := strings.Index(home, `data-testid="panel-state"`)
		if i < 0 {
			return ""
		}
		return html.UnescapeString(home[i : i+min(len(home)-i, 2000)])
	}

	// A missing file: refused at start, before the browser or the UI.
	cfg.PanelCAFile = filepath.Join(dir, "missing-ca.pem")
	err = h.StartAssistant(ctx, cfg, testenv.Logger(t))
	require.ErrorContains(t, err, "--panel-ca-file "+cfg.PanelCAFile+": no such file: give the PEM file of the CA that signs the panel's certificate")
	require.ErrorContains(t, err, "or leave the flag out to trust this machine's CAs")

	// No CA file: the system's roots do not know the private CA.
	cfg.PanelCAFile = ""
	require.NoError(t, h.StartAssistant(ctx, cfg, testenv.Logger(t)))
	require.Eventually(t, func() bool { return strings.Contains(panelState(), "certificate signed by unknown authority") },
		60*time.Second, 100*time.Millisecond)
	state := panelState()
	require.Contains(t, state, "give that CA's certificate with --panel-ca-file; the token was not sent")
	require.Zero(t, requests.Load(), "no request, so no token, reached the panel")
	require.False(t, b.read(t, id).Connected)
	require.NoError(t, h.StopAssistant())

	// Another CA's file: refused the same way, naming the file.
	cfg.PanelCAFile = otherFile
	require.NoError(t, h.StartAssistant(ctx, cfg, testenv.Logger(t)))
	require.Eventually(t, func() bool { return strings.Contains(panelState(), "certificate signed by unknown authority") },
		60*time.Second, 100*time.Millisecond)
	require.Contains(t, panelState(), "the panel's certificate is not signed by the CA in --panel-ca-file "+otherFile)
	require.Zero(t, requests.Load())
	require.NoError(t, h.StopAssistant())

	// The right CA: welcomed over TLS, and its reports arrive.
	cfg.PanelCAFile = caFile
	require.NoError(t, h.StartAssistant(ctx, cfg, testenv.Logger(t)))
	require.Eventually(t, func() bool {
		if !b.read(t, id).Connected {
			return false
		}
		f, err := b.store.List(ctx, b.tenant)
		require.NoError(t, err)
		for _, a := range f.Agents {
			if a.ID == id {
				return a.Assistant != nil
			}
		}
		return false
	}, 60*time.Second, 100*time.Millisecond)
	require.Contains(t, panelState(), "enrolled in the panel")
	require.Positive(t, requests.Load())
}
