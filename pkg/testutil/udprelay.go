package testutil

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// UDPRelay forwards the datagrams it receives on an address to a target,
// and the target's answers back to their sender: the UDP half of a proxy
// in front of a port that speaks both (memberlist gossips over UDP and
// TCP on one port; pair it with a TCPProxy on the same address). Cut, it
// drops every datagram both ways, as a partitioned network would; restored,
// it forwards again. Safe for concurrent use.
type UDPRelay struct {
	target *net.UDPAddr
	conn   *net.UDPConn
	cut    atomic.Bool

	mu       sync.Mutex              // guards upstream
	upstream map[string]*net.UDPConn // by sender address
	wg       sync.WaitGroup
}

// StartUDPRelay relays UDP from addr (host:port; port 0 picks one) to
// target; it is closed when t ends.
func StartUDPRelay(t testing.TB, addr, target string) *UDPRelay {
	t.Helper()
	ta, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		t.Fatalf("udp relay: target: %v", err)
	}
	la, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatalf("udp relay: address: %v", err)
	}
	conn, err := net.ListenUDP("udp", la)
	if err != nil {
		t.Fatalf("udp relay: %v", err)
	}
	r := &UDPRelay{target: ta, conn: conn, upstream: map[string]*net.UDPConn{}}
	r.wg.Add(1)
	go r.serve()
	t.Cleanup(r.close)
	return r
}

// Addr returns the address the relay receives on.
func (r *UDPRelay) Addr() string { return r.conn.LocalAddr().String() }

// Cut drops every datagram from now on, both ways.
func (r *UDPRelay) Cut() { r.cut.Store(true) }

// Restore forwards again.
func (r *UDPRelay) Restore() { r.cut.Store(false) }

func (r *UDPRelay) serve() {
	defer r.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := r.conn.ReadFromUDP(buf)
		if err != nil {
			return
		}
		if r.cut.Load() {
			continue
		}
		up, err := r.upstreamFor(from)
		if err != nil {
			continue
		}
		_, _ = up.Write(buf[:n])
	}
}

// upstreamFor returns the socket that carries from's datagrams to the
// target, starting the copy of the target's answers back to from.
func (r *UDPRelay) upstreamFor(from *net.UDPAddr) (*net.UDPConn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if up := r.upstream[from.String()]; up != nil {
		return up, nil
	}
	up, err := net.DialUDP("udp", nil, r.target)
	if err != nil {
		return nil, err
	}
	r.upstream[from.String()] = up
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, err := up.Read(buf)
			if err != nil {
				return
			}
			if !r.cut.Load() {
				_, _ = r.conn.WriteToUDP(buf[:n], from)
			}
		}
	}()
	return up, nil
}

func (r *UDPRelay) close() {
	_ = r.conn.Close()
	r.mu.Lock()
	for _, up := range r.upstream {
		_ = up.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
