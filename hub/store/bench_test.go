package store

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/pkg/model"
)

// benchShards is a cluster of n endpoints, 20 per service.
func benchShards(n int, salt byte) map[model.Hostname]*model.ServiceShard {
	out := map[model.Hostname]*model.ServiceShard{}
	for s := 0; s*20 < n; s++ {
		h := model.Hostname(fmt.Sprintf("svc-%d.demo.svc.cluster.local", s))
		sh := &model.ServiceShard{Service: &model.Service{Hostname: h, Name: fmt.Sprintf("svc-%d", s), Namespace: "demo",
			Ports: []model.ServicePort{{Name: "grpc", Port: 8080, Protocol: model.ProtocolGRPC}}}}
		for e := range 20 {
			i := s*20 + e
			sh.Endpoints = append(sh.Endpoints, model.Endpoint{Cluster: "c1",
				Address: netip.AddrFrom4([4]byte{10, salt, byte(i >> 8), byte(i)}), Ready: true,
				Locality: model.Locality{Region: "r1"}, ServiceAccount: "sa", Pod: fmt.Sprintf("p-%d", i),
				Ports: map[string]uint32{"grpc": 18080}})
		}
		out[h] = sh
	}
	return out
}

// BenchmarkServiceDuringPublish measures what an xDS read of one service
// costs while 100k-endpoint snapshots are being published back to back:
// "outbox" is the store as it is (encode after the lock is released);
// "under-lock" encodes with the store's lock held, as the store did
// before the outbox. It reports the read latency's p50 and p99.
func BenchmarkServiceDuringPublish(b *testing.B) {
	for _, mode := range []string{"outbox", "under-lock"} {
		b.Run(mode, func(b *testing.B) {
			st := New(Options{Self: "hub-0"})
			gen := st.NextGeneration("c1")
			snaps := []map[model.Hostname]*model.ServiceShard{benchShards(100_000, 1), benchShards(100_000, 2)}
			if err := st.ReplaceCluster("c1", gen, snaps[0]); err != nil {
				b.Fatal(err)
			}
			st.TakeOutbox()
			probe := model.Hostname("svc-7.demo.svc.cluster.local")

			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { // the owner's watcher relisting, and the replicator sending
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					gen := st.NextGeneration("c1") // a new term each time
					if mode == "under-lock" {
						st.mu.Lock()
						snap, _, err := st.state.LocalSnapshot("c1", "hub-0", st.writers["c1"].term, snaps[i%2], time.Now())
						if err == nil {
							_, err = federation.EncodePeerMessage(&federation.PeerMessage{Snapshot: &snap})
						}
						st.mu.Unlock()
						if err != nil {
							panic(err)
						}
						continue
					}
					if err := st.ReplaceCluster("c1", gen, snaps[i%2]); err != nil {
						panic(err)
					}
					for _, m := range st.TakeOutbox() {
						if _, err := federation.EncodePeerMessage(m); err != nil {
							panic(err)
						}
					}
				}
			}()
			lat := make([]time.Duration, 0, 1<<16)
			for b.Loop() {
				start := time.Now()
				if st.Service(probe) == nil {
					b.Fatal("probe service missing")
				}
				lat = append(lat, time.Since(start))
				time.Sleep(100 * time.Microsecond) // an xDS read now and then, not a spin
			}
			close(stop)
			wg.Wait()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2])/1e3, "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100])/1e3, "p99-µs")
		})
	}
}
