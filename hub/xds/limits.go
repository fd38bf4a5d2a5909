package xds

import (
	"errors"
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// What a client may make the hub hold or log. The node decides the proxy
// group and the sidecar state the hub builds; a NACK's message is kept in
// the proxy's status (replicated to every peer) and logged. Istio's
// proxies send nodes of a few KiB and NACK messages of a few hundred
// bytes (a Pod with large annotations, which pilot-agent copies into
// the node, makes it tens of KiB); the limits are far above both.
const (
	// maxNodeBytes bounds the marshalled node (metadata included).
	maxNodeBytes = 256 << 10
	// maxNodeIDBytes bounds the node ID, which keys the sidecar state.
	maxNodeIDBytes = 1024
	// maxClusterIDBytes bounds CLUSTER_ID, which keys proxy groups; a
	// cluster ID is a DNS label or subdomain (remotesecret).
	maxClusterIDBytes = 253
	// maxLocalityBytes bounds each of region, zone and sub-zone, which
	// key proxy groups too.
	maxLocalityBytes = 128
	// maxLoggedDetailBytes bounds a NACK message (and a node ID) as logged.
	maxLoggedDetailBytes = 512
)

// ErrNodeTooLarge means a node (or one of its keys) exceeds its limit.
var ErrNodeTooLarge = errors.New("xds: node too large")

// reasonNodeTooLarge labels meshfed_xds_requests_refused_total, as does
// reasonUnknownCluster (a CLUSTER_ID the fleet does not have).
const reasonNodeTooLarge = "node_too_large"

// checkNodeSize refuses a node, of metadata md, beyond the limits above, with a status
// that names the field and its size. A nil node (a request after the
// first) passes.
func checkNodeSize(node *corev3.Node, md xdsnode.Metadata) error {
	if node == nil {
		return nil
	}
	loc := node.GetLocality()
	for _, f := range []struct {
		name  string
		size  int
		limit int
	}{
		{"node ID", len(node.GetId()), maxNodeIDBytes},
		{xdsnode.MetadataClusterID, len(md.ClusterID), maxClusterIDBytes},
		{"locality region", len(loc.GetRegion()), maxLocalityBytes},
		{"locality zone", len(loc.GetZone()), maxLocalityBytes},
		{"locality sub-zone", len(loc.GetSubZone()), maxLocalityBytes},
		// Last, so that a field over its limit is named.
		{"node", proto.Size(node), maxNodeBytes},
	} {
		if f.size > f.limit {
			return grpcstatus.Error(codes.InvalidArgument,
				fmt.Errorf("%w: %s is %d bytes, over the limit of %d", ErrNodeTooLarge, f.name, f.size, f.limit).Error())
		}
	}
	return nil
}
