package testutil

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TCPProxy forwards the TCP connections it accepts on a loopback address
// to a target, and can be cut and restored on the same address: cut, it
// refuses new connections and has closed the ones it carried, as a
// server that went down would; restored, it accepts again, as the same
// server restarted. With a latency set, it holds every chunk it forwards
// for that long, in both directions: a slow network or a slow server.
// Safe for concurrent use.
type TCPProxy struct {
	target  string
	addr    string
	latency atomic.Int64 // time.Duration

	mu    sync.Mutex // guards l and conns
	l     net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// StartTCPProxy starts a proxy to target on a free loopback port; it is
// closed when t ends.
func StartTCPProxy(t testing.TB, target string) *TCPProxy {
	t.Helper()
	p := &TCPProxy{target: target, conns: map[net.Conn]struct{}{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("tcp proxy: %v", err)
	}
	p.addr = l.Addr().String()
	p.serve(l)
	t.Cleanup(p.Cut)
	return p
}

// Addr returns the address the proxy accepts on, the same across cuts.
func (p *TCPProxy) Addr() string { return p.addr }

// Cut closes the listener and every carried connection, and waits for
// their forwarding to end. Cutting a cut proxy does nothing.
func (p *TCPProxy) Cut() {
	p.mu.Lock()
	if p.l != nil {
		_ = p.l.Close()
		p.l = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// SetLatency holds each chunk forwarded from now on for d, both ways
// (zero: none).
func (p *TCPProxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Restore accepts on the proxy's address again.
func (p *TCPProxy) Restore() error {
	l, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.serve(l)
	return nil
}

func (p *TCPProxy) serve(l net.Listener) {
	p.mu.Lock()
	p.l = l
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.forward(c)
		}
	}()
}

// forward copies between c and a new connection to the target, both
// carried (closed by Cut).
func (p *TCPProxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.l == nil { // cut meanwhile
		p.mu.Unlock()
		_ = c.Close()
		_ = up.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	var once sync.Once
	done := func() {
		once.Do(func() {
			_ = c.Close()
			_ = up.Close()
			p.mu.Lock()
			delete(p.conns, c)
			delete(p.conns, up)
			p.mu.Unlock()
		})
	}
	p.wg.Add(2)
	for _, pair := range [][2]net.Conn{{up, c}, {c, up}} {
		go func() {
			defer p.wg.Done()
			defer done()
			p.copy(pair[0], pair[1])
		}()
	}
}

// copy forwards src to dst until either fails, holding each chunk for the
// latency set.
func (p *TCPProxy) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := time.Duration(p.latency.Load()); d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// StartBlackhole listens on a free loopback port and accepts every
// connection but never reads from it nor answers: a server that hangs.
// It returns the address; the listener and the connections it holds are
// closed when t ends.
func StartBlackhole(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("blackhole: %v", err)
	}
	var mu sync.Mutex
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}
