package loadtest

import (
	"errors"
	"net"
	"sync"
)

// relay is a TCP proxy between one agent and its panel replica. Blocked, it
// is a blackhole: nothing passes in either direction — no byte, and no
// close either (neither FIN nor RST reaches the other side) — until it is
// unblocked, the way a partition looks to both ends.
type relay struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	blocked bool
	open    chan struct{} // closed while traffic passes
	conns   map[net.Conn]struct{}
	// agentClosed counts connections the agent's side closed while the
	// relay was blocked (the agent gave up on a silent connection).
	agentClosed int
	wg          sync.WaitGroup
}

func newRelay(target string) (*relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	open := make(chan struct{})
	close(open)
	r := &relay{ln: ln, target: target, open: open, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.serve()
	return r, nil
}

// URL is the relay's address as an agent's --panel.
func (r *relay) URL() string { return "http://" + r.ln.Addr().String() }

func (r *relay) serve() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		r.wg.Add(1)
		go r.handle(c)
	}
}

func (r *relay) handle(agent net.Conn) {
	defer r.wg.Done()
	up, err := net.Dial("tcp", r.target)
	if err != nil {
		// The replica is down (restarting): the agent sees its connection
		// closed, as it would without the relay. Not while blocked: then
		// nothing at all reaches it.
		r.wait()
		_ = agent.Close()
		return
	}
	r.track(agent, up)
	done := make(chan struct{})
	go func() { r.pipe(agent, up, true); close(done) }()
	r.pipe(up, agent, false)
	<-done
	r.untrack(agent, up)
}

// pipe copies src to dst while the relay is open; a close passes only when
// traffic does. Reading goes on while blocked (into memory), so a side that
// gives up on the silent connection is seen doing so.
func (r *relay) pipe(src, dst net.Conn, fromAgent bool) {
	chunks := make(chan []byte, 256)
	go func() {
		defer close(chunks)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- append([]byte(nil), buf[:n]...)
			}
			if err != nil {
				if fromAgent {
					r.mu.Lock()
					if r.blocked {
						r.agentClosed++
					}
					r.mu.Unlock()
				}
				return
			}
		}
	}()
	for b := range chunks {
		r.wait()
		if _, err := dst.Write(b); err != nil {
			break
		}
	}
	r.wait()
	_ = src.Close()
	_ = dst.Close()
	for range chunks {
	}
}

func (r *relay) wait() {
	r.mu.Lock()
	open := r.open
	r.mu.Unlock()
	<-open
}

func (r *relay) track(cs ...net.Conn) {
	r.mu.Lock()
	for _, c := range cs {
		r.conns[c] = struct{}{}
	}
	r.mu.Unlock()
}

func (r *relay) untrack(cs ...net.Conn) {
	r.mu.Lock()
	for _, c := range cs {
		delete(r.conns, c)
	}
	r.mu.Unlock()
}

// block starts the blackhole and resets the count of agent-side closes.
func (r *relay) block() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.blocked {
		r.blocked, r.open, r.agentClosed = true, make(chan struct{}), 0
	}
}

// unblock lets traffic (and held closes) through again; it returns how many
// connections the agent closed meanwhile.
func (r *relay) unblock() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.blocked {
		r.blocked = false
		close(r.open)
	}
	return r.agentClosed
}

// close stops the relay and every connection through it.
func (r *relay) close() {
	r.unblock()
	_ = r.ln.Close()
	r.mu.Lock()
	for c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
