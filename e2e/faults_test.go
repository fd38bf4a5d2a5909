package e2e

import (
	"context"
	"crypto/x509"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/hub/remotes"
	"github.com/meshfed/meshfed/pkg/agent"
	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// The fault matrix of the hub: apiservers and peers cut and restored
// through TCP proxies (an envtest apiserver cannot restart on the same
// address and CA; a proxy cut and restored on its port is what a client
// sees of a restart). Each test prints what it measured.

const (
	// outage is how long an apiserver stays down.
	outage = 20 * time.Second
	// probeEvery is the hub's --cluster-probe-interval in these tests.
	probeEvery = time.Second
)

// outageFleet is two remote clusters, each its own region, with two echo
// replicas each, and one hub probing every second. cluster-1's remote
// secret reaches its apiserver through a TCP proxy the test can cut, and
// carries the stale-endpoints policy given (none when empty).
type outageFleet struct {
	f         *framework.Fleet
	hub       *framework.Hub
	proxy     *testutil.TCPProxy
	workloads map[model.ClusterID]*framework.Workload
	// local lives in cluster-1 (served by cluster-1 while it has
	// endpoints); elsewhere lives in no cluster (served by both).
	local, elsewhere *framework.XDSConn
	// endpoints is what cluster-1 contributes before the outage.
	endpoints int
}

func startOutageFleet(t *testing.T, policy string) *outageFleet {
	t.Helper()
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: threeRegionsN(2)})
	ctx := t.Context()
	of := &outageFleet{f: f}
	of.workloads = deployEcho(t, f)
	c1 := f.Remote("cluster-1")
	of.proxy = testutil.StartTCPProxy(t, strings.TrimPrefix(c1.Host(), "https://"))
	via, err := framework.KubeconfigVia(c1.HubKubeconfig(), of.proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Config().PutRawRemoteSecret(ctx, "remote-1", map[string][]byte{"cluster-1": via}); err != nil {
		t.Fatal(err)
	}
	if policy != "" {
		if err := f.Config().AnnotateRemoteSecret(ctx, "remote-1", map[string]string{remotes.AnnotationStaleEndpoints: policy}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Config().PutRemoteSecret(ctx, "remote-2", f.Remote("cluster-2")); err != nil {
		t.Fatal(err)
	}
	of.hub = framework.StartTestHub(t, f, framework.HubOptions{Args: []string{"--cluster-probe-interval=" + probeEvery.String()}})
	of.local = clientIn(t, f, of.hub, "cluster-1")
	of.elsewhere = clientIn(t, f, of.hub, "cluster-9")
	expectClusters(t, of.local, 20, "cluster-1")
	expectClusters(t, of.elsewhere, 40, "cluster-1", "cluster-2")
	c := registryzCluster(t, of.hub, "cluster-1")
	if c.State != debugdoc.ClusterSynced || c.Endpoints == 0 {
		t.Fatalf("before the outage cluster-1 is %s with %d endpoints, want synced with some", c.State, c.Endpoints)
	}
	of.endpoints = c.Endpoints
	return of
}

// servedBy sends n RPCs and returns the clusters and the replicas (by
// identity) that answered.
func servedBy(ctx context.Context, conn *framework.XDSConn, n int) ([]model.ClusterID, map[string]int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	counts, err := conn.Spread(ctx, n)
	return slices.Sorted(maps.Keys(framework.ByCluster(counts))), counts, err
}

// waitState waits for cluster id to show state in the hub's registryz and
// returns the document's entry.
func waitState(t *testing.T, hub *framework.Hub, id model.ClusterID, state debugdoc.ClusterState) debugdoc.RegistryzCluster {
	t.Helper()
	var c debugdoc.RegistryzCluster
	testutil.Eventually(t, converge, poll, func() error {
		c = registryzCluster(t, hub, id)
		if c.State != state {
			return fmt.Errorf("%s is %s (%s), want %s", id, c.State, c.Error, state)
		}
		return nil
	})
	return c
}

// TestRemoteOutageKeep: cluster-1's apiserver is down for 20 s under the
// default policy, keep. Its endpoints stay served (its workloads still
// run), it shows unreachable since the cut with policy keep, another
// cluster's change still reaches clients during the outage, and after the
// return a change made in cluster-1 reaches clients at once (its watches
// are restarted, not left to client-go's backoff). The hub never restarts.
func TestRemoteOutageKeep(t *testing.T) {
	of := startOutageFleet(t, "")
	ctx := t.Context()
	pid := of.hub.PID()

	cut := time.Now()
	of.proxy.Cut()
	c := waitState(t, of.hub, "cluster-1", debugdoc.ClusterUnreachable)
	t.Logf("outage seen after %v: state %s since %s, policy %q, error %q",
		time.Since(cut).Round(time.Millisecond), c.State, c.Since.Format(time.RFC3339Nano), c.StalePolicy, c.Error)
	if c.StalePolicy != "keep" {
		t.Errorf("stale policy %q, want keep", c.StalePolicy)
	}
	if c.Since.Before(cut.Add(-time.Second)) {
		t.Errorf("unreachable since %v, before the cut at %v", c.Since, cut)
	}
	if c.Endpoints != of.endpoints {
		t.Errorf("cluster-1 contributes %d endpoints while unreachable, want its %d kept", c.Endpoints, of.endpoints)
	}

	// Another cluster's change during the outage reaches clients.
	changed := time.Now()
	if err := of.workloads["cluster-2"].Scale(ctx, 3); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, converge, poll, func() error {
		_, counts, err := servedBy(ctx, of.elsewhere, 60)
		if err != nil {
			return err
		}
		if n := replicasOf(counts, "cluster-2"); n != 3 {
			return fmt.Errorf("%d cluster-2 replicas answer, want 3 (%v)", n, counts)
		}
		return nil
	})
	t.Logf("cluster-2 scaled to 3 during cluster-1's outage: served after %v", time.Since(changed).Round(time.Millisecond))

	// Until the return, cluster-1's endpoints keep serving its clients.
	rounds := 0
	testutil.Consistently(t, outage-time.Since(cut), time.Second, func() error {
		rounds++
		clusters, counts, err := servedBy(ctx, of.local, 10)
		if err != nil {
			return fmt.Errorf("during the outage: %w", err)
		}
		if !slices.Equal(clusters, []model.ClusterID{"cluster-1"}) {
			return fmt.Errorf("during the outage under keep, answers came from %v (%v), want cluster-1 only", clusters, counts)
		}
		return nil
	})
	t.Logf("%d rounds of 10 RPCs during the %v outage, all served by cluster-1", rounds, outage)

	if err := of.proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	waitState(t, of.hub, "cluster-1", debugdoc.ClusterSynced)
	t.Logf("synced %v after the return", time.Since(back).Round(time.Millisecond))

	// A change made 1 s after the return.
	time.Sleep(time.Until(back.Add(time.Second)))
	changed = time.Now()
	if err := of.workloads["cluster-1"].Scale(ctx, 3); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, converge, 20*time.Millisecond, func() error {
		_, counts, err := servedBy(ctx, of.local, 30)
		if err != nil {
			return err
		}
		if n := replicasOf(counts, "cluster-1"); n != 3 {
			return fmt.Errorf("%d cluster-1 replicas answer, want 3 (%v)", n, counts)
		}
		return nil
	})
	t.Logf("cluster-1 scaled to 3, 1 s after the return: all 3 answer after %v", time.Since(changed).Round(time.Millisecond))
	if !of.hub.Running() || of.hub.PID() != pid {
		t.Errorf("the hub restarted during the outage")
	}
}

// TestRemoteOutageDropAfter: under drop-after=5s, cluster-1's endpoints
// are still served 2 s into its apiserver's outage, leave the load
// assignments within ~5 s (plus a probe and a push), so its clients fail
// over to cluster-2, and come back after the return. Printed: the time to
// fail over and the time to return.
func TestRemoteOutageDropAfter(t *testing.T) {
	const dropAfter = 5 * time.Second
	of := startOutageFleet(t, "drop-after="+dropAfter.String())
	ctx := t.Context()
	pid := of.hub.PID()

	cut := time.Now()
	of.proxy.Cut()
	time.Sleep(time.Until(cut.Add(2 * time.Second)))
	if clusters, counts, err := servedBy(ctx, of.local, 10); err != nil {
		t.Fatal(err)
	} else if !slices.Equal(clusters, []model.ClusterID{"cluster-1"}) {
		t.Errorf("2 s into the outage, before drop-after=%v, answers came from %v (%v), want cluster-1", dropAfter, clusters, counts)
	}

	testutil.Eventually(t, converge, 50*time.Millisecond, func() error {
		clusters, counts, err := servedBy(ctx, of.local, 10)
		if err != nil {
			return err
		}
		if !slices.Equal(clusters, []model.ClusterID{"cluster-2"}) {
			return fmt.Errorf("answers from %v (%v), want cluster-2 only", clusters, counts)
		}
		return nil
	})
	failover := time.Since(cut)
	c := registryzCluster(t, of.hub, "cluster-1")
	t.Logf("failed over to cluster-2 %v after the cut (drop-after=%v, probes every %v); registryz: %s, policy %q, dropped at +%v, %d endpoints",
		failover.Round(time.Millisecond), dropAfter, probeEvery, c.State, c.StalePolicy,
		c.EndpointsDropped.Sub(cut).Round(time.Millisecond), c.Endpoints)
	if c.EndpointsDropped.IsZero() || c.Endpoints != 0 || c.StalePolicy != "drop-after=5s" {
		t.Errorf("registryz of the dropped cluster: %+v", c)
	}
	m, err := of.hub.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if metricValue(m, `meshfed_remote_cluster_errors_total{cluster="cluster-1",reason="endpoints_dropped"}`) != 1 {
		t.Errorf("the drop is not counted in meshfed_remote_cluster_errors_total:\n%s", grepLines(m, "meshfed_remote_cluster_errors_total"))
	}

	time.Sleep(time.Until(cut.Add(outage)))
	if err := of.proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	testutil.Eventually(t, converge, 50*time.Millisecond, func() error {
		clusters, counts, err := servedBy(ctx, of.local, 10)
		if err != nil {
			return err
		}
		if !slices.Equal(clusters, []model.ClusterID{"cluster-1"}) {
			return fmt.Errorf("answers from %v (%v), want cluster-1 again", clusters, counts)
		}
		return nil
	})
	t.Logf("served by cluster-1 again %v after the return", time.Since(back).Round(time.Millisecond))
	if c := waitState(t, of.hub, "cluster-1", debugdoc.ClusterSynced); !c.EndpointsDropped.IsZero() || c.Endpoints != of.endpoints {
		t.Errorf("after the return registryz says %+v, want %d endpoints and no drop", c, of.endpoints)
	}
	if !of.hub.Running() || of.hub.PID() != pid {
		t.Errorf("the hub restarted during the outage")
	}
}

// replicasOf counts the distinct replicas of cluster that answered.
func replicasOf(counts map[string]int, cluster model.ClusterID) int {
	n := 0
	for id := range counts {
		if strings.HasPrefix(id, string(cluster)+"/") {
			n++
		}
	}
	return n
}

// grepLines returns the lines of text that contain substr.
func grepLines(text, substr string) string {
	var out []string
	for line := range strings.Lines(text) {
		if strings.Contains(line, substr) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return strings.Join(out, "\n")
}

// TestConfigClusterOutage: the config cluster's apiserver is down for 20 s.
// The hub keeps serving from what it had: a remote change still reaches
// clients, a new client is served in full, and a workload still gets its
// certificate (its token is reviewed by its own cluster, the signing key is
// in memory). A remote secret written during the outage is engaged after
// the return without waiting out client-go's watch backoff: the hub's probe
// of the config cluster sees it answer again and lists the remote secrets
// anew (counted in meshfed_config_cluster_reconnects_total; printed: how
// long after the return, against a probe interval of 1 s). The hub never
// restarts.
func TestConfigClusterOutage(t *testing.T) {
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: threeRegionsN(2)})
	ctx := t.Context()
	workloads := deployEcho(t, f)
	if err := f.Config().PutRemoteSecret(ctx, "remote-1", f.Remote("cluster-1")); err != nil {
		t.Fatal(err)
	}
	proxy := testutil.StartTCPProxy(t, strings.TrimPrefix(f.Config().Host(), "https://"))
	via, err := framework.KubeconfigVia(f.Config().Kubeconfig(), proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "config-via-proxy.kubeconfig")
	if err := os.WriteFile(kubeconfig, via, 0o600); err != nil {
		t.Fatal(err)
	}
	hub := framework.StartTestHub(t, f, framework.HubOptions{Args: []string{"--kubeconfig=" + kubeconfig, "--cluster-probe-interval=1s"}})
	pid := hub.PID()
	before := clientIn(t, f, hub, "cluster-9")
	expectClusters(t, before, 20, "cluster-1")
	_, roots := waitTrustBundle(t, hub)
	token := serviceAccountToken(t, f.Remote("cluster-1"), "demo", "echo", "istio-ca")

	cut := time.Now()
	proxy.Cut()

	// A remote change during the outage reaches clients.
	changed := time.Now()
	if err := workloads["cluster-1"].Scale(ctx, 3); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, converge, poll, func() error {
		_, counts, err := servedBy(ctx, before, 30)
		if err != nil {
			return err
		}
		if n := replicasOf(counts, "cluster-1"); n != 3 {
			return fmt.Errorf("%d cluster-1 replicas answer, want 3 (%v)", n, counts)
		}
		return nil
	})
	t.Logf("config cluster down: a remote scale-up served after %v", time.Since(changed).Round(time.Millisecond))

	// A client that connects during the outage is served in full.
	during := clientIn(t, f, hub, "cluster-8")
	expectClusters(t, during, 30, "cluster-1")

	// A workload gets its certificate.
	issued := time.Now()
	leaf := workloadCertificate(t, hub, roots, "cluster-1", token)
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "spiffe://cluster.local/ns/demo/sa/echo" {
		t.Errorf("certificate issued during the outage names %v", leaf.URIs)
	}
	t.Logf("config cluster down: certificate issued in %v", time.Since(issued).Round(time.Millisecond))

	// A secret written while the hub cannot see it.
	if err := f.Config().PutRemoteSecret(ctx, "remote-2", f.Remote("cluster-2")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(cut.Add(outage)))
	if rz, err := hub.Registryz(ctx); err != nil {
		t.Fatal(err)
	} else if _, ok := rz.Cluster("cluster-2"); ok {
		t.Fatal("cluster-2 is known before the config cluster came back: the test does not cut what it means to")
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	expectClusters(t, before, 60, "cluster-1", "cluster-2")
	t.Logf("config cluster back after %v: the secret written during the outage served %v later (probes every 1s)", outage, time.Since(back).Round(time.Millisecond))
	m, err := hub.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if metricValue(m, "meshfed_config_cluster_reconnects_total") < 1 {
		t.Errorf("the config cluster's return did not rebuild the remote-secret cache:\n%s", grepLines(m, "meshfed_config_cluster"))
	}
	if !hub.Running() || hub.PID() != pid {
		t.Errorf("the hub restarted during the outage")
	}
}

// workloadCertificate has a workload agent of cluster get its certificate
// from the hub's CA with token, and returns the leaf.
func workloadCertificate(t *testing.T, hub *framework.Hub, roots *x509.CertPool, cluster model.ClusterID, token string) *x509.Certificate {
	t.Helper()
	a, err := agent.New(agent.Options{
		CAAddr: hub.CAAddr(), CARoots: roots, ServerName: "localhost", ClusterID: string(cluster),
		TokenFunc: func(context.Context) (string, error) { return token, nil },
		Dir:       t.TempDir(), TTL: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = a.Run(actx) }()
	select {
	case <-a.Ready():
	case <-time.After(converge):
		t.Fatalf("no certificate from %s within %v", hub.ReplicaID(), converge)
	}
	return a.Current().Leaf
}

// TestHungAndSlowApiservers: cluster-2's apiserver accepts connections and
// never answers, cluster-3's answers through 150 ms of latency each way.
// cluster-1 syncs and is served without waiting for either, cluster-2 is
// reported with its cause and counted, cluster-3 syncs late and is served,
// and a later change of cluster-1 reaches clients at once. Printed: each
// cluster's time to be served.
func TestHungAndSlowApiservers(t *testing.T) {
	const latency = 150 * time.Millisecond
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: threeRegionsN(3)})
	ctx := t.Context()
	workloads := deployEcho(t, f)
	hung, err := framework.KubeconfigVia(f.Remote("cluster-2").HubKubeconfig(), testutil.StartBlackhole(t))
	if err != nil {
		t.Fatal(err)
	}
	slowProxy := testutil.StartTCPProxy(t, strings.TrimPrefix(f.Remote("cluster-3").Host(), "https://"))
	slowProxy.SetLatency(latency)
	slow, err := framework.KubeconfigVia(f.Remote("cluster-3").HubKubeconfig(), slowProxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Config().PutRemoteSecret(ctx, "remote-1", f.Remote("cluster-1")); err != nil {
		t.Fatal(err)
	}
	if err := f.Config().PutRawRemoteSecret(ctx, "remote-2", map[string][]byte{"cluster-2": hung}); err != nil {
		t.Fatal(err)
	}
	if err := f.Config().PutRawRemoteSecret(ctx, "remote-3", map[string][]byte{"cluster-3": slow}); err != nil {
		t.Fatal(err)
	}

	const syncTimeout = 10 * time.Second
	start := time.Now()
	hub := framework.StartTestHub(t, f, framework.HubOptions{Args: []string{
		"--cluster-probe-interval=" + probeEvery.String(), "--cluster-sync-timeout=" + syncTimeout.String(),
	}})
	// cluster-1 is served while the hung cluster is still within its sync
	// timeout: nothing waited for it.
	testutil.Eventually(t, converge, poll, func() error {
		if c := registryzCluster(t, hub, "cluster-1"); c.State != debugdoc.ClusterSynced {
			return fmt.Errorf("cluster-1 is %s", c.State)
		}
		return nil
	})
	synced1 := time.Since(start)
	c2 := registryzCluster(t, hub, "cluster-2")
	if c2.State == debugdoc.ClusterSynced {
		t.Fatalf("the hung cluster-2 shows synced: %+v", c2)
	}
	if c2.State == debugdoc.ClusterTimeout || strings.Contains(c2.Error, "not synced after") {
		t.Errorf("cluster-1 synced only after the hung cluster's sync timeout (%v after the hub's start; cluster-2: %s %s)", synced1, c2.State, c2.Error)
	}
	client := clientIn(t, f, hub, "cluster-9")
	testutil.Eventually(t, converge, poll, func() error {
		clusters, counts, err := servedBy(ctx, client, 30)
		if err != nil {
			return err
		}
		if !slices.Contains(clusters, "cluster-1") {
			return fmt.Errorf("answers from %v (%v), want cluster-1 among them", clusters, counts)
		}
		return nil
	})
	t.Logf("cluster-1 synced %v after the hub's start and served %v after it, with cluster-2 %s: %s",
		synced1.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), c2.State, c2.Error)

	// The slow cluster syncs in the end and is served with the others.
	expectClusters(t, client, 60, "cluster-1", "cluster-3")
	t.Logf("cluster-3, behind %v of latency each way, served %v after the hub's start", latency, time.Since(start).Round(time.Millisecond))

	// The hung cluster is reported with its cause, and counted.
	c2 = registryzCluster(t, hub, "cluster-2")
	if (c2.State != debugdoc.ClusterUnreachable && c2.State != debugdoc.ClusterTimeout) || c2.Error == "" {
		t.Errorf("the hung cluster-2 shows %s (%q), want unreachable or timeout with a cause", c2.State, c2.Error)
	}
	t.Logf("cluster-2 (hung): %s: %s", c2.State, c2.Error)
	m, err := hub.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if metricValue(m, `meshfed_remote_cluster_errors_total{cluster="cluster-2",reason="unreachable"}`) == 0 {
		t.Errorf("the hung cluster is not counted:\n%s", grepLines(m, "meshfed_remote_cluster_errors_total"))
	}

	// A change of cluster-1 still reaches clients at once.
	changed := time.Now()
	if err := workloads["cluster-1"].Scale(ctx, 3); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, converge, 20*time.Millisecond, func() error {
		_, counts, err := servedBy(ctx, client, 60)
		if err != nil {
			return err
		}
		if n := replicasOf(counts, "cluster-1"); n != 3 {
			return fmt.Errorf("%d cluster-1 replicas answer, want 3 (%v)", n, counts)
		}
		return nil
	})
	t.Logf("with a hung and a slow cluster in the fleet, a cluster-1 scale-up served after %v", time.Since(changed).Round(time.Millisecond))
}

// TestRemoteSecretRotations: cluster-1's remote secret is rotated 100 times
// (each time a new TokenRequest token, as `istioctl create-remote-secret`
// makes), each rotation waited for. Its endpoints stay served throughout,
// and the hub's goroutines and heap (after a GC) come back to within 5 % of
// what they were before (the leak of istio/istio#57269). Printed: both,
// before and after.
func TestRemoteSecretRotations(t *testing.T) {
	const rotations, warmup = 100, 5
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: threeRegionsN(1)})
	ctx := t.Context()
	r := f.Remote("cluster-1")
	w, err := r.DeployWorkload(ctx, framework.WorkloadOptions{Namespace: "demo", Service: "echo", Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	if err := f.Config().PutRemoteSecret(ctx, "remote-1", r); err != nil {
		t.Fatal(err)
	}
	hub := framework.StartTestHub(t, f, framework.HubOptions{})
	client := clientIn(t, f, hub, "cluster-1")
	expectClusters(t, client, 20, "cluster-1")

	rotate := func(n int) time.Duration {
		start := time.Now()
		for range n {
			gen := registryzCluster(t, hub, "cluster-1").Generation
			kc, err := r.TokenKubeconfig(ctx, "meshfed-reader", 48*time.Hour) // past the expiry warning
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Config().PutRawRemoteSecret(ctx, "remote-1", map[string][]byte{"cluster-1": kc}); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, converge, 10*time.Millisecond, func() error {
				c := registryzCluster(t, hub, "cluster-1")
				if c.State != debugdoc.ClusterSynced || c.Generation <= gen {
					return fmt.Errorf("cluster-1 is %s at generation %d, want synced past %d", c.State, c.Generation, gen)
				}
				return nil
			})
			if clusters, counts, err := servedBy(ctx, client, 2); err != nil || !slices.Equal(clusters, []model.ClusterID{"cluster-1"}) {
				t.Fatalf("during the rotations: answers from %v (%v), %v", clusters, counts, err)
			}
		}
		return time.Since(start)
	}
	// A few rotations first: pools, caches and the token cache warm up.
	rotate(warmup)
	before := hubFootprint(t, hub)
	took := rotate(rotations)
	var after footprint
	err = testutil.Poll(ctx, converge, time.Second, func() error {
		after = hubFootprint(t, hub)
		if !after.within(before, 0.05) {
			return fmt.Errorf("after %d rotations: %s, before: %s", rotations, after, before)
		}
		return nil
	})
	t.Logf("%d rotations in %v (%v each, each waited for); before: %s; after: %s",
		rotations, took.Round(time.Millisecond), (took / rotations).Round(time.Millisecond), before, after)
	if err != nil {
		t.Errorf("the hub did not come back to within 5%%: %v", err)
	}
	expectClusters(t, client, 20, "cluster-1")
}

// footprint is a hub's goroutines and its heap after a GC.
type footprint struct{ goroutines, heapBytes int }

func (f footprint) String() string {
	return fmt.Sprintf("%d goroutines, %.2f MiB heap", f.goroutines, float64(f.heapBytes)/(1<<20))
}

// within tells whether f is at most frac above base in both.
func (f footprint) within(base footprint, frac float64) bool {
	return float64(f.goroutines) <= float64(base.goroutines)*(1+frac) && float64(f.heapBytes) <= float64(base.heapBytes)*(1+frac)
}

// hubFootprint reads the hub's goroutines and its heap after a GC.
func hubFootprint(t *testing.T, hub *framework.Hub) footprint {
	t.Helper()
	g, err := hub.Goroutines(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	heap, err := hub.HeapAlloc(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return footprint{goroutines: g, heapBytes: int(heap)}
}

// replicaLink puts a hub replica's gossip port (TCP and UDP) and peer port
// behind proxies, advertised to the other replicas, that a test can cut:
// the replica is then partitioned from its peers while it still reaches
// every apiserver and serves its proxies.
type replicaLink struct {
	gossipTCP, peer *testutil.TCPProxy
	gossipUDP       *testutil.UDPRelay
	opts            framework.HubOptions
}

func newReplicaLink(t *testing.T, gossipKeyFile string) *replicaLink {
	t.Helper()
	addrs, err := framework.FreeAddrs(2) // where the hub really listens
	if err != nil {
		t.Fatal(err)
	}
	l := &replicaLink{gossipTCP: testutil.StartTCPProxy(t, addrs[0]), peer: testutil.StartTCPProxy(t, addrs[1])}
	l.gossipUDP = testutil.StartUDPRelay(t, l.gossipTCP.Addr(), addrs[0])
	l.opts = framework.HubOptions{
		GossipAddr: addrs[0], PeerAddr: addrs[1], GossipKeyFile: gossipKeyFile,
		Args: []string{"--gossip-advertise-addr=" + l.gossipTCP.Addr(), "--peer-advertise-addr=" + l.peer.Addr()},
	}
	return l
}

func (l *replicaLink) cut() {
	l.gossipUDP.Cut()
	l.gossipTCP.Cut()
	l.peer.Cut()
}

func (l *replicaLink) heal(t *testing.T) {
	t.Helper()
	l.gossipUDP.Restore()
	for _, p := range []*testutil.TCPProxy{l.gossipTCP, l.peer} {
		if err := p.Restore(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReplicaPartition: two hub replicas, each watching one of two
// clusters, are cut apart (gossip and peer streams). Both sides keep
// serving both clusters' endpoints, each declares the other gone and takes
// over the cluster it did not watch, and a change made during the
// partition reaches the clients of both. After the heal they find each
// other again, ownership splits again, and their registries converge to
// the same digest. Printed: the time to split, to take over, and to
// converge after the heal.
func TestReplicaPartition(t *testing.T) {
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: threeRegionsN(2)})
	ctx := t.Context()
	workloads := deployEcho(t, f)
	if err := f.Config().PutRemoteSecret(ctx, "remotes", f.Remotes()...); err != nil {
		t.Fatal(err)
	}
	key := gossipKey(t, f)
	links := []*replicaLink{newReplicaLink(t, key), newReplicaLink(t, key)}
	links[1].opts.Args = append(links[1].opts.Args, "--join="+links[0].gossipTCP.Addr())
	hubs := []*framework.Hub{framework.StartTestHub(t, f, links[0].opts), framework.StartTestHub(t, f, links[1].opts)}
	pids := []int{hubs[0].PID(), hubs[1].PID()}

	// members returns the members each hub sees.
	members := func(h *framework.Hub) []string {
		fz, err := h.Federationz(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range fz.Members {
			ids = append(ids, m.ID)
		}
		return ids
	}
	// owned returns the clusters h watches itself (synced, not replicated).
	owned := func(h *framework.Hub) []model.ClusterID {
		rz, err := h.Registryz(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []model.ClusterID
		for _, c := range rz.Clusters {
			if c.State == debugdoc.ClusterSynced {
				ids = append(ids, c.ID)
			}
		}
		return ids
	}
	digests := func() []string {
		var out []string
		for _, h := range hubs {
			rz, err := h.Registryz(ctx)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, rz.Digest)
		}
		return out
	}
	converged := func() error {
		for _, h := range hubs {
			if got := members(h); len(got) != 2 {
				return fmt.Errorf("%s sees members %v", h.ReplicaID(), got)
			}
			if got := owned(h); len(got) != 1 {
				return fmt.Errorf("%s watches %v, want one cluster each", h.ReplicaID(), got)
			}
		}
		if d := digests(); d[0] != d[1] {
			return fmt.Errorf("registry digests differ: %v", d)
		}
		return nil
	}
	testutil.Eventually(t, converge, poll, converged)
	var clients []*framework.XDSConn
	for i, h := range hubs {
		c := clientIn(t, f, h, model.ClusterID(fmt.Sprintf("cluster-%d", 8+i)))
		expectClusters(t, c, 40, "cluster-1", "cluster-2")
		clients = append(clients, c)
	}

	cut := time.Now()
	for _, l := range links {
		l.cut()
	}
	testutil.Eventually(t, converge, poll, func() error {
		for _, h := range hubs {
			if got := members(h); len(got) != 1 {
				return fmt.Errorf("%s still sees %v", h.ReplicaID(), got)
			}
		}
		return nil
	})
	split := time.Since(cut)
	// Each side takes over the cluster it did not watch; until then it
	// serves what it had, and no endpoint disappears meanwhile.
	var takeover time.Duration
	testutil.Eventually(t, converge, poll, func() error {
		for i, h := range hubs {
			clusters, counts, err := servedBy(ctx, clients[i], 40)
			if err != nil {
				return fmt.Errorf("during the partition, via %s: %w", h.ReplicaID(), err)
			}
			if !slices.Equal(clusters, []model.ClusterID{"cluster-1", "cluster-2"}) {
				t.Errorf("during the partition %s's client was served by %v (%v): an endpoint disappeared", h.ReplicaID(), clusters, counts)
			}
			if got := owned(h); len(got) != 2 {
				return fmt.Errorf("%s watches %v, want both clusters", h.ReplicaID(), got)
			}
		}
		takeover = time.Since(cut)
		return nil
	})
	t.Logf("partitioned: each side alone after %v, watching both clusters after %v", split.Round(time.Millisecond), takeover.Round(time.Millisecond))

	// A change during the partition reaches the clients of both sides.
	if err := workloads["cluster-2"].Scale(ctx, 3); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, converge, poll, func() error {
		for i, h := range hubs {
			_, counts, err := servedBy(ctx, clients[i], 60)
			if err != nil {
				return err
			}
			if n := replicasOf(counts, "cluster-2"); n != 3 {
				return fmt.Errorf("via %s %d cluster-2 replicas answer, want 3 (%v)", h.ReplicaID(), n, counts)
			}
		}
		return nil
	})

	healed := time.Now()
	for _, l := range links {
		l.heal(t)
	}
	testutil.Eventually(t, converge, poll, converged)
	t.Logf("healed: together again, one cluster each and registry digest %s on both, %v after the heal",
		digests()[0], time.Since(healed).Round(time.Millisecond))
	for i, h := range hubs {
		m, err := h.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %s", h.ReplicaID(), strings.ReplaceAll(grepLines(m, "meshfed_gossip_rejoins_total{"), "\n", ", "))
		expectClusters(t, clients[i], 40, "cluster-1", "cluster-2")
		if !h.Running() || h.PID() != pids[i] {
			t.Errorf("%s restarted", h.ReplicaID())
		}
	}
}
