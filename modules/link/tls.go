package link

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

// Client is the HTTP client that dials the panel: TLS 1.2 or later, and no
// redirect (one could carry the token to another host). Without a CA file
// it trusts the system's roots; with one (--panel-ca-file), only the
// certificates in that file, so a private CA (Caddy's "tls internal") works
// without touching the host's trust store and a public CA cannot stand in
// for the panel.
func Client(caFile string) (*http.Client, error) {
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
		return nil, fmt.Errorf("--panel-ca-file %s: no such file: give the PEM file of the CA that signs the panel's certificate (Caddy: %s), or leave the flag out to trust this machine's CAs",
			path, caddyRoot)
	}
	if err != nil {
		return nil, fmt.Errorf("--panel-ca-file: %v", err)
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
			return nil, fmt.Errorf("--panel-ca-file %s: certificate %d: %v", path, n+1, err)
		}
		if !c.IsCA {
			return nil, fmt.Errorf("--panel-ca-file %s: %q is not a CA certificate; give the CA that signs the panel's certificate (Caddy: %s)",
				path, c.Subject.CommonName, caddyRoot)
		}
		if time.Now().After(c.NotAfter) {
			return nil, fmt.Errorf("--panel-ca-file %s: %q expired on %s", path, c.Subject.CommonName, c.NotAfter.Format(time.DateOnly))
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("--panel-ca-file %s holds no PEM certificate (-----BEGIN CERTIFICATE-----)", path)
	}
	return pool, nil
}

// caddyRoot is where Caddy keeps the root of its "tls internal" CA.
const caddyRoot = "/var/lib/caddy/.local/share/caddy/pki/authorities/local/root.crt"

// trustHint says what to do when the panel's certificate is not trusted; no
// token left this machine, since the TLS handshake failed first.
func trustHint(err error, caFile string) string {
	var ua x509.UnknownAuthorityError
	var ve *tls.CertificateVerificationError
	if !errors.As(err, &ua) && !(errors.As(err, &ve) && errors.As(ve.Err, &ua)) {
		return ""
	}
	if caFile == "" {
		return "; the panel's certificate is signed by a CA this machine does not trust (a private CA such as Caddy's \"tls internal\"?): give that CA's certificate with --panel-ca-file; the token was not sent"
	}
	return "; the panel's certificate is not signed by the CA in --panel-ca-file " + caFile + ": give the CA that signs the panel's certificate (Caddy: " + caddyRoot + "); the token was not sent"
}
