package replication

import (
	"maps"
	"slices"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/pkg/debugdoc"
)

// Ownership returns which clusters this replica watches.
func (r *Replicator) Ownership() *Ownership { return r.members.own }

// Federationz reports members, owners per cluster and state versions: the
// document of /debug/federationz.
func (r *Replicator) Federationz() debugdoc.Federationz {
	out := debugdoc.Federationz{Self: string(r.opts.Self), WatchReplicas: r.members.own.n}
	for _, id := range r.members.own.suspects() {
		out.Suspects = append(out.Suspects, string(id))
	}
	connected := map[federation.ReplicaID]bool{}
	for _, id := range r.peers.Connected() {
		connected[id] = true
	}
	for _, m := range r.membership.Members() {
		out.Members = append(out.Members, debugdoc.FederationzMember{
			ID: string(m.ID), GossipAddr: m.GossipAddr, PeerAddr: m.PeerAddr, Version: m.Version, Connected: connected[m.ID] || m.ID == r.opts.Self,
		})
	}
	digest := r.members.store.Digest()
	for _, c := range slices.Sorted(maps.Keys(digest)) {
		v := digest[c]
		owners := r.members.own.owners(c)
		ids := make([]string, len(owners))
		for i, o := range owners {
			ids[i] = string(o)
		}
		out.Clusters = append(out.Clusters, debugdoc.FederationzCluster{
			ID: c, Owners: ids, Version: debugdoc.StateVersion{Term: v.Term, Seq: v.Seq, Owner: string(v.Owner)},
		})
	}
	return out
}
