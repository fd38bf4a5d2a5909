package proxystatus

import (
	"fmt"
	"reflect"
	"testing"
)

// rec is a proxy of replica in cluster whose types ACKed epoch each
// (cds, lds, rds), with nack on rds when set.
func rec(name, cluster, replica string, epochs [3]uint64, nack string, nackEpoch uint64) Record {
	r := Record{Proxy: "sidecar~" + name, Name: name, Cluster: cluster, Replica: replica, Types: map[string]TypeStatus{}}
	for i, short := range []string{TypeCDS, TypeLDS, TypeRDS} {
		r.Types[short] = TypeStatus{SentNonce: "n", AckedEpoch: epochs[i]}
	}
	if nack != "" {
		ts := r.Types[TypeRDS]
		ts.Nack, ts.NackEpoch = nack, nackEpoch
		r.Types[TypeRDS] = ts
	}
	// A type asked for and never answered does not hold the epoch back.
	r.Types[TypeEDS] = TypeStatus{}
	return r
}

func obj(gen int64, epoch uint64, deleted bool) ConfigObject {
	return ConfigObject{Kind: "VirtualService", Namespace: "demo", Name: "echo", Generation: gen, Epoch: epoch, Deleted: deleted}
}

// TestRollouts: each proxy is judged against its own replica's epochs; a
// replica that holds an older generation has every proxy STALE; a NACK
// counts only when the rejected response held the generation; a replica
// whose ledger never arrived counts its proxies STALE; the counts split
// by cluster and replica, and the summary line reads as the issue asks.
func TestRollouts(t *testing.T) {
	ledgers := []ConfigLedger{
		{Replica: "hub-0", Epoch: 9, Objects: []ConfigObject{obj(7, 9, false), {Kind: "DestinationRule", Namespace: "demo", Name: "echo", Generation: 1, Epoch: 2}}},
		{Replica: "hub-1", Epoch: 4, Objects: []ConfigObject{obj(7, 4, false)}},
		{Replica: "hub-2", Epoch: 30, Objects: []ConfigObject{obj(6, 28, false)}},
	}
	recs := []Record{
		rec("a.demo", "cluster-1", "hub-0", [3]uint64{9, 9, 9}, "", 0),
		rec("b.demo", "cluster-1", "hub-0", [3]uint64{9, 8, 9}, "", 0),          // lds behind
		rec("c.demo", "cluster-2", "hub-0", [3]uint64{9, 9, 8}, "bad route", 9), // rejected gen 7
		rec("d.demo", "cluster-2", "hub-1", [3]uint64{5, 5, 5}, "", 0),          // synced on hub-1
		rec("e.demo", "cluster-2", "hub-1", [3]uint64{4, 4, 4}, "old news", 3),  // NACK older than gen 7: synced
		rec("f.demo", "cluster-3", "hub-2", [3]uint64{30, 30, 30}, "", 0),       // replica behind
		rec("g.demo", "cluster-3", "hub-9", [3]uint64{30, 30, 30}, "", 0),       // no ledger
		rec("h.demo", "cluster-1", "hub-1", [3]uint64{4, 0, 4}, "", 0),          // lds never ACKed
	}
	doc := Rollouts(ledgers, recs, RolloutQuery{Kind: "VirtualService", Namespace: "demo", Name: "echo"})
	if len(doc.Objects) != 1 {
		t.Fatalf("objects %+v", doc.Objects)
	}
	o := doc.Objects[0]
	if o.Generation != 7 || o.Proxies != 8 || o.Synced != 3 || o.Nacked != 1 || o.Stale != 4 {
		t.Errorf("counts %+v", o)
	}
	wantClusters := []ClusterRollout{
		{Cluster: "cluster-1", Proxies: 3, Synced: 1, Stale: 2},
		{Cluster: "cluster-2", Proxies: 3, Synced: 2, Nacked: 1},
		{Cluster: "cluster-3", Proxies: 2, Stale: 2},
	}
	if !reflect.DeepEqual(o.Clusters, wantClusters) {
		t.Errorf("clusters %+v", o.Clusters)
	}
	wantReplicas := []ReplicaRollout{
		{Replica: "hub-0", Held: true, Generation: 7, Epoch: 9, Proxies: 3, Synced: 1},
		{Replica: "hub-1", Held: true, Generation: 7, Epoch: 4, Proxies: 3, Synced: 2},
		{Replica: "hub-2", Held: true, Generation: 6, Epoch: 28, Behind: true, Proxies: 1},
		{Replica: "hub-9", Behind: true, Proxies: 1},
	}
	if !reflect.DeepEqual(o.Replicas, wantReplicas) {
		t.Errorf("replicas %+v", o.Replicas)
	}
	got := map[string]string{}
	for _, p := range o.Pending {
		got[p.Name] = fmt.Sprintf("%s: %s", p.State, p.Reason)
	}
	want := map[string]string{
		"b.demo": "STALE: holds epoch 8 of replica hub-0; the generation arrived in epoch 9",
		"c.demo": "NACKED: rds: bad route",
		"f.demo": "STALE: replica hub-2 holds generation 6",
		"g.demo": "STALE: no config ledger from replica hub-9 yet",
		"h.demo": "STALE: holds epoch 0 of replica hub-1; the generation arrived in epoch 4",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("pending\n got %v\nwant %v", got, want)
	}
	if s, w := o.Summary(), "VirtualService demo/echo gen 7: 3/8 proxies, 4 STALE in cluster-1, cluster-3, 1 NACKED in cluster-2"; s != w {
		t.Errorf("summary\n got %q\nwant %q", s, w)
	}

	// Without a name: every object, without pending lists.
	all := Rollouts(ledgers, recs, RolloutQuery{})
	if len(all.Objects) != 2 || all.Objects[0].Kind != "DestinationRule" || all.Objects[1].Pending != nil {
		t.Fatalf("all: %+v", all.Objects)
	}
	if dr := all.Objects[0]; dr.Synced != 3 || dr.Stale != 5 {
		// Only hub-0 holds the rule, since its epoch 2: its three proxies
		// have it (c too, by what it ACKed before its NACK); the other
		// replicas are behind.
		t.Errorf("destination rule %+v", dr)
	}
	wantEpochs := []ReplicaEpoch{{Replica: "hub-0", Epoch: 9, Objects: 2, Proxies: 3}, {Replica: "hub-1", Epoch: 4, Objects: 1, Proxies: 3},
		{Replica: "hub-2", Epoch: 30, Objects: 1, Proxies: 1}, {Replica: "hub-9", Proxies: 1, NoLedger: true}}
	if !reflect.DeepEqual(all.Replicas, wantEpochs) {
		t.Errorf("replicas %+v", all.Replicas)
	}
}

// TestRolloutsRemoval: a removal newer than a generation wins, and a
// proxy holds it once it ACKed the removal's epoch.
func TestRolloutsRemoval(t *testing.T) {
	ledgers := []ConfigLedger{
		{Replica: "hub-0", Epoch: 5, Objects: []ConfigObject{obj(3, 5, true)}},
		{Replica: "hub-1", Epoch: 5, Objects: []ConfigObject{obj(3, 2, false)}},
	}
	recs := []Record{rec("a.demo", "c1", "hub-0", [3]uint64{5, 5, 5}, "", 0), rec("b.demo", "c1", "hub-1", [3]uint64{5, 5, 5}, "", 0)}
	o := Rollouts(ledgers, recs, RolloutQuery{Kind: "VirtualService", Namespace: "demo", Name: "echo"}).Objects[0]
	if !o.Deleted || o.Synced != 1 || o.Stale != 1 || o.Pending[0].Reason != "replica hub-1 holds generation 3" {
		t.Errorf("%+v", o)
	}
	if s := o.Summary(); s != "VirtualService demo/echo gen 3 (deleted): 1/2 proxies, 1 STALE in c1" {
		t.Errorf("summary %q", s)
	}
}

// BenchmarkRollouts: the fleet's whole config status, and one object's
// detail, for 10,000 proxies on 3 replicas in 30 clusters and 2,000
// objects, 1% of the proxies NACKing and a tenth behind.
func BenchmarkRollouts(b *testing.B) {
	var ledgers []ConfigLedger
	for r := range 3 {
		l := ConfigLedger{Replica: fmt.Sprintf("hub-%d", r), Epoch: 100}
		for i := range 2000 {
			l.Objects = append(l.Objects, ConfigObject{Kind: "VirtualService", Namespace: "demo", Name: fmt.Sprintf("svc-%04d", i),
				Generation: 3, Epoch: uint64(1 + i%100)})
		}
		ledgers = append(ledgers, l)
	}
	var recs []Record
	for i := range 10_000 {
		e := uint64(100)
		if i%10 == 0 {
			e = 50
		}
		nack := ""
		if i%100 == 1 {
			nack = "bad"
		}
		recs = append(recs, rec(fmt.Sprintf("p-%05d.demo", i), fmt.Sprintf("cluster-%d", i%30), fmt.Sprintf("hub-%d", i%3), [3]uint64{e, e, e}, nack, 100))
	}
	b.Run("all objects", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if doc := Rollouts(ledgers, recs, RolloutQuery{}); len(doc.Objects) != 2000 {
				b.Fatal(len(doc.Objects))
			}
		}
	})
	b.Run("one object", func(b *testing.B) {
		b.ReportAllocs()
		q := RolloutQuery{Kind: "VirtualService", Namespace: "demo", Name: "svc-1999"}
		for b.Loop() {
			if doc := Rollouts(ledgers, recs, q); len(doc.Objects) != 1 || doc.Objects[0].Stale == 0 {
				b.Fatal(doc.Objects)
			}
		}
	})
}
