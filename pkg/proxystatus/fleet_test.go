package proxystatus

import (
	"reflect"
	"sync"
	"testing"
)

func names(recs []Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Replica+"/"+r.Name+"/"+r.Cluster)
	}
	return out
}

func TestFleetMergesReplicas(t *testing.T) {
	var f Fleet // the zero Fleet is ready
	recs := fixture()
	f.Upsert("hub-0", []Record{recs[0], recs[3]})
	f.Upsert("hub-1", []Record{recs[1], recs[2]})

	want := []string{
		"hub-1/api-0.shop/cluster-1",
		"hub-0/client-5f6d.demo/cluster-1",
		"hub-1/client-5f6d.demo/cluster-2",
		"hub-0/my-grpc-client/",
	}
	if got := names(f.All()); !reflect.DeepEqual(got, want) {
		t.Fatalf("All() = %v, want %v", got, want)
	}
	if got := names(f.Get("client-5f6d.demo")); !reflect.DeepEqual(got, want[1:3]) {
		t.Fatalf("Get(name) = %v", got)
	}
	if got := f.Get(recs[2].Proxy); len(got) != 1 || got[0].Name != "api-0.shop" {
		t.Fatalf("Get(node ID) = %v", names(got))
	}
	if got := f.Get("nobody.nowhere"); len(got) != 0 {
		t.Fatalf("Get(unknown) = %v", names(got))
	}
	if got := f.Replicas(); !reflect.DeepEqual(got, map[string]int{"hub-0": 2, "hub-1": 2}) {
		t.Fatalf("Replicas() = %v", got)
	}

	// Returned records are copies.
	f.All()[0].Types[TypeCDS] = TypeStatus{}
	if f.Get(recs[2].Proxy)[0].Types[TypeCDS].Status != StatusSynced {
		t.Fatal("a caller changed the fleet through a returned record")
	}
}

// Upsert copies what it is given; UpsertOwned keeps it, for records built
// for the call.
func TestFleetUpsertOwnership(t *testing.T) {
	var f Fleet
	recs := fixture()
	copied, owned := recs[0].Clone(), recs[1].Clone()
	f.Upsert("hub-0", []Record{copied})
	f.UpsertOwned("hub-1", []Record{owned})
	copied.Types[TypeCDS] = TypeStatus{Status: StatusStale}
	owned.Types[TypeCDS] = TypeStatus{Status: StatusStale}
	if got := f.Get(recs[0].Proxy)[0].Types[TypeCDS].Status; got == StatusStale {
		t.Error("Upsert kept the caller's map")
	}
	if got := f.Get(recs[1].Proxy)[0]; got.Types[TypeCDS].Status != StatusStale || got.Replica != "hub-1" {
		t.Errorf("UpsertOwned copied the caller's map, or did not name the replica: %+v", got)
	}
}

func TestFleetReconnectShowsNewest(t *testing.T) {
	var f Fleet
	old := fixture()[0] // on hub-0, connected at t0
	f.Upsert("hub-0", []Record{old})

	// The proxy reconnects to hub-1 before hub-0 notices its stream closed.
	moved := old.Clone()
	moved.Replica = "whatever" // Upsert sets the replica
	moved.Connected = at(60)
	moved.LastChange = at(60)
	f.Upsert("hub-1", []Record{moved})
	got := f.All()
	if len(got) != 1 || got[0].Replica != "hub-1" {
		t.Fatalf("after reconnect: %v", names(got))
	}

	// An update of the old stream does not bring it back.
	old.LastChange = at(61)
	f.Upsert("hub-0", []Record{old})
	if got := f.Get(old.Proxy); len(got) != 1 || got[0].Replica != "hub-1" {
		t.Fatalf("old stream's update won: %v", names(got))
	}

	// hub-1's stream closes: the old record shows again until hub-0 removes it.
	f.Remove("hub-1", []string{old.Proxy})
	if got := f.Get(old.Proxy); len(got) != 1 || got[0].Replica != "hub-0" {
		t.Fatalf("after remove on hub-1: %v", names(got))
	}
	f.Remove("hub-0", []string{old.Proxy})
	if got := f.Get(old.Proxy); len(got) != 0 {
		t.Fatalf("after remove on both: %v", names(got))
	}
	if len(f.Replicas()) != 0 {
		t.Fatalf("empty replicas kept: %v", f.Replicas())
	}
}

func TestFleetTieBreak(t *testing.T) {
	var f Fleet
	r := fixture()[0]
	f.Upsert("hub-b", []Record{r})
	f.Upsert("hub-a", []Record{r})
	if got := f.All(); len(got) != 1 || got[0].Replica != "hub-a" {
		t.Fatalf("tie: %v", names(got))
	}
	r.LastChange = at(100)
	f.Upsert("hub-b", []Record{r})
	if got := f.Get(r.Proxy); got[0].Replica != "hub-b" {
		t.Fatalf("later change lost: %v", names(got))
	}
}

func TestFleetDropAndReplace(t *testing.T) {
	var f Fleet
	recs := fixture()
	f.Upsert("hub-0", []Record{recs[0], recs[3]})
	f.Upsert("hub-1", []Record{recs[1], recs[2]})
	f.DropReplica("hub-0")
	if got := names(f.All()); !reflect.DeepEqual(got, []string{"hub-1/api-0.shop/cluster-1", "hub-1/client-5f6d.demo/cluster-2"}) {
		t.Fatalf("after DropReplica: %v", got)
	}
	f.Replace("hub-1", []Record{recs[3]})
	if got := names(f.All()); !reflect.DeepEqual(got, []string{"hub-1/my-grpc-client/"}) {
		t.Fatalf("after Replace: %v", got)
	}
	f.Remove("hub-9", []string{"x"}) // unknown replica: nothing happens
}

func TestFleetConcurrent(t *testing.T) {
	f := NewFleet()
	recs := fixture()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replica := []string{"hub-0", "hub-1"}[i%2]
			for range 200 {
				f.Upsert(replica, recs)
				_ = f.All()
				f.Remove(replica, []string{recs[0].Proxy})
			}
		}()
	}
	wg.Wait()
}
