package xds

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// FuzzCheckNodeSize: the node of a DiscoveryRequest as it comes off the
// wire: the size check never panics, refuses exactly the nodes over a
// limit (with an error naming ErrNodeTooLarge), and accepts the others.
func FuzzCheckNodeSize(f *testing.F) {
	md := xdsnode.Metadata{ClusterID: "cluster-1", Namespace: "demo", Labels: map[string]string{"app": "echo"}}
	for _, n := range []*corev3.Node{
		{Id: "sidecar~10.0.0.1~echo-0.demo~demo.svc.cluster.local", Metadata: md.Struct(),
			Locality: &corev3.Locality{Region: "r1", Zone: "z1"}},
		{Id: strings.Repeat("x", maxNodeIDBytes+1)},
		{Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			xdsnode.MetadataClusterID: structpb.NewStringValue(strings.Repeat("c", maxClusterIDBytes+1))}}},
		{},
	} {
		if b, err := proto.Marshal(n); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var n corev3.Node
		if proto.Unmarshal(data, &n) != nil {
			return
		}
		loc := n.GetLocality()
		over := len(n.GetId()) > maxNodeIDBytes ||
			len(xdsnode.ClusterOf(n.GetMetadata())) > maxClusterIDBytes ||
			len(loc.GetRegion()) > maxLocalityBytes || len(loc.GetZone()) > maxLocalityBytes ||
			len(loc.GetSubZone()) > maxLocalityBytes || proto.Size(&n) > maxNodeBytes
		err := checkNodeSize(&n, xdsnode.MetadataOf(n.GetMetadata()))
		if over != (err != nil) {
			t.Fatalf("node over a limit: %v; check: %v", over, err)
		}
		if err != nil && !strings.Contains(err.Error(), ErrNodeTooLarge.Error()) {
			t.Fatalf("refusal does not say %q: %v", ErrNodeTooLarge, err)
		}
	})
}
