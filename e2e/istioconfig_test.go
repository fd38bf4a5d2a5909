package e2e

import (
	"context"
	"fmt"
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// applyIstio creates or replaces, in the config cluster, the Istio object
// written as YAML, past any webhook (framework.ConfigCluster.ApplyIstio).
func applyIstio(t *testing.T, f *framework.Fleet, doc string) {
	t.Helper()
	if err := f.Config().ApplyIstio(t.Context(), doc); err != nil {
		t.Fatal(err)
	}
}

func deleteIstio(t *testing.T, f *framework.Fleet, kind, ns, name string) {
	t.Helper()
	if err := f.Config().DeleteIstio(t.Context(), kind, ns, name); err != nil {
		t.Fatal(err)
	}
}

const echoSubsets = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: demo}
spec:
  host: echo
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
`

const echoCanary = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo]
  http:
  - match: [{headers: {x-canary: {exact: "1"}}}]
    route: [{destination: {host: echo, subset: v2}}]
  - route:
    - {destination: {host: echo, subset: v1}, weight: 90}
    - {destination: {host: echo, subset: v2}, weight: 10}
`

// versionedFleet is echoFleet with the Pods of cluster-1 labelled version
// v1, those of cluster-2 v2 and those of cluster-3 v3.
func versionedFleet(t *testing.T, hubs int) (*framework.Fleet, []*framework.Hub) {
	t.Helper()
	f, out, _ := versionedWorkloads(t, hubs)
	return f, out
}

// versionedWorkloads is versionedFleet, with its workloads by cluster.
func versionedWorkloads(t *testing.T, hubs int) (*framework.Fleet, []*framework.Hub, map[model.ClusterID]*framework.Workload) {
	t.Helper()
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: threeRegions()})
	ctx := t.Context()
	workloads := map[model.ClusterID]*framework.Workload{}
	for i, r := range f.Remotes() {
		w, err := r.DeployWorkload(ctx, framework.WorkloadOptions{
			Namespace: "demo", Service: "echo", Replicas: 2,
			PodLabels: map[string]string{"version": fmt.Sprintf("v%d", i+1)},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		workloads[r.ID] = w
	}
	if err := f.Config().PutRemoteSecret(ctx, "remotes", f.Remotes()...); err != nil {
		t.Fatal(err)
	}
	var out []*framework.Hub
	var key string
	if hubs > 1 {
		key = gossipKey(t, f)
	}
	for i := range hubs {
		opts := framework.HubOptions{GossipKeyFile: key}
		if i > 0 {
			opts.Join = out[:1]
		}
		out = append(out, framework.StartTestHub(t, f, opts))
	}
	return f, out, workloads
}

// binomialBound is the half-width of the two-sided 99.9 % normal bound of
// the count of successes in n trials of probability p.
func binomialBound(n int, p float64) float64 {
	const z = 3.29 // 99.9 % two-sided
	return z * math.Sqrt(float64(n)*p*(1-p))
}

// TestVirtualServiceTraffic: a 90/10 split between subsets lands within its
// binomial bound, a header match sends every such call to its subset, a
// fault abort answers every call with its status, and removing the
// VirtualService brings back the default spread. An invalid VirtualService
// applied past the webhook is reported and leaves the others working.
func TestVirtualServiceTraffic(t *testing.T) {
	f, hubs := versionedFleet(t, 1)
	hub := hubs[0]
	conn := clientIn(t, f, hub, "cluster-9")
	expectClusters(t, conn, 60, "cluster-1", "cluster-2", "cluster-3")

	applyIstio(t, f, echoSubsets)
	applyIstio(t, f, echoCanary)
	// Canary calls all reach v2 once the config has arrived.
	testutil.Eventually(t, converge, poll, func() error {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-canary", "1")
		counts, err := conn.Spread(ctx, 20)
		if err != nil {
			return err
		}
		if by := framework.ByCluster(counts); by["cluster-2"] != 20 {
			return fmt.Errorf("canary calls answered by %v, want cluster-2 only", by)
		}
		return nil
	})
	const n = 1000
	counts, err := conn.Spread(t.Context(), n)
	if err != nil {
		t.Fatal(err)
	}
	by := framework.ByCluster(counts)
	bound := binomialBound(n, 0.1)
	t.Logf("90/10 split over %d calls: %v (v2 expected %d ± %.0f)", n, by, n/10, bound)
	if by["cluster-3"] != 0 || by["cluster-1"]+by["cluster-2"] != n {
		t.Errorf("calls outside subsets v1 and v2: %v", by)
	}
	if d := math.Abs(float64(by["cluster-2"]) - n*0.1); d > bound {
		t.Errorf("v2 got %d of %d calls, outside 10 %% ± %.0f", by["cluster-2"], n, bound)
	}

	// An invalid VirtualService for another host, past the webhook.
	applyIstio(t, f, `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: broken, namespace: demo}
spec:
  hosts: [other]
  http: [{route: [{destination: {host: other}, weight: "ninety"}]}]
`)
	testutil.Eventually(t, converge, poll, func() error {
		return configRejected(t.Context(), f, hub, "demo", "broken")
	})
	out, err := framework.Meshfedctl(t, "istio-config", "--monitoring", strings.TrimPrefix(hub.MonitoringURL(), "http://"), "vs/demo/broken")
	if err != nil || !strings.Contains(out, "rejected (undecodable)") || !strings.Contains(out, "spec.http[0].route[0].weight") {
		t.Errorf("meshfedctl istio-config vs/demo/broken: %v\n%s", err, out)
	}
	if counts, err := conn.Spread(t.Context(), 50); err != nil || framework.ByCluster(counts)["cluster-3"] != 0 {
		t.Errorf("after an invalid object: %v %v, want the split still applied", counts, err)
	}

	// Fault abort: every call fails with the configured status.
	applyIstio(t, f, `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo]
  http:
  - fault: {abort: {grpcStatus: RESOURCE_EXHAUSTED, percentage: {value: 100}}}
    route: [{destination: {host: echo, subset: v1}}]
`)
	testutil.Eventually(t, converge, poll, func() error {
		for i := range 20 {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			_, err := conn.Call(ctx)
			cancel()
			if status.Code(err) != codes.ResourceExhausted {
				return fmt.Errorf("call %d: %v, want RESOURCE_EXHAUSTED", i, err)
			}
		}
		return nil
	})

	deleteIstio(t, f, "VirtualService", "demo", "echo")
	deleteIstio(t, f, "DestinationRule", "demo", "echo")
	expectClusters(t, conn, 60, "cluster-1", "cluster-2", "cluster-3")
}

// configRejected checks that the hub reports ns/name as a rejected
// VirtualService, in /debug/configz, in meshfed_config_rejected_total and
// in the object's Reconciled condition.
func configRejected(ctx context.Context, f *framework.Fleet, hub *framework.Hub, ns, name string) error {
	cz, err := hub.Configz(ctx)
	if err != nil {
		return err
	}
	obj, ok := cz.Object("VirtualService", ns, name)
	if !ok || obj.State != debugdoc.ConfigRejected || len(obj.Errors) == 0 {
		return fmt.Errorf("/debug/configz: %s/%s is %+v, want rejected with errors", ns, name, obj)
	}
	m, err := hub.Metrics(ctx)
	if err != nil {
		return err
	}
	if !strings.Contains(m, `meshfed_config_rejected_total{kind="VirtualService",reason="undecodable"} 1`) {
		return fmt.Errorf("meshfed_config_rejected_total does not count the VirtualService")
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("networking.istio.io/v1")
	u.SetKind("VirtualService")
	if err := f.Config().Client().Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		return err
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		c, _ := c.(map[string]any)
		if c["type"] == "Reconciled" && c["status"] == "False" &&
			strings.Contains(fmt.Sprint(c["message"]), "weight") && fmt.Sprint(c["observedGeneration"]) == fmt.Sprint(u.GetGeneration()) {
			return nil
		}
	}
	return fmt.Errorf("status of %s/%s has no Reconciled=False condition naming the weight at generation %d: %v", ns, name, u.GetGeneration(), conds)
}

// TestFailoverPriority: a DestinationRule's failoverPriority overrides the
// hub's own-cluster-first priorities: a client in cluster-1 is served by
// the v3 endpoints (cluster-3) first, and when they are not ready, by the
// rest alike (its own cluster has no precedence left).
func TestFailoverPriority(t *testing.T) {
	f, hubs, workloads := versionedWorkloads(t, 1)
	conn := clientIn(t, f, hubs[0], "cluster-1")
	expectClusters(t, conn, 40, "cluster-1")

	applyIstio(t, f, `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: demo}
spec:
  host: echo
  trafficPolicy:
    loadBalancer:
      localityLbSetting: {failoverPriority: ["version=v3"]}
`)
	expectClusters(t, conn, 40, "cluster-3")
	if err := workloads["cluster-3"].SetReady(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	counts := expectClusters(t, conn, 60, "cluster-1", "cluster-2")
	t.Logf("v3 not ready: %v", counts)
}

// TestConfigAcrossReplicas: every replica of a federation applies the
// config, the subsets included on the replicas that do not watch the
// clusters (their endpoints' Pod labels come over the peer stream), and
// each object's status is written once, by one replica.
func TestConfigAcrossReplicas(t *testing.T) {
	f, hubs := versionedFleet(t, 3)
	testutil.Eventually(t, converge, poll, func() error {
		for _, h := range hubs {
			fz, err := h.Federationz(t.Context())
			if err != nil {
				return err
			}
			if len(fz.Members) != len(hubs) {
				return fmt.Errorf("%s sees %d members, want %d", h.ReplicaID(), len(fz.Members), len(hubs))
			}
		}
		return nil
	})
	var conns []*framework.XDSConn
	for _, h := range hubs {
		conns = append(conns, clientIn(t, f, h, "cluster-9"))
	}
	applyIstio(t, f, echoSubsets)
	applyIstio(t, f, echoCanary)
	for i, conn := range conns {
		testutil.Eventually(t, converge, poll, func() error {
			ctx := metadata.AppendToOutgoingContext(t.Context(), "x-canary", "1")
			counts, err := conn.Spread(ctx, 20)
			if err != nil {
				return err
			}
			if by := framework.ByCluster(counts); by["cluster-2"] != 20 {
				return fmt.Errorf("through %s: canary calls answered by %v, want cluster-2 only", hubs[i].ReplicaID(), by)
			}
			return nil
		})
	}
	// Each object's status is written by the replica rendezvous hashing
	// elects among the members, and by no other.
	members := make([]federation.ReplicaID, len(hubs))
	for i, h := range hubs {
		members[i] = federation.ReplicaID(h.ReplicaID())
	}
	want := map[string]int{}
	for _, key := range []string{"DestinationRule/demo/echo", "VirtualService/demo/echo"} {
		for _, id := range members {
			if federation.Owns(id, model.ClusterID(key), members, 1) {
				want[string(id)]++
			}
		}
	}
	writes := func() (map[string]int, error) {
		got := map[string]int{}
		for _, h := range hubs {
			m, err := h.Metrics(t.Context())
			if err != nil {
				return nil, err
			}
			if n := metricValue(m, `meshfed_config_status_writes_total{result="ok"}`); n > 0 {
				got[h.ReplicaID()] = n
			}
		}
		return got, nil
	}
	check := func() error {
		got, err := writes()
		if err != nil {
			return err
		}
		if !maps.Equal(got, want) {
			return fmt.Errorf("status writes by replica %v, want %v (one per object, by its elected writer)", got, want)
		}
		return nil
	}
	testutil.Eventually(t, converge, poll, check)
	testutil.Consistently(t, 2*time.Second, 200*time.Millisecond, check)
}

// metricValue returns the integer value of the sample named series (name
// and labels, as the text format writes them) in the text m, 0 if absent.
func metricValue(m, series string) int {
	for _, line := range strings.Split(m, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var n int
			_, _ = fmt.Sscan(v, &n)
			return n
		}
	}
	return 0
}
