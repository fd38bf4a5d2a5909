package xdsgen

import (
	"net/netip"
	"testing"

	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// secureFleet is echo with endpoints of two service accounts (one twice) and
// one endpoint without a known service account.
func secureFleet() *model.MergedService {
	a := ep("cluster-1", "10.1.0.1", usEast1a, true)
	a.ServiceAccount = "echo"
	b := ep("cluster-2", "10.2.0.1", usEast1a, false)
	b.ServiceAccount = "echo-canary"
	c := ep("cluster-3", "10.3.0.1", euWest1a, true)
	c.ServiceAccount = "echo"
	d := ep("cluster-3", "10.3.0.2", euWest1a, true)
	return merged(a, b, c, d)
}

func TestGoldenSecureClusters(t *testing.T) {
	opts := Options{Security: true, TrustDomain: "example.org"}
	checkGolden(t, "clusters_mtls", render(t, section{"clusters", asMessages(ServiceClusters(secureFleet(), nil, nil, opts))}))
}

func TestGoldenInboundListener(t *testing.T) {
	addr := netip.MustParseAddrPort("10.2.0.1:50051")
	checkGolden(t, "inbound_mtls", render(t, section{"listeners", asMessages([]proto.Message{InboundListener(addr, istioconfig.WorkloadSecurity{}, Options{Security: true})})}))
	checkGolden(t, "inbound_plaintext", render(t, section{"listeners", asMessages([]proto.Message{InboundListener(addr, istioconfig.WorkloadSecurity{}, Options{})})}))
}

func TestServiceClustersPlaintextIsClusters(t *testing.T) {
	ms := secureFleet()
	got, want := ServiceClusters(ms, nil, nil, Options{}), Clusters(ms.Service, nil)
	if len(got) != len(want) {
		t.Fatalf("got %d clusters, want %d", len(got), len(want))
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("cluster %d differs from Clusters without security", i)
		}
	}
	if ServiceClusters(nil, nil, nil, Options{Security: true}) != nil {
		t.Error("nil service: want nil")
	}
}

func TestServiceSANs(t *testing.T) {
	got := ServiceSANs(secureFleet(), Options{})
	want := []string{"spiffe://cluster.local/ns/demo/sa/echo", "spiffe://cluster.local/ns/demo/sa/echo-canary"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("ServiceSANs = %q, want %q", got, want)
	}
}

func TestInboundListenerName(t *testing.T) {
	for _, s := range []string{"10.2.0.1:50051", "[fd00::1]:8080"} {
		ap := netip.MustParseAddrPort(s)
		name := InboundListenerName(ap)
		got, err := ParseInboundListenerName(name)
		if err != nil || got != ap {
			t.Errorf("ParseInboundListenerName(%q) = %v, %v; want %v", name, got, err, ap)
		}
	}
	for _, bad := range []string{
		"10.2.0.1:50051",
		xdsnode.InboundListenerPrefix + "10.2.0.1",
		xdsnode.InboundListenerPrefix + "10.2.0.1:0",
		xdsnode.InboundListenerPrefix + "10.2.0.1:050051",
		xdsnode.InboundListenerPrefix + "host:80",
		xdsnode.InboundListenerPrefix + "[::ffff:10.0.0.1]:80x",
		xdsnode.InboundListenerPrefix + "[fd00:0::1]:80",
		"echo.demo.svc.cluster.local:8080",
	} {
		if _, err := ParseInboundListenerName(bad); err == nil {
			t.Errorf("ParseInboundListenerName(%q) succeeded", bad)
		}
	}
}

func TestValidateSecure(t *testing.T) {
	for _, c := range ServiceClusters(secureFleet(), nil, nil, Options{Security: true}) {
		if err := c.ValidateAll(); err != nil {
			t.Error(err)
		}
		var up tlsv3.UpstreamTlsContext
		if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(&up); err != nil {
			t.Fatal(err)
		}
		if err := up.ValidateAll(); err != nil {
			t.Error(err)
		}
	}
	for _, sec := range []bool{false, true} {
		l := InboundListener(netip.MustParseAddrPort("10.2.0.1:50051"), istioconfig.WorkloadSecurity{}, Options{Security: sec})
		if err := l.ValidateAll(); err != nil {
			t.Error(err)
		}
		for _, fc := range l.GetFilterChains() {
			var hcm hcmv3.HttpConnectionManager
			if err := fc.GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
				t.Fatal(err)
			}
			if err := hcm.ValidateAll(); err != nil {
				t.Error(err)
			}
			var r routerv3.Router
			if err := hcm.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(&r); err != nil {
				t.Fatal(err)
			}
			if ts := fc.GetTransportSocket(); ts != nil {
				var down tlsv3.DownstreamTlsContext
				if err := ts.GetTypedConfig().UnmarshalTo(&down); err != nil {
					t.Fatal(err)
				}
				if err := down.ValidateAll(); err != nil {
					t.Error(err)
				}
				if !down.GetRequireClientCertificate().GetValue() {
					t.Error("client certificate not required")
				}
			} else if sec {
				t.Error("secure inbound listener without transport socket")
			}
		}
	}
}
