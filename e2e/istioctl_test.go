package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/protobuf/encoding/protojson"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/hub/xds/xdsstatus"
	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/proxystatus/csds"
	"github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/xdsgen"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// envIstioctl names istioctl built from istio.io/istio (e2e/istioassets);
// `make e2e` and `make test` set it.
const envIstioctl = "MESHFED_ISTIOCTL_BIN"

// istioNamespace is where the framework's hubs run (--namespace), the
// namespace istioctl's -i names.
const istioNamespace = framework.RemoteSecretNamespace

// istioctlBinary returns $MESHFED_ISTIOCTL_BIN. Unset, the test fails
// rather than skips: these checks are what says the hub works with Istio's
// own tools.
func istioctlBinary(t *testing.T) string {
	t.Helper()
	p := os.Getenv(envIstioctl)
	if p == "" {
		t.Fatalf("%s is not set: run `make e2e` (or `make test`), which builds istioctl with e2e/istioassets/build.sh, "+
			"or set it to $(bash e2e/istioassets/build.sh --print-dir)/istioctl", envIstioctl)
	}
	return p
}

// istioctl runs istioctl with args against the fleet's config cluster and
// returns its stdout.
func istioctl(t *testing.T, f *framework.Fleet, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	args = append(args, "--kubeconfig", f.Config().KubeconfigFile(), "-i", istioNamespace)
	cmd := exec.CommandContext(ctx, istioctlBinary(t), args...)
	// istioctl reads and writes defaults under $HOME.
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("istioctl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// fleetProxy is one proxy as istioctl proxy-status -o json shows it.
type fleetProxy struct {
	cluster, namespace, replica string
	types                       map[string]statusv3.ConfigStatus // by type URL
}

// proxyStatusJSON decodes `istioctl proxy-status -o json`: one
// DiscoveryResponse (of istio.io/debug/syncz) per control plane, each
// holding ClientConfigs.
func proxyStatusJSON(out string) (map[string]fleetProxy, error) {
	got := map[string]fleetProxy{}
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("decoding %q: %w", out, err)
		}
		var dr discoveryv3.DiscoveryResponse
		if err := protojson.Unmarshal(raw, &dr); err != nil {
			return nil, fmt.Errorf("decoding a DiscoveryResponse: %w", err)
		}
		for _, a := range dr.GetResources() {
			var cc statusv3.ClientConfig
			if err := a.UnmarshalTo(&cc); err != nil {
				return nil, err
			}
			md := cc.GetNode().GetMetadata().GetFields()
			p := fleetProxy{
				cluster:   md[xdsnode.MetadataClusterID].GetStringValue(),
				namespace: md[xdsnode.MetadataNamespace].GetStringValue(),
				replica:   md[csds.MetadataReplica].GetStringValue(),
				types:     map[string]statusv3.ConfigStatus{},
			}
			for _, g := range cc.GetGenericXdsConfigs() {
				p.types[g.GetTypeUrl()] = g.GetConfigStatus()
			}
			if _, dup := got[cc.GetNode().GetId()]; dup {
				return nil, fmt.Errorf("%s is listed twice", cc.GetNode().GetId())
			}
			got[cc.GetNode().GetId()] = p
		}
	}
	return got, nil
}

// meshFleet starts two federated replicas over two remote clusters and
// connects one proxyless gRPC client to each, in its own cluster, and an
// Envoy sidecar (real pilot-agent and Envoy, in a Pod of cluster-2) to a
// replica that does not watch cluster-1, which must still send it
// cluster-1's endpoints (at a lower priority than cluster-2's). It returns
// the replicas and, by "<pod>.<ns>", each proxy's cluster and replica.
func meshFleet(t *testing.T) (*framework.Fleet, []*framework.Hub, map[string][2]string) {
	t.Helper()
	// The pod network first, so that it is removed after the hubs.
	net := framework.NewTestPodNetwork(t)
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: threeRegionsN(2)})
	ctx := t.Context()
	var echoes []*framework.Workload
	for _, r := range f.Remotes() {
		w, err := r.DeployWorkload(ctx, framework.WorkloadOptions{Namespace: "demo", Service: "echo", Replicas: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		echoes = append(echoes, w)
	}
	if err := f.Config().PutRemoteSecret(ctx, "remotes", f.Remotes()...); err != nil {
		t.Fatal(err)
	}
	key := gossipKey(t, f)
	listen := net.Gateway().String()
	// The plaintext xDS port is open for TestIstioctlProxyStatusPlaintext:
	// istioctl's --plaintext reads a hub whose operator opened it. Every
	// proxy of the fleet dials the authenticated port.
	h0 := framework.StartTestHub(t, f, framework.HubOptions{GossipKeyFile: key, ListenHost: listen, PlaintextXDS: true})
	h1 := framework.StartTestHub(t, f, framework.HubOptions{GossipKeyFile: key, Join: []*framework.Hub{h0}, ListenHost: listen, PlaintextXDS: true})
	hubs := []*framework.Hub{h0, h1}
	want := map[string][2]string{}
	for i, h := range hubs {
		id := f.Remotes()[i].ID
		conn := clientIn(t, f, h, id)
		expectClusters(t, conn, 10, id)
		want["client-"+string(id)+".demo"] = [2]string{string(id), h.ReplicaID()}
	}
	// The sidecar runs in cluster-2 and talks to a replica that does not
	// watch cluster-1: cluster-1's echo reaches it through the federation.
	r := f.Remotes()[1]
	via := h1
	if ownerOf(t, h0, f.Remotes()[0].ID) == h1.ReplicaID() {
		via = h0
	}
	pod := framework.NewTestPod(t, net, framework.PodOptions{Name: "envoy-0"})
	sc := framework.StartTestSidecar(t, f, framework.SidecarOptions{
		Cluster: r, Pod: pod, Hub: via, Name: "envoy-0", Namespace: "demo",
	})
	want["envoy-0.demo"] = [2]string{string(r.ID), via.ReplicaID()}
	echo := xdsgen.ClusterName(model.ServiceHostname("echo", "demo", ""), 8080)
	testutil.Eventually(t, converge, poll, func() error {
		prios, err := sc.ClusterPriorities(ctx, echo)
		if err != nil {
			return err
		}
		var byPrio [3]int
		for _, p := range prios {
			byPrio[min(p, 2)]++
		}
		if len(prios) != len(echoes) || byPrio[0] != 1 {
			return fmt.Errorf("Envoy on %s has %s hosts %v: want one per cluster, its own (cluster-2) alone at priority 0", via.ReplicaID(), echo, prios)
		}
		return nil
	})
	return f, hubs, want
}

// wantFleetListed checks that got lists exactly the proxies of want, each
// with its cluster and serving replica and its four types SYNCED.
func wantFleetListed(got map[string]fleetProxy, want map[string][2]string) error {
	for name, w := range want {
		p, ok := got[name]
		if !ok {
			return fmt.Errorf("%s is not listed (listed: %v)", name, got)
		}
		if p.cluster != w[0] || p.replica != w[1] || p.namespace != "demo" {
			return fmt.Errorf("%s: cluster %q replica %q namespace %q, want %v and demo", name, p.cluster, p.replica, p.namespace, w)
		}
		for _, short := range []string{"Cluster", "Listener", "RouteConfiguration", "ClusterLoadAssignment"} {
			found := false
			for url, st := range p.types {
				if strings.HasSuffix(url, "."+short) {
					found = true
					if st != statusv3.ConfigStatus_SYNCED {
						return fmt.Errorf("%s %s is %v", name, short, st)
					}
				}
			}
			if !found {
				return fmt.Errorf("%s has no %s status: %v", name, short, p.types)
			}
		}
	}
	if len(got) != len(want) {
		// istioctl's own stream (GENERATOR=event) must not be listed.
		return fmt.Errorf("listed %d proxies, want %d: %v", len(got), len(want), got)
	}
	return nil
}

// TestIstioctlProxyStatusPlaintext: `istioctl proxy-status --plaintext
// --xds-address <replica's xDS port>` lists the proxies of every replica,
// Envoy sidecars and proxyless clients alike,
// through either replica, with their cluster and serving replica, and not
// istioctl's own stream.
func TestIstioctlProxyStatusPlaintext(t *testing.T) {
	istioctlBinary(t)
	f, hubs, want := meshFleet(t)
	for _, via := range hubs {
		testutil.Eventually(t, converge, poll, func() error {
			out, err := istioctl(t, f, "proxy-status", "--plaintext", "--xds-address", via.XDSAddr(), "-o", "json")
			if err != nil {
				return err
			}
			got, err := proxyStatusJSON(out)
			if err != nil {
				return err
			}
			if err := wantFleetListed(got, want); err != nil {
				return fmt.Errorf("via %s: %w", via.ReplicaID(), err)
			}
			return nil
		})
	}
	table, err := istioctl(t, f, "proxy-status", "--plaintext", "--xds-address", hubs[1].XDSAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("istioctl proxy-status via %s:\n%s", hubs[1].ReplicaID(), table)
	for name, w := range want {
		if !tableRowHas(table, name, w[0], xdsstatus.ControlPlaneID, "4 (CDS,LDS,EDS,RDS)") {
			t.Errorf("no row %s %s %s ... 4 (CDS,LDS,EDS,RDS) in:\n%s", name, w[0], xdsstatus.ControlPlaneID, table)
		}
	}
}

// TestIstioctlProxyStatusToken: `istioctl proxy-status --xds-address
// <replica's TLS port>`, "the usual way" with an external control plane:
// istioctl mints a token for istio-system/default in the config cluster and
// sends it over TLS without a ClusterID; the hub reviews it there. This
// needs ADS on the TLS port (hub/xds TLS work).
func TestIstioctlProxyStatusToken(t *testing.T) {
	istioctlBinary(t)
	f, hubs, want := meshFleet(t)
	// envtest runs no controller-manager to create the default account.
	if err := f.Config().EnsureServiceAccount(t.Context(), istioNamespace, "default"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, converge, poll, func() error {
		out, err := istioctl(t, f, "proxy-status", "--xds-address", hubs[0].CAAddr(), "-o", "json")
		if err != nil {
			return err
		}
		got, err := proxyStatusJSON(out)
		if err != nil {
			return err
		}
		return wantFleetListed(got, want)
	})
}

// tableRowHas reports whether a row of table starts with name and holds
// every cell of cells.
func tableRowHas(table, name string, cells ...string) bool {
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, c := range cells {
			ok = ok && strings.Contains(line, c)
		}
		if ok {
			return true
		}
	}
	return false
}

// istioDebugInfo is istiod's /debug/clusterz entry as istioctl
// remote-clusters decodes it (istio.io/istio/pkg/cluster.DebugInfo: the
// same three fields and JSON names; that module is not a dependency of
// this one).
type istioDebugInfo struct {
	ID         string `json:"id"`
	SecretName string `json:"secretName"`
	SyncStatus string `json:"syncStatus"`
}

// TestClusterzForIstioctl: every replica's /debug/clusterz is what
// `istioctl remote-clusters` reads from istiod, with each remote cluster
// synced on both the replica that watches it and the one it replicates
// to. istioctl itself reaches the document only through a port-forward to
// a Pod labelled app=istiod, which envtest (no kubelet) cannot give, so the
// document is decoded here with istioctl's shape, strictly.
func TestClusterzForIstioctl(t *testing.T) {
	_, hubs, _ := meshFleet(t)
	for _, h := range hubs {
		testutil.Eventually(t, converge, poll, func() error {
			body, err := framework.HTTPGet(t.Context(), nil, h.MonitoringURL()+debugdoc.ClusterzPath, "")
			if err != nil {
				return err
			}
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			var got []istioDebugInfo
			if err := dec.Decode(&got); err != nil {
				return fmt.Errorf("decoding %s: %w", body, err)
			}
			want := []istioDebugInfo{
				{ID: "cluster-1", SecretName: istioNamespace + "/remotes", SyncStatus: "synced"},
				{ID: "cluster-2", SecretName: istioNamespace + "/remotes", SyncStatus: "synced"},
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("%s: %s, want %+v", h.ReplicaID(), body, want)
			}
			return nil
		})
	}
}

// TestHubChartIstioctlLabels: the hub chart's Pods are found as istioctl
// finds istiod's (app=istiod, the monitoring port in prometheus.io/port),
// without the label in the Deployment's selector, which cannot change on
// upgrade; and the label can be turned off.
func TestHubChartIstioctlLabels(t *testing.T) {
	var dep appsv1.Deployment
	mustRender(t, hubChartDir, "meshfed", nil).get(t, "Deployment", "meshfed", "meshfed-hub", &dep)
	if dep.Spec.Template.Labels["app"] != "istiod" || dep.Spec.Template.Annotations["prometheus.io/port"] != "15014" {
		t.Errorf("pod labels %v annotations %v, want app=istiod and prometheus.io/port=15014",
			dep.Spec.Template.Labels, dep.Spec.Template.Annotations)
	}
	if _, ok := dep.Spec.Selector.MatchLabels["app"]; ok {
		t.Errorf("selector %v holds app", dep.Spec.Selector.MatchLabels)
	}
	var off appsv1.Deployment
	mustRender(t, hubChartDir, "meshfed", map[string]any{"istioctlCompatible": false}).get(t, "Deployment", "meshfed", "meshfed-hub", &off)
	if _, ok := off.Spec.Template.Labels["app"]; ok {
		t.Errorf("istioctlCompatible=false: pod labels %v", off.Spec.Template.Labels)
	}
}
