package remotes_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	"github.com/meshfed/meshfed/hub/remotes"
	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// env is one real kube-apiserver, used both as the config cluster and,
// under several cluster IDs, as the remote clusters.
type env struct {
	cfg        *envtest.Environment
	client     client.Client
	kubeconfig []byte
}

func startEnv(t *testing.T) *env {
	t.Helper()
	e := &envtest.Environment{}
	cfg := testutil.StartAPIServer(t, e)
	user, err := e.AddUser(envtest.User{Name: "meshfed-hub", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	scheme := kruntime.NewScheme()
	_ = corev1.AddToScheme(scheme)
	_ = discoveryv1.AddToScheme(scheme)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return &env{cfg: e, client: c, kubeconfig: kc}
}

func (e *env) create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := e.client.Create(t.Context(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

// hubParts runs a Provider and a Watcher against e as config cluster.
func hubParts(t *testing.T, e *env) (*store.Store, *remotes.Status, context.CancelFunc, <-chan error) {
	return hubPartsWith(t, e, nil)
}

// hubPartsWith is hubParts with a discovery selector of namespaces.
func hubPartsWith(t *testing.T, e *env, selector labels.Selector) (*store.Store, *remotes.Status, context.CancelFunc, <-chan error) {
	return hubPartsOpts(t, e, prometheus.NewRegistry(), func(o *remotes.WatcherOptions) { o.DiscoverySelector = selector })
}

// hubPartsOpts is hubParts with the watcher's options changed by opt and
// the metrics registered on reg. The watcher reconnects clusters through
// the provider, as the hub's does.
func hubPartsOpts(t *testing.T, e *env, reg *prometheus.Registry, opt func(*remotes.WatcherOptions)) (*store.Store, *remotes.Status, context.CancelFunc, <-chan error) {
	t.Helper()
	st := store.New(store.Options{Self: "test"})
	status := remotes.NewStatus(clock.RealClock{}, reg)
	log := testr.NewWithOptions(t, testr.Options{Verbosity: 0})
	p := remotes.NewProvider(remotes.ProviderOptions{Remover: st, Status: status, Log: log})
	wopts := remotes.WatcherOptions{Sink: st, Status: status, Log: log, Reconnect: p.Reconnect}
	opt(&wopts)
	w := remotes.NewWatcher(wopts)
	scheme := kruntime.NewScheme()
	_ = corev1.AddToScheme(scheme)
	mgr, err := mcmanager.New(e.cfg.Config, p, manager.Options{
		Scheme: scheme, Cache: remotes.SecretCacheOptions("istio-system"),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0", Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	p.SetupWithManager(mgr.GetLocalManager())
	if err := mgr.Add(w); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return st, status, cancel, done
}

func remoteSecret(name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "istio-system",
			Labels: map[string]string{"istio/multiCluster": "true"}},
		Data: data,
	}
}

func workloadObjects() []client.Object {
	return []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{
			remotes.LabelRegion: "eu", remotes.LabelZone: "eu-1"}}},
		&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "echo-0", Namespace: "demo",
				Labels: map[string]string{"app": "echo", "version": "v1"}},
			Spec: corev1.PodSpec{NodeName: "n1", ServiceAccountName: "echo-sa",
				Containers: []corev1.Container{{Name: "echo", Image: "echo"}}},
		},
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "demo"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
				{Name: "grpc", Port: 8080, AppProtocol: ptr.To("grpc")}}},
		},
		&discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "echo-1", Namespace: "demo",
				Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](18080)}},
			Endpoints: []discoveryv1.Endpoint{{
				Addresses: []string{"10.1.0.1"}, NodeName: ptr.To("n1"),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "demo", Name: "echo-0"},
			}},
		},
	}
}

func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, testutil.Named(what, cond))
}

const echoHost = model.Hostname("echo.demo.svc.cluster.local")

// TestProviderLifecycle engages clusters from a secret, sees their
// endpoints with locality and service account, replaces a cluster whose
// kubeconfig changed without dropping its endpoints, and removes clusters
// when their secret goes, returning the goroutines and memory they took.
func TestProviderLifecycle(t *testing.T) {
	e := startEnv(t)
	e.create(t, workloadObjects()...)
	st, status, cancel, done := hubParts(t, e)
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()

	clusterIDs := []model.ClusterID{"c1", "c2", "c3", "c4", "c5"}
	data := map[string][]byte{}
	for _, id := range clusterIDs {
		data[string(id)] = e.kubeconfig
	}
	settle := func() (testutil.Goroutines, uint64) {
		var ms runtime.MemStats
		for range 3 {
			runtime.GC()
			time.Sleep(50 * time.Millisecond)
		}
		runtime.ReadMemStats(&ms)
		// The clusters' HTTP clients share client-go's transport cache, whose
		// idle connections (a read loop each, created by the HTTP/2 or
		// HTTP/1 transport's dial) stay pooled until they time out; how
		// many there are depends on how requests raced (a CI run once
		// ended with three more than it began with), not on what the
		// provider kept.
		return testutil.CountGoroutines().Except("(*Transport).newClientConn", "(*Transport).dialConn"), ms.HeapAlloc
	}
	// Warm up once so lazily created process-wide state (HTTP transports,
	// scheme caches) is not counted as a leak.
	cycle := func(i int) {
		sec := remoteSecret("remotes", data)
		e.create(t, sec)
		eventually(t, "clusters synced", func() error {
			ms := st.Service(echoHost)
			if ms == nil || len(ms.Clusters) != len(clusterIDs) {
				return fmt.Errorf("merged service = %+v", ms)
			}
			ep := ms.Endpoints[0]
			if ep.Locality.Region != "eu" || ep.ServiceAccount != "echo-sa" || !ep.Ready || ep.Ports["grpc"] != 18080 ||
				!ep.Labels.Match(map[string]string{"app": "echo", "version": "v1"}) {
				return fmt.Errorf("endpoint = %+v", ep)
			}
			for _, id := range clusterIDs {
				if s, _ := status.Get(id); s.State != remotes.StateSynced {
					return fmt.Errorf("cluster %s: %+v", id, s)
				}
			}
			return nil
		})
		if err := e.client.Delete(t.Context(), sec); err != nil {
			t.Fatal(err)
		}
		eventually(t, fmt.Sprintf("cycle %d: clusters removed", i), func() error {
			if ms := st.Service(echoHost); ms != nil {
				return fmt.Errorf("service still merged from %v", ms.Clusters)
			}
			if n := len(status.Clusters()); n != 0 {
				return fmt.Errorf("%d clusters still in status", n)
			}
			return nil
		})
	}
	cycle(0)
	g0, h0 := settle()
	const cycles = 4
	for i := 1; i <= cycles; i++ {
		cycle(i)
	}
	var g1 testutil.Goroutines
	var h1 uint64
	eventually(t, "goroutines return", func() error {
		g1, h1 = settle()
		if g1.Total() > g0.Total()+2 {
			return fmt.Errorf("goroutines %d after %d add/remove cycles of %d clusters, %d before; grown:\n%s",
				g1.Total(), cycles, len(clusterIDs), g0.Total(), g1.GrownSince(g0))
		}
		return nil
	})
	t.Logf("goroutines %d -> %d, heap %d KiB -> %d KiB over %d cycles", g0.Total(), g1.Total(), h0>>10, h1>>10, cycles)
	// Five clusters with five informers each hold well over 4 MiB; a leak of
	// even one cycle's caches would show.
	if h1 > h0+4<<20 {
		t.Errorf("heap grew from %d KiB to %d KiB over %d cycles", h0>>10, h1>>10, cycles)
	}
}

// TestRotatedKubeconfigKeepsEndpoints: a new kubeconfig for a cluster starts
// a new watch generation; the endpoints stay in the store throughout.
func TestRotatedKubeconfigKeepsEndpoints(t *testing.T) {
	e := startEnv(t)
	e.create(t, workloadObjects()...)
	st, status, cancel, done := hubParts(t, e)
	defer func() { cancel(); <-done }()

	sec := remoteSecret("remotes", map[string][]byte{"c1": e.kubeconfig})
	e.create(t, sec)
	var term uint64
	eventually(t, "c1 synced", func() error {
		cs := st.Clusters()
		if len(cs) != 1 || st.Service(echoHost) == nil {
			return fmt.Errorf("clusters = %+v", cs)
		}
		term = cs[0].Version.Term
		return nil
	})
	user, err := e.cfg.AddUser(envtest.User{Name: "meshfed-hub-rotated", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	sec.Data = map[string][]byte{"c1": rotated}
	if err := e.client.Update(t.Context(), sec); err != nil {
		t.Fatal(err)
	}
	eventually(t, "c1 re-synced", func() error {
		// Checked on every poll: the endpoint must never be missing.
		if ms := st.Service(echoHost); ms == nil || len(ms.Endpoints) != 1 {
			t.Fatalf("endpoint lost during rotation: %+v", ms)
		}
		cs := st.Clusters()
		if cs[0].Version.Term <= term {
			return fmt.Errorf("still term %d", cs[0].Version.Term)
		}
		if s, _ := status.Get("c1"); s.State != remotes.StateSynced {
			return fmt.Errorf("status %+v", s)
		}
		return nil
	})

	// A broken edit keeps the working credentials and says so.
	sec.Data = map[string][]byte{"c1": []byte("not a kubeconfig")}
	if err := e.client.Update(t.Context(), sec); err != nil {
		t.Fatal(err)
	}
	eventually(t, "bad edit reported", func() error {
		s, _ := status.Get("c1")
		if s.State != remotes.StateSynced || s.Error == "" {
			return fmt.Errorf("status %+v", s)
		}
		return nil
	})
	if ms := st.Service(echoHost); ms == nil || len(ms.Endpoints) != 1 {
		t.Fatalf("endpoint lost after a bad edit: %+v", ms)
	}
}

// TestDiscoverySelector: only Services of namespaces matching the selector
// are discovered, and labelling a namespace brings its Services in.
func TestDiscoverySelector(t *testing.T) {
	e := startEnv(t)
	e.create(t, workloadObjects()...)
	st, _, cancel, done := hubPartsWith(t, e, labels.SelectorFromSet(labels.Set{"mesh": "on"}))
	defer func() { cancel(); <-done }()
	e.create(t, remoteSecret("remotes", map[string][]byte{"c1": e.kubeconfig}))
	eventually(t, "c1 synced", func() error {
		if !st.HasCluster("c1") {
			return fmt.Errorf("c1 not published")
		}
		return nil
	})
	if ms := st.Service(echoHost); ms != nil {
		t.Fatalf("service of an unselected namespace discovered: %+v", ms)
	}
	var ns corev1.Namespace
	if err := e.client.Get(t.Context(), client.ObjectKey{Name: "demo"}, &ns); err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{"mesh": "on"}
	if err := e.client.Update(t.Context(), &ns); err != nil {
		t.Fatal(err)
	}
	eventually(t, "labelled namespace discovered", func() error {
		if ms := st.Service(echoHost); ms == nil || len(ms.Endpoints) != 1 {
			return fmt.Errorf("merged = %+v", ms)
		}
		return nil
	})
	ns.Labels = nil
	if err := e.client.Update(t.Context(), &ns); err != nil {
		t.Fatal(err)
	}
	eventually(t, "unlabelled namespace dropped", func() error {
		if ms := st.Service(echoHost); ms != nil {
			return fmt.Errorf("still merged: %+v", ms)
		}
		return nil
	})
}

// TestPodRelabelUpdatesEndpoints: an endpoint carries its Pod's labels, and
// relabelling the Pod (a canary promoted from v1 to v2) updates the shard,
// with no change to the EndpointSlice.
func TestPodRelabelUpdatesEndpoints(t *testing.T) {
	e := startEnv(t)
	e.create(t, workloadObjects()...)
	st, _, cancel, done := hubParts(t, e)
	defer func() { cancel(); <-done }()
	e.create(t, remoteSecret("remotes", map[string][]byte{"c1": e.kubeconfig}))
	// The apiserver's PodTopologyLabels admission copies the Node's
	// topology labels onto a Pod created on it; they are Pod labels like
	// any other (and an update that leaves them out removes them).
	topology := "topology.kubernetes.io/region=eu,topology.kubernetes.io/zone=eu-1"
	labelsAre := func(want string) func() error {
		return func() error {
			ms := st.Service(echoHost)
			if ms == nil || len(ms.Endpoints) != 1 {
				return fmt.Errorf("merged = %+v", ms)
			}
			if got := ms.Endpoints[0].Labels.String(); got != want {
				return fmt.Errorf("labels %q, want %q", got, want)
			}
			return nil
		}
	}
	eventually(t, "pod labels in the registry", labelsAre("app=echo,"+topology+",version=v1"))

	var pod corev1.Pod
	if err := e.client.Get(t.Context(), client.ObjectKey{Namespace: "demo", Name: "echo-0"}, &pod); err != nil {
		t.Fatal(err)
	}
	pod.Labels = map[string]string{"app": "echo", "version": "v2", "track": "canary"}
	if err := e.client.Update(t.Context(), &pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "relabel reaches the registry", labelsAre("app=echo,track=canary,version=v2"))

	pod.Labels = map[string]string{}
	if err := e.client.Update(t.Context(), &pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "labels removed", labelsAre(""))
	if err := e.client.Get(t.Context(), client.ObjectKeyFromObject(&pod), &pod); err != nil || len(pod.Labels) != 0 {
		t.Fatalf("pod labels after removal: %v (%v)", pod.Labels, err)
	}
}
