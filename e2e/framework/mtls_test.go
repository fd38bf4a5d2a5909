package framework

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/hub/xds"
)

func TestListenPod(t *testing.T) {
	l, err := ListenPod(netip.MustParseAddr("10.31.0.9"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ap := netip.MustParseAddrPort(l.Addr().String())
	if ap.Addr().String() != "10.31.0.9" || ap.Port() == 0 {
		t.Errorf("Addr() = %s, want the Pod IP", ap)
	}
	if _, err := ListenPod(netip.MustParseAddr("192.168.0.1"), 0); err == nil {
		t.Error("ListenPod accepted a non-pod IP")
	}
}

// TestXDSEchoServer: an xDS-enabled echo server gets its inbound listener
// (named after its Pod IP) from a real hub xDS server and serves plaintext
// when the hub's security is off.
func TestXDSEchoServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	hub := xds.New(xds.Options{Addr: "127.0.0.1:0", Registry: store.New(store.Options{Self: "test"}), Log: testr.New(t)})
	hctx, hcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- hub.Run(hctx) }()
	defer func() { hcancel(); <-done }()

	podIP := netip.MustParseAddr("10.32.0.4")
	srv, err := StartXDSEchoServer(XDSServerOptions{
		HubAddr: hub.Addr().String(), Cluster: "c1", Namespace: "demo", Pod: "echo-0", PodIP: podIP, Identity: "c1/echo-0",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if err := srv.WaitServing(ctx); err != nil {
		t.Fatal(err)
	}
	target := netip.AddrPortFrom(podIP, srv.Addr().Port()).String()
	cc, err := grpc.NewClient("passthrough:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(DialPod))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if id, err := CallEcho(ctx, cc); err != nil || id != "c1/echo-0" {
		t.Fatalf("echo via %s: %q, %v", target, id, err)
	}
	if srv.PeerID() != "" {
		t.Errorf("plaintext call has peer ID %q", srv.PeerID())
	}
}
