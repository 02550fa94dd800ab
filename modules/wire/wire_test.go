package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNegotiate(t *testing.T) {
	cases := []struct {
		name              string
		agentV, agentMin  int
		want              int
		incompatible, bad bool
	}{
		{name: "same window", agentV: 5, agentMin: 1, want: 5},
		{name: "v4 agent", agentV: 4, agentMin: 1, want: 4},
		{name: "v3 agent", agentV: 3, agentMin: 1, want: 3},
		{name: "v2 agent", agentV: 2, agentMin: 1, want: 2},
		{name: "old agent speaking v1 only", agentV: 1, agentMin: 1, want: 1},
		{name: "newer agent that still accepts v5", agentV: 6, agentMin: 5, want: 5},
		{name: "newer agent that accepts v1", agentV: 7, agentMin: 1, want: 5},
		{name: "agent too new", agentV: 7, agentMin: 6, incompatible: true},
		{name: "min above version", agentV: 1, agentMin: 2, bad: true},
		{name: "zero", agentV: 0, agentMin: 0, bad: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, err := Negotiate(c.agentV, c.agentMin)
			switch {
			case c.bad:
				require.ErrorIs(t, err, ErrBadVersionRange)
			case c.incompatible:
				var inc *IncompatibleError
				require.ErrorAs(t, err, &inc)
				require.Equal(t, MinSupported, inc.PanelMin)
				require.Equal(t, Current, inc.PanelMax)
			default:
				require.NoError(t, err)
				require.Equal(t, c.want, v)
			}
		})
	}
}

// A panel whose window has moved past v1 refuses a v1-only agent and names
// its range; the agent's golden v1 hello is what such an agent really sends.
func TestGoldenHelloOldAcceptedTooOldRefused(t *testing.T) {
	data, err := os.ReadFile("testdata/v1/hello.json")
	require.NoError(t, err)
	f, err := Decode(data)
	require.NoError(t, err)
	h := f.Message.(Hello)

	v, err := Negotiate(h.Version, h.MinVersion)
	require.NoError(t, err)
	require.Equal(t, V1, v, "this panel still speaks v1")

	// A later panel speaking 2..3 only.
	_, err = negotiate(h.Version, h.MinVersion, 2, 3)
	var inc *IncompatibleError
	require.ErrorAs(t, err, &inc)
	rej := RejectFor(err, "inst_x")
	require.Equal(t, RejectIncompatibleVersion, rej.Reason)
	require.Equal(t, 2, rej.MinVersion)
	require.Equal(t, 3, rej.MaxVersion)
	require.Contains(t, rej.Message, "panel speaks 2..3")
	raw, err := Encode(V1, Frame{Time: fixtureTime, Message: rej})
	require.NoError(t, err)
	require.Contains(t, string(raw), `"min_version":2,"max_version":3`)
}

func TestEncodeRefusesWhatAVersionLacks(t *testing.T) {
	_, err := Encode(Current+1, Frame{Time: fixtureTime, Message: Resume{CommandID: "c"}})
	require.Error(t, err)
	_, err = Encode(V1, Frame{Message: Resume{CommandID: "c"}})
	require.Error(t, err, "zero time")
	big := Event{Level: LevelInfo, Kind: "k", At: fixtureTime, Message: strings.Repeat("x", MaxMessageBytes)}
	_, err = Encode(V2, Frame{Time: fixtureTime, Message: big})
	require.ErrorIs(t, err, ErrOversized)
}

func TestV1EncodingDropsV2Fields(t *testing.T) {
	s := samples(V2)[TypeState]
	raw, err := Encode(V1, Frame{Time: fixtureTime, Message: s})
	require.NoError(t, err)
	require.NotContains(t, string(raw), "memory_rss_bytes")
	require.NotContains(t, string(raw), "oldest_task_age_ms")
	raw, err = Encode(V2, Frame{Time: fixtureTime, Message: s})
	require.NoError(t, err)
	require.Contains(t, string(raw), `"memory_rss_bytes":50331648`)
	// The caller's value is untouched by the downgrade.
	require.NotNil(t, s.(State).Workers[0].OldestTaskAgeMillis)
}

func TestDecodeErrors(t *testing.T) {
	valid := func(body string) string {
		return `{"type":"resume","id":"m1","time":"2026-01-01T00:00:00Z","body":` + body + `}`
	}
	cases := []struct {
		name string
		in   string
		kind error
	}{
		{"empty", ``, ErrMalformed},
		{"not json", `hello`, ErrMalformed},
		{"array", `[1,2]`, ErrMalformed},
		{"trailing data", valid(`{"command_id":"c"}`) + `{}`, ErrMalformed},
		{"no type", `{"id":"m","time":"2026-01-01T00:00:00Z","body":{}}`, ErrMalformed},
		{"unknown type", `{"type":"acting","id":"m","time":"2026-01-01T00:00:00Z","body":{}}`, ErrUnknownType},
		{"no id", `{"type":"resume","time":"2026-01-01T00:00:00Z","body":{"command_id":"c"}}`, ErrMalformed},
		{"bad time", `{"type":"resume","id":"m","time":"yesterday","body":{"command_id":"c"}}`, ErrMalformed},
		{"no body", `{"type":"resume","id":"m","time":"2026-01-01T00:00:00Z"}`, ErrMalformed},
		{"body not object", valid(`"x"`), ErrMalformed},
		{"wrong field type", valid(`{"command_id":7}`), ErrMalformed},
		{"missing command id", valid(`{}`), ErrMalformed},
		{"hello bad range", `{"type":"hello","id":"m","time":"2026-01-01T00:00:00Z","body":{"version":1,"min_version":2}}`, ErrMalformed},
		{"secret not a string", `{"type":"hello","id":"m","time":"2026-01-01T00:00:00Z","body":{"version":1,"min_version":1,"token":5}}`, ErrMalformed},
		{"oversized", valid(`{"command_id":"` + strings.Repeat("a", MaxMessageBytes) + `"}`), ErrOversized},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode([]byte(c.in))
			require.ErrorIs(t, err, c.kind)
			var de *DecodeError
			require.ErrorAs(t, err, &de)
			e := ErrorFor(err)
			require.NotEmpty(t, e.Code)
			_, encErr := Encode(V1, Frame{Time: fixtureTime, Message: e})
			require.NoError(t, encErr, "the protocol error for it must be sendable")
		})
	}
	f, err := Decode([]byte(valid(`{"command_id":"c","added_in_v9":true}`)))
	require.NoError(t, err, "fields of a newer version are ignored")
	require.Equal(t, Resume{CommandID: "c"}, f.Message)
}

func TestDecodeErrorDoesNotEchoSecrets(t *testing.T) {
	in := `{"type":"hello","id":"m","time":"2026-01-01T00:00:00Z","body":{"version":"` + fixtureToken + `","token":"` + fixtureToken + `"}}`
	_, err := Decode([]byte(in))
	require.Error(t, err)
	require.NotContains(t, err.Error(), fixtureToken)
}

func TestSecretIsRedactedEverywhereButTheWire(t *testing.T) {
	creds := sampleCredentials()
	tok := NewSecret(fixtureToken)
	type holder struct {
		Creds  Credentials
		hidden Secret
	}
	h := holder{Creds: creds, hidden: tok}

	var outs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
		outs = append(outs, fmt.Sprintf(verb, tok), fmt.Sprintf(verb, h), fmt.Sprintf(verb, &h), fmt.Sprintf(verb, creds))
	}
	outs = append(outs, tok.String(), fmt.Sprint(tok), fmt.Sprintln(creds), fmt.Errorf("wrap: %v", creds).Error())
	js, err := json.Marshal(h)
	require.NoError(t, err)
	outs = append(outs, string(js))
	txt, err := tok.MarshalText()
	require.NoError(t, err)
	outs = append(outs, string(txt))
	mk, err := json.Marshal(map[Secret]int{tok: 1})
	require.NoError(t, err)
	outs = append(outs, string(mk))

	var logs bytes.Buffer
	for _, lg := range []*slog.Logger{
		slog.New(slog.NewTextHandler(&logs, nil)),
		slog.New(slog.NewJSONHandler(&logs, nil)),
	} {
		lg.Info("creds", "token", tok, "creds", creds, "holder", h, "ptr", &h, slog.Any("group", []Secret{tok}))
		lg.Info("welcome", "msg", samples(V2)[TypeWelcome], "hello", samples(V2)[TypeHello])
	}
	outs = append(outs, logs.String())
	for _, o := range outs {
		for _, secret := range []string{fixtureToken, fixturePassword, fixtureTOTP} {
			require.NotContains(t, o, secret)
			require.NotContains(t, o, fmt.Sprintf("%x", secret))
		}
	}
	require.Contains(t, logs.String(), Redacted)

	// The wire carries them, and they come back intact.
	for _, typ := range []Type{TypeHello, TypeWelcome, TypeRotateCredentials} {
		raw, err := Encode(Current, sampleFrame(Current, typ))
		require.NoError(t, err)
		f, err := Decode(raw)
		require.NoError(t, err)
		switch m := f.Message.(type) {
		case Hello:
			require.Contains(t, string(raw), fixtureToken)
			require.Equal(t, fixtureToken, m.Token.Reveal())
		case Welcome:
			require.Contains(t, string(raw), fixturePassword)
			require.Equal(t, fixtureTOTP, m.Credentials.TOTPSecret.Reveal())
		case RotateCredentials:
			require.Equal(t, fixturePassword, m.Credentials.Password.Reveal())
		}
	}
	require.True(t, tok.Equal(NewSecret(fixtureToken)))
	require.False(t, tok.Equal(NewSecret("other")))
	require.True(t, Secret{}.IsZero())
}

func TestEstimatorPicksLowestRoundTrip(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// The agent's clock runs 2 s ahead.
	const ahead = 2 * time.Second
	mk := func(at time.Duration, up, down time.Duration) Sample {
		t0 := base.Add(at)
		t1 := t0.Add(up).Add(ahead)
		t2 := t1.Add(time.Millisecond)
		t3 := t2.Add(-ahead).Add(down)
		return Sample{T0: t0, T1: t1, T2: t2, T3: t3}
	}
	e := NewEstimator(3)
	_, ok := e.Estimate()
	require.False(t, ok)

	require.NoError(t, e.Add(mk(0, 300*time.Millisecond, 10*time.Millisecond))) // asymmetric, rt 310 ms
	est, ok := e.Estimate()
	require.True(t, ok)
	require.Equal(t, 310*time.Millisecond, est.RoundTrip)
	require.Equal(t, 155*time.Millisecond, est.ErrorBound)
	require.InDelta(t, float64(ahead), float64(est.Offset), float64(est.ErrorBound), "true offset within the bound")

	require.NoError(t, e.Add(mk(30*time.Second, 5*time.Millisecond, 5*time.Millisecond))) // rt 10 ms
	require.NoError(t, e.Add(mk(60*time.Second, 100*time.Millisecond, 100*time.Millisecond)))
	est, _ = e.Estimate()
	require.Equal(t, 10*time.Millisecond, est.RoundTrip)
	require.Equal(t, ahead, est.Offset)
	require.Equal(t, 5*time.Millisecond, est.ErrorBound)
	require.True(t, est.ToPanel(base.Add(time.Hour+ahead)).Equal(base.Add(time.Hour)))

	// The good sample leaves the window after three newer ones.
	for i := range 3 {
		require.NoError(t, e.Add(mk(time.Duration(90+30*i)*time.Second, 40*time.Millisecond, 60*time.Millisecond)))
	}
	est, _ = e.Estimate()
	require.Equal(t, 100*time.Millisecond, est.RoundTrip)

	// Inconsistent samples are refused and change nothing.
	bad := mk(0, time.Millisecond, time.Millisecond)
	bad.T3 = bad.T0.Add(-time.Second)
	require.ErrorIs(t, e.Add(bad), ErrBadSample)
	require.ErrorIs(t, e.Add(Sample{}), ErrBadSample)
	est2, _ := e.Estimate()
	require.Equal(t, est, est2)

	p := Pong{CommandID: "c", PingSentAt: base, ReceivedAt: base.Add(ahead + time.Millisecond), SentAt: base.Add(ahead + 2*time.Millisecond)}
	s := SampleFromPong(p, base.Add(3*time.Millisecond))
	require.Equal(t, 2*time.Millisecond, s.RoundTrip())
	require.Equal(t, ahead, s.Offset())
}

func TestDecodeErrorKindsAreDistinct(t *testing.T) {
	require.False(t, errors.Is(ErrMalformed, ErrUnknownType))
}
