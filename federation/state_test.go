package federation

import (
	"bufio"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
)

var testNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	hostEcho = model.Hostname("echo")
	hostWeb  = model.Hostname("web")
	hostAPI  = model.Hostname("api")
)

// mkShard returns cluster c's shard of h with endpoints at addrs.
func mkShard(c model.ClusterID, h model.Hostname, addrs ...string) *model.ServiceShard {
	s := &model.ServiceShard{Service: &model.Service{
		Hostname: h, Name: string(h), Namespace: "demo",
		Ports: []model.ServicePort{{Name: "grpc", Port: 8080, Protocol: model.ProtocolGRPC}},
	}}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, model.Endpoint{
			Cluster: c, Address: netip.MustParseAddr(a), Ready: true, Ports: map[string]uint32{"grpc": 18080},
		})
	}
	model.SortEndpoints(s.Endpoints)
	return s
}

func ver(term, seq uint64, owner ReplicaID) Version {
	return Version{Term: term, Seq: seq, Owner: owner}
}

func snapOf(c model.ClusterID, v Version, shards ...*model.ServiceShard) ClusterSnapshot {
	m := map[model.Hostname]*model.ServiceShard{}
	for _, s := range shards {
		m[s.Service.Hostname] = s
	}
	return ClusterSnapshot{Cluster: c, Version: v, Shards: m, Sent: testNow}
}

func deltaOf(c model.ClusterID, v Version, h model.Hostname, s *model.ServiceShard) ShardDelta {
	return ShardDelta{Cluster: c, Version: v, Hostname: h, Shard: s, Sent: testNow}
}

// stateReplica is a State with its registry, as one hub replica holds them.
type stateReplica struct {
	reg   *model.Registry
	state *State
}

func newStateReplica() *stateReplica {
	reg := model.NewRegistry()
	return &stateReplica{reg: reg, state: NewState(reg)}
}

// dump renders everything a replica holds: per cluster its version and
// shards, then the merged view of every hostname.
func (r *stateReplica) dump() string {
	var b strings.Builder
	digest := r.state.Digest()
	for _, sum := range r.reg.Clusters() {
		fmt.Fprintf(&b, "%s %s\n", sum.ID, digest[sum.ID])
		shards := r.reg.ClusterShards(sum.ID)
		for _, h := range slices.Sorted(maps.Keys(shards)) {
			fmt.Fprintf(&b, "  %s: %s\n", h, endpointList(shards[h].Endpoints))
		}
	}
	if len(digest) != len(r.reg.Clusters()) {
		fmt.Fprintf(&b, "MISMATCH: digest %v\n", digest)
	}
	for _, h := range r.reg.Hostnames() {
		m := r.reg.Service(h)
		fmt.Fprintf(&b, "merged %s %v: %s\n", h, m.Clusters, endpointList(m.Endpoints))
	}
	if b.Len() == 0 {
		return "empty\n"
	}
	return b.String()
}

func endpointList(eps []model.Endpoint) string {
	if len(eps) == 0 {
		return "-"
	}
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = e.Address.String()
	}
	return strings.Join(out, " ")
}

func wantStateErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if want == nil && err != nil || want != nil && !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}

func mustSnapshot(t *testing.T, r *stateReplica, snap ClusterSnapshot) []model.Hostname {
	t.Helper()
	changed, err := r.state.ApplySnapshot(snap)
	if err != nil {
		t.Fatalf("snapshot %s: %v", snap.Version, err)
	}
	return changed
}

func mustDelta(t *testing.T, r *stateReplica, d ShardDelta) {
	t.Helper()
	if _, err := r.state.ApplyDelta(d); err != nil {
		t.Fatalf("delta %s: %v", d.Version, err)
	}
}

// termWriter is an owner producing the messages of one term of a cluster on
// its own replica.
type termWriter struct {
	*stateReplica
	c     model.ClusterID
	owner ReplicaID
	term  uint64
	log   []any // ClusterSnapshot or ShardDelta, in write order
}

func newTermWriter(t *testing.T, c model.ClusterID, owner ReplicaID, term uint64, shards ...*model.ServiceShard) *termWriter {
	t.Helper()
	w := &termWriter{stateReplica: newStateReplica(), c: c, owner: owner, term: term}
	m := map[model.Hostname]*model.ServiceShard{}
	for _, s := range shards {
		m[s.Service.Hostname] = s
	}
	snap, _, err := w.state.LocalSnapshot(c, owner, term, m, testNow)
	if err != nil {
		t.Fatalf("LocalSnapshot: %v", err)
	}
	w.log = append(w.log, snap)
	return w
}

// set writes h's shard (nil deletes) and returns the delta, or nil for a
// no-op.
func (w *termWriter) set(t *testing.T, h model.Hostname, s *model.ServiceShard) *ShardDelta {
	t.Helper()
	d, changed, err := w.state.LocalDelta(w.c, w.owner, w.term, h, s, testNow)
	if err != nil {
		t.Fatalf("LocalDelta: %v", err)
	}
	if !changed {
		return nil
	}
	w.log = append(w.log, d)
	return &d
}

func (w *termWriter) snapshot(t *testing.T) ClusterSnapshot {
	t.Helper()
	snap, ok := w.state.Snapshot(w.c, testNow)
	if !ok {
		t.Fatalf("writer %s has no state of %s", w.owner, w.c)
	}
	return snap
}

// apply delivers a message; it returns the error.
func (r *stateReplica) apply(m any) error {
	switch m := m.(type) {
	case ClusterSnapshot:
		_, err := r.state.ApplySnapshot(m)
		return err
	case ShardDelta:
		_, err := r.state.ApplyDelta(m)
		return err
	}
	panic(fmt.Sprintf("unknown message %T", m))
}

func TestApplySnapshot(t *testing.T) {
	const c = model.ClusterID("c1")
	base := snapOf(c, ver(3, 5, "b"), mkShard(c, hostEcho, "10.0.0.1"))
	tests := []struct {
		name    string
		snap    ClusterSnapshot
		want    error
		changed []model.Hostname
	}{
		{"newer term", snapOf(c, ver(4, 0, "a"), mkShard(c, hostWeb, "10.0.1.1")), nil, []model.Hostname{hostEcho, hostWeb}},
		{"same term, higher owner", snapOf(c, ver(3, 0, "c"), mkShard(c, hostEcho, "10.0.0.2")), nil, []model.Hostname{hostEcho}},
		{"same writer, later seq (resync)", snapOf(c, ver(3, 9, "b"), mkShard(c, hostEcho, "10.0.0.1")), nil, nil},
		{"same version", snapOf(c, ver(3, 5, "b"), mkShard(c, hostEcho, "10.0.0.9")), ErrDuplicate, nil},
		{"same writer, earlier seq", snapOf(c, ver(3, 4, "b")), ErrDuplicate, nil},
		{"same term, lower owner", snapOf(c, ver(3, 9, "a")), ErrStale, nil},
		{"older term", snapOf(c, ver(2, 99, "z")), ErrStale, nil},
		{"unknown cluster", snapOf("c2", ver(1, 0, "a"), mkShard("c2", hostEcho, "10.0.2.1")), nil, []model.Hostname{hostEcho}},
		{"no cluster", snapOf("", ver(4, 0, "a")), ErrInvalid, nil},
		{"term 0", snapOf(c, ver(0, 0, "a")), ErrInvalid, nil},
		{"max term", snapOf(c, ver(math.MaxUint64, 0, "a")), ErrInvalid, nil},
		{"no owner", snapOf(c, ver(4, 0, "")), ErrInvalid, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newStateReplica()
			mustSnapshot(t, r, base)
			before := r.dump()
			changed, err := r.state.ApplySnapshot(tt.snap)
			wantStateErr(t, "ApplySnapshot", err, tt.want)
			if !slices.Equal(changed, tt.changed) {
				t.Fatalf("changed = %v, want %v", changed, tt.changed)
			}
			if tt.want != nil {
				if after := r.dump(); after != before {
					t.Fatalf("a refused snapshot changed the state:\n%s\nwas:\n%s", after, before)
				}
				return
			}
			if v, _ := r.state.Version(tt.snap.Cluster); v != tt.snap.Version {
				t.Fatalf("version = %s, want %s", v, tt.snap.Version)
			}
			if got := r.reg.ClusterShards(tt.snap.Cluster); !maps.EqualFunc(got, tt.snap.Shards, (*model.ServiceShard).Equal) {
				t.Fatalf("shards = %v, want %v", got, tt.snap.Shards)
			}
		})
	}
}

func TestApplyDelta(t *testing.T) {
	const c = model.ClusterID("c1")
	base := snapOf(c, ver(3, 5, "b"), mkShard(c, hostEcho, "10.0.0.1"))
	tests := []struct {
		name    string
		delta   ShardDelta
		want    error
		changed bool
	}{
		{"next seq", deltaOf(c, ver(3, 6, "b"), hostEcho, mkShard(c, hostEcho, "10.0.0.2")), nil, true},
		{"next seq, deletes", deltaOf(c, ver(3, 6, "b"), hostEcho, nil), nil, true},
		{"next seq, adds", deltaOf(c, ver(3, 6, "b"), hostWeb, mkShard(c, hostWeb)), nil, true},
		{"next seq, no change", deltaOf(c, ver(3, 6, "b"), hostEcho, mkShard(c, hostEcho, "10.0.0.1")), nil, false},
		{"current seq", deltaOf(c, ver(3, 5, "b"), hostEcho, nil), ErrDuplicate, false},
		{"earlier seq", deltaOf(c, ver(3, 1, "b"), hostEcho, nil), ErrDuplicate, false},
		{"skips a seq", deltaOf(c, ver(3, 7, "b"), hostEcho, nil), ErrGap, false},
		{"newer term before its snapshot", deltaOf(c, ver(4, 1, "a"), hostEcho, nil), ErrGap, false},
		{"higher owner before its snapshot", deltaOf(c, ver(3, 1, "c"), hostEcho, nil), ErrGap, false},
		{"lower owner of the same term", deltaOf(c, ver(3, 6, "a"), hostEcho, nil), ErrStale, false},
		{"older term", deltaOf(c, ver(2, 6, "b"), hostEcho, nil), ErrStale, false},
		{"cluster not held", deltaOf("c2", ver(1, 1, "a"), hostEcho, nil), ErrGap, false},
		{"seq 0", deltaOf(c, ver(3, 0, "b"), hostEcho, nil), ErrInvalid, false},
		{"no hostname", deltaOf(c, ver(3, 6, "b"), "", nil), ErrInvalid, false},
		{"no owner", deltaOf(c, ver(3, 6, ""), hostEcho, nil), ErrInvalid, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newStateReplica()
			mustSnapshot(t, r, base)
			before := r.dump()
			changed, err := r.state.ApplyDelta(tt.delta)
			wantStateErr(t, "ApplyDelta", err, tt.want)
			if changed != tt.changed {
				t.Fatalf("changed = %v, want %v", changed, tt.changed)
			}
			if tt.want != nil {
				if after := r.dump(); after != before {
					t.Fatalf("a refused delta changed the state:\n%s\nwas:\n%s", after, before)
				}
				return
			}
			// An accepted delta advances the version even when it is a no-op.
			if v, _ := r.state.Version(c); v != tt.delta.Version {
				t.Fatalf("version = %s, want %s", v, tt.delta.Version)
			}
			if got := r.reg.ClusterShards(c)[tt.delta.Hostname]; !got.Equal(tt.delta.Shard) {
				t.Fatalf("shard = %v, want %v", got, tt.delta.Shard)
			}
		})
	}
}

func TestReorderedDeltasGapThenSnapshot(t *testing.T) {
	const c = model.ClusterID("c1")
	w := newTermWriter(t, c, "a", 1, mkShard(c, hostEcho, "10.0.0.1"))
	d1 := w.set(t, hostEcho, mkShard(c, hostEcho, "10.0.0.1", "10.0.0.2"))
	d2 := w.set(t, hostWeb, mkShard(c, hostWeb, "10.0.1.1"))
	d3 := w.set(t, hostEcho, nil)
	snap0 := w.log[0].(ClusterSnapshot)

	// Deltas before the snapshot, and out of order after it, are gaps.
	r := newStateReplica()
	wantStateErr(t, "delta before snapshot", r.apply(*d2), ErrGap)
	mustSnapshot(t, r, snap0)
	wantStateErr(t, "delta 2 after snapshot 0", r.apply(*d2), ErrGap)
	// The caller asks for a snapshot: the writer's current one replaces
	// everything, and the deltas it includes are duplicates.
	mustSnapshot(t, r, w.snapshot(t))
	for _, d := range []*ShardDelta{d1, d2, d3} {
		wantStateErr(t, "delta included in the resync snapshot", r.apply(*d), ErrDuplicate)
	}
	if got, want := r.dump(), w.dump(); got != want {
		t.Fatalf("after resync:\n%s\nwant:\n%s", got, want)
	}

	// The same gap filled by the missing delta instead.
	r = newStateReplica()
	mustSnapshot(t, r, snap0)
	wantStateErr(t, "delta 2", r.apply(*d2), ErrGap)
	mustDelta(t, r, *d1)
	mustDelta(t, r, *d2)
	mustDelta(t, r, *d3)
	if got, want := r.dump(), w.dump(); got != want {
		t.Fatalf("after in-order deltas:\n%s\nwant:\n%s", got, want)
	}
}

func TestDuplicatesChangeNothing(t *testing.T) {
	const c = model.ClusterID("c1")
	w := newTermWriter(t, c, "a", 1, mkShard(c, hostEcho, "10.0.0.1"))
	w.set(t, hostEcho, mkShard(c, hostEcho, "10.0.0.2"))
	w.set(t, hostWeb, mkShard(c, hostWeb, "10.0.1.1"))
	r := newStateReplica()
	for _, m := range w.log {
		if err := r.apply(m); err != nil {
			t.Fatal(err)
		}
		before := r.dump()
		wantStateErr(t, "duplicate", r.apply(m), ErrDuplicate)
		if after := r.dump(); after != before {
			t.Fatalf("a duplicate changed the state:\n%s\nwas:\n%s", after, before)
		}
	}
	// A resync snapshot of the current version is a duplicate too.
	changed, err := r.state.ApplySnapshot(w.snapshot(t))
	wantStateErr(t, "resync snapshot", err, ErrDuplicate)
	if changed != nil {
		t.Fatalf("duplicate snapshot changed %v", changed)
	}
}

func TestSameTermTwoOwnersConverge(t *testing.T) {
	const c = model.ClusterID("c1")
	// Membership views briefly differ: a and b both take term 5.
	a := newTermWriter(t, c, "a", 5, mkShard(c, hostEcho, "10.0.0.1"))
	a.set(t, hostWeb, mkShard(c, hostWeb, "10.0.1.1"))
	a.set(t, hostEcho, mkShard(c, hostEcho, "10.0.0.1", "10.0.0.2"))
	b := newTermWriter(t, c, "b", 5, mkShard(c, hostEcho, "10.0.0.1"))
	b.set(t, hostAPI, mkShard(c, hostAPI, "10.0.2.1"))

	tests := []struct {
		name string
		msgs []any
		// resync: the order leaves a gap that the winner's snapshot closes.
		resync bool
	}{
		{"a then b", slices.Concat(a.log, b.log), false},
		{"b then a", slices.Concat(b.log, a.log), false},
		{"interleaved", []any{a.log[0], b.log[0], a.log[1], b.log[1], a.log[2]}, false},
		{"reversed", []any{b.log[1], a.log[2], a.log[1], b.log[0], a.log[0]}, true},
	}
	want := b.dump()
	for _, tt := range tests {
		r := newStateReplica()
		for _, m := range tt.msgs {
			if err := r.apply(m); err != nil && !errors.Is(err, ErrStale) && !errors.Is(err, ErrGap) {
				t.Fatalf("%s: %v", tt.name, err)
			}
		}
		if tt.resync {
			mustSnapshot(t, r, b.snapshot(t))
		}
		if got := r.dump(); got != want {
			t.Fatalf("%s:\n%s\nwant b's state:\n%s", tt.name, got, want)
		}
	}

	// The loser learns it lost: its next write is stale.
	mustSnapshot(t, a.stateReplica, b.snapshot(t))
	_, _, err := a.state.LocalDelta(c, "a", 5, hostEcho, nil, testNow)
	wantStateErr(t, "loser's write", err, ErrStale)
}

func TestHigherTermReplacesEverything(t *testing.T) {
	const c = model.ClusterID("c1")
	r := newStateReplica()
	mustSnapshot(t, r, snapOf(c, ver(1, 0, "a"), mkShard(c, hostEcho, "10.0.0.1"), mkShard(c, hostWeb, "10.0.1.1")))
	mustDelta(t, r, deltaOf(c, ver(1, 1, "a"), hostAPI, mkShard(c, hostAPI, "10.0.2.1")))
	// Another cluster's shards of the same hostname are not touched.
	mustSnapshot(t, r, snapOf("c2", ver(7, 0, "z"), mkShard("c2", hostEcho, "10.9.0.1")))

	changed := mustSnapshot(t, r, snapOf(c, ver(2, 0, "b"), mkShard(c, hostAPI, "10.0.2.2")))
	if want := []model.Hostname{hostAPI, hostEcho, hostWeb}; !slices.Equal(changed, want) {
		t.Fatalf("changed = %v, want %v", changed, want)
	}
	want := `c1 2.0@b
  api: 10.0.2.2
c2 7.0@z
  echo: 10.9.0.1
merged api [c1]: 10.0.2.2
merged echo [c2]: 10.9.0.1
`
	if got := r.dump(); got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestRemoveTombstone(t *testing.T) {
	const c = model.ClusterID("c1")
	r := newStateReplica()
	mustSnapshot(t, r, snapOf(c, ver(3, 0, "a"), mkShard(c, hostEcho, "10.0.0.1")))
	mustDelta(t, r, deltaOf(c, ver(3, 1, "a"), hostWeb, mkShard(c, hostWeb, "10.0.1.1")))

	if changed := r.state.Remove(c); !slices.Equal(changed, []model.Hostname{hostEcho, hostWeb}) {
		t.Fatalf("Remove changed %v", changed)
	}
	if _, ok := r.state.Version(c); ok || len(r.state.Digest()) != 0 || r.reg.HasCluster(c) {
		t.Fatal("removed cluster still held")
	}
	// Late messages of the removed term, or older, stay out.
	for name, m := range map[string]any{
		"next delta":                  deltaOf(c, ver(3, 2, "a"), hostEcho, nil),
		"resync snapshot":             snapOf(c, ver(3, 1, "a"), mkShard(c, hostEcho, "10.0.0.1")),
		"same term, higher owner":     snapOf(c, ver(3, 0, "b"), mkShard(c, hostEcho, "10.0.0.1")),
		"older term":                  snapOf(c, ver(2, 0, "z"), mkShard(c, hostEcho, "10.0.0.1")),
		"older term delta":            deltaOf(c, ver(2, 4, "z"), hostEcho, nil),
		"same term, higher owner (d)": deltaOf(c, ver(3, 9, "b"), hostEcho, nil),
	} {
		wantStateErr(t, name, r.apply(m), ErrRemoved)
	}
	if got := r.dump(); got != "empty\n" {
		t.Fatalf("late messages changed the state:\n%s", got)
	}
	if got := r.state.Behind(Digest{c: ver(3, 7, "b")}); got != nil {
		t.Fatalf("behind a removed version: %v", got)
	}
	if got := r.state.NextTerm(c); got != 4 {
		t.Fatalf("NextTerm = %d, want 4", got)
	}
	// Re-added: a newer term's delta is a gap until its snapshot arrives.
	wantStateErr(t, "newer term delta", r.apply(deltaOf(c, ver(4, 1, "b"), hostEcho, nil)), ErrGap)
	if got := r.state.Behind(Digest{c: ver(4, 1, "b")}); !slices.Equal(got, []model.ClusterID{c}) {
		t.Fatalf("behind = %v", got)
	}
	mustSnapshot(t, r, snapOf(c, ver(4, 0, "b"), mkShard(c, hostAPI, "10.0.2.1")))
	// Now held again: the old term is merely stale.
	wantStateErr(t, "old term after re-add", r.apply(deltaOf(c, ver(3, 2, "a"), hostEcho, nil)), ErrStale)
	if v, _ := r.state.Version(c); v != ver(4, 0, "b") {
		t.Fatalf("version = %s", v)
	}

	// Removing what is not held changes nothing and leaves no tombstone.
	if changed := r.state.Remove("c9"); changed != nil {
		t.Fatalf("Remove(c9) = %v", changed)
	}
	mustSnapshot(t, r, snapOf("c9", ver(1, 0, "a")))
}

func TestFailover(t *testing.T) {
	const c = model.ClusterID("c1")
	// a owns c1 in term 3 and has written up to Seq 7; replicas b and r
	// received everything.
	a := newTermWriter(t, c, "a", 3, mkShard(c, hostEcho, "10.0.0.1"))
	for i := range 7 {
		a.set(t, hostEcho, mkShard(c, hostEcho, "10.0.0.1", fmt.Sprintf("10.0.0.%d", 10+i)))
	}
	b, r := newStateReplica(), newStateReplica()
	for _, m := range a.log {
		if err := b.apply(m); err != nil {
			t.Fatal(err)
		}
		if err := r.apply(m); err != nil {
			t.Fatal(err)
		}
	}
	if v, _ := r.state.Version(c); v != ver(3, 7, "a") {
		t.Fatalf("version before failover = %s", v)
	}

	// a is declared dead; b takes the next term and lists the cluster.
	term := b.state.NextTerm(c)
	if term != 4 {
		t.Fatalf("NextTerm = %d, want 4", term)
	}
	snap, _, err := b.state.LocalSnapshot(c, "b", term, map[model.Hostname]*model.ServiceShard{
		hostEcho: mkShard(c, hostEcho, "10.0.0.1", "10.0.0.99"),
	}, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Version != ver(4, 0, "b") {
		t.Fatalf("snapshot version = %s", snap.Version)
	}
	mustSnapshot(t, r, snap)
	if got, want := r.dump(), b.dump(); got != want {
		t.Fatalf("r after b's snapshot:\n%s\nwant:\n%s", got, want)
	}

	// a was only partitioned: its late delta 3.8 is stale everywhere.
	late := a.set(t, hostEcho, nil)
	if late.Version != ver(3, 8, "a") {
		t.Fatalf("late delta version = %s", late.Version)
	}
	wantStateErr(t, "late delta on r", r.apply(*late), ErrStale)
	wantStateErr(t, "late delta on b", b.apply(*late), ErrStale)
	// When a hears of b's term, its own writes are refused: it stops.
	mustSnapshot(t, a.stateReplica, snap)
	_, _, err = a.state.LocalDelta(c, "a", 3, hostEcho, nil, testNow)
	wantStateErr(t, "a's write after b's term", err, ErrStale)
	if got := a.state.NextTerm(c); got != 5 {
		t.Fatalf("a's NextTerm = %d, want 5", got)
	}
}

func TestLocalWrites(t *testing.T) {
	const c = model.ClusterID("c1")
	r := newStateReplica()
	_, _, err := r.state.LocalDelta(c, "a", 1, hostEcho, nil, testNow)
	wantStateErr(t, "delta before the term's snapshot", err, ErrGap)

	shards := map[model.Hostname]*model.ServiceShard{hostEcho: mkShard(c, hostEcho, "10.0.0.1"), hostWeb: nil}
	snap, changed, err := r.state.LocalSnapshot(c, "a", 1, shards, testNow)
	if err != nil || !slices.Equal(changed, []model.Hostname{hostEcho}) {
		t.Fatalf("LocalSnapshot: changed=%v err=%v", changed, err)
	}
	if _, hasNil := snap.Shards[hostWeb]; hasNil || len(snap.Shards) != 1 || !snap.Sent.Equal(testNow) {
		t.Fatalf("snapshot = %+v", snap)
	}
	// The published snapshot does not alias the caller's map.
	shards[hostAPI] = mkShard(c, hostAPI)
	if len(snap.Shards) != 1 {
		t.Fatal("snapshot aliases the caller's map")
	}
	_, _, err = r.state.LocalSnapshot(c, "a", 1, nil, testNow)
	wantStateErr(t, "same term again", err, ErrDuplicate)

	// A no-op change publishes nothing and consumes no Seq.
	d, changed2, err := r.state.LocalDelta(c, "a", 1, hostEcho, mkShard(c, hostEcho, "10.0.0.1"), testNow)
	if err != nil || changed2 || d != (ShardDelta{}) {
		t.Fatalf("no-op delta: %+v changed=%v err=%v", d, changed2, err)
	}
	if v, _ := r.state.Version(c); v != ver(1, 0, "a") {
		t.Fatalf("version after no-op = %s", v)
	}
	d, changed2, err = r.state.LocalDelta(c, "a", 1, hostEcho, nil, testNow.Add(time.Second))
	if err != nil || !changed2 {
		t.Fatalf("delete: changed=%v err=%v", changed2, err)
	}
	if want := deltaOf(c, ver(1, 1, "a"), hostEcho, nil); d.Version != want.Version || d.Hostname != hostEcho || d.Shard != nil || !d.Sent.Equal(testNow.Add(time.Second)) {
		t.Fatalf("delta = %+v", d)
	}
	// Deleting what is gone is a no-op too.
	if _, changed2, err = r.state.LocalDelta(c, "a", 1, hostEcho, nil, testNow); err != nil || changed2 {
		t.Fatalf("second delete: changed=%v err=%v", changed2, err)
	}

	// Writes of another term or owner than the current one.
	_, _, err = r.state.LocalDelta(c, "0", 1, hostEcho, nil, testNow)
	wantStateErr(t, "lower owner", err, ErrStale)
	_, _, err = r.state.LocalDelta(c, "a", 2, hostEcho, nil, testNow)
	wantStateErr(t, "newer term before its snapshot", err, ErrGap)
	_, _, err = r.state.LocalDelta(c, "a", 1, "", nil, testNow)
	wantStateErr(t, "no hostname", err, ErrInvalid)
	_, _, err = r.state.LocalSnapshot(c, "", 9, nil, testNow)
	wantStateErr(t, "no owner", err, ErrInvalid)

	r.state.Remove(c)
	_, _, err = r.state.LocalDelta(c, "a", 1, hostEcho, nil, testNow)
	wantStateErr(t, "write after removal", err, ErrRemoved)
	_, _, err = r.state.LocalSnapshot(c, "a", 1, nil, testNow)
	wantStateErr(t, "snapshot after removal", err, ErrRemoved)
}

func TestNextTerm(t *testing.T) {
	r := newStateReplica()
	if got := r.state.NextTerm("c1"); got != 1 {
		t.Fatalf("NextTerm of a new cluster = %d", got)
	}
	// Terms of messages not applied count: someone is using them.
	wantStateErr(t, "gap", r.apply(deltaOf("c1", ver(6, 3, "x"), hostEcho, nil)), ErrGap)
	if got := r.state.NextTerm("c1"); got != 7 {
		t.Fatalf("NextTerm after a term-6 gap = %d", got)
	}
	// Invalid messages do not.
	wantStateErr(t, "invalid", r.apply(deltaOf("c1", ver(9, 0, "x"), hostEcho, nil)), ErrInvalid)
	if got := r.state.NextTerm("c1"); got != 7 {
		t.Fatalf("NextTerm after an invalid message = %d", got)
	}
	if got := r.state.NextTerm("c2"); got != 1 {
		t.Fatalf("terms leak between clusters: %d", got)
	}
}

func TestDigestBehindSnapshot(t *testing.T) {
	r := newStateReplica()
	mustSnapshot(t, r, snapOf("c1", ver(2, 0, "b"), mkShard("c1", hostEcho, "10.0.0.1")))
	mustSnapshot(t, r, snapOf("c2", ver(1, 4, "a")))
	d := r.state.Digest()
	if want := (Digest{"c1": ver(2, 0, "b"), "c2": ver(1, 4, "a")}); !maps.Equal(d, want) {
		t.Fatalf("digest = %v, want %v", d, want)
	}
	d["c1"] = Version{}
	if v, _ := r.state.Version("c1"); v != ver(2, 0, "b") {
		t.Fatal("Digest aliases the state")
	}

	remote := Digest{
		"c1": ver(2, 0, "c"),              // same term, higher owner: behind
		"c2": ver(1, 3, "a"),              // older seq of the same writer: not behind
		"c3": ver(1, 0, "a"),              // unknown here: behind
		"c0": ver(2, 0, "a"),              // unknown here: behind
		"c4": ver(0, 0, "a"),              // invalid: ignored
		"":   ver(1, 0, "a"),              // invalid: ignored
		"c5": ver(1, 0, ""),               // invalid: ignored
		"c6": ver(math.MaxUint64, 0, "a"), // invalid: ignored
	}
	if got, want := r.state.Behind(remote), []model.ClusterID{"c0", "c1", "c3"}; !slices.Equal(got, want) {
		t.Fatalf("behind = %v, want %v", got, want)
	}
	if got := r.state.Behind(r.state.Digest()); got != nil {
		t.Fatalf("behind itself: %v", got)
	}

	snap, ok := r.state.Snapshot("c1", testNow)
	if !ok || snap.Cluster != "c1" || snap.Version != ver(2, 0, "b") || !snap.Sent.Equal(testNow) || len(snap.Shards) != 1 {
		t.Fatalf("snapshot = %+v ok=%v", snap, ok)
	}
	delete(snap.Shards, hostEcho)
	if r.reg.Service(hostEcho) == nil {
		t.Fatal("Snapshot aliases the registry")
	}
	if _, ok := r.state.Snapshot("c9", testNow); ok {
		t.Fatal("snapshot of a cluster not held")
	}
	// A peer that applies our snapshot holds what we hold.
	peer := newStateReplica()
	for _, c := range peer.state.Behind(r.state.Digest()) {
		s, _ := r.state.Snapshot(c, testNow)
		mustSnapshot(t, peer, s)
	}
	if got, want := peer.dump(), r.dump(); got != want {
		t.Fatalf("peer after catch-up:\n%s\nwant:\n%s", got, want)
	}
}

// TestConvergence delivers random permutations of a message log, with
// duplicates, to two fresh replicas; once every message and then a final
// snapshot of each cluster's winner have arrived, both hold exactly the
// winners' state. Every refusal is one of the sentinels.
func TestConvergence(t *testing.T) {
	refusals := map[error]int{}
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		log, finals := randomLog(t, rng)

		want := newStateReplica()
		for _, s := range finals {
			mustSnapshot(t, want, s)
		}
		for i := range 2 {
			msgs := slices.Clone(log)
			for range rng.IntN(len(log) + 1) {
				msgs = append(msgs, log[rng.IntN(len(log))])
			}
			rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
			r := newStateReplica()
			for _, m := range msgs {
				err := r.apply(m)
				if err != nil && !isRefusal(err) {
					t.Fatalf("seed %d replica %d: %v", seed, i, err)
				}
				for _, kind := range []error{ErrStale, ErrDuplicate, ErrGap} {
					if errors.Is(err, kind) {
						refusals[kind]++
					}
				}
			}
			for _, j := range rng.Perm(len(finals)) {
				if _, err := r.state.ApplySnapshot(finals[j]); err != nil && !errors.Is(err, ErrDuplicate) {
					t.Fatalf("seed %d replica %d: final snapshot %s: %v", seed, i, finals[j].Version, err)
				}
			}
			if got, want := r.dump(), want.dump(); got != want {
				t.Fatalf("seed %d replica %d:\n%s\nwant:\n%s", seed, i, got, want)
			}
			if got, want := r.state.Digest(), want.state.Digest(); !maps.Equal(got, want) {
				t.Fatalf("seed %d replica %d: digest %v, want %v", seed, i, got, want)
			}
		}
	}
	// The logs exercise every kind of refusal.
	for _, kind := range []error{ErrStale, ErrDuplicate, ErrGap} {
		if refusals[kind] == 0 {
			t.Errorf("no message was refused with %v", kind)
		}
	}
	t.Logf("refusals: %v", refusals)
}

func isRefusal(err error) bool {
	return errors.Is(err, ErrStale) || errors.Is(err, ErrDuplicate) || errors.Is(err, ErrGap) || errors.Is(err, ErrRemoved)
}

// randomLog writes a few clusters through several terms of several owners,
// some of them claiming the same term, and returns every message and the
// current snapshot of each cluster's winning writer.
func randomLog(t *testing.T, rng *rand.Rand) (log []any, finals []ClusterSnapshot) {
	t.Helper()
	hosts := []model.Hostname{hostEcho, hostWeb, hostAPI}
	randShard := func(c model.ClusterID, h model.Hostname) *model.ServiceShard {
		if rng.IntN(4) == 0 {
			return nil
		}
		var addrs []string
		for range rng.IntN(3) {
			addrs = append(addrs, fmt.Sprintf("10.0.%d.%d", rng.IntN(2), rng.IntN(4)))
		}
		slices.Sort(addrs)
		return mkShard(c, h, slices.Compact(addrs)...)
	}
	for _, c := range []model.ClusterID{"c1", "c2", "c3"} {
		var winner *termWriter
		used := map[Version]bool{}
		for range 1 + rng.IntN(4) {
			v := ver(1+rng.Uint64N(3), 0, ReplicaID([]string{"a", "b", "c"}[rng.IntN(3)]))
			if used[v] {
				continue // an owner never reuses a term
			}
			used[v] = true
			var shards []*model.ServiceShard
			for _, h := range hosts {
				if s := randShard(c, h); s != nil {
					shards = append(shards, s)
				}
			}
			w := newTermWriter(t, c, v.Owner, v.Term, shards...)
			for range rng.IntN(6) {
				h := hosts[rng.IntN(len(hosts))]
				w.set(t, h, randShard(c, h))
			}
			log = append(log, w.log...)
			if winner == nil || v.Compare(ver(winner.term, 0, winner.owner)) > 0 {
				winner = w
			}
		}
		finals = append(finals, winner.snapshot(t))
	}
	return log, finals
}

// TestScenarios runs the scripts in testdata/state: each command is
// applied to one replica and its output compared with the text under
// "----". Run with -update to rewrite the expected output.
//
// Commands (hostnames are bare words; addresses are comma-separated, "-"
// deletes in a delta, an empty list is a shard with no endpoints):
//
//	snapshot <cluster> <term.seq@owner> [host=addr,...]...
//	delta <cluster> <term.seq@owner> host=addr,...|host=-
//	local-snapshot <cluster> <owner> <term> [host=addr,...]...
//	local-delta <cluster> <owner> <term> host=addr,...|host=-
//	remove <cluster>
//	next-term <cluster>
//	behind [<cluster>=<term.seq@owner>]...
//	state
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/state/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			runScenario(t, file)
		})
	}
}

func runScenario(t *testing.T, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	r := newStateReplica()
	var out strings.Builder // the file as it should be
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	lineNo := 0
	next := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		lineNo++
		return sc.Text(), true
	}
	for {
		line, ok := next()
		if !ok {
			break
		}
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			out.WriteString(line + "\n")
			continue
		}
		cmdLine := lineNo
		if sep, ok := next(); !ok || sep != "----" {
			t.Fatalf("%s:%d: command %q is not followed by ----", file, cmdLine, line)
		}
		var expected strings.Builder
		for {
			l, ok := next()
			if !ok || l == "" {
				break
			}
			expected.WriteString(l + "\n")
		}
		got := runCommand(t, r, line)
		fmt.Fprintf(&out, "%s\n----\n%s\n", line, got)
		if !testutil.Updating() && got != expected.String() {
			t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", file, cmdLine, line, got, expected.String())
		}
	}
	if testutil.Updating() {
		if err := os.WriteFile(file, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func runCommand(t *testing.T, r *stateReplica, line string) string {
	t.Helper()
	f := strings.Fields(line)
	result := func(changed []model.Hostname, err error) string {
		if err != nil {
			return "error: " + err.Error() + "\n"
		}
		return fmt.Sprintf("changed %v\n", changed)
	}
	c := func() model.ClusterID {
		if len(f) < 2 {
			t.Fatalf("%q: no cluster", line)
		}
		return model.ClusterID(f[1])
	}
	switch f[0] {
	case "snapshot":
		v := parseScenarioVersion(t, f[2])
		snap := ClusterSnapshot{Cluster: c(), Version: v, Shards: parseShards(t, c(), f[3:]), Sent: testNow}
		return result(r.state.ApplySnapshot(snap))
	case "delta":
		h, s := parseDeltaArg(t, c(), f[3])
		changed, err := r.state.ApplyDelta(ShardDelta{Cluster: c(), Version: parseScenarioVersion(t, f[2]), Hostname: h, Shard: s, Sent: testNow})
		if err != nil {
			return result(nil, err)
		}
		return fmt.Sprintf("changed=%v\n", changed)
	case "local-snapshot":
		term, _ := strconv.ParseUint(f[3], 10, 64)
		snap, changed, err := r.state.LocalSnapshot(c(), ReplicaID(f[2]), term, parseShards(t, c(), f[4:]), testNow)
		if err != nil {
			return result(nil, err)
		}
		return fmt.Sprintf("publish snapshot %s\n%s", snap.Version, result(changed, nil))
	case "local-delta":
		term, _ := strconv.ParseUint(f[3], 10, 64)
		h, s := parseDeltaArg(t, c(), f[4])
		d, changed, err := r.state.LocalDelta(c(), ReplicaID(f[2]), term, h, s, testNow)
		switch {
		case err != nil:
			return result(nil, err)
		case !changed:
			return "no-op: nothing to publish\n"
		}
		return fmt.Sprintf("publish delta %s %s\n", d.Version, d.Hostname)
	case "remove":
		return result(r.state.Remove(c()), nil)
	case "next-term":
		return fmt.Sprintf("%d\n", r.state.NextTerm(c()))
	case "behind":
		d := Digest{}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			d[model.ClusterID(k)] = parseScenarioVersion(t, v)
		}
		return fmt.Sprintf("%v\n", r.state.Behind(d))
	case "state":
		return r.dump()
	}
	t.Fatalf("unknown command %q", line)
	return ""
}

// parseScenarioVersion parses Version.String's form, term.seq@owner.
func parseScenarioVersion(t *testing.T, s string) Version {
	t.Helper()
	ts, owner, ok1 := strings.Cut(s, "@")
	term, seq, ok2 := strings.Cut(ts, ".")
	tn, err1 := strconv.ParseUint(term, 10, 64)
	sn, err2 := strconv.ParseUint(seq, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		t.Fatalf("bad version %q", s)
	}
	return ver(tn, sn, ReplicaID(owner))
}

func parseShards(t *testing.T, c model.ClusterID, args []string) map[model.Hostname]*model.ServiceShard {
	m := map[model.Hostname]*model.ServiceShard{}
	for _, a := range args {
		h, s := parseDeltaArg(t, c, a)
		m[h] = s
	}
	return m
}

func parseDeltaArg(t *testing.T, c model.ClusterID, arg string) (model.Hostname, *model.ServiceShard) {
	t.Helper()
	h, addrs, ok := strings.Cut(arg, "=")
	if !ok {
		t.Fatalf("bad shard %q, want host=addr,...", arg)
	}
	if addrs == "-" {
		return model.Hostname(h), nil
	}
	var list []string
	if addrs != "" {
		list = strings.Split(addrs, ",")
	}
	return model.Hostname(h), mkShard(c, model.Hostname(h), list...)
}
