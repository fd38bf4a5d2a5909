//go:build linux

package e2e

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
	"github.com/meshfed/meshfed/pkg/xdsgen"
)

// drClusterSpecs are DestinationRules of demo/echo that together use every
// field SidecarClusters translates for Envoy (one object per host, so
// several cases).
var drClusterSpecs = map[string]string{
	"hash-pool-outlier": `{"host":"echo","trafficPolicy":{
		"loadBalancer":{"consistentHash":{"httpHeaderName":"x-user","ringHash":{"minimumRingSize":2048}}},
		"connectionPool":{
			"tcp":{"maxConnections":7,"connectTimeout":"2s","maxConnectionDuration":"1h","idleTimeout":"5m","tcpKeepalive":{"probes":3,"time":"60s","interval":"10s"}},
			"http":{"http1MaxPendingRequests":10,"http2MaxRequests":100,"maxRequestsPerConnection":5,"maxRetries":2,"idleTimeout":"30s","maxConcurrentStreams":50,"http2KeepAlive":{"interval":"10s","timeout":"2s"}}},
		"outlierDetection":{"consecutive5xxErrors":3,"consecutiveGatewayErrors":2,"interval":"1s","baseEjectionTime":"30s","maxEjectionPercent":50,"minHealthPercent":20},
		"portLevelSettings":[{"port":{"number":7070},"loadBalancer":{"consistentHash":{"httpHeaderName":"x-user","maglev":{"tableSize":65521}}}}]},
		"subsets":[
			{"name":"v1","labels":{"version":"v1"},"trafficPolicy":{"loadBalancer":{"simple":"RANDOM"}}},
			{"name":"v2","labels":{"version":"v2"},"trafficPolicy":{"loadBalancer":{"consistentHash":{"httpCookie":{"name":"s","path":"/","ttl":"60s"}}}}}]}`,
	"outlier-variants": `{"host":"echo","trafficPolicy":{
		"loadBalancer":{"simple":"ROUND_ROBIN"},
		"connectionPool":{"http":{"h2UpgradePolicy":"UPGRADE"}},
		"outlierDetection":{"consecutive5xxErrors":0,"failurePercentageThreshold":70,"splitExternalLocalOriginErrors":true,"consecutiveLocalOriginFailures":4}},
		"subsets":[{"name":"v1","labels":{"version":"v1"},"trafficPolicy":{"loadBalancer":{"consistentHash":{"useSourceIp":true,"minimumRingSize":512}}}}]}`,
}

// TestEnvoyAcceptsDestinationRuleClusters runs `envoy --mode validate` on
// the sidecar clusters generated under each of drClusterSpecs: as served
// (EDS over ADS, with and without mTLS) and made static with the subsets'
// load assignments, so that Envoy also builds each cluster's load balancer
// over real hosts (a ring, a Maglev table, least request).
func TestEnvoyAcceptsDestinationRuleClusters(t *testing.T) {
	bin := framework.TestEnvoyBinary(t)
	services := validateFixture()
	pod := netip.MustParseAddr("10.1.0.1")
	sc := xdsgen.Sidecar{IP: pod, Namespace: "demo", Interception: xdsgen.InterceptRedirect, Inbound: xdsgen.SidecarInbound(services, "cluster-1", pod)}
	for name, spec := range drClusterSpecs {
		config, dr := drClusterConfig(t, spec)
		if notes := xdsgen.ClusterNotes(xdsgen.ProxyEnvoy, dr); len(notes) > 0 {
			t.Errorf("%s: Envoy left parts out: %v", name, notes)
		}
		for _, security := range []bool{false, true} {
			opts := xdsgen.Options{Security: security}
			clusters := xdsgen.SidecarClusters(services, config, sc, opts)
			if !strings.Contains(strings.Join(clusterNames(clusters), " "), "|v1|") {
				t.Fatalf("%s: no subset clusters in %v", name, clusterNames(clusters))
			}
			t.Run(fmt.Sprintf("%s/security=%t/served", name, security), func(t *testing.T) {
				runEnvoyValidate(t, bin, servedBootstrap(xdsgen.SidecarListeners(services, sc, opts), clusters))
			})
		}
		t.Run(name+"/static", func(t *testing.T) {
			clusters := xdsgen.SidecarClusters(services, config, sc, xdsgen.Options{})
			runEnvoyValidate(t, bin, servedBootstrap(nil, staticClusters(t, config, clusters)))
		})
	}
}

func drClusterConfig(t *testing.T, spec string) (*istioconfig.Snapshot, *istioconfig.DestinationRule) {
	t.Helper()
	msg, errs := validate.DecodeSpec(validate.KindDestinationRule, []byte(spec))
	if len(errs) == 0 {
		errs = validate.Spec(msg)
	}
	if len(errs) > 0 {
		t.Fatalf("DestinationRule: %v", errs)
	}
	dr := &istioconfig.DestinationRule{
		Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: validate.KindDestinationRule, Namespace: "demo", Name: "echo"}, Generation: 1, Created: time.Unix(0, 0)},
		Spec: msg.(*networking.DestinationRule),
	}
	return istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, []istioconfig.Object{dr}), dr
}

// staticClusters turns copies of the EDS clusters STATIC with the load
// assignments a proxy in cluster-1 gets (subsets' included), and keeps the
// others.
func staticClusters(t *testing.T, config *istioconfig.Snapshot, clusters []*clusterv3.Cluster) []*clusterv3.Cluster {
	t.Helper()
	assignments := map[string]*endpointv3.ClusterLoadAssignment{}
	for _, ms := range validateFixture() {
		dr := config.Host(ms.Service.Hostname).DestinationRule
		for _, cla := range xdsgen.LoadAssignments(ms, xdsgen.ProxyGroup{Cluster: "cluster-1", Region: "us-east"}, dr) {
			assignments[cla.GetClusterName()] = cla
		}
	}
	var out []*clusterv3.Cluster
	for _, c := range clusters {
		c = proto.Clone(c).(*clusterv3.Cluster)
		if c.GetType() == clusterv3.Cluster_EDS {
			cla := assignments[c.GetEdsClusterConfig().GetServiceName()]
			if cla == nil {
				t.Fatalf("cluster %s: no load assignment %q", c.GetName(), c.GetEdsClusterConfig().GetServiceName())
			}
			c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}
			c.EdsClusterConfig = nil
			c.LoadAssignment = cla
		}
		out = append(out, c)
	}
	return out
}

func clusterNames(cs []*clusterv3.Cluster) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.GetName()
	}
	return out
}
