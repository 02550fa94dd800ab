package agent

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"time"
)

// panelClient is the HTTP client the agent dials the panel with. Without a
// CA file it trusts the system's roots; with one, only the certificates in
// that file, so a private CA (Caddy's "tls internal") works without touching
// the host's trust store and a public CA cannot stand in for the panel.
// PanelClient is the HTTP client that dials the panel: TLS 1.2 or later,
// only the CAs of caFile when set (--panel-ca-file), and no redirect (one
// could carry the token to another host). The enrolled assistant uses it too.
func PanelClient(caFile string) (*http.Client, error) { return panelClient(caFile) }

func panelClient(caFile string) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := loadCAFile(caFile)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	return &http.Client{Transport: tr, Timeout: 0, CheckRedirect: func(*http.Request, []*http.Request) error {
		// A redirect could move the token to another host.
		return http.ErrUseLastResponse
	}}, nil
}

func loadCAFile(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: --panel-ca-file %s: no such file: give the PEM file of the CA that signs the panel's certificate (Caddy: /var/lib/caddy/.local/share/caddy/pki/authorities/local/root.crt), or leave the flag out to trust this machine's CAs",
			ErrConfig, path)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: --panel-ca-file: %v", ErrConfig, err)
	}
	pool := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: --panel-ca-file %s: certificate %d: %v", ErrConfig, path, n+1, err)
		}
		if !c.IsCA {
			return nil, fmt.Errorf("%w: --panel-ca-file %s: %q is not a CA certificate; give the CA that signs the panel's certificate (Caddy: /var/lib/caddy/.local/share/caddy/pki/authorities/local/root.crt)",
				ErrConfig, path, c.Subject.CommonName)
		}
		if time.Now().After(c.NotAfter) {
			return nil, fmt.Errorf("%w: --panel-ca-file %s: %q expired on %s", ErrConfig, path, c.Subject.CommonName, c.NotAfter.Format(time.DateOnly))
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: --panel-ca-file %s holds no PEM certificate (-----BEGIN CERTIFICATE-----)", ErrConfig, path)
	}
	return pool, nil
}
