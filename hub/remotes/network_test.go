package remotes

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshfed/meshfed/pkg/model"
)

func gatewayService(labels, annotations map[string]string, ports []int32, ingress []corev1.LoadBalancerIngress, externalIPs ...string) *corev1.Service {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "eastwest", Namespace: "istio-system", Labels: labels, Annotations: annotations}}
	for _, p := range ports {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Port: p})
	}
	svc.Spec.ExternalIPs = externalIPs
	svc.Status.LoadBalancer.Ingress = ingress
	return svc
}

func TestGatewayOf(t *testing.T) {
	net2 := map[string]string{model.LabelTopologyNetwork: "network-2"}
	resolve := func(_ context.Context, host string) ([]netip.Addr, error) {
		if host == "lb.example.com" {
			return []netip.Addr{netip.MustParseAddr("198.19.0.9")}, nil
		}
		return nil, errors.New("no such host")
	}
	for _, tc := range []struct {
		name    string
		svc     *corev1.Service
		want    string // addresses joined, or "nil"
		port    uint32
		problem string
	}{
		{"not labelled", gatewayService(nil, nil, []int32{15443}, []corev1.LoadBalancerIngress{{IP: "198.19.0.1"}}), "nil", 0, ""},
		{"labelled without the port", gatewayService(net2, nil, []int32{80}, []corev1.LoadBalancerIngress{{IP: "198.19.0.1"}}), "nil", 0, ""},
		{"load balancer IPs", gatewayService(net2, nil, []int32{15443}, []corev1.LoadBalancerIngress{{IP: "198.19.0.2"}, {IP: "198.19.0.1"}, {IP: "198.19.0.2"}}, "203.0.113.1"),
			"198.19.0.1,198.19.0.2", 15443, ""},
		{"hostname resolved", gatewayService(net2, nil, []int32{15443}, []corev1.LoadBalancerIngress{{Hostname: "lb.example.com"}}), "198.19.0.9", 15443, ""},
		{"external IPs", gatewayService(net2, nil, []int32{15443}, nil, "203.0.113.1"), "203.0.113.1", 15443, ""},
		{"port annotation", gatewayService(net2, map[string]string{model.AnnotationGatewayPort: "16443"}, []int32{16443}, []corev1.LoadBalancerIngress{{IP: "198.19.0.1"}}),
			"198.19.0.1", 16443, ""},
		{"bad port annotation", gatewayService(net2, map[string]string{model.AnnotationGatewayPort: "https"}, []int32{15443}, nil), "", 0, "is not a port number"},
		{"no address", gatewayService(net2, nil, []int32{15443}, nil), "", 15443, "no address in status.loadBalancer.ingress or spec.externalIPs"},
		{"unresolvable", gatewayService(net2, nil, []int32{15443}, []corev1.LoadBalancerIngress{{Hostname: "gone.example.com"}}), "", 15443, `"gone.example.com": no such host`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw := gatewayOf(context.Background(), tc.svc, resolve)
			if tc.want == "nil" {
				if gw != nil {
					t.Fatalf("a gateway: %+v", gw)
				}
				return
			}
			if gw == nil {
				t.Fatal("no gateway")
			}
			var addrs []string
			for _, a := range gw.Addresses {
				addrs = append(addrs, a.String())
			}
			if got := strings.Join(addrs, ","); got != tc.want || gw.Network != "network-2" || gw.Port != tc.port && tc.port != 0 {
				t.Errorf("gateway %+v, want addresses %s port %d", gw, tc.want, tc.port)
			}
			if tc.problem == "" && gw.Problem != "" || !strings.Contains(gw.Problem, tc.problem) {
				t.Errorf("problem %q, want %q", gw.Problem, tc.problem)
			}
		})
	}
}

func TestNetworkOf(t *testing.T) {
	if got := networkOf(model.NewLabels(map[string]string{"app": "echo"}), "network-1"); got != "network-1" {
		t.Errorf("unlabelled Pod: %q", got)
	}
	if got := networkOf(model.NewLabels(map[string]string{model.LabelTopologyNetwork: "network-2"}), "network-1"); got != "network-2" {
		t.Errorf("labelled Pod: %q", got)
	}
	if got := networkOf(model.Labels{}, ""); got != "" {
		t.Errorf("nothing known: %q", got)
	}
}

// FuzzGatewayOf: whatever a remote cluster's Service says (labels,
// port annotation, ports, load balancer status, external IPs), gatewayOf
// returns nil or a gateway of a known network with a port in range and
// either addresses or the problem why it has none.
func FuzzGatewayOf(f *testing.F) {
	f.Add("network-2", "", int32(15443), "198.19.0.1", "", "203.0.113.1")
	f.Add("network-2", "16443", int32(16443), "", "lb.example.com", "")
	f.Add("network-2", "x", int32(15443), "::ffff:1.2.3.4", "", "not-an-ip")
	f.Add("", "15443", int32(15443), "198.19.0.1", "", "")
	f.Fuzz(func(t *testing.T, network, portAnnotation string, port int32, ip, hostname, externalIP string) {
		svc := gatewayService(map[string]string{model.LabelTopologyNetwork: network},
			map[string]string{model.AnnotationGatewayPort: portAnnotation}, []int32{port},
			[]corev1.LoadBalancerIngress{{IP: ip, Hostname: hostname}}, externalIP)
		resolve := func(context.Context, string) ([]netip.Addr, error) { return nil, errors.New("no resolver here") }
		gw := gatewayOf(context.Background(), svc, resolve)
		if gw == nil {
			return
		}
		if gw.Network == "" || gw.Network != model.Network(network) {
			t.Fatalf("gateway of network %q from label %q", gw.Network, network)
		}
		if gw.Problem == "" && (len(gw.Addresses) == 0 || gw.Port == 0 || gw.Port > 65535) {
			t.Fatalf("gateway without a problem but unusable: %+v", gw)
		}
		for _, a := range gw.Addresses {
			if !a.IsValid() || a.Is4In6() {
				t.Fatalf("address %v", a)
			}
		}
	})
}
