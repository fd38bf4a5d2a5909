package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/proxystatus"
	"github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/xdsgen"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// echoWeights is echoCanary with the default route split v1/v2 by w.
func echoWeights(w int) string {
	return strings.Replace(echoCanary, "weight: 90}\n    - {destination: {host: echo, subset: v2}, weight: 10}",
		fmt.Sprintf("weight: %d}\n    - {destination: {host: echo, subset: v2}, weight: %d}", w, 100-w), 1)
}

// configStatus runs `meshfedctl config-status -o json KIND/NS/NAME`
// against hub.
func configStatus(t *testing.T, hub *framework.Hub, object string) (proxystatus.ObjectRollout, error) {
	t.Helper()
	out, err := framework.Meshfedctl(t, "config-status", "--monitoring", strings.TrimPrefix(hub.MonitoringURL(), "http://"), "-o", "json", object)
	if err != nil {
		return proxystatus.ObjectRollout{}, err
	}
	var o proxystatus.ObjectRollout
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		return o, fmt.Errorf("decoding %q: %w", out, err)
	}
	return o, nil
}

// TestConfigStatusRollout: a VirtualService's generations are followed to
// every proxy of a fleet of three replicas, asked of any replica:
// meshfedctl config-status shows each generation reaching every proxy
// (each on its own replica, in its own cluster), a proxy that rejects the
// route as NACKED with its error, and the object's removal rolling out.
func TestConfigStatusRollout(t *testing.T) {
	f, hubs := versionedFleet(t, 3)
	// One proxyless client per replica, each in another cluster.
	clusters := map[string]bool{}
	for i, h := range hubs {
		id := f.Remotes()[i].ID
		expectClusters(t, clientIn(t, f, h, id), 10, id)
		clusters[string(id)] = true
	}
	applyIstio(t, f, echoSubsets)
	applyIstio(t, f, echoCanary)
	const vs = "VirtualService/demo/echo"

	// rolledOut waits until, asked of via, generation gen (or more, when
	// atLeast) of the VirtualService has reached synced of proxies, with
	// the rest in the states of pending (state by cluster).
	rolledOut := func(via *framework.Hub, gen int64, deleted bool, synced, proxies int, pending map[string]proxystatus.RolloutState) proxystatus.ObjectRollout {
		t.Helper()
		var last proxystatus.ObjectRollout
		testutil.Eventually(t, converge, poll, func() error {
			o, err := configStatus(t, via, vs)
			if err != nil {
				return err
			}
			last = o
			if o.Generation != gen || o.Deleted != deleted {
				return fmt.Errorf("via %s: generation %d deleted %v, want %d %v", via.ReplicaID(), o.Generation, o.Deleted, gen, deleted)
			}
			if o.Proxies != proxies || o.Synced != synced {
				return fmt.Errorf("via %s: %s (pending %+v)", via.ReplicaID(), o.Summary(), o.Pending)
			}
			got := map[string]proxystatus.RolloutState{}
			for _, p := range o.Pending {
				got[p.Cluster] = p.State
			}
			if fmt.Sprint(got) != fmt.Sprint(pending) {
				return fmt.Errorf("via %s: pending %+v, want %v", via.ReplicaID(), o.Pending, pending)
			}
			for _, r := range o.Replicas {
				if r.Behind || r.Proxies == 0 {
					return fmt.Errorf("via %s: replica %+v is behind or serves nothing", via.ReplicaID(), r)
				}
			}
			return nil
		})
		return last
	}
	first := rolledOut(hubs[2], 1, false, 3, 3, map[string]proxystatus.RolloutState{})
	if len(first.Replicas) != 3 || len(first.Clusters) != 3 {
		t.Fatalf("want the rollout per replica and cluster: %+v", first)
	}
	for _, c := range first.Clusters {
		if !clusters[c.Cluster] || c.Proxies != 1 || c.Synced != 1 {
			t.Errorf("cluster %+v", c)
		}
	}

	// The next generation reaches all three, asked of another replica.
	applyIstio(t, f, echoWeights(50))
	rolledOut(hubs[0], 2, false, 3, 3, map[string]proxystatus.RolloutState{})
	table, err := framework.Meshfedctl(t, "config-status", "--monitoring", strings.TrimPrefix(hubs[1].MonitoringURL(), "http://"), vs)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("meshfedctl config-status %s via %s:\n%s", vs, hubs[1].ReplicaID(), table)
	if !strings.Contains(table, "VirtualService demo/echo gen 2: 3/3 proxies") {
		t.Fatalf("no rollout line in:\n%s", table)
	}

	// A proxy that rejects its routes: once it holds generation 2, it
	// NACKs generation 3, and says why. It lives in a cluster of its own,
	// which a remote secret names (the hub refuses a CLUSTER_ID no secret
	// names); that cluster's apiserver is never reached.
	dead, err := f.Remotes()[0].DeadKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Config().PutRawRemoteSecret(t.Context(), "remote-nack", map[string][]byte{"cluster-nack": dead}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, converge, poll, func() error {
		for _, h := range hubs {
			if _, ok := registryzClusterOK(t, h, "cluster-nack"); !ok {
				return fmt.Errorf("%s does not know cluster-nack yet", h.ReplicaID())
			}
		}
		return nil
	})
	listener := xdsgen.ListenerName(echoHost, 8080)
	node := &corev3.Node{
		Id:       xdsnode.SidecarID("10.250.0.9", "nacker", "demo", model.DefaultDomainSuffix),
		Metadata: xdsnode.Metadata{ClusterID: "cluster-nack"}.Struct(),
	}
	// Its certificate is of demo/nacker in cluster-1: a certificate names
	// a namespace, not a cluster.
	w := authenticatedWatcher(t, hubs[1], f.Remotes()[0], "nacker", node)
	if err := w.Watch(resourcev3.ListenerType, listener); err != nil {
		t.Fatal(err)
	}
	if err := w.Watch(resourcev3.RouteType, listener); err != nil {
		t.Fatal(err)
	}
	rolledOut(hubs[2], 2, false, 4, 4, map[string]proxystatus.RolloutState{})
	const why = "meshfed-e2e: route rejected on purpose"
	w.RejectAll(why)
	applyIstio(t, f, echoWeights(70))
	o := rolledOut(hubs[0], 3, false, 3, 4, map[string]proxystatus.RolloutState{"cluster-nack": proxystatus.RolloutNacked})
	if p := o.Pending[0]; p.Name != "nacker.demo" || p.Replica != hubs[1].ReplicaID() || !strings.Contains(p.Reason, why) {
		t.Fatalf("pending %+v, want nacker.demo on %s with %q", p, hubs[1].ReplicaID(), why)
	}
	if !strings.Contains(o.Summary(), "1 NACKED in cluster-nack") {
		t.Errorf("summary %q", o.Summary())
	}

	// The removal rolls out too; the proxy that rejects everything
	// rejects it as well.
	deleteIstio(t, f, "VirtualService", "demo", "echo")
	rolledOut(hubs[1], 3, true, 3, 4, map[string]proxystatus.RolloutState{"cluster-nack": proxystatus.RolloutNacked})
}
