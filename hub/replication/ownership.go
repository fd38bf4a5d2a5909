package replication

import (
	"maps"
	"slices"
	"sync"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/pkg/model"
)

// Ownership is the set of live, unsuspected members and the rendezvous
// ranking over it: which clusters this replica watches. It implements
// remotes.Ownership. Build it with NewOwnership before the remote-cluster
// provider that asks it, and hand it to New, which keeps it current.
type Ownership struct {
	self federation.ReplicaID
	n    int

	mu        sync.Mutex // guards members and suspected
	members   []federation.ReplicaID
	suspected map[federation.ReplicaID]bool

	changed chan struct{}
	// writers signals a membership change to the writers of Writes; a
	// channel of its own, since changed has one reader (the provider).
	writers chan struct{}
}

// NewOwnership returns the ownership of replica self, alone until New's
// Replicator learns the members, with n (at least 1) owners per cluster.
func NewOwnership(self federation.ReplicaID, n int) *Ownership {
	n = max(n, 1)
	return &Ownership{
		self: self, n: n,
		members:   []federation.ReplicaID{self},
		suspected: map[federation.ReplicaID]bool{},
		changed:   make(chan struct{}, 1),
		writers:   make(chan struct{}, 1),
	}
}

// Owns reports whether this replica watches cluster c.
func (o *Ownership) Owns(c model.ClusterID) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return federation.Owns(o.self, c, o.members, o.n)
}

// Writes reports whether this replica is the one of the live members that
// writes what is named name into the config cluster, such as the status of
// an Istio config object: chosen by the same rendezvous hashing as cluster
// owners, one writer per name, so that N replicas do not write N times.
// While membership settles two replicas may both think they are it; what
// they write is the same.
func (o *Ownership) Writes(name string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return federation.Owns(o.self, model.ClusterID(name), o.members, 1)
}

func (o *Ownership) owners(c model.ClusterID) []federation.ReplicaID {
	o.mu.Lock()
	defer o.mu.Unlock()
	return federation.Owners(c, o.members, o.n)
}

// Changed signals that ownership may have changed.
func (o *Ownership) Changed() <-chan struct{} { return o.changed }

// WritersChanged signals that Writes may answer otherwise now.
func (o *Ownership) WritersChanged() <-chan struct{} { return o.writers }

// setMembers sets the live members (suspects are left out) and returns how
// many of clusters changed owners.
func (o *Ownership) setMembers(all []federation.ReplicaID, clusters []model.ClusterID) int {
	o.mu.Lock()
	live := make([]federation.ReplicaID, 0, len(all))
	present := map[federation.ReplicaID]bool{}
	for _, id := range all {
		present[id] = true
		if !o.suspected[id] || id == o.self {
			live = append(live, id)
		}
	}
	for id := range o.suspected {
		if !present[id] {
			delete(o.suspected, id) // gone for good: no longer a suspect
		}
	}
	moved := 0
	for _, c := range clusters {
		if !slices.Equal(federation.Owners(c, o.members, o.n), federation.Owners(c, live, o.n)) {
			moved++
		}
	}
	same := slices.Equal(slices.Sorted(slices.Values(o.members)), slices.Sorted(slices.Values(live)))
	o.members = live
	o.mu.Unlock()
	if !same {
		for _, ch := range []chan struct{}{o.changed, o.writers} {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	return moved
}

// suspect marks (or clears) a member as suspect and reports whether that
// changed anything.
func (o *Ownership) suspect(id federation.ReplicaID, on bool) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if id == o.self || o.suspected[id] == on {
		return false
	}
	if on {
		o.suspected[id] = true
	} else {
		delete(o.suspected, id)
	}
	return true
}

// liveMembers returns the members last set, suspects included, so that
// setMembers can re-filter them.
func (o *Ownership) liveMembers() []federation.ReplicaID {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := slices.Clone(o.members)
	for id := range o.suspected {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

func (o *Ownership) suspects() []federation.ReplicaID {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Sorted(maps.Keys(o.suspected))
}
