package agent

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/agent/store"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// newTLSFakePanel is the fake panel behind a real TLS listener on loopback
// whose certificate the private CA signed.
func newTLSFakePanel(t *testing.T, ca *testenv.CA, script func(n int) action) *fakePanel {
	p := &fakePanel{t: t, script: script, hellos: make(chan wire.Hello, 100), sessions: make(chan *panelConn, 10),
		now: time.Now}
	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(p.serve))
	p.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted handshake is the point
	p.srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.ServerCert(t)}, MinVersion: tls.VersionTLS12}
	p.srv.StartTLS()
	t.Cleanup(p.srv.Close)
	return p
}

func TestPanelCAFileTrustsAPrivateCA(t *testing.T) {
	ca := testenv.NewCA(t, "Fleetwright Test Root")
	p := newTLSFakePanel(t, ca, func(int) action { return welcome("inst_a", wire.Config{}) })
	require.True(t, strings.HasPrefix(p.srv.URL, "https://127.0.0.1:"))
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, ca.PEM, 0o644))

	// Without the CA the agent does not trust the panel: no hello leaves it.
	h := newHarness(t, p)
	h.start(t)
	require.Eventually(t, func() bool { return strings.Contains(h.logs.String(), "certificate signed by unknown authority") },
		10*time.Second, 10*time.Millisecond, h.logs.String())
	select {
	case <-p.hellos:
		t.Fatal("the agent sent its token to a panel it does not trust")
	default:
	}
	h.stop()
	require.NoError(t, h.result(t))

	// With --panel-ca-file it connects, over wss://, and is welcomed.
	h = newHarness(t, p)
	h.cfg.PanelURL = strings.Replace(p.srv.URL, "https://", "wss://", 1) + "/agent/ws"
	h.cfg.PanelCAFile = caFile
	h.start(t)
	require.Equal(t, testToken, p.hello(t).Token.Reveal())
	p.session(t)
}

func TestPanelCAFileErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, data, 0o644))
		return path
	}
	ca := testenv.NewCA(t, "Fleetwright Test Root")
	leaf := ca.ServerCert(t)
	leafPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Certificate[0]})
	for path, want := range map[string]string{
		filepath.Join(dir, "missing.pem"):   "no such file",
		write("empty.pem", []byte("hello")): "holds no PEM certificate",
		write("leaf.pem", leafPEM):          "is not a CA certificate",
	} {
		_, err := panelClient(path)
		require.ErrorIs(t, err, ErrConfig, path)
		require.ErrorContains(t, err, want)
		require.ErrorContains(t, err, "--panel-ca-file")
	}
	_, err := panelClient(write("ca.pem", ca.PEM))
	require.NoError(t, err)
}

// TestCredentialsArriveSealedToTheInstallationKey: hello carries the public
// half of a key kept in the state dir; credentials sealed to it are stored,
// a box sealed to another key or withheld credentials are not, and the
// stored ones stay.
func TestCredentialsArriveSealedToTheInstallationKey(t *testing.T) {
	other, err := wire.NewInstallKey()
	require.NoError(t, err)
	creds := wire.Credentials{Username: "dispatch42", Password: wire.NewSecret(testPassword), TOTPSecret: wire.NewSecret(testTOTP)}
	hellos := make(chan string, 10)
	p := newFakePanel(t, nil)
	p.script = func(n int) action {
		key := <-hellos
		w := &wire.Welcome{AgentID: "ag_1", InstallationID: "inst_a"}
		switch n {
		case 1: // sealed to the agent's key
			w.SealedCredentials, err = wire.SealCredentials(key, "ag_1", creds)
			require.NoError(t, err)
		case 2: // sealed to somebody else's key: useless to the agent
			w.SealedCredentials, err = wire.SealCredentials(wire.InstallKeyString(other.PublicKey()), "ag_1",
				wire.Credentials{Username: "mallory", Password: wire.NewSecret("other-pw"), TOTPSecret: wire.NewSecret("OTHER")})
			require.NoError(t, err)
		default:
			w.CredentialsWithheld = wire.WithheldKeyMismatch
		}
		return action{welcome: w}
	}
	// The fake panel picks its answer before it reads hello: give it the
	// key from the state dir the agent is about to use.
	h := newHarness(t, p)
	st, err := store.Open(context.Background(), h.cfg.StateDir)
	require.NoError(t, err)
	key, err := st.InstallKey(context.Background())
	require.NoError(t, err)
	require.NoError(t, st.Close())
	pub := wire.InstallKeyString(key.PublicKey())
	for range 3 {
		hellos <- pub
	}

	h.start(t)
	require.Equal(t, pub, p.hello(t).InstallKey, "hello carries the state dir's installation key")
	pc := p.session(t)
	stored := func() wire.Credentials {
		// The agent holds the database; a busy moment reads as nothing yet.
		st, err := store.Open(context.Background(), h.cfg.StateDir)
		if err != nil {
			return wire.Credentials{}
		}
		defer st.Close()
		c, _, _ := st.Credentials(context.Background())
		return c
	}
	require.Eventually(t, func() bool { return stored().Password.Reveal() == testPassword }, 10*time.Second, 10*time.Millisecond)

	for range 2 {
		pc.conn.CloseNow()
		// Move the fake clock until the agent's reconnect pause is over
		// (other timers of the agent share the clock; none matters here).
		var hello wire.Hello
		require.Eventually(t, func() bool {
			select {
			case hello = <-p.hellos:
				return true
			default:
				h.clk.Advance(time.Second)
				return false
			}
		}, 20*time.Second, 5*time.Millisecond)
		require.Equal(t, pub, hello.InstallKey, "the key survives reconnects")
		pc = p.session(t)
	}
	require.Eventually(t, func() bool {
		return strings.Contains(h.logs.String(), "installation_key_mismatch") && strings.Contains(h.logs.String(), "new-installation")
	}, 10*time.Second, 10*time.Millisecond, h.logs.String())
	require.Contains(t, h.logs.String(), wire.ErrSealedForAnother.Error())
	var c wire.Credentials
	require.Eventually(t, func() bool { c = stored(); return c.Username != "" }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, "dispatch42", c.Username, "a box for another key changes nothing")
	require.Equal(t, testPassword, c.Password.Reveal())
	require.NotContains(t, h.logs.String(), testPassword)
}
