package xdsgen

import (
	"fmt"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// explainLines renders an explanation as "address cluster priority:
// reason" lines.
func explainLines(x Explanation) []string {
	var out []string
	for _, e := range x.Endpoints {
		out = append(out, fmt.Sprintf("%s %s %d: %s", e.Address, e.Cluster, e.Priority, e.Reason))
	}
	return out
}

// TestExplainEndpoints: the explanation lists what the load assignment
// sends, in its order, with the reason of each priority, then what is left
// out and why.
func TestExplainEndpoints(t *testing.T) {
	noHTTP := ep("cluster-2", "10.2.0.9", usEast1b, true, "grpc", 50051)
	ms := merged(
		ep("cluster-3", "10.3.0.1", euWest1a, true),
		ep("cluster-1", "10.1.0.1", usEast1a, true),
		ep("cluster-1", "10.1.0.2", usEast1a, false),
		ep("cluster-2", "10.2.0.1", usEast1b, true),
		noHTTP,
		ep("cluster-4", "10.4.0.1", model.Locality{Region: "ap-south"}, true),
	)
	g := ProxyGroup{Cluster: "cluster-1", Region: "us-east", Zone: "us-east-1a"}
	failover := localityRule(&networking.LocalityLoadBalancerSetting{Failover: []*networking.LocalityLoadBalancerSetting_Failover{{From: "us-east", To: "ap-south"}}})
	for _, tc := range []struct {
		name string
		dr   *istioconfig.DestinationRule
		port uint32
		want []string
	}{
		{"default, grpc port", nil, 8080, []string{
			"10.1.0.1:50051 cluster-1 0: in the proxy's own cluster cluster-1",
			"10.2.0.1:50051 cluster-2 1: another cluster (cluster-2) in the proxy's region us-east",
			"10.2.0.9:50051 cluster-2 1: another cluster (cluster-2) in the proxy's region us-east",
			"10.4.0.1:50051 cluster-4 2: another cluster (cluster-4) outside the proxy's region us-east",
			"10.3.0.1:50051 cluster-3 2: another cluster (cluster-3) outside the proxy's region us-east",
			"10.1.0.2:50051 cluster-1 -1: not ready",
		}},
		{"failover, http port", failover, 9090, []string{
			"10.1.0.1:8081 cluster-1 0: in the proxy's own cluster cluster-1",
			"10.2.0.1:8081 cluster-2 1: another cluster (cluster-2) in the proxy's region us-east",
			"10.4.0.1:8081 cluster-4 2: failover region ap-south (choice 1 of failover from us-east)",
			"10.3.0.1:8081 cluster-3 3: outside the proxy's region and its failover regions",
			"10.1.0.2:8081 cluster-1 -1: not ready",
			`10.2.0.9 cluster-2 -1: does not serve port "http"`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x, err := ExplainEndpoints(ms, g, tc.dr, nil, tc.port, "")
			if err != nil {
				t.Fatal(err)
			}
			if got, want := strings.Join(explainLines(x), "\n"), strings.Join(tc.want, "\n"); got != want {
				t.Errorf("explanation:\n%s\nwant:\n%s", got, want)
			}
			if x.Assignment != ClusterName(ms.Service.Hostname, tc.port) || x.Group != g.String() {
				t.Errorf("assignment %q group %q", x.Assignment, x.Group)
			}
		})
	}
	if _, err := ExplainEndpoints(ms, g, nil, nil, 9999, ""); err == nil || !strings.Contains(err.Error(), "no port 9999") {
		t.Errorf("unknown port: %v", err)
	}
	if _, err := ExplainEndpoints(ms, g, nil, nil, 8080, "v9"); err == nil || !strings.Contains(err.Error(), `subset "v9"`) {
		t.Errorf("unknown subset: %v", err)
	}
}
