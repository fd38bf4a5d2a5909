package proxystatus

import (
	"sync"
)

// Fleet merges the records of every hub replica into one view of the fleet.
// A proxy (keyed by node ID) that reconnected to another replica may for a
// while have records on both; Fleet shows only the newest: the one whose
// stream opened last, then the one that changed last, then the one of the
// lower replica name.
//
// The zero Fleet is empty and ready. A Fleet is safe for concurrent use; it
// does no I/O. Records passed in are copied (but see UpsertOwned) and
// those returned are copies.
type Fleet struct {
	mu       sync.RWMutex                 // guards replicas
	replicas map[string]map[string]Record // replica → node ID → record
}

// NewFleet returns an empty Fleet.
func NewFleet() *Fleet { return &Fleet{} }

// Upsert adds or replaces the records of replica. Each record's Replica is
// set to replica.
func (f *Fleet) Upsert(replica string, recs []Record) { f.upsert(replica, recs, true) }

// UpsertOwned is Upsert without the copy: the Fleet keeps recs' Types
// maps, which the caller must not change afterwards (it may go on reading
// them). It is for records built for the call, such as a decoded batch.
func (f *Fleet) UpsertOwned(replica string, recs []Record) { f.upsert(replica, recs, false) }

func (f *Fleet) upsert(replica string, recs []Record, clone bool) {
	if len(recs) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.replicas == nil {
		f.replicas = map[string]map[string]Record{}
	}
	m := f.replicas[replica]
	if m == nil {
		m = make(map[string]Record, len(recs))
		f.replicas[replica] = m
	}
	for _, r := range recs {
		if clone {
			r = r.Clone()
		}
		r.Replica = replica
		m[r.Proxy] = r
	}
}

// Remove deletes replica's records of the given node IDs: their streams to
// replica closed.
func (f *Fleet) Remove(replica string, proxies []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.replicas[replica]
	for _, p := range proxies {
		delete(m, p)
	}
	if len(m) == 0 {
		delete(f.replicas, replica)
	}
}

// Replace sets replica's records to exactly recs, as after a full resync
// from that replica.
func (f *Fleet) Replace(replica string, recs []Record) {
	f.DropReplica(replica)
	f.Upsert(replica, recs)
}

// DropReplica deletes every record of replica: it left or died.
func (f *Fleet) DropReplica(replica string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.replicas, replica)
}

// Replicas returns how many records each replica has.
func (f *Fleet) Replicas() map[string]int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[string]int, len(f.replicas))
	for r, m := range f.replicas {
		out[r] = len(m)
	}
	return out
}

// All returns the newest record of every proxy, sorted (see Sort).
func (f *Fleet) All() []Record {
	return f.collect(func(Record) bool { return true })
}

// Get returns the newest records of the proxies whose node ID or name is
// q, sorted. There can be several: the same "<pod>.<ns>" in several
// clusters.
func (f *Fleet) Get(q string) []Record {
	return f.collect(func(r Record) bool { return r.Proxy == q || r.Name == q })
}

func (f *Fleet) collect(keep func(Record) bool) []Record {
	f.mu.RLock()
	newest := map[string]Record{}
	for _, m := range f.replicas {
		for id, r := range m {
			if !keep(r) {
				continue
			}
			if cur, ok := newest[id]; !ok || newer(r, cur) {
				newest[id] = r
			}
		}
	}
	f.mu.RUnlock()
	out := make([]Record, 0, len(newest))
	for _, r := range newest {
		out = append(out, r.Clone())
	}
	Sort(out)
	return out
}

// newer reports whether a supersedes b, two records of one proxy.
func newer(a, b Record) bool {
	if !a.Connected.Equal(b.Connected) {
		return a.Connected.After(b.Connected)
	}
	if !a.LastChange.Equal(b.LastChange) {
		return a.LastChange.After(b.LastChange)
	}
	return a.Replica < b.Replica
}
