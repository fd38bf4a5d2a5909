package e2e

import (
	"context"
	"crypto/x509"
	"net/netip"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshfed/meshfed/e2e/framework"
)

// TestMTLSAcrossClusters: with the hub's --xds-mtls, a proxyless client in
// cluster-1 with a hub-issued certificate calls xDS-enabled gRPC servers in
// cluster-2 over mTLS (the servers see the client's SPIFFE ID), and a
// plaintext client dialing a server directly is refused.
func TestMTLSAcrossClusters(t *testing.T) {
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: threeRegionsN(2)})
	ctx := t.Context()
	if err := f.Config().PutRemoteSecret(ctx, "remotes", f.Remotes()...); err != nil {
		t.Fatal(err)
	}
	// The plaintext port is open for one client only: one without
	// certificates, which can reach no other port, shown to get nothing of
	// the secure clusters.
	hub := framework.StartTestHub(t, f, framework.HubOptions{Args: []string{"--xds-mtls"}, PlaintextXDS: true})

	_, roots := waitTrustBundle(t, hub)
	certs := &framework.CertOptions{CAAddr: hub.CAAddr(), CARoots: roots}

	c1, c2 := f.Remote("cluster-1"), f.Remote("cluster-2")
	w := deployServing(t, c2, framework.WorkloadOptions{
		Namespace: "demo", Service: "echo", Replicas: 2,
		XDS: &framework.XDSWorkloadOptions{HubAddr: hub.CAAddr(), Certs: certs},
	})

	// The client's own identity: service account demo/client of cluster-1.
	conn := dialXDS(t, certClientOptions(t, c1, hub, certs, "client"), w.Target())
	counts := expectClusters(t, conn, 20, "cluster-2")
	t.Logf("mTLS answers: %v", counts)

	const clientID = "spiffe://cluster.local/ns/demo/sa/client"
	for backend, id := range w.PeerIDs() {
		if counts[backend] > 0 && id != clientID {
			t.Errorf("%s saw client identity %q, want %q", backend, id, clientID)
		}
	}

	// A proxyless client without certificate providers cannot use the
	// secure clusters (grpc-go rejects them), so it gets no answer.
	plain := framework.NewTestXDSClient(t, framework.ClientOptions{
		HubAddr: hub.XDSAddr(), Cluster: c1.ID, Namespace: "demo", Locality: c1.Locality, Name: "plain",
	})
	pconn, err := plain.Dial(w.Target())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pconn.Close() })
	xctx, xcancel := context.WithTimeout(ctx, 5*time.Second)
	defer xcancel()
	if id, err := pconn.Call(xctx); err == nil {
		t.Errorf("xDS client without certificates answered by %s", id)
	} else {
		t.Logf("xDS client without certificates: %v", err)
	}

	// A plaintext client dialing a replica's Pod IP directly is refused.
	rep := w.Replicas()[0]
	target := netip.AddrPortFrom(rep.PodIP, rep.Addr.Port()).String()
	cc, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(framework.DialPod))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	defer pcancel()
	if id, err := framework.CallEcho(pctx, cc); err == nil {
		t.Fatalf("plaintext call to %s answered by %s", target, id)
	} else {
		t.Logf("plaintext call refused: %v", err)
	}
}

// waitTrustBundle waits until h's trust bundle has roots and returns them,
// as PEM and as a pool.
func waitTrustBundle(t *testing.T, h *framework.Hub) ([]byte, *x509.CertPool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), converge)
	defer cancel()
	pemBytes, pool, err := h.TrustBundle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return pemBytes, pool
}
