package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// federatedFleet starts five remote clusters (one echo replica pair each,
// all in one secret) and n hub replicas that gossip with one key.
func federatedFleet(t *testing.T, n int) (*framework.Fleet, []*framework.Hub, map[model.ClusterID]*framework.Workload, string) {
	t.Helper()
	return gossipFleet(t, threeRegionsN(5), 2, n)
}

// gossipFleet starts a fleet of the given remote clusters, each with
// echoReplicas ready echo endpoints in namespace demo (none for 0), one
// remote secret "remotes" naming them all, and n hub replicas that gossip
// encrypted with one key, the later ones joining the first. It returns the
// workloads by cluster and the key's file.
func gossipFleet(t *testing.T, remotes []framework.RemoteClusterOptions, echoReplicas, n int) (*framework.Fleet, []*framework.Hub, map[model.ClusterID]*framework.Workload, string) {
	t.Helper()
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: remotes})
	ctx := t.Context()
	workloads := map[model.ClusterID]*framework.Workload{}
	for _, r := range f.Remotes() {
		if echoReplicas == 0 {
			break
		}
		w, err := r.DeployWorkload(ctx, framework.WorkloadOptions{Namespace: "demo", Service: "echo", Replicas: echoReplicas})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		workloads[r.ID] = w
	}
	if err := f.Config().PutRemoteSecret(ctx, "remotes", f.Remotes()...); err != nil {
		t.Fatal(err)
	}
	key := gossipKey(t, f)
	var hubs []*framework.Hub
	for i := range n {
		opts := framework.HubOptions{GossipKeyFile: key}
		if i > 0 {
			opts.Join = hubs[:1]
		}
		hubs = append(hubs, framework.StartTestHub(t, f, opts))
	}
	return f, hubs, workloads, key
}

// threeRegionsN is n remote clusters cluster-1 … cluster-n, each its own
// region.
func threeRegionsN(n int) []framework.RemoteClusterOptions {
	var out []framework.RemoteClusterOptions
	for i := 1; i <= n; i++ {
		out = append(out, framework.RemoteClusterOptions{
			ID:       model.ClusterID(fmt.Sprintf("cluster-%d", i)),
			Locality: model.Locality{Region: fmt.Sprintf("region-%d", i), Zone: fmt.Sprintf("zone-%d", i)},
		})
	}
	return out
}

func gossipKey(t *testing.T, f *framework.Fleet) string {
	t.Helper()
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	path := filepath.Join(f.TempDir(), fmt.Sprintf("gossip-%d.key", time.Now().UnixNano()))
	if err := os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(k)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// watchBaseline counts each remote apiserver's EndpointSlice watches before
// any hub runs (the apiserver's own loopback watches).
func watchBaseline(t *testing.T, f *framework.Fleet) map[model.ClusterID]int {
	t.Helper()
	out := map[model.ClusterID]int{}
	for _, r := range f.Remotes() {
		n, err := r.Watches(t.Context(), "endpointslices")
		if err != nil {
			t.Fatal(err)
		}
		out[r.ID] = n
	}
	return out
}

// expectWatchers waits until every remote apiserver serves exactly want
// EndpointSlice watches from hubs, counted by the apiserver itself.
func expectWatchers(t *testing.T, f *framework.Fleet, base map[model.ClusterID]int, want int) {
	t.Helper()
	testutil.Eventually(t, converge, poll, func() error {
		var bad []string
		for _, r := range f.Remotes() {
			n, err := r.Watches(t.Context(), "endpointslices")
			if err != nil {
				return err
			}
			if n-base[r.ID] != want {
				bad = append(bad, fmt.Sprintf("%s=%d", r.ID, n-base[r.ID]))
			}
		}
		if len(bad) > 0 {
			return fmt.Errorf("hub watches per remote apiserver %v, want %d each", bad, want)
		}
		return nil
	})
}

// expectAllEndpoints waits until hub serves echo endpoints of every remote.
func expectAllEndpoints(t *testing.T, f *framework.Fleet, hub *framework.Hub) {
	t.Helper()
	testutil.Eventually(t, converge, poll, func() error {
		rz, err := hub.Registryz(t.Context())
		if err != nil {
			return err
		}
		svc, _ := rz.Service(echoHost)
		for _, r := range f.Remotes() {
			if len(svc.ReadyEndpoints(r.ID)) != 2 {
				return fmt.Errorf("hub %s: %s has %d ready endpoints", hub.ReplicaID(), r.ID, len(svc.ReadyEndpoints(r.ID)))
			}
		}
		return nil
	})
}

func ownerOf(t *testing.T, hub *framework.Hub, id model.ClusterID) string {
	t.Helper()
	fz, err := hub.Federationz(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	owners := fz.Owners(id)
	if len(owners) != 1 {
		t.Fatalf("hub %s reports owners %v for %s", hub.ReplicaID(), owners, id)
	}
	return owners[0]
}

// TestFederationShardsWatches: three replicas split five clusters so that
// each remote apiserver is watched by one replica only, every replica serves
// every cluster, and a fourth replica changes no remote's watch count.
func TestFederationShardsWatches(t *testing.T) {
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: threeRegionsN(5)})
	base := watchBaseline(t, f)
	ctx := t.Context()
	workloads := deployEcho(t, f)
	if err := f.Config().PutRemoteSecret(ctx, "remotes", f.Remotes()...); err != nil {
		t.Fatal(err)
	}
	key := gossipKey(t, f)
	h0 := framework.StartTestHub(t, f, framework.HubOptions{GossipKeyFile: key})
	h1 := framework.StartTestHub(t, f, framework.HubOptions{GossipKeyFile: key, Join: []*framework.Hub{h0}})
	h2 := framework.StartTestHub(t, f, framework.HubOptions{GossipKeyFile: key, Join: []*framework.Hub{h0}})
	hubs := []*framework.Hub{h0, h1, h2}

	expectWatchers(t, f, base, 1)
	for _, h := range hubs {
		expectAllEndpoints(t, f, h)
	}

	t.Run("client on a non-owner sees the owner's cluster change", func(t *testing.T) {
		target := model.ClusterID("cluster-2")
		owner := ownerOf(t, h0, target)
		var via *framework.Hub
		for _, h := range hubs {
			if h.ReplicaID() != owner {
				via = h
				break
			}
		}
		t.Logf("%s is watched by %s; the client uses %s", target, owner, via.ReplicaID())
		conn := clientIn(t, f, via, target)
		expectClusters(t, conn, 30, target)
		if err := workloads[target].SetReady(ctx, false); err != nil {
			t.Fatal(err)
		}
		expectClusters(t, conn, 60, "cluster-1", "cluster-3", "cluster-4", "cluster-5")
		if err := workloads[target].SetReady(ctx, true); err != nil {
			t.Fatal(err)
		}
		expectClusters(t, conn, 30, target)
	})

	t.Run("a fourth replica warms up from peers and adds no watches", func(t *testing.T) {
		h3 := framework.StartTestHub(t, f, framework.HubOptions{GossipKeyFile: key, Join: []*framework.Hub{h1}})
		expectAllEndpoints(t, f, h3)
		expectWatchers(t, f, base, 1)
	})

	t.Run("a replica with another gossip key is not admitted", func(t *testing.T) {
		stranger := framework.StartTestHub(t, f, framework.HubOptions{GossipKeyFile: gossipKey(t, f), Join: []*framework.Hub{h0}})
		testutil.Eventually(t, converge, poll, func() error {
			m, err := h0.Metrics(ctx)
			if err != nil {
				return err
			}
			if !strings.Contains(m, "meshfed_gossip_rejected_messages_total") {
				return fmt.Errorf("no rejected gossip counted yet")
			}
			return nil
		})
		fz, err := h0.Federationz(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fz.Members {
			if m.ID == stranger.ReplicaID() {
				t.Fatalf("replica with a foreign key was admitted: %+v", fz.Members)
			}
		}
		sz, err := stranger.Federationz(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(sz.Members) != 1 {
			t.Fatalf("the stranger sees members %+v", sz.Members)
		}
		// Alone, the stranger watches every cluster itself; once it is gone
		// each remote is back to one watcher.
		if err := stranger.Stop(); err != nil {
			t.Fatal(err)
		}
		expectWatchers(t, f, base, 1)
	})
}

// TestFederationFailover: killing the owner of a cluster loses no RPC and
// no endpoint on the other replicas, a new owner takes over, and changes
// flow again; a SIGTERMed replica hands over the same way.
func TestFederationFailover(t *testing.T) {
	f, hubs, workloads, _ := federatedFleet(t, 3)
	ctx := t.Context()
	for _, h := range hubs {
		expectAllEndpoints(t, f, h)
	}
	byID := map[string]*framework.Hub{}
	for _, h := range hubs {
		byID[h.ReplicaID()] = h
	}

	handover := func(t *testing.T, stop func(*framework.Hub) error, how string) {
		// The victim is the owner of some cluster; clients on every other
		// replica keep calling their own cluster's echo (and the victim's
		// cluster) throughout.
		var target model.ClusterID
		var victim *framework.Hub
		for _, r := range f.Remotes() {
			o := byID[ownerOf(t, hubs[0], r.ID)]
			if o != nil && o.Running() {
				target, victim = r.ID, o
				break
			}
		}
		if victim == nil {
			t.Fatal("no running owner found")
		}
		var survivors []*framework.Hub
		for _, h := range hubs {
			if h != victim && h.Running() {
				survivors = append(survivors, h)
			}
		}
		t.Logf("%s %s, the owner of %s; clients on %d other replicas", how, victim.ReplicaID(), target, len(survivors))
		var conns []*framework.XDSConn
		for _, h := range survivors {
			conn := clientIn(t, f, h, target)
			expectClusters(t, conn, 20, target)
			conns = append(conns, conn)
		}
		// Keep RPCs flowing; any failure is a gap in service.
		loopCtx, stopLoop := context.WithCancel(ctx)
		var calls, failures atomic.Int64
		var firstErr atomic.Value
		var wg sync.WaitGroup
		for _, conn := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for loopCtx.Err() == nil {
					cctx, cancel := context.WithTimeout(loopCtx, 5*time.Second)
					_, err := conn.Call(cctx)
					cancel()
					if loopCtx.Err() != nil {
						return
					}
					calls.Add(1)
					if err != nil {
						failures.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					}
				}
			}()
		}
		// Watch that no replica ever loses an endpoint while this happens.
		var lost atomic.Value
		wg.Add(1)
		go func() {
			defer wg.Done()
			for loopCtx.Err() == nil {
				for _, h := range survivors {
					rz, err := h.Registryz(loopCtx)
					if err != nil {
						continue
					}
					svc, _ := rz.Service(echoHost)
					if n := len(svc.ReadyEndpoints("")); n != 2*len(f.Remotes()) {
						lost.CompareAndSwap(nil, fmt.Sprintf("%s served %d endpoints", h.ReplicaID(), n))
					}
				}
			}
		}()

		if err := stop(victim); err != nil {
			t.Logf("stopping %s: %v", victim.ReplicaID(), err)
		}
		// A new owner takes the cluster and publishes under a higher term.
		testutil.Eventually(t, converge, poll, func() error {
			for _, h := range survivors {
				o := ownerOf(t, h, target)
				if o == victim.ReplicaID() {
					return fmt.Errorf("%s still names %s owner of %s", h.ReplicaID(), o, target)
				}
				rz, err := h.Registryz(ctx)
				if err != nil {
					return err
				}
				c, _ := rz.Cluster(target)
				fz, _ := h.Federationz(ctx)
				for _, fc := range fz.Clusters {
					if fc.ID == target && fc.Version.Owner == victim.ReplicaID() {
						return fmt.Errorf("%s: %s state still from %s (%+v, %s)", h.ReplicaID(), target, victim.ReplicaID(), fc.Version, c.State)
					}
				}
			}
			return nil
		})
		stopLoop()
		wg.Wait()
		t.Logf("%d RPCs during the handover, %d failed", calls.Load(), failures.Load())
		if failures.Load() > 0 {
			t.Errorf("%d of %d RPCs failed during the handover; first: %v", failures.Load(), calls.Load(), firstErr.Load())
		}
		if v := lost.Load(); v != nil {
			t.Errorf("an endpoint disappeared during the handover: %v", v)
		}

		// Changes in the cluster flow again through the new owner.
		if err := workloads[target].SetReady(ctx, false); err != nil {
			t.Fatal(err)
		}
		for _, conn := range conns {
			testutil.Eventually(t, converge, poll, func() error {
				counts, err := conn.Spread(ctx, 30)
				if err != nil {
					return err
				}
				if framework.ByCluster(counts)[target] > 0 {
					return fmt.Errorf("still answered by %s: %v", target, counts)
				}
				return nil
			})
		}
		if err := workloads[target].SetReady(ctx, true); err != nil {
			t.Fatal(err)
		}
		for _, conn := range conns {
			expectClusters(t, conn, 20, target)
		}
	}

	t.Run("SIGKILL", func(t *testing.T) { handover(t, (*framework.Hub).Kill, "killing") })
	t.Run("SIGTERM", func(t *testing.T) { handover(t, (*framework.Hub).Stop, "stopping") })
}
