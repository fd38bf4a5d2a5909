package xdsstatus

import (
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/proxystatus"
)

// Ledger keeps the server's config epochs: which configuration each
// response holds, so that the fleet can say which proxies have an object's
// newest generation (proxystatus.ConfigLedger, Rollouts).
//
// The epoch counts the Istio configurations the server pushed. A push of a
// new configuration begins epoch E+1: each object whose generation is new
// (or which is gone) is recorded as arriving in E+1. When the push's
// writes are done, the epoch is sealed: every cache's current version
// holds E+1. A version written after the seal of E (a later endpoint push,
// or E+1's own writes before its seal) holds E: it has every object of E,
// and perhaps some of E+1. So the epoch of version n of a cache is that of
// the last seal at or below n (mark), which only ever understates it.
//
// Every watch cache the server writes is observed here (Reserve, then
// Observe or ObserveApart): it names its versions after a prefix of its
// own (VersionPrefix), so that a version names its cache and a proxy's
// ACKed version can be looked up. The caches own their versions; the
// ledger only reads their counters when it seals.
type Ledger struct {
	replica string

	mu      sync.Mutex // guards what follows; a leaf: nothing is called under it
	nextID  uint64
	epoch   uint64 // sealed; 1 is the epoch of no configuration
	pending uint64 // the epoch being pushed; epoch when none
	caches  map[uint64]*observed
	objects map[istioconfig.Key]proxystatus.ConfigObject
	removed []istioconfig.Key // keys of the Deleted objects, oldest removal first

	changed chan struct{} // capacity 1: objects or epoch changed
}

// maxRemoved bounds how many removed objects the ledger remembers, so that
// their rollouts can be followed for a while.
const maxRemoved = 256

// MaxMarks bounds the seals a cache remembers: a proxy that ACKed a
// version older than all of them is taken to hold no epoch (it lags behind
// MaxMarks configuration changes of its cache).
const MaxMarks = 64

// NewLedger returns the ledger of replica, for Options.Ledger.
func NewLedger(replica string) *Ledger {
	return &Ledger{replica: replica, epoch: 1, pending: 1, caches: map[uint64]*observed{},
		objects: map[istioconfig.Key]proxystatus.ConfigObject{}, changed: make(chan struct{}, 1)}
}

// Versioned is a cache whose versions the ledger places: a counter of its
// writes, which the versions it sends name after its prefix
// (VersionPrefix). The ledger only reads it.
type Versioned interface {
	Version() uint64
}

// observed is a cache the ledger follows.
type observed struct {
	v     Versioned
	marks []mark // ascending in both fields
	// apart is set while the cache holds what was built apart from the
	// planners and they have not adopted it: a seal leaves its marks
	// alone, since its content is of the epoch it was built from, not of
	// the push being sealed.
	apart bool
}

// mark says that version n of a cache held epoch.
type mark struct{ n, epoch uint64 }

// VersionPrefix is the prefix of the versions of the cache of id, which
// the ledger reads back from a proxy's ACKs: "<id>.".
func VersionPrefix(id uint64) string { return strconv.FormatUint(id, 10) + "." }

// Reserve returns the ID of a cache about to be made, for its version
// prefix; Observe then follows it.
func (l *Ledger) Reserve() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nextID++
	return l.nextID
}

// Observe follows cache id (from Reserve), whose first version holds the
// sealed epoch: its writer holds the push lock.
func (l *Ledger) Observe(id uint64, v Versioned) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.caches[id] = &observed{v: v, marks: []mark{{v.Version(), l.epoch}}}
}

// ObserveApart follows cache id (from Reserve), built apart from the
// planners from the configuration of epoch: its first version holds that
// epoch, and seals leave it alone until Adopted.
func (l *Ledger) ObserveApart(id uint64, v Versioned, epoch uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.caches[id] = &observed{v: v, marks: []mark{{v.Version(), epoch}}, apart: true}
}

// Adopted marks cache id, written by the planners under the push lock with
// no epoch pending: its current version holds the sealed epoch, and seals
// mark it from now on.
func (l *Ledger) Adopted(id uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if o := l.caches[id]; o != nil {
		o.apart = false
		l.markLocked(o, l.epoch)
	}
}

// markLocked records that o's current version holds epoch.
func (l *Ledger) markLocked(o *observed, epoch uint64) {
	n := o.v.Version()
	if last := &o.marks[len(o.marks)-1]; last.n == n {
		last.epoch = epoch
		return
	}
	o.marks = append(o.marks, mark{n, epoch})
	if len(o.marks) > MaxMarks {
		o.marks = o.marks[len(o.marks)-MaxMarks:]
	}
}

// Release forgets caches that are freed.
func (l *Ledger) Release(ids ...uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		delete(l.caches, id)
	}
}

// Begin starts the epoch of a push of next: the objects whose generation
// next brings, and those it no longer has, arrive in it.
func (l *Ledger) Begin(next *istioconfig.Snapshot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending++
	present := map[istioconfig.Key]bool{}
	for _, o := range next.Objects() {
		m := istioconfig.MetaOf(o)
		present[m.Key] = true
		if cur, ok := l.objects[m.Key]; ok && !cur.Deleted && cur.Generation == m.Generation {
			continue
		}
		l.objects[m.Key] = proxystatus.ConfigObject{Kind: m.Kind, Namespace: m.Namespace, Name: m.Name,
			Generation: m.Generation, Epoch: l.pending}
	}
	for k, cur := range l.objects {
		if present[k] || cur.Deleted {
			continue
		}
		cur.Deleted, cur.Epoch = true, l.pending
		l.objects[k] = cur
		l.removed = append(l.removed, k)
	}
	// Drop the oldest removals, and those whose object came back.
	kept := l.removed[:0]
	for _, k := range l.removed {
		if l.objects[k].Deleted {
			kept = append(kept, k)
		}
	}
	for len(kept) > maxRemoved {
		delete(l.objects, kept[0])
		kept = kept[1:]
	}
	l.removed = kept
	l.signal()
}

// Seal ends the epoch begun, once its writes are done: every cache's
// current version holds it, but those built apart and not adopted yet. It
// reports whether an epoch ended. The caller holds the push lock, so no
// planned write is under way.
func (l *Ledger) Seal() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending == l.epoch {
		return false
	}
	l.epoch = l.pending
	for _, o := range l.caches {
		if !o.apart {
			l.markLocked(o, l.epoch)
		}
	}
	l.signal()
	return true
}

// EpochOf returns the epoch that version holds, 0 when the version is not
// one of a live cache's, or older than its marks.
func (l *Ledger) EpochOf(version string) uint64 {
	prefix, counter, ok := strings.Cut(version, ".")
	if !ok {
		return 0
	}
	id, err1 := strconv.ParseUint(prefix, 10, 64)
	n, err2 := strconv.ParseUint(counter, 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	v := l.caches[id]
	if v == nil {
		return 0
	}
	// The first mark past n; the one before it holds n.
	i := sort.Search(len(v.marks), func(i int) bool { return v.marks[i].n > n })
	if i == 0 {
		return 0
	}
	return v.marks[i-1].epoch
}

// ConfigLedger returns the replica's account of its config: each object's
// generation and the epoch it arrived in, against which the AckedEpoch of
// the records of its proxies compare.
func (l *Ledger) ConfigLedger() proxystatus.ConfigLedger {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := proxystatus.ConfigLedger{Replica: l.replica, Epoch: l.epoch, Pending: l.pending, Objects: make([]proxystatus.ConfigObject, 0, len(l.objects))}
	for _, o := range l.objects {
		out.Objects = append(out.Objects, o)
	}
	proxystatus.SortConfigObjects(out.Objects)
	return out
}

// Epochs returns the sealed and the pending epoch: a pair that changes
// whenever ConfigLedger does.
func (l *Ledger) Epochs() (sealed, pending uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch, l.pending
}

// Changed signals, coalesced, that ConfigLedger changed.
func (l *Ledger) Changed() <-chan struct{} { return l.changed }

func (l *Ledger) signal() {
	select {
	case l.changed <- struct{}{}:
	default:
	}
}
