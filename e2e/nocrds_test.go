//go:build linux

package e2e

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// echoProbeAbort aborts calls that carry x-probe: 1 with UNAVAILABLE.
const echoProbeAbort = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo]
  http:
  - match: [{headers: {x-probe: {exact: "1"}}}]
    fault: {abort: {grpcStatus: UNAVAILABLE, percentage: {value: 100}}}
    route: [{destination: {host: echo}}]
  - route: [{destination: {host: echo}}]
`

// TestHubWithoutIstioCRDs is issue #29's "missing CRDs are an empty
// config, not a hang": a hub whose config cluster has neither Istio's nor
// the Gateway API's CRDs becomes ready, says in /debug/configz which kinds are absent, and
// serves; once the CRDs are installed, a VirtualService applies without a
// restart.
func TestHubWithoutIstioCRDs(t *testing.T) {
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: threeRegionsN(1), NoIstioCRDs: true})
	ctx := t.Context()
	r := f.Remote("cluster-1")
	w, err := r.DeployWorkload(ctx, framework.WorkloadOptions{Namespace: "demo", Service: "echo", Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Config().PutRemoteSecret(ctx, "remotes", f.Remotes()...); err != nil {
		t.Fatal(err)
	}
	hub := framework.StartTestHub(t, f, framework.HubOptions{}) // waits for /readyz
	doc, err := hub.Configz(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !doc.Synced || len(doc.AbsentKinds) == 0 {
		t.Errorf("configz without CRDs: synced %v, absent kinds %v", doc.Synced, doc.AbsentKinds)
	}
	conn := clientIn(t, f, hub, "cluster-1")
	expectBackends(t, conn, w.Backends()...)

	if err := f.Config().InstallIstioCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	applyIstio(t, f, echoProbeAbort)
	expectProbe(t, conn, codes.Unavailable)
	testutil.Eventually(t, converge, poll, func() error {
		doc, err := hub.Configz(ctx)
		if err != nil {
			return err
		}
		// Istio's kinds are all watched now; the Gateway API's CRDs
		// were not installed.
		for _, k := range doc.AbsentKinds {
			if !validate.IsGatewayAPI(k) {
				return fmt.Errorf("%s is absent after Istio's CRDs were installed (absent: %v)", k, doc.AbsentKinds)
			}
		}
		return nil
	})
}
