package federation

import (
	"cmp"
	"slices"

	"github.com/meshfed/meshfed/pkg/model"
)

// Owners returns the n members that own cluster, best first, by rendezvous
// (highest random weight) hashing: every member gets the score
// hash(cluster, member) and the n highest scores win, ties broken by the
// lower ReplicaID. The result depends only on the set of members, not on
// their order, and duplicates in members count once. When n exceeds the
// number of distinct members all of them are returned, ranked; when n is not
// positive the result is nil.
//
// Because a member's score for a cluster does not depend on the other
// members, adding a member moves to it only the clusters where it ranks
// among the first n, and removing a member moves only the clusters it
// owned: about 1/len(members) of them in either case.
func Owners(cluster model.ClusterID, members []ReplicaID, n int) []ReplicaID {
	if n <= 0 || len(members) == 0 {
		return nil
	}
	ranked := make([]scored, len(members))
	for i, m := range members {
		ranked[i] = scored{id: m, score: score(cluster, m)}
	}
	slices.SortFunc(ranked, compareScored)
	// Equal IDs have equal scores, so duplicates are adjacent.
	ranked = slices.CompactFunc(ranked, func(a, b scored) bool { return a.id == b.id })
	n = min(n, len(ranked))
	out := make([]ReplicaID, n)
	for i := range out {
		out[i] = ranked[i].id
	}
	return out
}

// Owns reports whether self is one of the n owners of cluster among members
// (see Owners). A replica that is not in members owns nothing.
func Owns(self ReplicaID, cluster model.ClusterID, members []ReplicaID, n int) bool {
	return slices.Contains(Owners(cluster, members, n), self)
}

// scored is a member with its score for one cluster.
type scored struct {
	id    ReplicaID
	score uint64
}

// compareScored orders by descending score, then ascending ID.
func compareScored(a, b scored) int {
	if c := cmp.Compare(b.score, a.score); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

// score is member's rendezvous weight for cluster: FNV-1a 64 over
// cluster + "\x00" + member, then the MurmurHash3 64-bit finalizer, because
// FNV alone leaves inputs that differ only in their last bytes close together
// in the high bits, which are the ones a comparison looks at.
func score(cluster model.ClusterID, member ReplicaID) uint64 {
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := 0; i < len(cluster); i++ {
		h ^= uint64(cluster[i])
		h *= prime64
	}
	h *= prime64 // the "\x00" separator: h ^= 0 is a no-op
	for i := 0; i < len(member); i++ {
		h ^= uint64(member[i])
		h *= prime64
	}
	// fmix64 from MurmurHash3.
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
