package propose_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/platform/propose"
)

// TestProposeJSONSignInWithBearerToken: a platform that signs in over a
// JSON API (a ticket carried from the password step to the code step) and
// carries the session as a bearer token: the draft sends the ticket and
// the token as variables, extracted where they came from, and holds none
// of the session's secrets. (A HAR written here: the sandbox board has no
// such dialect.)
func TestProposeJSONSignInWithBearerToken(t *testing.T) {
	const (
		pw     = "Quartz-Meadow-Ninety-3"
		code   = "493027"
		ticket = "tkt-5f0c2a9e17b84d3c"
		token  = "eyJhbGciOiJIUzI1NiJ9.c2Vzc2lvbg.Zk3j9Qx"
	)
	bearer := []propose.NV{{Name: "Authorization", Value: "Bearer " + token}, {Name: "Accept", Value: "application/json"}}
	entry := func(at, method, url string, hs []propose.NV, body string, status int, answer string) propose.Entry {
		e := propose.Entry{StartedDateTime: "2026-12-02T08:00:" + at + "Z",
			Request:  propose.Request{Method: method, URL: "https://api.board.example" + url, Headers: hs},
			Response: propose.Response{Status: status, Content: propose.Content{MimeType: "application/json", Text: answer}}}
		if body != "" {
			e.Request.PostData = &propose.PostData{MimeType: "application/json", Text: body}
		}
		return e
	}
	var h propose.HAR
	h.Log.Version = "1.2"
	h.Log.Entries = []propose.Entry{
		entry("00", "POST", "/v1/auth", nil, `{"email":"me@acme.example","password":"`+pw+`"}`, 200, `{"ticket":"`+ticket+`","mfa":true}`),
		entry("01", "POST", "/v1/auth/otp", nil, `{"ticket":"`+ticket+`","code":"`+code+`"}`, 200, `{"access_token":"`+token+`","expires_in":3600}`),
		entry("02", "GET", "/v1/jobs?since=0", bearer, "", 200, `{"items":[{"uuid":"j-1","created":1764662400,"lane":{"origin":"Reno, NV","destination":"Boise, ID"},"weight_kg":9000}],"cursor":"c-1"}`),
		entry("04", "GET", "/v1/jobs?since=c-1", bearer, "", 200, `{"items":[{"uuid":"j-2","created":1764662460,"lane":{"origin":"Mesa, AZ","destination":"Provo, UT"},"weight_kg":12000}],"cursor":"c-2"}`),
		entry("06", "GET", "/v1/jobs?since=c-2", bearer, "", 200, `{"items":[],"cursor":"c-2"}`),
		entry("07", "POST", "/v1/jobs/j-1/claim", bearer, "", 201, `{"state":"booked","claim_id":"77"}`),
		entry("09", "GET", "/v1/me/claims", bearer, "", 200, `{"claims":[{"claim_id":"77","job":"j-1"}],"total":1}`),
	}
	raw, err := json.Marshal(h)
	require.NoError(t, err)
	har, err := propose.ReadHAR(raw)
	require.NoError(t, err)
	d, err := propose.Propose(har, propose.Options{Name: "api-board"})
	require.NoError(t, err)
	text := string(d.YAML)
	t.Logf("draft:\n%s", text)
	require.NoError(t, d.Err)
	for _, s := range []string{pw, code, ticket, token} {
		require.False(t, strings.Contains(text, s), "a secret of %d bytes is in the draft", len(s))
		require.True(t, slices.Contains(d.Secrets, s), "a secret of %d bytes is registered", len(s))
	}
	for _, want := range []string{
		`json: '{"email":{{json .username}},"password":{{json .password}}}'`,
		`ticket: {json: ticket}`,
		`"ticket":{{json .vars.ticket}}`,
		`{{json .code}}`,
		`token: {json: access_token}`,
		`carry: header`,
		`value: 'Bearer {{.vars.token}}'`,
		`since: '{{.cursor}}'`,
		`next: cursor`,
		`key: {path: uuid, required: true}`,
		`published_at: {path: created, time: epoch_s, required: true}`,
		`weight: {path: weight_kg, unit: kg}`,
		`url: /v1/jobs/{{path .key}}/claim`,
		`json: {path: state, equals: booked}`,
		`booking_id: {json: claim_id}`,
		`key: {path: job}`,
		`total: total`,
	} {
		require.True(t, strings.Contains(text, want), "the draft has %s", want)
	}
}
