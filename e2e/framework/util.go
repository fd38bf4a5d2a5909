package framework

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
)

// Pod IPs and where their servers listen. The apiserver rejects loopback
// addresses in EndpointSlices, so a replica's Pod IP is 10.X.A.B (X = 10 +
// the cluster's index) and its echo server listens on 127.X.A.B, the same
// address with the first octet swapped. Clients built by the framework
// dial through DialPod, which does that swap: the fleet's "pod network".
const (
	podIPFirstOctet   = 10
	firstClusterOctet = 10
)

// LocalAddr returns the loopback address where the fleet's pod with IP ip
// listens, and whether ip is a fleet pod IP (10.X.A.B with X >= 10).
func LocalAddr(ip netip.Addr) (netip.Addr, bool) {
	if !ip.Is4() {
		return ip, false
	}
	b := ip.As4()
	if b[0] != podIPFirstOctet || b[1] < firstClusterOctet {
		return ip, false
	}
	b[0] = 127
	return netip.AddrFrom4(b), true
}

// PodIP returns the Pod IP whose server listens on the loopback address
// local (the inverse of LocalAddr).
func PodIP(local netip.Addr) netip.Addr {
	b := local.As4()
	b[0] = podIPFirstOctet
	return netip.AddrFrom4(b)
}

// DialPod dials addr (host:port), first mapping a fleet pod IP to the
// loopback address its server listens on. It has the signature of
// grpc.WithContextDialer; XDSClient uses it for every data-plane
// connection.
func DialPod(ctx context.Context, addr string) (net.Conn, error) {
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		if local, ok := LocalAddr(ap.Addr()); ok {
			addr = netip.AddrPortFrom(local, ap.Port()).String()
		}
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// ipAllocator hands out the Pod IPs 10.X.A.B of one remote cluster
// (B in 1..254), reusing released ones.
type ipAllocator struct {
	mu   sync.Mutex
	x    byte
	used map[uint16]bool // A<<8 | B
	next int             // lowest index that may be free
}

// maxPodsPerCluster is how many Pod IPs one cluster can hold at once.
const maxPodsPerCluster = 256 * 254

func newIPAllocator(index int) (*ipAllocator, error) {
	x := firstClusterOctet + index
	if x > 255 {
		return nil, fmt.Errorf("too many remote clusters for 10.X.A.B pod addressing (index %d)", index)
	}
	return &ipAllocator{x: byte(x), used: map[uint16]bool{}}, nil
}

func podIPAt(x byte, n int) (netip.Addr, uint16) {
	a, b := byte(n/254), byte(n%254+1)
	return netip.AddrFrom4([4]byte{podIPFirstOctet, x, a, b}), uint16(a)<<8 | uint16(b)
}

// get returns an unused Pod IP, the lowest one first.
func (a *ipAllocator) get() (netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for n := a.next; n < maxPodsPerCluster; n++ {
		ip, key := podIPAt(a.x, n)
		if !a.used[key] {
			a.used[key] = true
			a.next = n + 1
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("all %d pod IPs 10.%d.A.B are in use", maxPodsPerCluster, a.x)
}

func (a *ipAllocator) put(ip netip.Addr) {
	b := ip.As4()
	if b[0] != podIPFirstOctet || b[1] != a.x || b[3] == 0 || b[3] == 255 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.used, uint16(b[2])<<8|uint16(b[3]))
	if n := int(b[2])*254 + int(b[3]) - 1; n < a.next {
		a.next = n
	}
}

// freeAddrs returns n distinct addresses 127.0.0.1:<port> whose ports were
// free a moment ago (all are held until all are chosen, so they differ),
// none of them one of taken: addresses chosen before for the same process,
// free again until it binds them (a hub's preset peer address was handed
// out again as its monitoring address, and the hub could not start).
// Another process may take one before the caller binds it; callers that
// hand the addresses to a child process accept that small race.
func freeAddrs(n int, taken ...string) ([]string, error) {
	return pickAddrs(func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }, n, taken)
}

// pickAddrs takes n distinct addresses of listeners that listen opens,
// none in taken; every listener is held until all are chosen.
func pickAddrs(listen func() (net.Listener, error), n int, taken []string) ([]string, error) {
	out := make([]string, 0, n)
	for tries := 0; len(out) < n; tries++ {
		if tries > n+len(taken)+64 {
			return nil, fmt.Errorf("framework: no %d free addresses apart from %v after %d listens", n, taken, tries)
		}
		l, err := listen()
		if err != nil {
			return nil, err
		}
		defer l.Close()
		a := l.Addr().String()
		if !slices.Contains(taken, a) && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out, nil
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// prefixWriter writes each complete line to w with a prefix. It is used as
// both Stdout and Stderr of a child, which os/exec serializes.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix []byte
	buf    []byte
}

func newPrefixWriter(w io.Writer, prefix string) *prefixWriter {
	return &prefixWriter{w: w, prefix: []byte(prefix)}
}

// Write buffers b and writes out every complete line. It never fails, so
// a broken log sink cannot break the child process.
func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		line := make([]byte, 0, len(p.prefix)+i+1)
		line = append(append(line, p.prefix...), p.buf[:i+1]...)
		p.buf = p.buf[i+1:]
		if _, err := p.w.Write(line); err != nil {
			return len(b), nil // a broken log sink must not break the child
		}
	}
	return len(b), nil
}

// Flush writes a trailing partial line, if any.
func (p *prefixWriter) Flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.buf) > 0 {
		line := append(append([]byte{}, p.prefix...), p.buf...)
		_, _ = p.w.Write(append(line, '\n'))
		p.buf = nil
	}
}

// FreeAddrs returns n distinct free TCP addresses on 127.0.0.1, none of
// them in taken, for listeners a test passes to hubs (gossip, peer).
func FreeAddrs(n int, taken ...string) ([]string, error) { return freeAddrs(n, taken...) }
