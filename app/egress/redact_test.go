package egress_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/egress"
)

// TestRedactErrorKeepsTheCauseAndDropsTheToken: the url.Error of a real
// refused request quotes the whole URL; after RedactError only the scheme
// and host remain, the refusal stays findable.
func TestRedactErrorKeepsTheCauseAndDropsTheToken(t *testing.T) {
	g, err := egress.New(egress.Config{})
	require.NoError(t, err)
	c := g.Client(egress.ClientOptions{Timeout: 5 * time.Second})
	for _, target := range []string{
		"http://127.0.0.1:9/services/T0ken4Path77/B1?token=Qu3ryT0ken99&x=1",
		"http://127.0.0.1:9/p/T0ken4Path77?token=Qu3ry%20T0ken99#Fr4gm3ntT0k",
		"http://127.0.0.1:9/%54%30ken4Path77?sig=Qu3ryT0ken99",
	} {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, target, nil)
		require.NoError(t, err)
		_, err = c.Do(req)
		require.Error(t, err)
		red := egress.RedactError(err, target)
		for _, tok := range []string{"T0ken4Path77", "%54%30ken4Path77", "Qu3ryT0ken99", "Qu3ry", "Fr4gm3ntT0k", "token="} {
			require.NotContains(t, red.Error(), tok, target)
		}
		require.Contains(t, red.Error(), "http://127.0.0.1:9/…")
		require.Contains(t, red.Error(), "refused")
		_, isRefusal := egress.AsRefusal(red)
		require.True(t, isRefusal)
	}
	require.NoError(t, egress.RedactError(nil, "http://x/y"))
	require.Equal(t, "https://hooks.example.com", egress.RedactEndpoint("https://hooks.example.com"))
	require.Equal(t, "https://hooks.example.com/…", egress.RedactEndpoint("https://hooks.example.com/T0?k=v"))
	require.Equal(t, "(malformed URL)", egress.RedactEndpoint("::"))
}
