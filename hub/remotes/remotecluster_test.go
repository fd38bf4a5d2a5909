package remotes_test

import (
	"context"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/meshfed/meshfed/hub/remotes"
	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/pkg/model"
)

// requestLog records the requests a remote cluster's clients make.
type requestLog struct {
	mu   sync.Mutex
	seen []request
}

type request struct {
	path   string
	watch  bool
	accept string
}

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		l.mu.Lock()
		l.seen = append(l.seen, request{path: req.URL.Path, watch: req.URL.Query().Get("watch") == "true",
			accept: req.Header.Get("Accept")})
		l.mu.Unlock()
		return rt.RoundTrip(req)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// to returns the requests made to path.
func (l *requestLog) to(path string) []request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(l.seen), func(r request) bool { return r.path != path })
}

// noWatchList is the process's feature gates with client-go's
// WatchListClient off, as the hub runs (pkg/kubegates): informers list,
// then watch.
type noWatchList struct{ clientfeatures.Gates }

func (g noWatchList) Enabled(f clientfeatures.Feature) bool {
	return f != clientfeatures.WatchListClient && g.Gates.Enabled(f)
}

// runRemote runs e's apiserver as remote cluster c1 under scope, built by
// NewRemoteCluster with its requests seen by log, and a Watcher that
// publishes it into the store it returns; both stop (and are waited for)
// when the test ends. Informers list and then watch, as in the hub.
func runRemote(t *testing.T, e *env, scope remotes.Scope, log *requestLog) (*store.Store, cluster.Cluster) {
	t.Helper()
	gates := clientfeatures.FeatureGates()
	clientfeatures.ReplaceFeatureGates(noWatchList{gates})
	t.Cleanup(func() { clientfeatures.ReplaceFeatureGates(gates) })

	cfg := rest.CopyConfig(e.cfg.Config)
	cfg.WrapTransport = log.wrap
	status := remotes.NewStatus(clock.RealClock{}, prometheus.NewRegistry())
	status.Set("c1", "istio-system/remotes", remotes.StateSyncing, "") // as the Provider does before the scope
	status.SetScope("c1", scope)
	cl, err := remotes.NewRemoteCluster("c1", cfg, scope, status)
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(store.Options{Self: "test"})
	w := remotes.NewWatcher(remotes.WatcherOptions{Sink: st, Status: status, Log: testr.New(t)})
	ctx, cancel := context.WithCancel(context.Background())
	clusterDone, watcherDone := make(chan error, 1), make(chan error, 1)
	go func() { clusterDone <- cl.Start(ctx) }()
	go func() { watcherDone <- w.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-clusterDone; err != nil {
			t.Errorf("cluster: %v", err)
		}
		<-watcherDone
	})
	if err := w.Engage(ctx, "c1", cl); err != nil {
		t.Fatal(err)
	}
	return st, cl
}

// echoFromPod checks that echo's endpoint carries what only its Pod tells:
// its service account and labels.
func echoFromPod(st *store.Store) func() error {
	return func() error {
		ms := st.Service(echoHost)
		if ms == nil || len(ms.Endpoints) != 1 {
			return fmt.Errorf("merged = %+v", ms)
		}
		if ep := ms.Endpoints[0]; ep.ServiceAccount != "echo-sa" || !ep.Labels.Match(map[string]string{"app": "echo", "version": "v1"}) {
			return fmt.Errorf("endpoint without its Pod's service account and labels: %+v", ep)
		}
		return nil
	}
}

// TestRemoteClientsSpeakProtobuf: every list and watch a remote cluster
// makes of Pods, Services and EndpointSlices asks for protobuf first.
func TestRemoteClientsSpeakProtobuf(t *testing.T) {
	e := startEnv(t)
	e.create(t, workloadObjects()...)
	var log requestLog
	st, _ := runRemote(t, e, remotes.Scope{}, &log)
	eventually(t, "echo published", echoFromPod(st))
	for _, path := range []string{"/api/v1/pods", "/api/v1/services", "/apis/discovery.k8s.io/v1/endpointslices"} {
		var lists, watches int
		var accepts []string
		for _, r := range log.to(path) {
			if !slices.Contains(accepts, r.accept) {
				accepts = append(accepts, r.accept)
			}
			if r.watch {
				watches++
			} else {
				lists++
			}
			first, _, _ := strings.Cut(r.accept, ",")
			if mt, _, err := mime.ParseMediaType(first); err != nil || mt != runtime.ContentTypeProtobuf {
				t.Errorf("%s (watch %v) accepts %q, want %s first", path, r.watch, r.accept, runtime.ContentTypeProtobuf)
			}
		}
		if lists == 0 || watches == 0 {
			t.Errorf("%s: %d lists and %d watches seen, want both", path, lists, watches)
		}
		t.Logf("%s: %d lists, %d watches, Accept %q", path, lists, watches, accepts)
	}
}

// TestPodInformerScope: a cluster whose discovery scope names its
// namespaces watches its Pods in those namespaces only, and its endpoints
// still carry their Pods' service accounts and labels.
func TestPodInformerScope(t *testing.T) {
	e := startEnv(t)
	e.create(t, workloadObjects()...)
	scope, err := remotes.ParseScope("kubernetes.io/metadata.name in (demo)")
	if err != nil {
		t.Fatal(err)
	}
	var log requestLog
	st, _ := runRemote(t, e, scope, &log)
	eventually(t, "echo published", echoFromPod(st))
	if rs := log.to("/api/v1/pods"); len(rs) > 0 {
		t.Errorf("Pods of every namespace requested: %+v", rs)
	}
	var lists, watches int
	for _, r := range log.to("/api/v1/namespaces/demo/pods") {
		if r.watch {
			watches++
		} else {
			lists++
		}
	}
	if lists == 0 || watches == 0 {
		t.Errorf("Pods of demo: %d lists and %d watches, want both", lists, watches)
	}
}

// TestEndpointSliceServiceIndex: a remote cluster's cache finds a
// Service's EndpointSlices by IndexSliceService, without the other
// Services' slices of the namespace.
func TestEndpointSliceServiceIndex(t *testing.T) {
	e := startEnv(t)
	e.create(t, workloadObjects()...)
	for _, o := range serviceIn("demo", "web", "10.1.0.2") {
		if o.GetNamespace() != "" { // demo exists already
			e.create(t, o)
		}
	}
	st, cl := runRemote(t, e, remotes.Scope{}, &requestLog{})
	eventually(t, "echo published", echoFromPod(st))
	eventually(t, "web published", endpointsFrom(st, model.ServiceHostname("web", "demo", ""), "c1"))
	for svc, want := range map[string][]string{"echo": {"echo-1"}, "web": {"web-1"}, "none": nil} {
		var list discoveryv1.EndpointSliceList
		if err := cl.GetCache().List(t.Context(), &list, client.InNamespace("demo"),
			client.MatchingFields{remotes.IndexSliceService: svc}); err != nil {
			t.Fatalf("listing %s's slices by the index: %v", svc, err)
		}
		var got []string
		for _, sl := range list.Items {
			got = append(got, sl.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("slices of %s: %v, want %v", svc, got, want)
		}
	}
}
