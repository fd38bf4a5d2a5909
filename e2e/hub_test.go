package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
)

const (
	echoHost   = model.Hostname("echo.demo.svc.cluster.local")
	echoTarget = "xds:///echo.demo.svc.cluster.local:8080"
	// converge bounds how long a change may take to reach a client. It is a
	// limit for a hung test, not a performance claim: make bench measures.
	converge = 30 * time.Second
	// poll is how often a wait looks again.
	poll = 50 * time.Millisecond
)

// threeRegions is three remote clusters, each its own region, so that a
// client in cluster-1 ranks cluster-2 and cluster-3 equally behind its own.
func threeRegions() []framework.RemoteClusterOptions { return threeRegionsN(3) }

// echoFleet starts three remote clusters with two echo replicas each, one
// secret holding cluster-1 and cluster-2 and another holding cluster-3,
// and a hub.
func echoFleet(t *testing.T) (*framework.Fleet, *framework.Hub, map[model.ClusterID]*framework.Workload) {
	t.Helper()
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: threeRegions()})
	ctx := t.Context()
	workloads := deployEcho(t, f)
	if err := f.Config().PutRemoteSecret(ctx, "remote-a", f.Remote("cluster-1"), f.Remote("cluster-2")); err != nil {
		t.Fatal(err)
	}
	if err := f.Config().PutRemoteSecret(ctx, "remote-b", f.Remote("cluster-3")); err != nil {
		t.Fatal(err)
	}
	hub := framework.StartTestHub(t, f, framework.HubOptions{})
	return f, hub, workloads
}

// deployEcho deploys two echo replicas (demo/echo) in every remote cluster
// of f, stopped when t ends, and returns them by cluster.
func deployEcho(t *testing.T, f *framework.Fleet) map[model.ClusterID]*framework.Workload {
	t.Helper()
	workloads := map[model.ClusterID]*framework.Workload{}
	for _, r := range f.Remotes() {
		w, err := r.DeployWorkload(t.Context(), framework.WorkloadOptions{Namespace: "demo", Service: "echo", Replicas: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		workloads[r.ID] = w
	}
	return workloads
}

// clientIn returns an xDS client that lives in cluster id, dialing echo.
// For an id that is no remote of the fleet, the client lives in no cluster
// (it sends no CLUSTER_ID: the hub refuses one that names no cluster) and
// in a region of its own; id still names it. It dials the hub's
// authenticated port with the certificate of service account
// demo/client-<id> of its cluster, which a cert agent keeps; a client in no
// cluster has its certificate from the fleet's first remote cluster (a
// certificate names a namespace, not a cluster), whose apiserver the
// outage tests leave up while they create such clients.
func clientIn(t *testing.T, f *framework.Fleet, hub *framework.Hub, id model.ClusterID) *framework.XDSConn {
	t.Helper()
	loc := model.Locality{Region: "elsewhere"}
	cluster := model.ClusterID("")
	certs := f.Remotes()[0]
	if r := f.Remote(id); r != nil {
		loc, cluster, certs = r.Locality, id, r
	}
	name := "client-" + string(id)
	ag := framework.StartTestCertAgent(t, certs, hub, "demo", name)
	c := framework.NewTestXDSClient(t, framework.ClientOptions{
		HubAddr: hub.CAAddr(), ServerTLS: true, CertDir: ag.Dir(),
		Cluster: cluster, Namespace: "demo", Locality: loc, Name: name,
	})
	conn, err := c.Dial(echoTarget)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// expectClusters waits until n consecutive RPCs are answered by exactly the
// clusters want, each at least once.
func expectClusters(t *testing.T, conn *framework.XDSConn, n int, want ...model.ClusterID) map[string]int {
	t.Helper()
	slices.Sort(want)
	var last map[string]int
	testutil.Eventually(t, converge, poll, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		counts, err := conn.Spread(ctx, n)
		if err != nil {
			return err
		}
		last = counts
		got := slices.Sorted(maps.Keys(framework.ByCluster(counts)))
		if !slices.Equal(got, want) {
			return fmt.Errorf("answers came from clusters %v (%v), want %v", got, counts, want)
		}
		return nil
	})
	return last
}

// TestFailoverAcrossClusters: a client in cluster-1 is served by cluster-1
// while it has ready endpoints, by the other clusters when it has none, and
// a client with no local endpoints is served by all three.
func TestFailoverAcrossClusters(t *testing.T) {
	f, hub, workloads := echoFleet(t)
	ctx := t.Context()

	local := clientIn(t, f, hub, "cluster-1")
	counts := expectClusters(t, local, 40, "cluster-1")
	t.Logf("cluster-1 ready: %v", counts)

	if err := workloads["cluster-1"].SetReady(ctx, false); err != nil {
		t.Fatal(err)
	}
	counts = expectClusters(t, local, 40, "cluster-2", "cluster-3")
	t.Logf("cluster-1 not ready: %v", counts)

	if err := workloads["cluster-1"].SetReady(ctx, true); err != nil {
		t.Fatal(err)
	}
	expectClusters(t, local, 40, "cluster-1")

	remote := clientIn(t, f, hub, "cluster-9")
	counts = expectClusters(t, remote, 60, "cluster-1", "cluster-2", "cluster-3")
	t.Logf("client without local endpoints: %v", counts)
}

// TestEndpointAndSecretLifecycle: scaling down stops traffic to the removed
// addresses; deleting a secret removes its clusters' endpoints, re-adding it
// brings them back; a rotated kubeconfig replaces the cluster's watch
// without losing its endpoints.
func TestEndpointAndSecretLifecycle(t *testing.T) {
	f, hub, workloads := echoFleet(t)
	ctx := t.Context()
	conn := clientIn(t, f, hub, "cluster-9") // no local endpoints: sees every cluster

	expectClusters(t, conn, 60, "cluster-1", "cluster-2", "cluster-3")

	t.Run("scale down", func(t *testing.T) {
		w := workloads["cluster-2"]
		before := w.Backends()
		if err := w.Scale(ctx, 1); err != nil {
			t.Fatal(err)
		}
		after := w.Backends()
		removed := slices.DeleteFunc(slices.Clone(before), func(b string) bool { return slices.Contains(after, b) })
		if len(removed) != 1 {
			t.Fatalf("scaling 2 -> 1 removed %v", removed)
		}
		testutil.Eventually(t, converge, poll, func() error {
			counts, err := conn.Spread(ctx, 60)
			if err != nil {
				return err
			}
			for _, r := range removed {
				if counts[r] > 0 {
					return fmt.Errorf("removed backend %s still answered: %v", r, counts)
				}
			}
			if counts[after[0]] == 0 {
				return fmt.Errorf("remaining backend %s never answered: %v", after[0], counts)
			}
			return nil
		})
	})

	t.Run("delete and re-add secret", func(t *testing.T) {
		if err := f.Config().DeleteRemoteSecret(ctx, "remote-b"); err != nil {
			t.Fatal(err)
		}
		expectClusters(t, conn, 60, "cluster-1", "cluster-2")
		rz, err := hub.Registryz(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := rz.Cluster("cluster-3"); ok {
			t.Errorf("cluster-3 still in registryz after its secret was deleted")
		}
		svc, _ := rz.Service(echoHost)
		if eps := svc.ReadyEndpoints("cluster-3"); len(eps) != 0 {
			t.Errorf("cluster-3 endpoints left: %v", eps)
		}

		if err := f.Config().PutRemoteSecret(ctx, "remote-b", f.Remote("cluster-3")); err != nil {
			t.Fatal(err)
		}
		expectClusters(t, conn, 60, "cluster-1", "cluster-2", "cluster-3")
	})

	t.Run("rotated kubeconfig", func(t *testing.T) {
		// Rotate cluster-3 from client certificates to a TokenRequest token
		// that expires within the hub's warning window, then to a longer one.
		rotate := func(ttl time.Duration, wantState debugdoc.ClusterState) {
			t.Helper()
			before := registryzCluster(t, hub, "cluster-3")
			kc, err := f.Remote("cluster-3").TokenKubeconfig(ctx, "meshfed-reader", ttl)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Config().PutRawRemoteSecret(ctx, "remote-b", map[string][]byte{"cluster-3": kc}); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, converge, poll, func() error {
				c := registryzCluster(t, hub, "cluster-3")
				if c.Generation <= before.Generation || c.State != wantState {
					return fmt.Errorf("cluster-3 after rotation: %+v (before %+v), want state %s", c, before, wantState)
				}
				return nil
			})
			// The endpoints never left: the client keeps reaching cluster-3.
			expectClusters(t, conn, 60, "cluster-1", "cluster-2", "cluster-3")
		}
		rotate(time.Hour, debugdoc.ClusterCredentialExpiring)
		rotate(48*time.Hour, debugdoc.ClusterSynced)
	})
}

// registryzClusterOK returns cluster id's entry in the hub's registryz,
// and whether it has one.
func registryzClusterOK(t *testing.T, hub *framework.Hub, id model.ClusterID) (debugdoc.RegistryzCluster, bool) {
	t.Helper()
	rz, err := hub.Registryz(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return rz.Cluster(id)
}

func registryzCluster(t *testing.T, hub *framework.Hub, id model.ClusterID) debugdoc.RegistryzCluster {
	t.Helper()
	rz, err := hub.Registryz(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c, ok := rz.Cluster(id)
	if !ok {
		t.Fatalf("cluster %s not in registryz: %+v", id, rz.Clusters)
	}
	return c
}

// TestBadRemotes: a malformed kubeconfig and an unreachable apiserver are
// reported with their cause in /debug/registryz and /metrics, and the good
// cluster is served all along.
func TestBadRemotes(t *testing.T) {
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: threeRegions()[:1]})
	ctx := t.Context()
	good := f.Remote("cluster-1")
	w, err := good.DeployWorkload(ctx, framework.WorkloadOptions{Namespace: "demo", Service: "echo", Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	dead, err := good.DeadKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Config().PutRawRemoteSecret(ctx, "broken", map[string][]byte{
		"malformed": []byte("apiVersion: v1\nkind: Config\nclusters: [ {name: x, cluster: {server: 12}"),
		"dead":      dead,
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.Config().PutRawRemoteSecret(ctx, "empty", map[string][]byte{}); err != nil {
		t.Fatal(err)
	}
	if err := f.Config().PutRemoteSecret(ctx, "remote-good", good); err != nil {
		t.Fatal(err)
	}
	hub := framework.StartTestHub(t, f, framework.HubOptions{Args: []string{"--cluster-sync-timeout=5s"}})

	conn := clientIn(t, f, hub, "cluster-1")
	expectClusters(t, conn, 20, "cluster-1")

	testutil.Eventually(t, converge, poll, func() error {
		rz, err := hub.Registryz(ctx)
		if err != nil {
			return err
		}
		want := map[model.ClusterID]struct {
			state debugdoc.ClusterState
			cause string
		}{
			"malformed": {debugdoc.ClusterInvalid, "invalid kubeconfig"},
			"dead":      {debugdoc.ClusterUnreachable, "connection refused"},
			"cluster-1": {debugdoc.ClusterSynced, ""},
		}
		for id, w := range want {
			c, ok := rz.Cluster(id)
			if !ok {
				return fmt.Errorf("cluster %s missing from registryz", id)
			}
			if c.State != w.state || !strings.Contains(c.Error, w.cause) {
				return fmt.Errorf("cluster %s: state %q error %q, want %q with %q", id, c.State, c.Error, w.state, w.cause)
			}
			if c.Secret == "" {
				return fmt.Errorf("cluster %s: no secret named", id)
			}
		}
		if len(rz.SecretErrors) != 1 || rz.SecretErrors[0].Secret != "istio-system/empty" ||
			!strings.Contains(rz.SecretErrors[0].Error, "no clusters") {
			return fmt.Errorf("secret errors = %+v, want the empty secret", rz.SecretErrors)
		}
		return nil
	})

	metrics, err := hub.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`meshfed_remote_clusters{state="invalid"} 1`,
		`meshfed_remote_clusters{state="unreachable"} 1`,
		`meshfed_remote_clusters{state="synced"} 1`,
		`meshfed_remote_cluster_errors_total{cluster="malformed",reason="invalid_kubeconfig"}`,
		`meshfed_remote_cluster_errors_total{cluster="dead",reason="unreachable"}`,
		`meshfed_remote_cluster_errors_total{cluster="istio-system/empty",reason="no_clusters"}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// Still served after all that.
	expectClusters(t, conn, 20, "cluster-1")
}
