package xdsnode

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
)

func TestMetadataKeys(t *testing.T) {
	// Istio's spelling, which proxies and istioctl depend on.
	for got, want := range map[string]string{
		MetadataClusterID: "CLUSTER_ID", MetadataNamespace: "NAMESPACE", MetadataNetwork: "NETWORK",
		MetadataLabels: "LABELS", MetadataGenerator: "GENERATOR", MetadataInterceptionMode: "INTERCEPTION_MODE",
		MetadataIstioVersion: "ISTIO_VERSION", MetadataInstanceIPs: "INSTANCE_IPS", MetadataServiceAccount: "SERVICE_ACCOUNT",
		GeneratorGRPC: "grpc", GeneratorEvent: "event",
		InterceptionRedirect: "REDIRECT", InterceptionTProxy: "TPROXY", InterceptionNone: "NONE",
		MetadataEnv(MetadataClusterID): "ISTIO_META_CLUSTER_ID",
	} {
		if got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	m := Metadata{
		ClusterID: "cluster-1", Namespace: "demo", Network: "net-1", Labels: map[string]string{"app": "a"},
		Generator: GeneratorGRPC, InterceptionMode: InterceptionRedirect, IstioVersion: "1.28.0",
		InstanceIPs: "10.0.0.1", ServiceAccount: "sa",
	}
	if got := MetadataOf(m.Struct()); !reflect.DeepEqual(got, m) {
		t.Errorf("MetadataOf(Struct()) = %+v, want %+v", got, m)
	}
	s, err := structpb.NewStruct(m.Map())
	if err != nil {
		t.Fatal(err)
	}
	if got := MetadataOf(s); !reflect.DeepEqual(got, m) {
		t.Errorf("MetadataOf(Map()) = %+v, want %+v", got, m)
	}
	if ClusterOf(m.Struct()) != "cluster-1" || ClusterOf(nil) != "" {
		t.Errorf("ClusterOf = %q, %q", ClusterOf(m.Struct()), ClusterOf(nil))
	}
}

func TestMetadataLeavesEmptyOut(t *testing.T) {
	m := Metadata{ClusterID: "c1"}
	if got, want := m.Map(), map[string]any{MetadataClusterID: "c1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Map = %v, want %v", got, want)
	}
	if got := m.Struct().GetFields(); len(got) != 1 || got[MetadataClusterID].GetStringValue() != "c1" {
		t.Errorf("Struct = %v", got)
	}
}

func TestMetadataOfOtherKinds(t *testing.T) {
	s, err := structpb.NewStruct(map[string]any{
		MetadataClusterID: 7.0,
		MetadataNamespace: "ns",
		MetadataLabels:    map[string]any{"app": "a", "n": 1.0},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Metadata{Namespace: "ns", Labels: map[string]string{"app": "a"}}
	if got := MetadataOf(s); !reflect.DeepEqual(got, want) {
		t.Errorf("MetadataOf = %+v, want %+v", got, want)
	}
	if got := MetadataOf(nil); !reflect.DeepEqual(got, Metadata{}) {
		t.Errorf("MetadataOf(nil) = %+v", got)
	}
}
