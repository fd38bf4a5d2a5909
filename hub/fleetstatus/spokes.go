package fleetstatus

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/model"
)

// spokeStatus is the fleet-wide view of the spokes: those whose
// trust-bundle stream this replica holds (trustsvc.Service.Spokes) and
// those the other replicas reported over the peer stream. It travels in
// the fleet-status batches (batch), so any replica answers for every spoke as it
// does for every proxy. Safe for concurrent use.
type spokeStatus struct {
	self  string
	local func() []debugdoc.Spoke // nil without the CA

	mu       sync.Mutex                  // guards peers and lastSent; no call out under it
	peers    map[string][]debugdoc.Spoke // replica → its spokes
	lastSent []byte                      // wire form of the last local list sent
}

func newSpokeStatus(self string, local func() []debugdoc.Spoke) *spokeStatus {
	return &spokeStatus{self: self, local: local, peers: map[string][]debugdoc.Spoke{}}
}

// localWire returns the local spokes as replicated: what a replica holds,
// without the fields that only the passing of time changes.
func (s *spokeStatus) localWire() []debugdoc.Spoke {
	if s.local == nil {
		return nil
	}
	out := s.local()
	for i := range out {
		if out[i].Healthy {
			out[i].LastSeen = time.Time{} // "now", wherever it is read
		}
		out[i].Hubs = nil
	}
	return out
}

// full returns the local spokes for a full batch, and marks them sent.
func (s *spokeStatus) full() []debugdoc.Spoke {
	list := s.localWire()
	raw, _ := json.Marshal(list)
	s.mu.Lock()
	s.lastSent = raw
	s.mu.Unlock()
	return list
}

// take returns the local spokes if they changed since last sent.
func (s *spokeStatus) take() ([]debugdoc.Spoke, bool) {
	list := s.localWire()
	raw, _ := json.Marshal(list)
	s.mu.Lock()
	defer s.mu.Unlock()
	if string(raw) == string(s.lastSent) {
		return nil, false
	}
	s.lastSent = raw
	return list, true
}

// apply replaces what replica from reported.
func (s *spokeStatus) apply(from string, list []debugdoc.Spoke) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.peers[from] = slices.Clone(list)
}

// drop forgets a departed replica's spokes: its streams are gone with it.
func (s *spokeStatus) drop(replica string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.peers, replica)
}

// all returns the merged view at now (/debug/spokez).
func (s *spokeStatus) all(now time.Time) []debugdoc.Spoke {
	byReplica := map[string][]debugdoc.Spoke{s.self: s.localWire()}
	s.mu.Lock()
	for r, list := range s.peers {
		if r != s.self {
			byReplica[r] = list
		}
	}
	s.mu.Unlock()
	return mergeSpokes(byReplica, now)
}

// mergeSpokes merges per cluster what each replica knows of its spokes:
// streams add up (healthy if any replica holds one, Hubs naming them), the
// latest connection gives version, identity and bundle version, and
// LastSeen is the latest (now while healthy). Sorted by cluster.
func mergeSpokes(byReplica map[string][]debugdoc.Spoke, now time.Time) []debugdoc.Spoke {
	merged := map[model.ClusterID]*debugdoc.Spoke{}
	for _, replica := range slices.Sorted(maps.Keys(byReplica)) {
		for _, st := range byReplica[replica] {
			m := merged[st.Cluster]
			if m == nil {
				m = &debugdoc.Spoke{Cluster: st.Cluster}
				merged[st.Cluster] = m
			}
			if m.ConnectedAt.IsZero() || st.ConnectedAt.After(m.ConnectedAt) {
				m.Version, m.Identity, m.ConnectedAt, m.BundleVersion = st.Version, st.Identity, st.ConnectedAt, st.BundleVersion
			}
			if st.LastSeen.After(m.LastSeen) {
				m.LastSeen = st.LastSeen
			}
			if st.Streams > 0 {
				m.Streams += st.Streams
				m.Hubs = append(m.Hubs, replica)
			}
		}
	}
	out := make([]debugdoc.Spoke, 0, len(merged))
	for _, m := range merged {
		m.Healthy = m.Streams > 0
		if m.Healthy {
			m.LastSeen = now
		}
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b debugdoc.Spoke) int { return strings.Compare(string(a.Cluster), string(b.Cluster)) })
	return out
}
