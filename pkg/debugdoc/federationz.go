package debugdoc

import (
	"maps"
	"slices"

	"github.com/meshfed/meshfed/pkg/model"
)

// Federationz is the document of /debug/federationz: the live members as
// this replica sees them, and each cluster's owners and the version of its
// state held here. Replica IDs are strings (federation.ReplicaID on the
// hub's side).
type Federationz struct {
	// Self is the answering replica.
	Self string `json:"self"`
	// WatchReplicas is how many replicas own (watch) each cluster.
	WatchReplicas int `json:"watchReplicas"`
	// Members are the live members, self included.
	Members []FederationzMember `json:"members"`
	// Clusters are the clusters whose state this replica holds, sorted by ID.
	Clusters []FederationzCluster `json:"clusters"`
	// Suspects are members whose peer stream broke, treated as gone before
	// gossip says so.
	Suspects []string `json:"suspects,omitempty"`
}

// FederationzMember is one live member.
type FederationzMember struct {
	ID         string `json:"id"`
	GossipAddr string `json:"gossipAddr"`
	PeerAddr   string `json:"peerAddr"`
	// Version is the member's build version (meshfed-hub --version), as
	// it publishes it over gossip.
	Version string `json:"version,omitempty"`
	// Connected: this replica holds a peer stream to it (always for self).
	Connected bool `json:"connected"`
}

// FederationzCluster is one cluster's owners and state version here.
type FederationzCluster struct {
	ID      model.ClusterID `json:"id"`
	Owners  []string        `json:"owners"`
	Version StateVersion    `json:"version"`
}

// StateVersion is the version of a cluster's state (federation.Version).
type StateVersion struct {
	Term  uint64 `json:"term"`
	Seq   uint64 `json:"seq"`
	Owner string `json:"owner"`
}

// Owners returns the owners this replica reports for cluster id.
func (f *Federationz) Owners(id model.ClusterID) []string {
	for _, c := range f.Clusters {
		if c.ID == id {
			return c.Owners
		}
	}
	return nil
}

// VersionGroup is one build version and the members running it.
type VersionGroup struct {
	// Version is empty for members that publish none.
	Version  string
	Replicas []string
}

// Versions groups the members by build version, sorted by version, each
// group's replicas sorted: more than one group means a fleet of mixed
// builds (mid-upgrade, or one forgotten).
func (f *Federationz) Versions() []VersionGroup {
	by := map[string][]string{}
	for _, m := range f.Members {
		by[m.Version] = append(by[m.Version], m.ID)
	}
	out := make([]VersionGroup, 0, len(by))
	for _, v := range slices.Sorted(maps.Keys(by)) {
		out = append(out, VersionGroup{Version: v, Replicas: slices.Sorted(slices.Values(by[v]))})
	}
	return out
}
