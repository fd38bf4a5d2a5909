//go:build linux

package framework

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// echoOnce answers one line per connection of l with "<who>:<line>".
func echoOnce(l net.Listener, who string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			b := make([]byte, 64)
			n, _ := c.Read(b)
			_, _ = c.Write([]byte(who + ":" + string(b[:n])))
		}()
	}
}

func roundTrip(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), addr string) (string, error) {
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := c.Write([]byte("hi")); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// TestPodNetwork: Pods have their own loopback and ports, reach each other
// and the gateway, the test process reaches into them, processes run in
// them see the Pod's hosts, and Close leaves nothing behind.
func TestPodNetwork(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	// What a crashed run leaves: a namespace with our prefix, a process in
	// it. The next network removes both.
	stale := netnsPrefix + "0-0-stale"
	if out, err := exec.Command("ip", "netns", "add", stale).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	sleeper := exec.Command("ip", "netns", "exec", stale, "sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	sleeperDone := make(chan error, 1)
	go func() { sleeperDone <- sleeper.Wait() }()
	// `ip netns exec` enters the namespace after it starts: wait until it
	// has, or on a busy machine the sweep may run first and find nobody.
	for {
		out, err := exec.CommandContext(ctx, "ip", "netns", "pids", stale).Output()
		if err != nil {
			t.Fatalf("ip netns pids %s: %v", stale, err)
		}
		if strings.Contains(" "+strings.Join(strings.Fields(string(out)), " ")+" ", fmt.Sprintf(" %d ", sleeper.Process.Pid)) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the stale namespace's process never entered it")
		case <-time.After(10 * time.Millisecond):
		}
	}

	n := NewTestPodNetwork(t)
	if _, err := os.Stat(filepath.Join("/run/netns", stale)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale namespace %s still there: %v", stale, err)
	}
	select {
	case <-sleeperDone:
	case <-ctx.Done():
		t.Fatal("the process of the stale namespace was not killed")
	}

	a := NewTestPod(t, n, PodOptions{Name: "a", Hosts: map[string]netip.Addr{"istiod.istio-system.svc": n.Gateway()}})
	b := NewTestPod(t, n, PodOptions{Name: "b"})
	// The gateway's MAC stays what it was, however many Pods join (an
	// unset bridge address follows the lowest port's).
	for i := range 6 {
		NewTestPod(t, n, PodOptions{Name: fmt.Sprintf("more-%d", i)})
	}
	if got := sysNet(t, n.Bridge(), "address"); got != bridgeMAC {
		t.Errorf("bridge address %s after adding Pods, want %s", got, bridgeMAC)
	}
	if got := sysNet(t, n.Bridge(), "addr_assign_type"); got != "3" { // NET_ADDR_SET
		t.Errorf("bridge addr_assign_type %s, want 3 (set, so the kernel never changes it)", got)
	}
	if a.IP() == b.IP() || !podNetworkPrefix.Contains(a.IP()) || a.IP().IsLoopback() {
		t.Fatalf("pod IPs %s, %s: want distinct addresses in %s", a.IP(), b.IP(), podNetworkPrefix)
	}

	// The same port on two Pods' loopbacks: no clash, each its own.
	la, err := a.Listen(ctx, "tcp", "127.0.0.1:15000")
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	go echoOnce(la, "a-lo")
	lb, err := b.Listen(ctx, "tcp", "127.0.0.1:15000")
	if err != nil {
		t.Fatalf("second pod cannot bind the port the first holds: %v", err)
	}
	defer lb.Close()
	go echoOnce(lb, "b-lo")
	for pod, want := range map[*Pod]string{a: "a-lo:hi", b: "b-lo:hi"} {
		if got, err := roundTrip(ctx, pod.Dial, "127.0.0.1:15000"); err != nil || got != want {
			t.Errorf("loopback of %s: got %q, %v; want %q", pod.Netns(), got, err, want)
		}
	}

	// Pod to Pod over the bridge, host to Pod, Pod to the gateway.
	ls, err := a.Listen(ctx, "tcp", netip.AddrPortFrom(a.IP(), 8080).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	go echoOnce(ls, "a-pod")
	var host net.Dialer
	for name, dial := range map[string]func(context.Context, string, string) (net.Conn, error){"pod b": b.Dial, "host": host.DialContext} {
		if got, err := roundTrip(ctx, dial, ls.Addr().String()); err != nil || got != "a-pod:hi" {
			t.Errorf("%s to pod a: got %q, %v", name, got, err)
		}
	}
	gw, err := net.Listen("tcp", netip.AddrPortFrom(n.Gateway(), 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	go echoOnce(gw, "host")
	if got, err := roundTrip(ctx, a.Dial, gw.Addr().String()); err != nil || got != "host:hi" {
		t.Errorf("pod to gateway: got %q, %v", got, err)
	}

	// HTTP from inside a Pod.
	hl, err := b.Listen(ctx, "tcp", "127.0.0.1:8081")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "from b") })}
	go func() { _ = srv.Serve(hl) }()
	defer srv.Close()
	resp, err := b.HTTPClient().Get("http://127.0.0.1:8081/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "from b" {
		t.Errorf("HTTP inside pod b: %q", body)
	}
	if _, err := a.HTTPClient().Get("http://127.0.0.1:8081/"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("pod a reached pod b's loopback server: %v", err)
	}

	// A process in the Pod: its address and its hosts.
	out, err := a.Command("sh", "-c", "cat /etc/hosts; cat /proc/net/fib_trie").CombinedOutput()
	if err != nil {
		t.Fatalf("command in pod: %v: %s", err, out)
	}
	for _, want := range []string{"198.18.0.1\tistiod.istio-system.svc", a.IP().String()} {
		if !strings.Contains(string(out), want) {
			t.Errorf("process in pod a does not see %q:\n%s", want, out)
		}
	}

	if _, err := a.Dial(ctx, "tcp", "localhost:15000"); err == nil {
		t.Error("Dial resolved a host name; only IP literals are safe inside a pod")
	}

	// Close removes every namespace, veth and the bridge.
	names := []string{filepath.Join("/run/netns", a.Netns()), filepath.Join("/run/netns", b.Netns()),
		filepath.Join("/sys/class/net", n.Bridge()), filepath.Join("/sys/class/net", a.veth), filepath.Join("/etc/netns", a.Netns())}
	for _, p := range names[:4] {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s missing while the network is up: %v", p, err)
		}
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range names {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after Close: %v", p, err)
		}
	}
	if _, err := n.AddPod(ctx, PodOptions{}); err == nil {
		t.Error("AddPod on a closed network succeeded")
	}
	// The lock is free again: a new network can start at once.
	ctx2, cancel2 := context.WithTimeout(ctx, 5*time.Second)
	defer cancel2()
	n2, err := NewPodNetwork(ctx2, PodNetworkOptions{})
	if err != nil {
		t.Fatalf("network after Close: %v", err)
	}
	if err := n2.Close(); err != nil {
		t.Fatal(err)
	}
}

// sysNet reads attribute attr of link from /sys/class/net.
func sysNet(t *testing.T, link, attr string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/class/net", link, attr))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
