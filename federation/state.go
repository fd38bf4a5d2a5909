package federation

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/meshfed/meshfed/pkg/model"
)

// Errors returned by State. A refused message changes nothing; what the
// caller does next depends on the sentinel.
var (
	// ErrStale means the message comes from a writer that has been
	// superseded: an older term, or the losing owner of the same term. Drop
	// it; a local writer that gets it has lost the cluster and stops.
	ErrStale = errors.New("federation: stale version")
	// ErrDuplicate means the state already includes the message (it is
	// the current version, or an earlier one of the same writer). Drop it.
	ErrDuplicate = errors.New("federation: duplicate version")
	// ErrGap means the message cannot be applied yet: a delta that skips a
	// Seq, a delta of a newer writer whose snapshot has not arrived, or a
	// delta of a cluster not held. Ask the sender for a snapshot.
	ErrGap = errors.New("federation: version gap")
	// ErrRemoved means the cluster was removed (Remove) at a term not
	// older than the message's. Drop it.
	ErrRemoved = errors.New("federation: cluster removed")
	// ErrInvalid means the message is malformed: no cluster, term 0 (or
	// the maximum term), no owner, a delta without a hostname or at Seq 0.
	ErrInvalid = errors.New("federation: invalid message")
)

// State is the pure merge of every cluster's replicated state. It orders
// each cluster's writes by Version, applies the accepted ones to a
// model.Registry (which stores the shards; State keeps the versions) and
// refuses the others with ErrStale, ErrDuplicate, ErrGap, ErrRemoved or
// ErrInvalid. It does no I/O and reads no clock; it is not safe for
// concurrent use (the caller serialises access).
//
// State is the one authority on the order of writes: the registry stores
// what State hands it and orders nothing, so State must be the only writer
// of the registry's clusters. State does not know which clusters are
// configured: the caller drops messages for clusters it does not have in
// its configuration, so that a snapshot begun before a removal and
// delivered after it cannot bring the cluster back.
type State struct {
	reg *model.Registry
	// versions holds the current version of every cluster held; the
	// registry holds the same clusters, at generation Version.Term.
	versions map[model.ClusterID]Version
	// removed holds the version a cluster had when it was removed, for the
	// clusters removed and not added again since.
	removed map[model.ClusterID]Version
	// maxTerm is the highest term seen for each cluster, in local writes
	// and in every valid message whether applied or not.
	maxTerm map[model.ClusterID]uint64
}

// NewState returns a State that writes to reg. reg should be empty: State
// does not know the versions of clusters written before it.
func NewState(reg *model.Registry) *State {
	return &State{
		reg:      reg,
		versions: map[model.ClusterID]Version{},
		removed:  map[model.ClusterID]Version{},
		maxTerm:  map[model.ClusterID]uint64{},
	}
}

// ApplySnapshot replaces cluster snap.Cluster's state with snap when
// snap.Version is newer than the current version (Version.Compare > 0): a
// newer term, a higher owner of the same term, or a later Seq of the same
// writer (a resync). It returns the hostnames whose merged view changed. A
// snapshot of the current version, or of an earlier Seq of the current
// writer, is refused with ErrDuplicate; an older writer's with ErrStale; a
// snapshot of a removed cluster with ErrRemoved unless its term is newer
// than the one the cluster was removed at. Nil shards in snap.Shards are
// ignored.
func (s *State) ApplySnapshot(snap ClusterSnapshot) ([]model.Hostname, error) {
	c, v := snap.Cluster, snap.Version
	if err := validVersion(c, v); err != nil {
		return nil, fmt.Errorf("snapshot %s of cluster %q: %w", v, c, err)
	}
	s.observe(c, v.Term)
	if err := s.checkSnapshot(c, v); err != nil {
		return nil, err
	}
	changed := s.reg.ReplaceCluster(c, snap.Shards)
	s.versions[c] = v
	delete(s.removed, c)
	return changed, nil
}

// checkSnapshot tells whether a snapshot of version v of cluster c is newer
// than what State holds.
func (s *State) checkSnapshot(c model.ClusterID, v Version) error {
	if cur, ok := s.versions[c]; ok {
		switch {
		case v.Compare(cur) > 0:
			return nil
		case sameWriter(v, cur):
			return fmt.Errorf("cluster %s: snapshot %s, have %s: %w", c, v, cur, ErrDuplicate)
		default:
			return fmt.Errorf("cluster %s: snapshot %s is older than %s: %w", c, v, cur, ErrStale)
		}
	}
	if tomb, ok := s.removed[c]; ok && v.Term <= tomb.Term {
		return fmt.Errorf("cluster %s: snapshot %s, removed at %s: %w", c, v, tomb, ErrRemoved)
	}
	return nil
}

// ApplyDelta applies d when it is the next write of the current writer:
// the same Term and Owner as the current version and Seq one more. It
// reports whether the merged view of d.Hostname changed; an accepted delta
// advances the version even when it changes nothing. A delta the state
// already includes is refused with ErrDuplicate; one that skips a Seq, that
// comes from a newer writer whose snapshot has not been applied, or that
// names a cluster not held, with ErrGap (ask the sender for a snapshot); an
// older writer's with ErrStale; one of a removed cluster, not newer than the
// removal, with ErrRemoved.
func (s *State) ApplyDelta(d ShardDelta) (changed bool, err error) {
	c, v := d.Cluster, d.Version
	if err := validDelta(d); err != nil {
		return false, fmt.Errorf("delta %s of cluster %q: %w", v, c, err)
	}
	s.observe(c, v.Term)
	if err := s.checkDelta(c, v); err != nil {
		return false, err
	}
	changed, err = s.reg.UpdateShard(c, d.Hostname, d.Shard)
	if err != nil {
		return false, fmt.Errorf("cluster %s: delta %s: registry refused it: %w", c, v, err)
	}
	s.versions[c] = v
	return changed, nil
}

// checkDelta tells whether a delta of version v is the next write of
// cluster c.
func (s *State) checkDelta(c model.ClusterID, v Version) error {
	cur, ok := s.versions[c]
	if !ok {
		if tomb, ok := s.removed[c]; ok && v.Term <= tomb.Term {
			return fmt.Errorf("cluster %s: delta %s, removed at %s: %w", c, v, tomb, ErrRemoved)
		}
		return fmt.Errorf("cluster %s: delta %s of a cluster not held: %w", c, v, ErrGap)
	}
	switch {
	case sameWriter(v, cur) && v.Seq <= cur.Seq:
		return fmt.Errorf("cluster %s: delta %s, have %s: %w", c, v, cur, ErrDuplicate)
	case sameWriter(v, cur) && v.Seq == cur.Seq+1:
		return nil
	case sameWriter(v, cur):
		return fmt.Errorf("cluster %s: delta %s skips from %s: %w", c, v, cur, ErrGap)
	case v.Compare(cur) > 0:
		return fmt.Errorf("cluster %s: delta %s of a newer writer than %s, before its snapshot: %w", c, v, cur, ErrGap)
	default:
		return fmt.Errorf("cluster %s: delta %s is older than %s: %w", c, v, cur, ErrStale)
	}
}

// NextTerm returns the term a replica that starts owning cluster c writes
// under: one more than the highest term seen for c, including terms of
// messages that were not applied and of removed clusters.
func (s *State) NextTerm(c model.ClusterID) uint64 {
	return s.maxTerm[c] + 1
}

// LocalSnapshot starts a term of owner's writes to cluster c: it builds the
// snapshot of shards at version {term, 0, owner}, applies it like
// ApplySnapshot, and returns it to publish with the hostnames whose merged
// view changed. term should come from NextTerm. The snapshot holds a copy of
// shards (the shards themselves are shared: they are immutable). On error
// nothing is applied and there is nothing to publish.
func (s *State) LocalSnapshot(c model.ClusterID, owner ReplicaID, term uint64, shards map[model.Hostname]*model.ServiceShard, now time.Time) (ClusterSnapshot, []model.Hostname, error) {
	snap := ClusterSnapshot{
		Cluster: c,
		Version: Version{Term: term, Owner: owner},
		Shards:  map[model.Hostname]*model.ServiceShard{},
		Sent:    now,
	}
	for h, sh := range shards {
		if sh != nil {
			snap.Shards[h] = sh
		}
	}
	changed, err := s.ApplySnapshot(snap)
	if err != nil {
		return ClusterSnapshot{}, nil, err
	}
	return snap, changed, nil
}

// LocalDelta records owner's change to cluster c's shard of hostname h (nil
// deletes it) in term, after the LocalSnapshot of that term. It returns the
// delta to publish, at the next Seq, and whether the merged view changed. A
// change that changes nothing (model.ServiceShard.Equal) returns
// changed=false, consumes no Seq and there is nothing to publish. When
// another writer has superseded owner's term the error is ErrStale (stop
// watching c); when c was removed, ErrRemoved; before the term's snapshot,
// ErrGap.
func (s *State) LocalDelta(c model.ClusterID, owner ReplicaID, term uint64, h model.Hostname, shard *model.ServiceShard, now time.Time) (ShardDelta, bool, error) {
	v := Version{Term: term, Seq: 1, Owner: owner}
	if cur, ok := s.versions[c]; ok && sameWriter(v, cur) {
		v.Seq = cur.Seq + 1
	}
	d := ShardDelta{Cluster: c, Version: v, Hostname: h, Shard: shard, Sent: now}
	if err := validDelta(d); err != nil {
		return ShardDelta{}, false, fmt.Errorf("delta %s of cluster %q: %w", v, c, err)
	}
	s.observe(c, term)
	if err := s.checkDelta(c, v); err != nil {
		return ShardDelta{}, false, err
	}
	changed, err := s.reg.UpdateShard(c, h, shard)
	if err != nil {
		return ShardDelta{}, false, fmt.Errorf("cluster %s: delta %s: registry refused it: %w", c, v, err)
	}
	if !changed {
		return ShardDelta{}, false, nil
	}
	s.versions[c] = v
	return d, true, nil
}

// Remove drops cluster c, deleted from the configuration (every replica
// sees that), and returns the hostnames whose merged view changed. The
// version c had becomes a tombstone: later snapshots and deltas whose term
// is not newer are refused with ErrRemoved, while a snapshot of a strictly
// newer term (the cluster added again, under a new owner term) is accepted.
// Removing a cluster not held changes nothing.
func (s *State) Remove(c model.ClusterID) []model.Hostname {
	changed := s.reg.RemoveCluster(c)
	if cur, ok := s.versions[c]; ok {
		delete(s.versions, c)
		s.removed[c] = cur
	}
	return changed
}

// Version returns the current version of cluster c, if held.
func (s *State) Version(c model.ClusterID) (Version, bool) {
	v, ok := s.versions[c]
	return v, ok
}

// Tombstone returns the version cluster c had when it was removed, for a
// cluster removed and not added again since.
func (s *State) Tombstone(c model.ClusterID) (Version, bool) {
	v, ok := s.removed[c]
	return v, ok
}

// Observe records that term has been used for cluster c by a writer this
// State has not applied (a tombstone a peer reports), so that NextTerm
// comes after it.
func (s *State) Observe(c model.ClusterID, term uint64) { s.observe(c, term) }

// Digest returns the version of every cluster held.
func (s *State) Digest() Digest {
	return Digest(maps.Clone(s.versions))
}

// Behind returns, sorted, the clusters on which remote holds a version that
// ApplySnapshot would accept here: the clusters to ask remote a snapshot of.
func (s *State) Behind(remote Digest) []model.ClusterID {
	var out []model.ClusterID
	for c, v := range remote {
		if validVersion(c, v) != nil {
			continue
		}
		if s.checkSnapshot(c, v) == nil {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// Snapshot returns the current state of cluster c, sent at now, for a
// peer's catch-up; false when c is not held.
func (s *State) Snapshot(c model.ClusterID, now time.Time) (ClusterSnapshot, bool) {
	v, ok := s.versions[c]
	if !ok {
		return ClusterSnapshot{}, false
	}
	return ClusterSnapshot{Cluster: c, Version: v, Shards: s.reg.ClusterShards(c), Sent: now}, true
}

// observe records that term has been used for cluster c.
func (s *State) observe(c model.ClusterID, term uint64) {
	if term > s.maxTerm[c] {
		s.maxTerm[c] = term
	}
}

// sameWriter reports whether a and b were written in the same term by the
// same owner.
func sameWriter(a, b Version) bool { return a.Term == b.Term && a.Owner == b.Owner }

func validVersion(c model.ClusterID, v Version) error {
	switch {
	case c == "":
		return fmt.Errorf("no cluster: %w", ErrInvalid)
	case v.Term == 0 || v.Term == math.MaxUint64:
		return fmt.Errorf("term %d out of range: %w", v.Term, ErrInvalid)
	case v.Owner == "":
		return fmt.Errorf("no owner: %w", ErrInvalid)
	}
	return nil
}

func validDelta(d ShardDelta) error {
	if err := validVersion(d.Cluster, d.Version); err != nil {
		return err
	}
	switch {
	case d.Version.Seq == 0:
		return fmt.Errorf("seq 0 is a snapshot's: %w", ErrInvalid)
	case d.Hostname == "":
		return fmt.Errorf("no hostname: %w", ErrInvalid)
	}
	return nil
}
