package debugdoc

import (
	"time"

	"github.com/meshfed/meshfed/pkg/model"
)

// Spokez is the document of /debug/spokez: every spoke of the fleet,
// merged over the replicas, sorted by cluster.
type Spokez []Spoke

// Spoke is one spoke (a cluster's config-cluster shim), as the hub sees its
// trust-bundle streams.
type Spoke struct {
	Cluster model.ClusterID `json:"cluster"`
	// Version is the spoke's x-meshfed-spoke-version of its latest stream.
	Version string `json:"version"`
	// Identity is the service account the spoke authenticated as.
	Identity string `json:"identity"`
	// ConnectedAt is when the latest stream opened.
	ConnectedAt time.Time `json:"connectedAt"`
	// LastSeen is now while a stream is open, else when the last one closed.
	LastSeen time.Time `json:"lastSeen"`
	// Healthy means at least one stream of the cluster is open now.
	Healthy bool `json:"healthy"`
	// Streams is the number of open streams (one per spoke replica).
	Streams int `json:"streams"`
	// BundleVersion is the bundle version last sent to the cluster.
	BundleVersion string `json:"bundleVersion"`
	// Hubs are the hub replicas holding the open streams.
	Hubs []string `json:"hubs,omitempty"`
}

// Spoke returns the entry of cluster id.
func (s Spokez) Spoke(id model.ClusterID) (Spoke, bool) {
	for _, sp := range s {
		if sp.Cluster == id {
			return sp, true
		}
	}
	return Spoke{}, false
}
