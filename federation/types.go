package federation

import (
	"cmp"
	"fmt"
	"time"

	"github.com/meshfed/meshfed/pkg/model"
)

// ReplicaID names a hub replica; it is its memberlist node name.
type ReplicaID string

func (r ReplicaID) String() string { return string(r) }

// Version orders the writes of one cluster's state across replicas.
//
// A replica that starts owning a cluster picks a Term greater than any it
// has seen for that cluster and publishes a snapshot at Seq 0; each later
// delta of that term has the next Seq. A higher Term always wins; within a
// term, writes apply in Seq order. Two replicas that claim a cluster with
// the same term (their membership views briefly differ) are ordered by
// Owner, so every replica picks the same winner.
type Version struct {
	Term  uint64    `json:"term"`
	Seq   uint64    `json:"seq"`
	Owner ReplicaID `json:"owner"`
}

// Compare orders versions: by Term, then Owner, then Seq. It returns -1, 0
// or +1.
func (v Version) Compare(o Version) int {
	if c := cmp.Compare(v.Term, o.Term); c != 0 {
		return c
	}
	if c := cmp.Compare(v.Owner, o.Owner); c != 0 {
		return c
	}
	return cmp.Compare(v.Seq, o.Seq)
}

// IsZero reports whether v is the zero version (nothing known).
func (v Version) IsZero() bool { return v == Version{} }

func (v Version) String() string { return fmt.Sprintf("%d.%d@%s", v.Term, v.Seq, v.Owner) }

// ClusterSnapshot is the whole state of one cluster at a version.
type ClusterSnapshot struct {
	Cluster model.ClusterID                        `json:"cluster"`
	Version Version                                `json:"version"`
	Shards  map[model.Hostname]*model.ServiceShard `json:"shards"`
	// Sent is when the owner produced the write, for replication lag.
	Sent time.Time `json:"sent"`
}

// ShardDelta changes one hostname's shard of a cluster; a nil Shard
// deletes it. Version.Seq is one more than the version it applies on.
type ShardDelta struct {
	Cluster  model.ClusterID     `json:"cluster"`
	Version  Version             `json:"version"`
	Hostname model.Hostname      `json:"hostname"`
	Shard    *model.ServiceShard `json:"shard,omitempty"`
	Sent     time.Time           `json:"sent"`
}

// Digest is the version of every cluster a replica holds (or owns, as
// gossiped), so that a peer can tell what it is missing.
type Digest map[model.ClusterID]Version
