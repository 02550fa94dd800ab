package gateway_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/cell"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// liveAgent speaks the protocol on one WebSocket in the background: it
// answers pings (so the panel measures its round trip) and keeps every
// grant, offer and answer the panel sends.
type liveAgent struct {
	t       *testing.T
	ws      *websocket.Conn
	version int
	mu      sync.Mutex
	grants  []wire.LeaseGrant
	offers  []wire.Offer
	answers map[string]wire.Message
}

func connectLive(t *testing.T, url, token string, v int) *liveAgent {
	t.Helper()
	ws := dial(t, url)
	data, err := wire.Encode(wire.Current, wire.Frame{Time: time.Now(), Message: wire.Hello{Version: v,
		MinVersion: wire.V3, Build: "test", Host: "h", Clock: time.Now(), Token: wire.NewSecret(token)}})
	require.NoError(t, err)
	f := exchange(t, ws, data)
	_, ok := f.Message.(wire.Welcome)
	require.True(t, ok, "%#v", f.Message)
	a := &liveAgent{t: t, ws: ws, version: v, answers: map[string]wire.Message{}}
	go a.read()
	return a
}

func (a *liveAgent) read() {
	for {
		_, raw, err := a.ws.Read(context.Background())
		if err != nil {
			return
		}
		f, err := wire.Decode(raw)
		if err != nil {
			a.t.Errorf("undecodable message from the panel: %v", err)
			return
		}
		a.mu.Lock()
		switch m := f.Message.(type) {
		case wire.Ping:
			now := time.Now()
			go a.send(wire.Pong{CommandID: m.CommandID, PingSentAt: m.SentAt, ReceivedAt: now, SentAt: now})
		case wire.LeaseGrant:
			a.grants = append(a.grants, m)
		case wire.Offer:
			a.offers = append(a.offers, m)
		case wire.GateResult:
			a.answers[m.RequestID] = m
		case wire.OutcomeAck:
			a.answers[m.RequestID] = m
		case wire.LeaseResult:
			a.answers[m.RequestID] = m
		case wire.ActResult:
			a.answers[m.RequestID] = m
		}
		a.mu.Unlock()
	}
}

func (a *liveAgent) send(m wire.Message) {
	data, err := wire.Encode(a.version, wire.Frame{Time: time.Now(), Message: m})
	require.NoError(a.t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = a.ws.Write(ctx, websocket.MessageText, data)
}

func (a *liveAgent) state(paused bool, workers ...wire.WorkerState) {
	a.send(wire.State{Paused: paused, Workers: workers})
}

func (a *liveAgent) granted() []wire.LeaseGrant {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]wire.LeaseGrant(nil), a.grants...)
}

func (a *liveAgent) offered() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.offers)
}

// offeredKey reports whether the job was offered to this agent.
func (a *liveAgent) offeredKey(key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, o := range a.offers {
		if o.Job.Key == key {
			return true
		}
	}
	return false
}

// grantedKey reports whether the job was granted to this agent.
func (a *liveAgent) grantedKey(key string) bool {
	for _, g := range a.granted() {
		if g.Job.Key == key {
			return true
		}
	}
	return false
}

func (a *liveAgent) answer(id string) wire.Message {
	a.t.Helper()
	var m wire.Message
	require.Eventually(a.t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		m = a.answers[id]
		return m != nil
	}, 10*time.Second, 10*time.Millisecond, "no answer to %s", id)
	return m
}

func running(name, kind string) wire.WorkerState {
	return wire.WorkerState{Name: name, Kind: kind, State: wire.WorkerRunning}
}

// published waits until the tenant's cell holds want warm actors in all
// (every replica's list read, as the dispatcher reads them): until then a
// job would be offered instead of granted.
func published(t *testing.T, m *cell.Manager, tenant string, want int) {
	t.Helper()
	require.Eventually(t, func() bool {
		lists, err := m.Warm(context.Background(), tenant)
		if err != nil {
			return false
		}
		n := 0
		for _, body := range lists {
			var actors []claim.WarmActor
			if json.Unmarshal(body, &actors) == nil {
				n += len(actors)
			}
		}
		return n == want
	}, 10*time.Second, 10*time.Millisecond, "%d warm actors are published to the cell", want)
}

// TestAssignGrantsToAWarmActorOverTheWebSocket: in assign mode the panel
// publishes only the actors that may act — on protocol v4, running, of an
// agent not paused — and grants each job to one of them over its WebSocket:
// never to a paused agent, an actor needing a person, or a v3 agent (which
// never receives a lease_grant). The actor's gate check passes with its
// token and fails with another; a NOT_SENT is granted again at once to
// another actor; the outcome settles the claim.
func TestAssignGrantsToAWarmActorOverTheWebSocket(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	rc, err := river.NewClient(riverpgxv5.New(b.db.App), &river.Config{})
	require.NoError(t, err)
	eng, err := claim.NewEngine(claim.NewStore(b.db.App, rc), claim.Config{Log: testenv.Logger(t)})
	require.NoError(t, err)
	_, err = eng.PutFilter(ctx, ops, b.tenant, claim.Filter{Name: "everything", Enabled: true})
	require.NoError(t, err)
	require.NoError(t, eng.SetDispatchMode(ctx, ops, b.tenant, claim.DispatchAssign))
	g, url := b.replica(t, "one")
	g.SetClaims(eng)
	eng.SetOfferer(g)
	eng.SetAssign(g, g)
	m := cell.New(b.db.App, eng.CellConfig(cell.Config{DefaultRedisURL: testenv.RedisURL(t), Consumer: "replica-one",
		Log: testenv.Logger(t)}))
	eng.SetCells(m)
	require.NoError(t, m.Start(ctx))
	t.Cleanup(m.Stop)
	wctx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	go eng.RunWarm(wctx)

	idOK, tokOK := b.agent(t, "acct-ok")
	_, tokPaused := b.agent(t, "acct-paused")
	_, tokPerson := b.agent(t, "acct-person")
	_, tokV3 := b.agent(t, "acct-v3")
	ok := connectLive(t, url, tokOK, wire.V4)
	paused := connectLive(t, url, tokPaused, wire.V4)
	person := connectLive(t, url, tokPerson, wire.V4)
	v3 := connectLive(t, url, tokV3, wire.V3)
	ok.state(false, running("act-1", "http_actor"), running("act-2", "http_actor"), running("watch-1", "watcher"))
	paused.state(true, running("act-1", "http_actor"))
	person.state(false, wire.WorkerState{Name: "act-1", Kind: "http_actor", State: wire.WorkerNeedsPerson})
	v3.state(false, running("act-1", "http_actor"))

	require.Eventually(t, func() bool { return len(g.WarmActors()[b.tenant]) == 2 }, 10*time.Second, 20*time.Millisecond,
		"the warm actors are measured")
	for _, a := range g.WarmActors()[b.tenant] {
		require.Equal(t, idOK, a.Agent, "only the running actors of the unpaused v4 agent are warm")
		require.Contains(t, []string{"act-1", "act-2"}, a.Worker)
		require.Positive(t, a.RTTMicros)
	}
	published(t, m, b.tenant, 2)

	sight := func(key string) {
		ok.send(wire.Detected{Worker: "watch-1", Sightings: []wire.Sighting{{SeenAt: time.Now(), Job: wire.Job{Key: key,
			PublishedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour), Origin: "Dallas, TX", Miles: 700, RateCents: 200000}}}})
	}
	for _, k := range []string{"LD-1", "LD-2", "LD-3", "LD-4"} {
		sight(k)
	}
	require.Eventually(t, func() bool { return len(ok.granted()) == 4 }, 10*time.Second, 20*time.Millisecond)
	byWorker := map[string]int{}
	for _, lg := range ok.granted() {
		byWorker[lg.Worker]++
		c, err := eng.Store().Get(ctx, b.tenant, lg.Job.Key)
		require.NoError(t, err)
		require.Equal(t, claim.Acting, c.State, "one commit: the grant is ACTING")
		require.Equal(t, lg.Token, c.Token)
		require.Equal(t, lg.Worker, c.Holder.Worker)
		require.True(t, lg.SendBy.After(lg.GrantedAt))
	}
	require.Positive(t, byWorker["act-1"], "the least busy actor is chosen: spread over both")
	require.Positive(t, byWorker["act-2"])
	for _, other := range []*liveAgent{paused, person, v3} {
		require.Empty(t, other.granted(), "never granted to a paused agent, an actor needing a person, or a v3 agent")
		require.Zero(t, other.offered(), "nothing offered while a warm actor takes the jobs")
	}

	first := ok.granted()[0]
	ok.send(wire.GateCheck{RequestID: "gate-wrong", Worker: first.Worker, Key: first.Job.Key, Token: first.Token + 1})
	gr := ok.answer("gate-wrong").(wire.GateResult)
	require.False(t, gr.OK, "a wrong token never passes the gate")
	require.Equal(t, wire.ReasonStaleToken, gr.Reason)
	ok.send(wire.GateCheck{RequestID: "gate-ok", Worker: first.Worker, Key: first.Job.Key, Token: first.Token})
	gr = ok.answer("gate-ok").(wire.GateResult)
	require.True(t, gr.OK, gr.Reason)
	sent := time.Now()
	ok.send(wire.Outcome{RequestID: "out-1", Worker: first.Worker, Key: first.Job.Key, Token: first.Token,
		OperationID: first.OperationID, Result: wire.ResultConfirmed, SentAt: &sent, ConfirmedAt: &sent})
	require.True(t, ok.answer("out-1").(wire.OutcomeAck).OK)
	c, err := eng.Store().Get(ctx, b.tenant, first.Job.Key)
	require.NoError(t, err)
	require.Equal(t, claim.Confirmed, c.State)

	// NOT_SENT: released, and granted again at once to the other actor.
	second := ok.granted()[1]
	ok.send(wire.Outcome{RequestID: "out-2", Worker: second.Worker, Key: second.Job.Key, Token: second.Token,
		OperationID: second.OperationID, Result: wire.ResultNotSent, Detail: "test"})
	require.True(t, ok.answer("out-2").(wire.OutcomeAck).OK)
	require.Eventually(t, func() bool { return len(ok.granted()) == 5 }, 10*time.Second, 20*time.Millisecond, "re-granted")
	again := ok.granted()[4]
	require.Equal(t, second.Job.Key, again.Job.Key)
	require.NotEqual(t, second.Worker, again.Worker, "to another actor")
	require.Greater(t, again.Token, second.Token, "with a fresh token")

	// The paused agent resumes: it is warm again.
	paused.state(false, running("act-1", "http_actor"))
	require.Eventually(t, func() bool { return len(g.WarmActors()[b.tenant]) == 3 }, 10*time.Second, 20*time.Millisecond)
}
