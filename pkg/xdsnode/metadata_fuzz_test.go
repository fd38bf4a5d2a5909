package xdsnode

import (
	"maps"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// FuzzMetadataOf: node metadata as a proxy sends it (the protobuf wire of
// a Struct, any shape): MetadataOf never panics, reading it back from its
// own Struct gives the same metadata, and ClusterOf agrees with it.
func FuzzMetadataOf(f *testing.F) {
	seed := Metadata{
		ClusterID: "cluster-1", Namespace: "demo", Network: "net-1", Generator: GeneratorGRPC,
		Labels: map[string]string{"app": "echo", "version": "v1"}, ServiceAccount: "echo",
	}.Struct()
	if b, err := proto.Marshal(seed); err == nil {
		f.Add(b)
	}
	odd, _ := structpb.NewStruct(map[string]any{MetadataClusterID: 7.0, MetadataLabels: "not a struct", MetadataNamespace: []any{"x"}})
	if b, err := proto.Marshal(odd); err == nil {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var s structpb.Struct
		if proto.Unmarshal(data, &s) != nil {
			return
		}
		m := MetadataOf(&s)
		back := MetadataOf(m.Struct())
		if back.ClusterID != m.ClusterID || back.Namespace != m.Namespace || back.Network != m.Network ||
			back.Generator != m.Generator || back.InterceptionMode != m.InterceptionMode ||
			back.IstioVersion != m.IstioVersion || back.InstanceIPs != m.InstanceIPs ||
			back.ServiceAccount != m.ServiceAccount || !maps.Equal(back.Labels, m.Labels) {
			t.Fatalf("metadata does not survive its own Struct:\n%+v\n%+v", m, back)
		}
		if got := ClusterOf(&s); got != m.ClusterID {
			t.Fatalf("ClusterOf %q, MetadataOf %q", got, m.ClusterID)
		}
	})
}
