package remotes

import (
	"testing"
	"unique"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/meshfed/meshfed/pkg/model"
)

func TestPortProtocol(t *testing.T) {
	for _, tc := range []struct {
		name string
		app  *string
		want model.Protocol
	}{
		{"grpc", nil, model.ProtocolGRPC},
		{"grpc-web", nil, model.ProtocolGRPC},
		{"http-api", nil, model.ProtocolHTTP},
		{"http2", nil, model.ProtocolHTTP2},
		{"tcp-db", nil, model.ProtocolTCP},
		{"", nil, model.ProtocolTCP},
		{"web", ptr.To("grpc"), model.ProtocolGRPC},
		{"grpc", ptr.To("kubernetes.io/h2c"), model.ProtocolHTTP2},
		{"grpc", ptr.To("mysql"), model.ProtocolGRPC}, // unknown appProtocol: fall back to the name
	} {
		if got := portProtocol(tc.name, tc.app); got != tc.want {
			t.Errorf("portProtocol(%q, %v) = %s, want %s", tc.name, ptr.Deref(tc.app, ""), got, tc.want)
		}
	}
}

func TestEndpointsFromSlices(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{
		LabelRegion: "eu", LabelZone: "eu-1", LabelSubZone: "rack-7"}}}
	podLabels := map[string]string{"app": "echo", "version": "v1"}
	pod := &podInfo{labels: model.NewLabels(podLabels), shared: unique.Make(podShared{serviceAccount: "sa"})}
	look := endpointLookup{
		node: func(name string) *corev1.Node {
			if name == "n1" {
				return node
			}
			return nil
		},
		pod: func(ns, name string) *podInfo {
			if ns == "demo" && name == "p1" {
				return pod
			}
			return nil
		},
	}
	ep := func(addr string, ready *bool, podName string) discoveryv1.Endpoint {
		e := discoveryv1.Endpoint{Addresses: []string{addr}, NodeName: ptr.To("n1"),
			Conditions: discoveryv1.EndpointConditions{Ready: ready}}
		if podName != "" {
			e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: podName}
		}
		return e
	}
	slices := []*discoveryv1.EndpointSlice{
		{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "demo", Name: "a"},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](9000)}},
			Endpoints: []discoveryv1.Endpoint{
				ep("10.0.0.2", ptr.To(false), ""),
				ep("10.0.0.1", nil, "p1"), // nil ready means ready
				ep("not-an-ip", nil, ""),
			},
		},
		{
			// The same address in a second slice, ready there: one endpoint, ready.
			ObjectMeta:  metav1.ObjectMeta{Namespace: "demo", Name: "b"},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](9000)}},
			Endpoints:   []discoveryv1.Endpoint{ep("10.0.0.2", ptr.To(true), "")},
		},
		{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "demo", Name: "fqdn"},
			AddressType: discoveryv1.AddressTypeFQDN,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"example.com"}}},
		},
	}
	got := endpointsFromSlices("c1", "", slices, look)
	if len(got) != 2 {
		t.Fatalf("got %d endpoints: %+v", len(got), got)
	}
	first, second := got[0], got[1]
	if first.Address.String() != "10.0.0.1" || !first.Ready || first.ServiceAccount != "sa" || first.Pod != "p1" ||
		first.Locality != (model.Locality{Region: "eu", Zone: "eu-1", SubZone: "rack-7"}) || first.Ports["grpc"] != 9000 {
		t.Errorf("first endpoint = %+v", first)
	}
	if want := model.NewLabels(podLabels); first.Labels != want {
		t.Errorf("first endpoint's labels = %v, want the Pod's %v", first.Labels, want)
	}
	if second.Address.String() != "10.0.0.2" || !second.Ready || second.Cluster != "c1" || !second.Labels.IsZero() {
		t.Errorf("deduplicated endpoint = %+v", second)
	}
}
