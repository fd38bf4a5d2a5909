package proxystatus

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// ConfigObject is one Istio config object as one hub replica applies it:
// the generation it holds, and the replica's config epoch in which that
// generation (or the object's deletion) arrived.
type ConfigObject struct {
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	Generation int64  `json:"generation"`
	// Epoch is the config epoch of the replica in which this generation,
	// or the deletion, arrived.
	Epoch uint64 `json:"epoch"`
	// Deleted: the replica applies the object's removal (Generation is
	// the last one it held).
	Deleted bool `json:"deleted,omitempty"`
}

func (o ConfigObject) compare(p ConfigObject) int {
	return cmp.Or(cmp.Compare(o.Kind, p.Kind), cmp.Compare(o.Namespace, p.Namespace), cmp.Compare(o.Name, p.Name))
}

// ConfigLedger is one replica's account of the config it applies. Its
// config epoch counts the configuration snapshots it pushed: each
// ConfigObject says in which epoch its generation arrived, and each
// record's TypeStatus.AckedEpoch which epoch the proxy's ACKed version
// holds, so a proxy has an object's generation when its ConfigEpoch is at
// least the object's Epoch. Epochs are the replica's own: they compare only
// with the epochs of the proxies it serves.
type ConfigLedger struct {
	Replica string `json:"replica"`
	// Epoch is the newest epoch whose push has been written to every cache.
	Epoch uint64 `json:"epoch"`
	// Pending is the epoch being pushed: Epoch when none is.
	Pending uint64 `json:"pending"`
	// Objects are sorted by kind, namespace and name.
	Objects []ConfigObject `json:"objects"`
}

// SortConfigObjects sorts objs by kind, namespace and name.
func SortConfigObjects(objs []ConfigObject) { slices.SortFunc(objs, ConfigObject.compare) }

// RolloutState is where one proxy is with one object.
type RolloutState string

// The states of a proxy for an object.
const (
	// RolloutSynced: the proxy ACKed, of every type, a response that holds
	// the object's newest generation (or its removal).
	RolloutSynced RolloutState = "SYNCED"
	// RolloutStale: it has not yet: its replica has not pushed the
	// generation yet, or the proxy has not ACKed it.
	RolloutStale RolloutState = "STALE"
	// RolloutNacked: the proxy rejected a response that holds it, and has
	// not ACKed one since.
	RolloutNacked RolloutState = "NACKED"
)

// ConfigStatusz is the fleet's config status (/debug/configstatusz): for
// each object, how many proxies of the fleet hold its newest generation.
type ConfigStatusz struct {
	// Objects are sorted by kind, namespace and name.
	Objects []ObjectRollout `json:"objects"`
	// Replicas are the replicas whose ledgers were read, sorted.
	Replicas []ReplicaEpoch `json:"replicas"`
}

// ReplicaEpoch is one replica's config epoch and how much it serves.
type ReplicaEpoch struct {
	Replica string `json:"replica"`
	Epoch   uint64 `json:"epoch"`
	Objects int    `json:"objects"`
	Proxies int    `json:"proxies"`
	// NoLedger: the replica serves proxies, but its config ledger has not
	// arrived (it just joined, or runs a version without one).
	NoLedger bool `json:"noLedger,omitempty"`
}

// ObjectRollout is the rollout of one object's newest generation.
type ObjectRollout struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Generation is the newest generation a replica holds; Deleted, that
	// the newest news of the object is its removal.
	Generation int64 `json:"generation"`
	Deleted    bool  `json:"deleted,omitempty"`
	// Proxies counts every proxy of the fleet; each is Synced, Stale or
	// Nacked.
	Proxies int `json:"proxies"`
	Synced  int `json:"synced"`
	Stale   int `json:"stale"`
	Nacked  int `json:"nacked"`
	// Clusters splits the counts by the proxies' clusters, sorted.
	Clusters []ClusterRollout `json:"clusters,omitempty"`
	// Replicas says what each replica holds of the object, sorted.
	Replicas []ReplicaRollout `json:"replicas,omitempty"`
	// Rejected, when set, says that the answering replica refuses the
	// object's newest generation in the config cluster (its config
	// status, /debug/configz): the generation rolled out is the last valid
	// one, or the removal.
	Rejected string `json:"rejected,omitempty"`
	// Pending lists the proxies that are not synced, sorted; only in the
	// detail of one object.
	Pending []ProxyRollout `json:"pending,omitempty"`
}

// ClusterRollout is an object's rollout to the proxies of one cluster.
type ClusterRollout struct {
	Cluster string `json:"cluster"`
	Proxies int    `json:"proxies"`
	Synced  int    `json:"synced"`
	Stale   int    `json:"stale"`
	Nacked  int    `json:"nacked"`
}

// ReplicaRollout is what one replica holds of an object, and how far its
// proxies are.
type ReplicaRollout struct {
	Replica string `json:"replica"`
	// Generation and Deleted are what the replica applies; Held is false
	// when it has never seen the object.
	Held       bool  `json:"held"`
	Generation int64 `json:"generation,omitempty"`
	Deleted    bool  `json:"deleted,omitempty"`
	// Epoch is the replica's epoch in which it arrived.
	Epoch uint64 `json:"epoch,omitempty"`
	// Behind: the replica does not apply the newest generation yet (its
	// config watch lags), so none of its proxies can have it.
	Behind  bool `json:"behind,omitempty"`
	Proxies int  `json:"proxies"`
	Synced  int  `json:"synced"`
}

// ProxyRollout is one proxy that does not hold an object's newest
// generation, and why.
type ProxyRollout struct {
	Proxy   string       `json:"proxy"`
	Name    string       `json:"name,omitempty"`
	Cluster string       `json:"cluster,omitempty"`
	Replica string       `json:"replica"`
	State   RolloutState `json:"state"`
	// Reason: the replica is behind, the epoch the proxy holds, or the
	// NACK ("lds: <error detail>").
	Reason string `json:"reason"`
}

// RolloutQuery says which objects Rollouts reports.
type RolloutQuery struct {
	// Kind, Namespace and Name, when Name is set, select one object, and
	// its ObjectRollout lists its Pending proxies.
	Kind, Namespace, Name string
}

// Rollouts computes every object's rollout from the ledgers of the
// replicas and the fleet's records (the newest of each proxy, as
// Fleet.All returns them). A proxy is counted against its own replica's
// ledger; a replica whose ledger is missing counts its proxies STALE.
//
// The cost is one pass over the records and, per object, a binary search
// per (replica, cluster) group: objects × groups × log(proxies), so the
// whole fleet's document is cheap to build on demand.
func Rollouts(ledgers []ConfigLedger, recs []Record, q RolloutQuery) ConfigStatusz {
	detail := q.Name != ""
	want := objectKey{q.Kind, q.Namespace, q.Name}
	groups, nacking, perReplica := groupRecords(recs)
	byReplica := make(map[string]map[objectKey]ConfigObject, len(ledgers))
	doc := ConfigStatusz{Objects: []ObjectRollout{}}
	for _, l := range ledgers {
		idx := make(map[objectKey]ConfigObject, len(l.Objects))
		for _, o := range l.Objects {
			if !detail || o.key() == want {
				idx[o.key()] = o
			}
		}
		byReplica[l.Replica] = idx
		doc.Replicas = append(doc.Replicas, ReplicaEpoch{Replica: l.Replica, Epoch: l.Epoch, Objects: len(l.Objects), Proxies: perReplica[l.Replica]})
	}
	for r, n := range perReplica {
		if _, ok := byReplica[r]; !ok {
			doc.Replicas = append(doc.Replicas, ReplicaEpoch{Replica: r, Proxies: n, NoLedger: true})
		}
	}
	slices.SortFunc(doc.Replicas, func(a, b ReplicaEpoch) int { return cmp.Compare(a.Replica, b.Replica) })
	for _, o := range newestObjects(byReplica) {
		doc.Objects = append(doc.Objects, rollout(o, byReplica, doc.Replicas, groups, nacking, detail))
	}
	return doc
}

// objectKey is an object's kind, namespace and name.
type objectKey [3]string

func (o ConfigObject) key() objectKey { return objectKey{o.Kind, o.Namespace, o.Name} }

// group is the proxies of one replica and cluster that have no NACK
// outstanding, by ConfigEpoch, sorted.
type group struct {
	replica, cluster string
	epochs           []uint64
	recs             []*Record // in epochs' order; kept for Pending
}

// groupRecords sorts the records into their (replica, cluster) groups;
// those with a NACK outstanding are kept apart (they are few, and
// compared one by one).
func groupRecords(recs []Record) (groups []*group, nacking []nacker, perReplica map[string]int) {
	perReplica = map[string]int{}
	byKey := map[[2]string]*group{}
	for i := range recs {
		r := &recs[i]
		perReplica[r.Replica]++
		if r.hasNack() {
			nacking = append(nacking, newNacker(r))
			continue
		}
		k := [2]string{r.Replica, r.Cluster}
		g := byKey[k]
		if g == nil {
			g = &group{replica: r.Replica, cluster: r.Cluster}
			byKey[k] = g
			groups = append(groups, g)
		}
		g.recs = append(g.recs, r)
	}
	for _, g := range groups {
		g.epochs = make([]uint64, len(g.recs))
		for i, r := range g.recs {
			g.epochs[i] = r.ConfigEpoch()
		}
		sort.Stable(byEpoch{g})
	}
	return groups, nacking, perReplica
}

// byEpoch sorts a group's records and epochs together, by epoch.
type byEpoch struct{ *group }

func (g byEpoch) Len() int           { return len(g.epochs) }
func (g byEpoch) Less(i, j int) bool { return g.epochs[i] < g.epochs[j] }
func (g byEpoch) Swap(i, j int) {
	g.epochs[i], g.epochs[j] = g.epochs[j], g.epochs[i]
	g.recs[i], g.recs[j] = g.recs[j], g.recs[i]
}

func (r Record) hasNack() bool {
	for _, ts := range r.Types {
		if ts.Nack != "" {
			return true
		}
	}
	return false
}

// newestObjects returns, for every object any ledger names, its newest
// state: the highest generation, a removal winning a tie (it came after
// the generation it removed).
func newestObjects(ledgers map[string]map[objectKey]ConfigObject) []ConfigObject {
	best := map[objectKey]ConfigObject{}
	for _, l := range ledgers {
		for k, o := range l {
			cur, ok := best[k]
			if !ok || o.Generation > cur.Generation || (o.Generation == cur.Generation && o.Deleted && !cur.Deleted) {
				best[k] = o
			}
		}
	}
	out := make([]ConfigObject, 0, len(best))
	for _, o := range best {
		out = append(out, o)
	}
	SortConfigObjects(out)
	return out
}

// rollout computes the rollout of newest, an object's newest state.
func rollout(newest ConfigObject, ledgers map[string]map[objectKey]ConfigObject, replicas []ReplicaEpoch,
	groups []*group, nacking []nacker, detail bool) ObjectRollout {
	out := ObjectRollout{Kind: newest.Kind, Namespace: newest.Namespace, Name: newest.Name,
		Generation: newest.Generation, Deleted: newest.Deleted}
	views := make(map[string]held, len(replicas))
	for _, re := range replicas {
		h := held{noLedger: re.NoLedger}
		h.obj, h.ok = ledgers[re.Replica][newest.key()]
		h.cur = h.ok && h.obj.Generation == newest.Generation && h.obj.Deleted == newest.Deleted
		views[re.Replica] = h
	}
	clusters := map[string]*ClusterRollout{}
	rr := map[string]*ReplicaRollout{}
	for _, re := range replicas {
		h := views[re.Replica]
		rr[re.Replica] = &ReplicaRollout{Replica: re.Replica, Held: h.ok, Generation: h.obj.Generation,
			Deleted: h.obj.Deleted, Epoch: h.obj.Epoch, Behind: !h.cur}
	}
	count := func(replica, cluster string, synced, stale, nacked int) {
		c := clusters[cluster]
		if c == nil {
			c = &ClusterRollout{Cluster: cluster}
			clusters[cluster] = c
		}
		n := synced + stale + nacked
		c.Proxies += n
		c.Synced += synced
		c.Stale += stale
		c.Nacked += nacked
		out.Proxies += n
		out.Synced += synced
		out.Stale += stale
		out.Nacked += nacked
		rr[replica].Proxies += n
		rr[replica].Synced += synced
	}
	for _, g := range groups {
		h := views[g.replica]
		if !h.cur {
			count(g.replica, g.cluster, 0, len(g.recs), 0)
			if detail {
				for _, r := range g.recs {
					out.Pending = append(out.Pending, pending(r, RolloutStale, behindReason(g.replica, h, h.obj)))
				}
			}
			continue
		}
		// epochs is sorted: the first index at or past the object's epoch
		// splits stale from synced.
		i, _ := slices.BinarySearch(g.epochs, h.obj.Epoch)
		count(g.replica, g.cluster, len(g.epochs)-i, i, 0)
		if detail {
			for _, r := range g.recs[:i] {
				out.Pending = append(out.Pending, pending(r, RolloutStale, staleReason(r.ConfigEpoch(), g.replica, h.obj.Epoch)))
			}
		}
	}
	for _, n := range nacking {
		r := n.rec
		h := views[r.Replica]
		state := RolloutStale
		if h.cur {
			state = n.state(h.obj.Epoch)
		}
		switch state {
		case RolloutSynced:
			count(r.Replica, r.Cluster, 1, 0, 0)
		case RolloutNacked:
			count(r.Replica, r.Cluster, 0, 0, 1)
		default:
			count(r.Replica, r.Cluster, 0, 1, 0)
		}
		if detail && state != RolloutSynced {
			reason := behindReason(r.Replica, h, h.obj)
			if h.cur {
				reason = n.reason(h.obj.Epoch)
			}
			out.Pending = append(out.Pending, pending(r, state, reason))
		}
	}
	for _, c := range clusters {
		out.Clusters = append(out.Clusters, *c)
	}
	slices.SortFunc(out.Clusters, func(a, b ClusterRollout) int { return cmp.Compare(a.Cluster, b.Cluster) })
	for _, re := range replicas {
		out.Replicas = append(out.Replicas, *rr[re.Replica])
	}
	slices.SortFunc(out.Pending, func(a, b ProxyRollout) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Proxy, b.Proxy))
	})
	return out
}

// held is what one replica holds of an object.
type held struct {
	obj      ConfigObject
	ok       bool // the replica has an entry
	cur      bool // and it is the newest state
	noLedger bool // the replica's ledger is missing
}

// nacker is a proxy with a NACK outstanding, its epochs read once.
type nacker struct {
	rec   *Record
	epoch uint64 // ConfigEpoch
	// nacks are its NACKed types by short type, sorted, with the epoch
	// of each NACKed version.
	nacks []typeNack
}

type typeNack struct {
	short, msg string
	epoch      uint64
}

func newNacker(r *Record) nacker {
	n := nacker{rec: r, epoch: r.ConfigEpoch()}
	for _, short := range slices.Sorted(maps.Keys(r.Types)) {
		if ts := r.Types[short]; ts.Nack != "" {
			n.nacks = append(n.nacks, typeNack{short: short, msg: ts.Nack, epoch: ts.NackEpoch})
		}
	}
	return n
}

// state is the proxy's state for an object that arrived in epoch: synced
// if what it ACKed holds the object anyway, NACKED if a rejected response
// held it, else stale.
func (n nacker) state(epoch uint64) RolloutState {
	if n.epoch >= epoch {
		return RolloutSynced
	}
	if _, ok := n.rejected(epoch); ok {
		return RolloutNacked
	}
	return RolloutStale
}

// rejected returns the first NACK of a response that held epoch.
func (n nacker) rejected(epoch uint64) (typeNack, bool) {
	for _, tn := range n.nacks {
		if tn.epoch >= epoch {
			return tn, true
		}
	}
	return typeNack{}, false
}

// reason says why the proxy is not synced with an object of epoch.
func (n nacker) reason(epoch uint64) string {
	if tn, ok := n.rejected(epoch); ok {
		return tn.short + ": " + tn.msg
	}
	return staleReason(n.epoch, n.rec.Replica, epoch)
}

func staleReason(held uint64, replica string, epoch uint64) string {
	return fmt.Sprintf("holds epoch %d of replica %s; the generation arrived in epoch %d", held, replica, epoch)
}

func behindReason(replica string, h held, o ConfigObject) string {
	switch {
	case h.noLedger:
		return fmt.Sprintf("no config ledger from replica %s yet", replica)
	case !h.ok:
		return fmt.Sprintf("replica %s has not read the object", replica)
	case o.Deleted:
		return fmt.Sprintf("replica %s applies its removal after generation %d", replica, o.Generation)
	default:
		return fmt.Sprintf("replica %s holds generation %d", replica, o.Generation)
	}
}

func pending(r *Record, s RolloutState, reason string) ProxyRollout {
	return ProxyRollout{Proxy: r.Proxy, Name: r.Name, Cluster: r.Cluster, Replica: r.Replica, State: s, Reason: reason}
}

// Summary is the object's rollout in a line: "VirtualService demo/echo
// gen 7: 118/120 proxies, 2 STALE in cluster-3".
func (o ObjectRollout) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s/%s gen %d", o.Kind, o.Namespace, o.Name, o.Generation)
	if o.Deleted {
		b.WriteString(" (deleted)")
	}
	fmt.Fprintf(&b, ": %d/%d proxies", o.Synced, o.Proxies)
	for _, part := range []struct {
		state RolloutState
		n     func(ClusterRollout) int
	}{
		{RolloutStale, func(c ClusterRollout) int { return c.Stale }},
		{RolloutNacked, func(c ClusterRollout) int { return c.Nacked }},
	} {
		var in []string
		total := 0
		for _, c := range o.Clusters {
			if n := part.n(c); n > 0 {
				total += n
				in = append(in, c.Cluster)
			}
		}
		if total > 0 {
			fmt.Fprintf(&b, ", %d %s in %s", total, part.state, strings.Join(in, ", "))
		}
	}
	return b.String()
}
