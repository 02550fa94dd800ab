package browser_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/go-rod/rod/lib/proto"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/browser"
)

func TestOnceSendsThePausedRequestOnceAndFulfilsWithoutHopHeaders(t *testing.T) {
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		b, _ := io.ReadAll(r.Body)
		require.Equal(t, http.MethodPost, r.Method)
		require.Equal(t, "/book", r.URL.Path)
		require.Equal(t, `{"load":"LD-1"}`, string(b))
		require.Equal(t, "application/json", r.Header.Get("Content-Type"))
		require.Equal(t, "sid=abc", r.Header.Get("Cookie"))
		require.Equal(t, "key-1", r.Header.Get("Idempotency-Key"))
		http.SetCookie(w, &http.Cookie{Name: "seen", Value: "1", Path: "/"})
		w.Header().Set("Connection", "close")
		w.Header().Set("X-Booking", "B-7")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"booking":"B-7"}`))
	}))
	defer srv.Close()

	var sent *http.Request
	once := browser.Once{
		Send: func(r *http.Request) (*http.Response, error) {
			sent = r
			return http.DefaultTransport.RoundTrip(r)
		},
		Cookie:  func(u *url.URL) (string, error) { return "sid=abc", nil },
		Prepare: func(r *http.Request) { r.Header.Set("Idempotency-Key", "key-1") },
	}
	// As CDP hands it over in Fetch.requestPaused.
	var paused proto.NetworkRequest
	require.NoError(t, json.Unmarshal([]byte(`{"method":"POST","url":"`+srv.URL+`/book","headers":{"Content-Type":"application/json"}}`), &paused))
	ans, err := once.Do(context.Background(), &paused, []byte(`{"load":"LD-1"}`))
	require.NoError(t, err)
	require.Equal(t, 1, hits)
	require.Nil(t, sent.GetBody, "nothing a transport could rewind and resend")
	require.Equal(t, http.StatusCreated, ans.Status)
	require.Equal(t, `{"booking":"B-7"}`, string(ans.Body))

	cookies, fulfil := ans.Fulfil()
	require.Len(t, cookies, 1)
	require.Equal(t, "seen", cookies[0].Name)
	require.Equal(t, srv.URL+"/book", cookies[0].URL)
	require.Equal(t, http.StatusCreated, fulfil.ResponseCode)
	require.Equal(t, "Created", fulfil.ResponsePhrase)
	names := map[string]bool{}
	for _, h := range fulfil.ResponseHeaders {
		names[http.CanonicalHeaderKey(h.Name)] = true
	}
	require.True(t, names["X-Booking"])
	for _, hop := range []string{"Connection", "Content-Length", "Set-Cookie"} {
		require.False(t, names[hop], "%s describes the actor's connection, not the page's answer", hop)
	}
}

func TestOnceSaysHowFarAFailedRequestCame(t *testing.T) {
	stage := func(err error) browser.Stage {
		var oe *browser.OnceError
		require.True(t, errors.As(err, &oe), err)
		return oe.Stage
	}
	sends := 0
	once := browser.Once{Send: func(*http.Request) (*http.Response, error) { sends++; return nil, errors.New("connection reset") }}

	_, err := once.Do(context.Background(), &proto.NetworkRequest{Method: "POST", URL: "data:text/plain,x"}, nil)
	require.Equal(t, browser.NotBuilt, stage(err))
	once.Cookie = func(*url.URL) (string, error) { return "", errors.New("target closed") }
	_, err = once.Do(context.Background(), &proto.NetworkRequest{Method: "POST", URL: "http://127.0.0.1:9/x"}, nil)
	require.Equal(t, browser.NotBuilt, stage(err))
	require.Zero(t, sends, "a request that could not be rebuilt is not sent")

	once.Cookie = nil
	_, err = once.Do(context.Background(), &proto.NetworkRequest{Method: "POST", URL: "http://127.0.0.1:9/x"}, nil)
	require.Equal(t, browser.NoAnswer, stage(err))
	require.EqualError(t, err, "connection reset")
	require.Equal(t, 1, sends)

	// An answer that stops short of its length: the request left.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		_, _ = w.Write([]byte("short"))
	}))
	defer srv.Close()
	once.Send = http.DefaultTransport.RoundTrip
	_, err = once.Do(context.Background(), &proto.NetworkRequest{Method: "POST", URL: srv.URL}, nil)
	require.Equal(t, browser.CutOff, stage(err))
}
