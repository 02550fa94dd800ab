package outagetest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type outageReport struct {
	Failed                 bool     `json:"failed"`
	Failures               []string `json:"failures"`
	DuplicateConfirmations int      `json:"duplicate_confirmations"`
	LostClaims             int      `json:"lost_claims"`
	PhantomClaims          int      `json:"phantom_claims"`
	StuckClaims            int      `json:"stuck_claims"`
	UnknownUnsettled       int      `json:"unknown_unsettled"`
	Conflicts              int      `json:"conflicts"`
	BoardBookings          int      `json:"board_bookings"`
	Confirmed              int      `json:"confirmed"`
	BoardOutage            *struct {
		Seconds                float64        `json:"seconds"`
		BookingsFailSeconds    float64        `json:"bookings_503_seconds"`
		AllFailSeconds         float64        `json:"all_503_seconds"`
		RefusedSeconds         float64        `json:"refused_seconds"`
		LoadsPublished         int            `json:"loads_published"`
		Sightings              int            `json:"sightings"`
		BookingRequestsRefused int            `json:"booking_requests_refused"`
		BookingsAccepted       int            `json:"bookings_accepted"`
		Judged                 int            `json:"judged"`
		Results                map[string]int `json:"results"`
		ConfirmedAfter         int            `json:"confirmed_after_return"`
		Alarms                 []struct {
			Kind       string     `json:"kind"`
			Key        string     `json:"key"`
			RaisedAt   time.Time  `json:"raised_at"`
			ResolvedAt *time.Time `json:"resolved_at"`
		} `json:"alarms"`
		Unresolved int `json:"alarms_unresolved"`
		Bad        []struct {
			Tenant, Key, Result string
		} `json:"bad"`
	} `json:"board_outage"`
}

// TestBoardOutageForMinutesLosesNothing: the real binary runs `loadtest`
// with a small fleet (6 workers: three browser watchers, three HTTP
// actors), no chaos schedule, and a 3-minute board outage — bookings
// answered 503 while the feed still shows loads, then every request 503,
// then the board down (connections refused) — while the board keeps
// publishing. Every sighting during the outage, every load published
// during it and every claim open when it began must end booked once by its
// tenant's client or settled with a reason; no load is booked twice; the
// board accepted no booking while it failed; alarms (the watchers, alive
// with work and reading nothing) were raised during it and resolved after.
func TestBoardOutageForMinutesLosesNothing(t *testing.T) {
	bin := testenv.Binary(t)
	dir, err := os.MkdirTemp(testenv.Dir(t), "outage-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755)) // the postgres user traverses it
	jsonPath := filepath.Join(dir, "report.json")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "loadtest", "--workers=6", "--browsers=3", "--chaos=off", "--duration=20s",
		"--rate=1", "--board-outage=3m", "--seed=5", "--progress=15s", "--data-dir="+filepath.Join(dir, "run"), "--json="+jsonPath)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLEET_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("loadtest output:\n%s", out.String())
	require.NoError(t, err, "loadtest exits 0 only when nothing of the outage was lost")

	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var rep outageReport
	require.NoError(t, json.Unmarshal(b, &rep))
	require.False(t, rep.Failed, "%v", rep.Failures)
	require.Zero(t, rep.DuplicateConfirmations, "no load booked twice by one client")
	require.Zero(t, rep.Conflicts)
	require.Zero(t, rep.LostClaims)
	require.Zero(t, rep.PhantomClaims)
	require.Zero(t, rep.StuckClaims)
	require.Zero(t, rep.UnknownUnsettled)
	require.Equal(t, rep.BoardBookings, rep.Confirmed)

	o := rep.BoardOutage
	require.NotNil(t, o, "the report has the outage")
	require.GreaterOrEqual(t, o.Seconds, 180.0, "the board's API failed for at least three minutes")
	require.Positive(t, o.BookingsFailSeconds)
	require.Positive(t, o.AllFailSeconds)
	require.Positive(t, o.RefusedSeconds)
	require.Positive(t, o.LoadsPublished, "the board published while its API failed")
	require.Positive(t, o.Sightings, "the watchers saw loads while bookings failed")
	require.Positive(t, o.BookingRequestsRefused, "the actors tried to book and were refused")
	require.Zero(t, o.BookingsAccepted, "nothing was booked while the API failed")
	require.Empty(t, o.Bad, "every job of the outage booked once or settled with a reason")
	require.Positive(t, o.Results["confirmed"], "jobs of the outage were booked once the board returned")
	require.Positive(t, o.ConfirmedAfter)
	require.Zero(t, o.Results["never_claimed"]+o.Results["unsettled"]+o.Results["booked_twice"])

	hung := 0
	for _, a := range o.Alarms {
		require.NotNil(t, a.ResolvedAt, "alarm %s %s resolved", a.Kind, a.Key)
		require.True(t, a.ResolvedAt.After(a.RaisedAt))
		if a.Kind == "worker.hung" {
			hung++
		}
	}
	require.Positive(t, hung, "the watchers, alive with work and reading nothing, were alarmed: %+v", o.Alarms)
	require.Zero(t, o.Unresolved)
	require.Contains(t, out.String(), "board outage:")
}
