package xds

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/hub/xds/xdsstatus"
	"github.com/meshfed/meshfed/pkg/proxystatus"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// TestSynczOverADS: a proxy's CDS stream is tracked, and istioctl's
// istio.io/debug/syncz request on the server's ADS gets that proxy, not
// itself, with istiod's control plane identifier; asking again on the
// stream gets a fresh answer.
func TestSynczOverADS(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	storeWriter(t, st)(shard("c1", "r1", "10.0.0.5"))
	s := runServer(t, Options{Registry: st, Replica: "hub-0"})
	addr := s.Addr().String()

	proxy := newADS(t, addr, "c1", "r1")
	proxy.subscribe(resourcev3.ClusterType) // and ACK it
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		for _, r := range s.Status().Records() {
			if r.Name == "client.demo" && r.Status(proxystatus.TypeCDS) == proxystatus.StatusSynced {
				return nil
			}
		}
		return errors.New("the proxy's CDS ACK is not tracked yet")
	})

	ctl := newADS(t, addr, "", "")
	ask := func(nonce string) *discoveryv3.DiscoveryResponse {
		t.Helper()
		if err := ctl.stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: xdsstatus.DebugSynczType, ResponseNonce: nonce,
			Node: ctl.node}); err != nil {
			t.Fatal(err)
		}
		return ctl.recv()
	}
	first := ask("istioctl") // istioctl's first request carries a nonce already
	if first.GetTypeUrl() != xdsstatus.DebugSynczType {
		t.Errorf("type %q", first.GetTypeUrl())
	}
	var ids []string
	var cds statusv3.ConfigStatus
	for _, a := range first.GetResources() {
		cc := &statusv3.ClientConfig{}
		if err := a.UnmarshalTo(cc); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, cc.GetNode().GetId())
		cds = generic(cc, resourcev3.ClusterType).GetConfigStatus()
	}
	if len(ids) != 1 || ids[0] != "client.demo" {
		t.Fatalf("answer lists %v, want client.demo alone", ids)
	}
	if cds != statusv3.ConfigStatus_SYNCED {
		t.Errorf("client.demo CDS is %v, want SYNCED", cds)
	}
	var cp struct {
		Component, ID, Replica string
		Info                   struct {
			GolangVersion string `json:"golang_version"`
		}
	}
	if err := json.Unmarshal([]byte(first.GetControlPlane().GetIdentifier()), &cp); err != nil ||
		cp.ID != xdsstatus.ControlPlaneID || cp.Replica != "hub-0" || cp.Info.GolangVersion == "" {
		t.Errorf("control plane identifier %q (%v): want ID %s, replica hub-0 and the build", first.GetControlPlane().GetIdentifier(), err, xdsstatus.ControlPlaneID)
	}

	again := ask(first.GetNonce())
	if again.GetVersionInfo() == first.GetVersionInfo() {
		t.Errorf("second answer has the first's version %q", again.GetVersionInfo())
	}
	if n := len(again.GetResources()); n != 1 {
		t.Errorf("second answer has %d resources, want 1", n)
	}
}
