package bench

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// startReplicas starts n hub replicas that gossip with one key (the first
// is the seed) with extra args, and waits until each is ready and sees all
// the others.
func startReplicas(b *testing.B, f *framework.Fleet, n int, args []string) []*framework.Hub {
	b.Helper()
	key := filepath.Join(f.TempDir(), "gossip.key")
	if _, err := os.Stat(key); err != nil {
		k := make([]byte, 32)
		_, _ = rand.Read(k)
		if err := os.WriteFile(key, []byte(base64.StdEncoding.EncodeToString(k)), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	var hubs []*framework.Hub
	for i := range n {
		opts := framework.HubOptions{GossipKeyFile: key, Args: args, PlaintextXDS: true}
		if i > 0 {
			opts.Join = hubs[:1]
		}
		hubs = append(hubs, framework.StartTestHub(b, f, opts))
	}
	ctx, cancel := context.WithTimeout(b.Context(), settleTimeout)
	defer cancel()
	for _, h := range hubs {
		if err := testutil.Poll(ctx, settleTimeout, 50*time.Millisecond, func() error {
			fz, err := h.Federationz(ctx)
			if err != nil {
				return err
			}
			if len(fz.Members) != n {
				return fmt.Errorf("%s sees %d of %d members", h.ReplicaID(), len(fz.Members), n)
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	return hubs
}

// nonOwner returns a replica that does not watch cluster id, once every
// replica agrees on its owner.
func nonOwner(b *testing.B, ctx context.Context, hubs []*framework.Hub, id model.ClusterID) *framework.Hub {
	b.Helper()
	var out *framework.Hub
	err := testutil.Poll(ctx, settleTimeout, 50*time.Millisecond, func() error {
		owner := ""
		for _, h := range hubs {
			fz, err := h.Federationz(ctx)
			if err != nil {
				return err
			}
			o := fz.Owners(id)
			if len(o) != 1 || (owner != "" && o[0] != owner) {
				return fmt.Errorf("replicas disagree on the owner of %s", id)
			}
			owner = o[0]
		}
		for _, h := range hubs {
			if h.ReplicaID() != owner {
				out = h
				return nil
			}
		}
		return fmt.Errorf("every replica owns %s", id)
	})
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// ---------------------------------------------------------------------------
// BenchmarkFailover

const failoverRuns = 5

// BenchmarkFailover kills (SIGKILL) the owner of a cluster, then measures
// how long until every surviving replica names a new owner ("moved-ms") and
// until the new owner has listed the cluster and its snapshot, under a
// higher term, has reached every survivor ("synced-ms"). The victim is
// replaced by a fresh replica before the next run.
func BenchmarkFailover(b *testing.B) {
	f := framework.NewTestFleet(b, framework.FleetOptions{Remotes: framework.Remotes(3)})
	ctx, cancel := context.WithTimeout(b.Context(), convergenceBudget)
	defer cancel()
	for _, r := range f.Remotes() {
		w, err := r.DeployWorkload(ctx, framework.WorkloadOptions{Namespace: convNamespace, Service: convService, Replicas: convReplicas})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(w.Stop)
	}
	if err := f.Config().PutRemoteSecret(ctx, "bench-remotes", f.Remotes()...); err != nil {
		b.Fatal(err)
	}
	hubs := startReplicas(b, f, 3, nil)
	target := f.Remotes()[0].ID
	var moved, synced []time.Duration
	for b.Loop() {
		for range failoverRuns {
			victim := hubs[0]
			for _, h := range hubs {
				if h.ReplicaID() == ownerName(b, ctx, hubs[0], target) {
					victim = h
				}
			}
			survivors := slices.DeleteFunc(slices.Clone(hubs), func(h *framework.Hub) bool { return h == victim })
			start := time.Now()
			if err := victim.Kill(); err != nil {
				b.Fatal(err)
			}
			var movedAt time.Time
			err := testutil.Poll(ctx, settleTimeout, 5*time.Millisecond, func() error {
				allMoved, allSynced := true, true
				for _, h := range survivors {
					fz, err := h.Federationz(ctx)
					if err != nil {
						return err
					}
					if o := fz.Owners(target); len(o) != 1 || o[0] == victim.ReplicaID() {
						allMoved = false
					}
					for _, c := range fz.Clusters {
						if c.ID == target && c.Version.Owner == victim.ReplicaID() {
							allSynced = false
						}
					}
				}
				if allMoved && movedAt.IsZero() {
					movedAt = time.Now()
				}
				if !allMoved || !allSynced {
					return fmt.Errorf("not failed over yet")
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			moved = append(moved, movedAt.Sub(start))
			synced = append(synced, time.Since(start))
			// Replace the victim for the next run.
			fresh := framework.StartTestHub(b, f, framework.HubOptions{
				GossipKeyFile: victim.Options().GossipKeyFile, Join: survivors[:1], PlaintextXDS: true,
			})
			hubs = append(survivors, fresh)
		}
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(msOf(percentile(moved, 50)), "moved-p50-ms")
	b.ReportMetric(msOf(percentile(moved, 100)), "moved-max-ms")
	b.ReportMetric(msOf(percentile(synced, 50)), "synced-p50-ms")
	b.ReportMetric(msOf(percentile(synced, 100)), "synced-max-ms")
	b.ReportMetric(float64(len(synced)), "runs")
}

func ownerName(b *testing.B, ctx context.Context, hub *framework.Hub, id model.ClusterID) string {
	b.Helper()
	fz, err := hub.Federationz(ctx)
	if err != nil {
		b.Fatal(err)
	}
	o := fz.Owners(id)
	if len(o) == 0 {
		b.Fatalf("no owner of %s", id)
	}
	return o[0]
}

// ---------------------------------------------------------------------------
// BenchmarkRemoteWatches

// BenchmarkRemoteWatches counts, on each of five remote apiservers, the
// watches the hub replicas hold (the apiserver's own
// apiserver_longrunning_requests, less what it serves before any hub
// starts), for 1, 3 and 5 replicas, and for 5 replicas that each watch
// every cluster as istiod replicas do (--watch-replicas=5). A hub watches
// five kinds per cluster, so one watching replica shows as 5.
func BenchmarkRemoteWatches(b *testing.B) {
	for _, tc := range []struct {
		name             string
		replicas, watchN int
	}{
		{"replicas=1", 1, 1},
		{"replicas=3", 3, 1},
		{"replicas=5", 5, 1},
		{"replicas=5/every-replica-watches", 5, 5},
	} {
		b.Run(tc.name, func(b *testing.B) {
			f := framework.NewTestFleet(b, framework.FleetOptions{Remotes: framework.Remotes(5)})
			ctx, cancel := context.WithTimeout(b.Context(), convergenceBudget)
			defer cancel()
			base := map[model.ClusterID]int{}
			for _, r := range f.Remotes() {
				n, err := allWatches(ctx, r)
				if err != nil {
					b.Fatal(err)
				}
				base[r.ID] = n
			}
			if err := f.Config().PutRemoteSecret(ctx, "bench-remotes", f.Remotes()...); err != nil {
				b.Fatal(err)
			}
			startReplicas(b, f, tc.replicas, []string{fmt.Sprintf("--watch-replicas=%d", tc.watchN)})
			want := 5 * min(tc.watchN, tc.replicas)
			var counts []float64
			for b.Loop() {
				counts = counts[:0]
				err := testutil.Poll(ctx, settleTimeout, 50*time.Millisecond, func() error {
					counts = counts[:0]
					for _, r := range f.Remotes() {
						n, err := allWatches(ctx, r)
						if err != nil {
							return err
						}
						counts = append(counts, float64(n-base[r.ID]))
					}
					for _, c := range counts {
						if int(c) != want {
							return fmt.Errorf("watches per remote %v, settling towards %d", counts, want)
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(mean(counts), "watches/remote-apiserver")
			b.ReportMetric(float64(tc.replicas), "replicas")
		})
	}
}

// allWatches counts the watches of the five kinds a hub watches.
func allWatches(ctx context.Context, r *framework.RemoteCluster) (int, error) {
	total := 0
	for _, res := range []string{"services", "endpointslices", "pods", "nodes", "namespaces"} {
		n, err := r.Watches(ctx, res)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}
