//go:build linux

package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The pod network: Envoy and pilot-agent bind fixed ports (15000 admin,
// 15020/15021 status, 15090 metrics, 15004 debug, 15053 DNS), so two
// sidecars cannot share a network namespace. Each Pod gets its own, joined
// by a veth to a bridge in the host namespace. The addresses come from the
// benchmark range 198.18.0.0/15 (RFC 2544): non-loopback, so the apiserver
// takes them in EndpointSlices, and never routed off the machine, since
// every address of the range lives on the bridge.
var (
	// PodNetworkGateway is the bridge's address in the host namespace:
	// every Pod's default route, and where host listeners (hubs) are
	// reachable from the Pods.
	PodNetworkGateway = netip.MustParseAddr("198.18.0.1")
	podNetworkPrefix  = netip.MustParsePrefix("198.18.0.0/15")
)

// Names of everything a pod network creates start with these, followed by
// the owning process's ID in hex, so that what a crashed run left behind
// is found and removed (see acquirePodNetworkLock).
const (
	netnsPrefix  = "meshfed-"
	bridgePrefix = "mfbr"
	vethPrefix   = "mfv"
	// podNetworkLock serializes pod networks across processes: they all
	// want the same gateway address. It is an flock, so the kernel drops
	// it when a holder dies.
	podNetworkLock = "/run/meshfed-podnet.lock"
)

// bridgeMAC is the bridge's fixed address (locally administered, with the
// gateway's IPv4 address in its low four bytes).
const bridgeMAC = "02:00:c6:12:00:01"

// maxPods is how many Pods one network numbers: 198.18.A.B with A in
// 1..255 and B in 1..254 (A = 0 is the gateway's).
const maxPods = 255 * 254

// PodNetworkOptions configure a pod network.
type PodNetworkOptions struct {
	// IPCommand is the iproute2 binary. Default: "ip" from PATH.
	IPCommand string
}

// PodNetwork is a bridge with the address PodNetworkGateway/15 in the host
// network namespace and the Pods attached to it. Only one exists at a time
// on a machine (an flock guards it); creating a second waits for the first
// to close. Close removes every Pod and the bridge.
type PodNetwork struct {
	ipCmd  string
	id     string // process ID in hex, part of every name
	bridge string
	lock   *os.File

	mu       sync.Mutex // guards next, nextMain, pods, segments, closed
	next     int        // numbers every Pod (names)
	nextMain int        // numbers the addresses on the bridge
	pods     []*Pod
	segments []*Segment
	closed   bool
}

// NewPodNetwork takes the machine's pod-network lock (waiting for ctx at
// most), removes what earlier runs left behind, and creates the bridge.
// It needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2.
func NewPodNetwork(ctx context.Context, opts PodNetworkOptions) (_ *PodNetwork, retErr error) {
	if opts.IPCommand == "" {
		opts.IPCommand = "ip"
	}
	ipCmd, err := exec.LookPath(opts.IPCommand)
	if err != nil {
		return nil, fmt.Errorf("framework: pod network needs iproute2's ip command: %w", err)
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("framework: pod network needs root (network namespaces, veths and a bridge)")
	}
	lock, err := acquirePodNetworkLock(ctx)
	if err != nil {
		return nil, err
	}
	id := strconv.FormatInt(int64(os.Getpid()), 16)
	n := &PodNetwork{ipCmd: ipCmd, id: id, bridge: bridgePrefix + id, lock: lock}
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, n.Close())
		}
	}()
	if err := n.removeStale(ctx); err != nil {
		return nil, err
	}
	gw := netip.PrefixFrom(PodNetworkGateway, podNetworkPrefix.Bits()).String()
	for _, args := range [][]string{
		{"link", "add", n.bridge, "type", "bridge"},
		// A bridge whose address was never set takes the lowest of its
		// ports' addresses, so adding a Pod could change the gateway's
		// MAC: the Pods that had resolved it sent to the old one, which
		// the bridge drops, until their ARP entry went stale. pilot-agent's
		// connection to the hub then failed after 10 s (its TCP user
		// timeout). A set address never changes.
		{"link", "set", n.bridge, "address", bridgeMAC},
		{"addr", "add", gw, "dev", n.bridge},
		{"link", "set", n.bridge, "up"},
	} {
		if err := n.ip(ctx, args...); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// acquirePodNetworkLock takes the flock, polling until ctx ends.
func acquirePodNetworkLock(ctx context.Context) (*os.File, error) {
	f, err := os.OpenFile(podNetworkLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("framework: pod network lock: %w", err)
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("framework: pod network lock %s: %w", podNetworkLock, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("framework: another process holds the pod network (%s): %w", podNetworkLock, ctx.Err())
		case <-t.C:
		}
	}
}

// removeStale deletes the namespaces and links of earlier runs. Whoever
// holds the lock owns the only live pod network, so every name with our
// prefixes that exists now was left by a run that died.
func (n *PodNetwork) removeStale(ctx context.Context) error {
	var errs []error
	entries, err := os.ReadDir("/run/netns")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("framework: listing network namespaces: %w", err)
	}
	for _, e := range entries {
		if name := e.Name(); strings.HasPrefix(name, netnsPrefix) {
			errs = append(errs, n.killPids(ctx, name), n.ip(ctx, "netns", "delete", name))
			_ = os.RemoveAll(filepath.Join("/etc/netns", name))
		}
	}
	links, err := os.ReadDir("/sys/class/net")
	if err != nil {
		return fmt.Errorf("framework: listing links: %w", err)
	}
	for _, l := range links {
		name := l.Name()
		if strings.HasPrefix(name, bridgePrefix) || strings.HasPrefix(name, vethPrefix) {
			if err := n.ip(ctx, "link", "delete", name); err != nil && linkExists(name) {
				errs = append(errs, err) // a veth goes with its peer's namespace
			}
		}
	}
	return errors.Join(errs...)
}

// killPids SIGKILLs the processes still in namespace netns: a dead run's
// Envoy (pilot-agent's child outlives a killed agent), or a process a
// test left running in a Pod it closed.
func (n *PodNetwork) killPids(ctx context.Context, netns string) error {
	out, err := exec.CommandContext(ctx, n.ipCmd, "netns", "pids", netns).Output()
	if err != nil {
		return fmt.Errorf("framework: ip netns pids %s: %w", netns, err)
	}
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
	return nil
}

func linkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// ip runs the ip command with args.
func (n *PodNetwork) ip(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, n.ipCmd, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("framework: ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// Bridge returns the name of the network's bridge.
func (n *PodNetwork) Bridge() string { return n.bridge }

// Gateway returns the bridge's address, where Pods reach the host.
func (n *PodNetwork) Gateway() netip.Addr { return PodNetworkGateway }

// PodOptions describe one Pod's network namespace.
type PodOptions struct {
	// Name is part of the namespace's name, for people reading `ip netns`;
	// it need not be unique. Default "pod".
	Name string
	// Hosts are extra /etc/hosts entries seen by processes run in the Pod
	// (Pod.Command): the names a Pod resolves without DNS, e.g. the hub's
	// Service name mapped to the gateway.
	Hosts map[string]netip.Addr
	// Segment, when set, puts the Pod on that segment (a network of its
	// own) instead of the bridge.
	Segment *Segment
}

// AddPod creates a network namespace with the next free address
// 198.18.A.B/15 on a veth to the bridge, loopback up and a default route
// via the gateway.
func (n *PodNetwork) AddPod(ctx context.Context, opts PodOptions) (_ *Pod, retErr error) {
	if opts.Name == "" {
		opts.Name = "pod"
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, errors.New("framework: pod network is closed")
	}
	idx := n.next
	n.next++
	bridge, prefix, routes := n.bridge, podNetworkPrefix, [][]string{{"default", "via", PodNetworkGateway.String()}}
	var ip netip.Addr
	if s := opts.Segment; s != nil {
		var err error
		if ip, err = s.nextAddr(); err != nil {
			n.mu.Unlock()
			return nil, err
		}
		bridge, prefix, routes = s.bridge, s.prefix, s.podRoutes()
	} else {
		var err error
		if ip, err = n.nextMainAddrLocked(); err != nil {
			n.mu.Unlock()
			return nil, err
		}
	}
	n.mu.Unlock()

	p := &Pod{
		net:   n,
		netns: fmt.Sprintf("%s%s-%x-%s", netnsPrefix, n.id, idx, sanitize(opts.Name)),
		veth:  fmt.Sprintf("%s%s-%x", vethPrefix, n.id, idx),
		ip:    ip,
		hosts: map[string]netip.Addr{},
	}
	for name, ip := range opts.Hosts {
		p.hosts[name] = ip
	}
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, p.Close())
		}
	}()
	if len(p.veth) > unix.IFNAMSIZ-1 {
		return nil, fmt.Errorf("framework: link name %q too long", p.veth)
	}
	if err := n.ip(ctx, "netns", "add", p.netns); err != nil {
		return nil, err
	}
	if err := p.writeHosts(); err != nil {
		return nil, err
	}
	addr := netip.PrefixFrom(p.ip, prefix.Bits()).String()
	cmds := [][]string{
		// The peer is created inside the namespace, so its name (eth0)
		// never meets another Pod's in the host namespace.
		{"link", "add", p.veth, "type", "veth", "peer", "name", "eth0", "netns", p.netns},
		{"link", "set", p.veth, "master", bridge, "up"},
		{"-n", p.netns, "addr", "add", addr, "dev", "eth0"},
		{"-n", p.netns, "link", "set", "lo", "up"},
		{"-n", p.netns, "link", "set", "eth0", "up"},
	}
	for _, r := range routes {
		cmds = append(cmds, append([]string{"-n", p.netns, "route", "add"}, r...))
	}
	for _, args := range cmds {
		if err := n.ip(ctx, args...); err != nil {
			return nil, err
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, errors.New("framework: pod network closed while adding a pod")
	}
	n.pods = append(n.pods, p)
	return p, nil
}

// sanitize keeps a name usable in a namespace file name.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, strings.ToLower(s))
}

// Close removes every Pod (killing nothing: stop the processes first),
// the bridge, and releases the lock. Idempotent.
func (n *PodNetwork) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	pods := n.pods
	n.pods = nil
	n.mu.Unlock()
	var errs []error
	for _, p := range pods {
		errs = append(errs, p.Close())
	}
	// Not the caller's context: cleanup must run even when that ended.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range n.segments {
		if linkExists(s.bridge) {
			errs = append(errs, n.ip(ctx, "link", "delete", s.bridge))
		}
	}
	if linkExists(n.bridge) {
		errs = append(errs, n.ip(ctx, "link", "delete", n.bridge))
	}
	errs = append(errs, n.lock.Close()) // closing drops the flock
	return errors.Join(errs...)
}

// Pod is one network namespace on the pod network: its own loopback, its
// own ports, and an address on the bridge. The test process reaches into
// it with Dial and Listen; processes run in it through Command.
type Pod struct {
	net   *PodNetwork
	netns string
	veth  string
	ip    netip.Addr
	// legs are the host ends of its veths to the bridge beside eth0
	// (AddLeg), deleted with it.
	legs []string

	hostsMu sync.Mutex // guards hosts and the hosts file
	hosts   map[string]netip.Addr

	closeOnce sync.Once
	closeErr  error
}

// IP returns the Pod's address, 198.18.A.B (on a segment, 198.19.K.B).
func (p *Pod) IP() netip.Addr { return p.ip }

// Netns returns the name of the Pod's network namespace (`ip netns`).
func (p *Pod) Netns() string { return p.netns }

func (p *Pod) nsPath() string { return filepath.Join("/run/netns", p.netns) }

// SetHost maps name to ip in the /etc/hosts of processes started in the
// Pod from now on.
func (p *Pod) SetHost(name string, ip netip.Addr) error {
	p.hostsMu.Lock()
	p.hosts[name] = ip
	p.hostsMu.Unlock()
	return p.writeHosts()
}

// writeHosts writes the /etc/hosts that `ip netns exec` bind-mounts for
// processes of this namespace: localhost, the Pod's own address, extras.
func (p *Pod) writeHosts() error {
	p.hostsMu.Lock()
	defer p.hostsMu.Unlock()
	var b strings.Builder
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost\n")
	fmt.Fprintf(&b, "%s\t%s\n", p.ip, p.netns)
	names := make([]string, 0, len(p.hosts))
	for name := range p.hosts {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(&b, "%s\t%s\n", p.hosts[name], name)
	}
	dir := filepath.Join("/etc/netns", p.netns)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("framework: pod hosts: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hosts"), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("framework: pod hosts: %w", err)
	}
	return nil
}

// Command returns a command that runs name with args inside the Pod's
// network namespace (through `ip netns exec`, which also gives it the
// Pod's /etc/hosts).
func (p *Pod) Command(name string, args ...string) *exec.Cmd {
	return exec.Command(p.net.ipCmd, p.commandArgs(name, args...)...)
}

func (p *Pod) commandArgs(name string, args ...string) []string {
	return append([]string{"netns", "exec", p.netns, name}, args...)
}

// do runs fn on an OS thread that has entered the Pod's network
// namespace. Sockets keep the namespace they were created in, so a socket
// made by fn lives in the Pod after the thread has left it. The thread is
// switched back before it is unlocked; if that fails it stays locked and
// Go discards it when the goroutine ends.
func (p *Pod) do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- p.doLocked(fn)
	}()
	return <-errc
}

func (p *Pod) doLocked(fn func() error) error {
	self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("framework: own network namespace: %w", err)
	}
	defer unix.Close(self)
	target, err := unix.Open(p.nsPath(), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("framework: pod %s: %w", p.netns, err)
	}
	defer unix.Close(target)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("framework: entering pod %s: %w", p.netns, err)
	}
	fnErr := fn()
	if err := unix.Setns(self, unix.CLONE_NEWNET); err == nil {
		runtime.UnlockOSThread()
	}
	return fnErr
}

// literalAddr refuses host names: resolving one could run on another
// thread, in the host's namespace.
func literalAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" {
		return nil
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return fmt.Errorf("framework: pod address %q: an IP address is needed, not a name", addr)
	}
	return nil
}

// Dial connects to addr (an IP literal and port) from inside the Pod:
// 127.0.0.1 is the Pod's own loopback, e.g. Envoy's admin port.
func (p *Pod) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if err := literalAddr(addr); err != nil {
		return nil, err
	}
	var c net.Conn
	err := p.do(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Listen listens on addr (an IP literal, or empty for all of the Pod's
// addresses, and a port) inside the Pod, so a test app served by the test
// process is reachable at the Pod's address or its loopback.
func (p *Pod) Listen(ctx context.Context, network, addr string) (net.Listener, error) {
	if err := literalAddr(addr); err != nil {
		return nil, err
	}
	var l net.Listener
	err := p.do(func() error {
		var lc net.ListenConfig
		var err error
		l, err = lc.Listen(ctx, network, addr)
		return err
	})
	return l, err
}

// HTTPClient returns a client whose connections are made inside the Pod
// (no keep-alives: each request dials, so each is routed anew).
func (p *Pod) HTTPClient() *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext:       p.Dial,
			DisableKeepAlives: true,
		},
	}
}

// Close kills the processes still in the namespace (stop them gracefully
// first; this is the safety net) and deletes it; its veth goes with it.
// Idempotent.
func (p *Pod) Close() error {
	p.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var errs []error
		_, nsErr := os.Stat(p.nsPath())
		if nsErr == nil {
			errs = append(errs, p.net.killPids(ctx, p.netns))
		}
		// The veth first: deleting one end deletes both at once, whereas a
		// namespace's links go asynchronously, after its last user.
		for _, v := range append([]string{p.veth}, p.legs...) {
			if err := p.net.ip(ctx, "link", "delete", v); err != nil && linkExists(v) {
				errs = append(errs, err)
			}
		}
		if nsErr == nil {
			errs = append(errs, p.net.ip(ctx, "netns", "delete", p.netns))
		}
		_ = os.RemoveAll(filepath.Join("/etc/netns", p.netns))
		p.closeErr = errors.Join(errs...)
	})
	return p.closeErr
}

// NewTestPodNetwork creates a pod network for a test and closes it in
// t.Cleanup. It fails the test (never skips it) when the process is not
// root or iproute2 is missing: the sidecar tests need both. Create it
// before the fleet, so that cleanups remove it after the hubs listening on
// its gateway have stopped (a hub whose listen address vanished under it
// was seen to miss its stop grace).
func NewTestPodNetwork(t testing.TB) *PodNetwork {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	n, err := NewPodNetwork(ctx, PodNetworkOptions{})
	if err != nil {
		t.Fatalf("pod network (the sidecar tests run as root, with iproute2): %v", err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("closing pod network: %v", err)
		}
	})
	return n
}

// NewTestPod adds a Pod to n, failing the test on error; n's Close
// removes it.
func NewTestPod(t testing.TB, n *PodNetwork, opts PodOptions) *Pod {
	t.Helper()
	p, err := n.AddPod(t.Context(), opts)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return p
}
