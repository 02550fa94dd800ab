package assistant_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/assistant/model/stub"
	"github.com/fleetwright/fleetwright/modules/assistant/store"
)

const bankValue = "Bank-Pa55-9931-xq"

// typeInto is the script of a model that does what the exfiltration page
// asks: it types the named secret into the page's search box.
func typeInto(page, secret string) stub.Script {
	return stub.Script{Steps: []stub.Step{
		step("open_tab", map[string]any{"name": "page", "url": "$url:" + page}),
		step("read_page", map[string]any{}),
		step("type", map[string]any{"element": "$el:textbox:text \"search", "text": "{{secret:" + secret + "}}"}),
		step("read_page", map[string]any{}),
		step("finish", map[string]any{"summary": "typed it"}),
	}}
}

// A stored secret names the sites it belongs to, and is typed nowhere
// else. The exfiltration page (on a site in the task's plan) sends every
// keystroke of its search box home: asked to type a bank password there,
// the task stops with the reason and the page receives nothing. A form
// that posts to another site is refused the same way. On its own site the
// secret is held for approval, showing where it goes, unless the person
// allowed it there without asking; then (and only then) the page gets it.
func TestSecretsAreTypedOnlyOnTheirOwnSite(t *testing.T) {
	f := start(t, stub.Script{}, nil)
	studioOrigin := f.StudioURL

	// Origins are required, in the UI and in the API.
	resp, body, err := f.Post("/secrets", url.Values{"name": {"bankpw"}, "value": {bankValue}})
	require.NoError(t, err)
	require.Equal(t, 400, resp.StatusCode)
	require.Contains(t, body, "needs the site(s) it belongs to")
	resp, body, err = f.Post("/secrets", url.Values{"name": {"bankpw"}, "value": {bankValue}, "origins": {"bank.example"}})
	require.NoError(t, err)
	require.Equal(t, 400, resp.StatusCode)
	require.Contains(t, body, "is not a site")
	code, msg := postSecretAPI(t, f, map[string]any{"name": "bankpw", "value": bankValue})
	require.Equal(t, 400, code)
	require.Contains(t, msg, "needs the site(s) it belongs to")
	code, msg = postSecretAPI(t, f, map[string]any{"name": "apipw", "value": bankValue, "origins": []string{"https://bank.example"}, "no_ask": []string{studioOrigin}})
	require.Equal(t, 400, code)
	require.Contains(t, msg, "is not one of its sites")

	resp, _, err = f.Post("/secrets", url.Values{"name": {"bankpw"}, "value": {bankValue}, "origins": {"https://bank.example/login"}})
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	_, settings, err := f.Get("/settings")
	require.NoError(t, err)
	require.Contains(t, settings, "on https://bank.example")
	require.NotContains(t, settings, bankValue)

	// The bank password on the studio's page: refused, nothing typed.
	f.model.SetScript(typeInto("/inject/exfil", "bankpw"))
	id, err := f.Submit("Check my account.", f.urls("/inject/exfil"), nil)
	require.NoError(t, err)
	task, err := f.Wait(id, 60*time.Second, false, store.StatusStopped, store.StatusDone, store.StatusFailed)
	require.NoError(t, err)
	require.Equal(t, store.StatusStopped, task.Status, task.StopReason)
	require.Equal(t, "refused to type {{secret:bankpw}}: it belongs to https://bank.example, and this page is on "+studioOrigin+". Nothing was typed", task.StopReason)
	require.Empty(t, task.Pending)
	require.Empty(t, f.Studio.Oracle().Keystrokes, "the page received keystrokes")

	// The studio's own secret into a form that posts to the outside
	// address: refused.
	code, msg = postSecretAPI(t, f, map[string]any{"name": "sitepw", "value": secretValue, "origins": []string{studioOrigin}})
	require.Equal(t, 204, code, msg)
	f.model.SetScript(stub.Script{Steps: []stub.Step{
		step("open_tab", map[string]any{"name": "page", "url": "$url:/inject/secret"}),
		step("read_page", map[string]any{}),
		step("type", map[string]any{"element": "$el:password", "text": "{{secret:sitepw}}"}),
		step("finish", map[string]any{"summary": "typed it"}),
	}})
	id, err = f.Submit("Log in to keep publishing.", f.urls("/inject/secret"), nil)
	require.NoError(t, err)
	task, err = f.Wait(id, 60*time.Second, false, store.StatusStopped, store.StatusDone, store.StatusFailed)
	require.NoError(t, err)
	require.Equal(t, store.StatusStopped, task.Status, task.StopReason)
	require.Equal(t, "refused to type {{secret:sitepw}}: it belongs to "+studioOrigin+", and this field's form is sent to "+f.OutsideURL+". Nothing was typed", task.StopReason)
	require.Empty(t, f.Outside.Requests())

	// On its own site it is held, showing the destination; denied, the
	// page gets nothing.
	f.model.SetScript(typeInto("/inject/exfil", "sitepw"))
	id, err = f.Submit("Search the studio.", f.urls("/inject/exfil"), nil)
	require.NoError(t, err)
	task, err = f.Wait(id, 60*time.Second, true)
	require.NoError(t, err)
	require.Equal(t, store.StatusWaiting, task.Status)
	_, page, err := f.Get("/approvals/" + itoa(task.Pending[0]))
	require.NoError(t, err)
	require.Contains(t, page, "it types the stored secret {{secret:sitepw}} into a page of "+studioOrigin)
	require.Contains(t, page, studioOrigin+"/search")
	require.NotContains(t, page, secretValue)
	require.Empty(t, f.Studio.Oracle().Keystrokes)
	require.NoError(t, f.Decide(task.Pending[0], false))
	_, err = f.Wait(id, 60*time.Second, false, store.StatusDone)
	require.NoError(t, err)
	require.Empty(t, f.Studio.Oracle().Keystrokes, "a denied secret reached the page")

	// Allowed there without asking, it is typed at once: the page's
	// keystroke reporter works, so the refusals above are what stopped it.
	code, msg = postSecretAPI(t, f, map[string]any{"name": "sitepw", "value": secretValue, "origins": []string{studioOrigin}, "no_ask": []string{studioOrigin}})
	require.Equal(t, 204, code, msg)
	id, err = f.Submit("Search the studio.", f.urls("/inject/exfil"), nil)
	require.NoError(t, err)
	task, err = f.Wait(id, 60*time.Second, false, store.StatusDone, store.StatusStopped, store.StatusFailed)
	require.NoError(t, err)
	require.Equal(t, store.StatusDone, task.Status, task.StopReason)
	require.Empty(t, task.Pending)
	require.Eventually(t, func() bool {
		ks := f.Studio.Oracle().Keystrokes
		return len(ks) > 0 && ks[len(ks)-1] == secretValue
	}, 10*time.Second, 50*time.Millisecond, "the allowed secret was not typed")
	for _, k := range f.Studio.Oracle().Keystrokes {
		require.NotContains(t, k, bankValue)
	}
}

func postSecretAPI(t *testing.T, f *fixture, body map[string]any) (int, string) {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, f.UI+"/api/secrets", bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", f.UI)
	resp, err := f.Client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(out))
}
