package istioconfig_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	hubconfig "github.com/meshfed/meshfed/hub/istioconfig"
	"github.com/meshfed/meshfed/hub/monitoring"
	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// crdDir is the hub chart's crds/ directory: the test installs exactly
// what Helm installs.
var crdDir = filepath.Join("..", "..", "remote-charts", "hub", "crds")

const (
	ns      = "demo"
	timeout = 30 * time.Second
	poll    = 20 * time.Millisecond
)

func startAPIServer(t *testing.T) *rest.Config {
	t.Helper()
	return testutil.StartAPIServer(t, &envtest.Environment{CRDDirectoryPaths: []string{crdDir}, ErrorIfCRDPathMissing: true})
}

// fixture is an apiserver with the CRDs, an admin client, and a running
// Watcher.
type fixture struct {
	t   *testing.T
	c   client.Client
	w   *hubconfig.Watcher
	reg *prometheus.Registry

	mu      sync.Mutex
	latest  *istioconfig.Snapshot
	changes int
}

func newClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	_ = corev1.AddToScheme(scheme)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return c
}

func (f *fixture) start(cfg *rest.Config, writeStatus func(istioconfig.Key) bool) {
	f.t.Helper()
	f.reg = prometheus.NewRegistry()
	w, err := hubconfig.New(hubconfig.Options{
		Config: cfg, Log: testr.New(f.t), Registerer: f.reg, WriteStatus: writeStatus,
		OnChange: func(s *istioconfig.Snapshot) {
			f.mu.Lock()
			f.latest, f.changes = s, f.changes+1
			f.mu.Unlock()
		},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.w = w
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- w.Run(ctx) }()
	f.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			f.t.Errorf("Run: %v", err)
		}
	})
}

func (f *fixture) snapshot() (*istioconfig.Snapshot, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.latest, f.changes
}

// object builds an unstructured object of kind in namespace demo.
func object(version, kind, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(validate.GroupOf(kind) + "/" + version)
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func virtualService(name string, hosts []any, route []any) *unstructured.Unstructured {
	return object("v1", "VirtualService", name, map[string]any{
		"hosts": hosts,
		"http":  []any{map[string]any{"route": route}},
	})
}

func route(host string, weight any) map[string]any {
	r := map[string]any{"destination": map[string]any{"host": host}}
	if weight != nil {
		r["weight"] = weight
	}
	return r
}

func (f *fixture) create(objs ...*unstructured.Unstructured) {
	f.t.Helper()
	for _, o := range objs {
		if err := f.c.Create(f.t.Context(), o); err != nil {
			f.t.Fatalf("creating %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

func (f *fixture) get(kind, name string) *unstructured.Unstructured {
	f.t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(validate.GroupOf(kind) + "/v1")
	u.SetKind(kind)
	if err := f.c.Get(f.t.Context(), client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		f.t.Fatalf("reading %s %s: %v", kind, name, err)
	}
	return u
}

// reconciled checks the Reconciled condition and observedGeneration of
// kind/name: status, reason, the generation, and a part of the message.
func (f *fixture) reconciled(kind, name, status, reason, msgPart string) func() error {
	return func() error {
		u := f.get(kind, name)
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		gen := u.GetGeneration()
		for _, c := range conds {
			m := c.(map[string]any)
			if m["type"] != "Reconciled" {
				continue
			}
			og, _ := m["observedGeneration"].(int64)
			top, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
			msg, _ := m["message"].(string)
			if m["status"] != status || m["reason"] != reason || og != gen || top != gen || !strings.Contains(msg, msgPart) {
				return fmt.Errorf("%s %s: condition %v, status.observedGeneration %d; want %s/%s at generation %d with %q",
					kind, name, m, top, status, reason, gen, msgPart)
			}
			if _, err := time.Parse(time.RFC3339, fmt.Sprint(m["lastTransitionTime"])); err != nil {
				return fmt.Errorf("%s %s: lastTransitionTime: %v", kind, name, err)
			}
			return nil
		}
		return fmt.Errorf("%s %s: no Reconciled condition in %v", kind, name, u.Object["status"])
	}
}

const reviews = "reviews.demo.svc.cluster.local"

// TestWatcher runs the watcher against a real kube-apiserver with the
// chart's CRDs, and objects created straight into it (no webhook runs).
func TestWatcher(t *testing.T) {
	cfg := startAPIServer(t)
	f := &fixture{t: t, c: newClient(t, cfg)}

	good := virtualService("reviews", []any{"reviews"}, []any{route("reviews", nil)})
	// Another writer's status (Istio's analysis) must survive ours.
	f.create(good)
	good.Object["status"] = map[string]any{
		"validationMessages": []any{map[string]any{"type": map[string]any{"code": "IST0101"}}},
		"conditions":         []any{map[string]any{"type": "Other", "status": "True"}},
	}
	if err := f.c.Status().Update(t.Context(), good); err != nil {
		t.Fatal(err)
	}
	// A v1alpha3 object is the same object in v1, which the hub reads.
	dr := object("v1alpha3", "DestinationRule", "reviews", map[string]any{
		"host":    "reviews",
		"subsets": []any{map[string]any{"name": "v1", "labels": map[string]any{"version": "v1"}}},
	})
	badWeight := virtualService("ratings", []any{"ratings"}, []any{route("ratings", "ten")})
	noHost := virtualService("details", []any{"details"}, []any{map[string]any{"destination": map[string]any{}}})
	dup := virtualService("reviews-dup", []any{"reviews"}, []any{route("reviews", nil)})
	quiet := virtualService("quiet", []any{"quiet"}, []any{route("quiet", nil)})
	// The security kinds, v1beta1 the same as v1: a valid one, and a DENY
	// without rules, which Istio refuses.
	strict := object("v1beta1", "PeerAuthentication", "default", map[string]any{"mtls": map[string]any{"mode": "STRICT"}})
	denyNothing := object("v1", "AuthorizationPolicy", "deny-nothing", map[string]any{"action": "DENY"})
	// A ServiceEntry of an external host, and one that Istio refuses (two
	// endpoints with DNS_ROUND_ROBIN).
	payments := object("v1", "ServiceEntry", "payments", map[string]any{
		"hosts": []any{"payments.ext.test"}, "resolution": "STATIC",
		"ports":     []any{map[string]any{"number": int64(443), "name": "https", "protocol": "HTTPS"}},
		"endpoints": []any{map[string]any{"address": "10.9.0.1"}},
	})
	twoNames := object("v1", "ServiceEntry", "two-names", map[string]any{
		"hosts": []any{"db.ext.test"}, "resolution": "DNS_ROUND_ROBIN",
		"ports":     []any{map[string]any{"number": int64(5432), "name": "tcp", "protocol": "TCP"}},
		"endpoints": []any{map[string]any{"address": "db-1.ext.test"}, map[string]any{"address": "db-2.ext.test"}},
	})
	f.create(dr, badWeight, noHost, dup, quiet, strict, denyNothing, payments, twoNames)

	var quietWrites atomic.Bool // whether this replica writes quiet's status
	f.start(cfg, func(k istioconfig.Key) bool { return k.Name != "quiet" || quietWrites.Load() })

	// The snapshot holds the valid objects only.
	testutil.Eventually(t, timeout, poll, func() error {
		s, _ := f.snapshot()
		var keys []string
		for _, o := range s.Objects() {
			keys = append(keys, istioconfig.MetaOf(o).Key.String())
		}
		want := "DestinationRule/demo/reviews PeerAuthentication/demo/default ServiceEntry/demo/payments VirtualService/demo/quiet VirtualService/demo/reviews VirtualService/demo/reviews-dup"
		if got := strings.Join(keys, " "); got != want {
			return fmt.Errorf("snapshot objects %v, want %s", keys, want)
		}
		return nil
	})
	s, _ := f.snapshot()
	hc := s.Host(reviews)
	if hc.VirtualService == nil || hc.VirtualService.Name != "reviews" || hc.DestinationRule == nil {
		t.Errorf("host %s: %+v", reviews, hc)
	}
	if e := s.Entry("payments.ext.test"); e == nil || len(e.Endpoints) != 1 || !e.Service.External {
		t.Errorf("payments.ext.test: %+v, want the entry's external service", e)
	}
	if m := s.Workload(ns, model.Labels{}).MTLS(8080, istioconfig.MTLSDisable); m != istioconfig.MTLSStrict {
		t.Errorf("a workload of %s: mode %s, want STRICT from the v1beta1 PeerAuthentication", ns, m)
	}

	// Status: valid ones True, invalid ones False naming the field, the
	// shadowed one naming the older object.
	for _, check := range []func() error{
		f.reconciled("VirtualService", "reviews", "True", "Accepted", ""),
		f.reconciled("DestinationRule", "reviews", "True", "Accepted", ""),
		f.reconciled("VirtualService", "ratings", "False", "Invalid", `spec.http[0].route[0].weight: must be a number, got "ten"`),
		f.reconciled("VirtualService", "details", "False", "Invalid", "spec.http[0].route[0].destination.host: required"),
		f.reconciled("VirtualService", "reviews-dup", "False", "Shadowed", "host "+reviews+" is held by VirtualService/demo/reviews"),
		f.reconciled("PeerAuthentication", "default", "True", "Accepted", ""),
		f.reconciled("AuthorizationPolicy", "deny-nothing", "False", "Invalid", "spec.rules"),
		f.reconciled("ServiceEntry", "payments", "True", "Accepted", ""),
		f.reconciled("ServiceEntry", "two-names", "False", "Invalid", "spec.endpoints: at most one endpoint with resolution DNS_ROUND_ROBIN"),
	} {
		testutil.Eventually(t, timeout, poll, check)
	}
	st, _, _ := unstructured.NestedMap(f.get("VirtualService", "reviews").Object, "status")
	if msgs, _ := st["validationMessages"].([]any); len(msgs) != 1 {
		t.Errorf("validationMessages lost: %v", st)
	}
	if conds, _ := st["conditions"].([]any); len(conds) != 2 || conds[0].(map[string]any)["type"] != "Other" {
		t.Errorf("conditions: want Other kept before Reconciled, got %v", conds)
	}

	// Metrics: one rejection of each reason, the objects by state.
	if err := promtest.GatherAndCompare(f.reg, strings.NewReader(`
# HELP meshfed_config_rejected_total Generations of Istio config objects skipped as invalid, by kind and reason (undecodable, invalid).
# TYPE meshfed_config_rejected_total counter
meshfed_config_rejected_total{kind="AuthorizationPolicy",reason="invalid"} 1
meshfed_config_rejected_total{kind="AuthorizationPolicy",reason="undecodable"} 0
meshfed_config_rejected_total{kind="DestinationRule",reason="invalid"} 0
meshfed_config_rejected_total{kind="DestinationRule",reason="undecodable"} 0
meshfed_config_rejected_total{kind="GRPCRoute",reason="invalid"} 0
meshfed_config_rejected_total{kind="GRPCRoute",reason="undecodable"} 0
meshfed_config_rejected_total{kind="Gateway",reason="invalid"} 0
meshfed_config_rejected_total{kind="Gateway",reason="undecodable"} 0
meshfed_config_rejected_total{kind="GatewayClass",reason="invalid"} 0
meshfed_config_rejected_total{kind="GatewayClass",reason="undecodable"} 0
meshfed_config_rejected_total{kind="HTTPRoute",reason="invalid"} 0
meshfed_config_rejected_total{kind="HTTPRoute",reason="undecodable"} 0
meshfed_config_rejected_total{kind="KubernetesGateway",reason="invalid"} 0
meshfed_config_rejected_total{kind="KubernetesGateway",reason="undecodable"} 0
meshfed_config_rejected_total{kind="PeerAuthentication",reason="invalid"} 0
meshfed_config_rejected_total{kind="PeerAuthentication",reason="undecodable"} 0
meshfed_config_rejected_total{kind="ReferenceGrant",reason="invalid"} 0
meshfed_config_rejected_total{kind="ReferenceGrant",reason="undecodable"} 0
meshfed_config_rejected_total{kind="ServiceEntry",reason="invalid"} 1
meshfed_config_rejected_total{kind="ServiceEntry",reason="undecodable"} 0
meshfed_config_rejected_total{kind="Sidecar",reason="invalid"} 0
meshfed_config_rejected_total{kind="Sidecar",reason="undecodable"} 0
meshfed_config_rejected_total{kind="TLSRoute",reason="invalid"} 0
meshfed_config_rejected_total{kind="TLSRoute",reason="undecodable"} 0
meshfed_config_rejected_total{kind="VirtualService",reason="invalid"} 1
meshfed_config_rejected_total{kind="VirtualService",reason="undecodable"} 1
# HELP meshfed_config_objects Istio config objects held, by kind and state (applied, rejected, shadowed).
# TYPE meshfed_config_objects gauge
meshfed_config_objects{kind="AuthorizationPolicy",state="applied"} 0
meshfed_config_objects{kind="AuthorizationPolicy",state="rejected"} 1
meshfed_config_objects{kind="AuthorizationPolicy",state="shadowed"} 0
meshfed_config_objects{kind="DestinationRule",state="applied"} 1
meshfed_config_objects{kind="DestinationRule",state="rejected"} 0
meshfed_config_objects{kind="DestinationRule",state="shadowed"} 0
meshfed_config_objects{kind="GRPCRoute",state="applied"} 0
meshfed_config_objects{kind="GRPCRoute",state="rejected"} 0
meshfed_config_objects{kind="GRPCRoute",state="shadowed"} 0
meshfed_config_objects{kind="Gateway",state="applied"} 0
meshfed_config_objects{kind="Gateway",state="rejected"} 0
meshfed_config_objects{kind="Gateway",state="shadowed"} 0
meshfed_config_objects{kind="GatewayClass",state="applied"} 0
meshfed_config_objects{kind="GatewayClass",state="rejected"} 0
meshfed_config_objects{kind="GatewayClass",state="shadowed"} 0
meshfed_config_objects{kind="HTTPRoute",state="applied"} 0
meshfed_config_objects{kind="HTTPRoute",state="rejected"} 0
meshfed_config_objects{kind="HTTPRoute",state="shadowed"} 0
meshfed_config_objects{kind="KubernetesGateway",state="applied"} 0
meshfed_config_objects{kind="KubernetesGateway",state="rejected"} 0
meshfed_config_objects{kind="KubernetesGateway",state="shadowed"} 0
meshfed_config_objects{kind="PeerAuthentication",state="applied"} 1
meshfed_config_objects{kind="PeerAuthentication",state="rejected"} 0
meshfed_config_objects{kind="PeerAuthentication",state="shadowed"} 0
meshfed_config_objects{kind="ReferenceGrant",state="applied"} 0
meshfed_config_objects{kind="ReferenceGrant",state="rejected"} 0
meshfed_config_objects{kind="ReferenceGrant",state="shadowed"} 0
meshfed_config_objects{kind="ServiceEntry",state="applied"} 1
meshfed_config_objects{kind="ServiceEntry",state="rejected"} 1
meshfed_config_objects{kind="ServiceEntry",state="shadowed"} 0
meshfed_config_objects{kind="Sidecar",state="applied"} 0
meshfed_config_objects{kind="Sidecar",state="rejected"} 0
meshfed_config_objects{kind="Sidecar",state="shadowed"} 0
meshfed_config_objects{kind="TLSRoute",state="applied"} 0
meshfed_config_objects{kind="TLSRoute",state="rejected"} 0
meshfed_config_objects{kind="TLSRoute",state="shadowed"} 0
meshfed_config_objects{kind="VirtualService",state="applied"} 2
meshfed_config_objects{kind="VirtualService",state="rejected"} 2
meshfed_config_objects{kind="VirtualService",state="shadowed"} 1
`), "meshfed_config_rejected_total", "meshfed_config_objects"); err != nil {
		t.Error(err)
	}

	// /debug/configz, through the hub's monitoring server.
	doc := f.configz()
	if !doc.Synced || doc.Generation < 1 || len(doc.Objects) != 10 {
		t.Fatalf("configz: %+v", doc)
	}
	for name, want := range map[string]hubconfig.State{
		"reviews": hubconfig.StateApplied, "ratings": hubconfig.StateRejected, "details": hubconfig.StateRejected,
		"reviews-dup": hubconfig.StateShadowed, "quiet": hubconfig.StateApplied,
	} {
		if o, ok := doc.Object("VirtualService", ns, name); !ok || o.State != want || o.Generation != 1 {
			t.Errorf("configz VirtualService %s: %+v, want %s at generation 1", name, o, want)
		}
	}
	if o, _ := doc.Object("VirtualService", ns, "ratings"); o.Reason != hubconfig.ReasonUndecodable ||
		len(o.Errors) != 1 || o.Errors[0].Field != "spec.http[0].route[0].weight" {
		t.Errorf("configz ratings: %+v", o)
	}
	if o, _ := doc.Object("VirtualService", ns, "details"); o.Reason != hubconfig.ReasonInvalid ||
		len(o.Errors) != 1 || o.Errors[0].Field != "spec.http[0].route[0].destination.host" {
		t.Errorf("configz details: %+v", o)
	}
	if o, _ := doc.Object("VirtualService", ns, "reviews-dup"); len(o.ShadowedBy) != 1 ||
		o.ShadowedBy[0].Host != reviews || o.ShadowedBy[0].By.Name != "reviews" {
		t.Errorf("configz reviews-dup: %+v", o)
	}

	// No write loop, and no status for an object WriteStatus refuses:
	// nothing is written while nothing changes.
	rv := f.get("VirtualService", "reviews").GetResourceVersion()
	// Every object existed before the watcher started: one snapshot, and
	// the status writes since (events of their own) made no other.
	_, changes := f.snapshot()
	if changes != 1 {
		t.Errorf("OnChange called %d times, want 1: status writes must not make snapshots", changes)
	}
	testutil.Consistently(t, time.Second, 100*time.Millisecond, func() error {
		if got := f.get("VirtualService", "reviews").GetResourceVersion(); got != rv {
			return fmt.Errorf("reviews rewritten: resourceVersion %s → %s", rv, got)
		}
		if st, ok := f.get("VirtualService", "quiet").Object["status"]; ok {
			return fmt.Errorf("quiet has a status although WriteStatus refuses it: %v", st)
		}
		if _, n := f.snapshot(); n != changes {
			return fmt.Errorf("OnChange called %d times more with nothing changed", n-changes)
		}
		return nil
	})

	// When WriteStatus changes its mind, RecheckStatus makes it count.
	quietWrites.Store(true)
	f.w.RecheckStatus()
	testutil.Eventually(t, timeout, poll, f.reconciled("VirtualService", "quiet", "True", "Accepted", ""))

	// A status someone else overwrote is put right.
	tampered := f.get("VirtualService", "reviews")
	tampered.Object["status"].(map[string]any)["conditions"] = []any{map[string]any{
		"type": "Reconciled", "status": "False", "reason": "Tampered", "observedGeneration": int64(1),
	}}
	if err := f.c.Status().Update(t.Context(), tampered); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, timeout, poll, f.reconciled("VirtualService", "reviews", "True", "Accepted", ""))

	// Fixing the invalid object applies it and flips its status.
	fixed := f.get("VirtualService", "details")
	fixed.Object["spec"] = map[string]any{"hosts": []any{"details"}, "http": []any{map[string]any{"route": []any{route("details", nil)}}}}
	if err := f.c.Update(t.Context(), fixed); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, timeout, poll, func() error {
		s, _ := f.snapshot()
		vs := s.Host("details.demo.svc.cluster.local").VirtualService
		if vs == nil || vs.Generation != 2 {
			return fmt.Errorf("details not applied at generation 2: %+v", vs)
		}
		return nil
	})
	testutil.Eventually(t, timeout, poll, f.reconciled("VirtualService", "details", "True", "Accepted", ""))
	if o, _ := f.configz().Object("VirtualService", ns, "details"); o.State != hubconfig.StateApplied || o.Generation != 2 {
		t.Errorf("configz details after the fix: %+v", o)
	}

	// Deleting an object removes it from the snapshot and the document.
	if err := f.c.Delete(t.Context(), f.get("DestinationRule", "reviews")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, timeout, poll, func() error {
		s, _ := f.snapshot()
		if dr := s.Host(reviews).DestinationRule; dr != nil {
			return fmt.Errorf("deleted DestinationRule still applies: %+v", dr.Meta)
		}
		return nil
	})
	if _, ok := f.configz().Object("DestinationRule", ns, "reviews"); ok {
		t.Error("configz still lists the deleted DestinationRule")
	}
}

// configz reads /debug/configz from a monitoring server serving it as the
// hub does.
func (f *fixture) configz() debugdoc.Configz {
	f.t.Helper()
	mon := monitoring.New(monitoring.Options{
		Debug: map[string]func(*http.Request) any{debugdoc.ConfigzName: func(*http.Request) any { return f.w.Configz() }},
	})
	rec := httptest.NewRecorder()
	mon.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, debugdoc.ConfigzPath, nil))
	if rec.Code != http.StatusOK {
		f.t.Fatalf("GET /debug/configz: %d %s", rec.Code, rec.Body)
	}
	var doc debugdoc.Configz
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		f.t.Fatalf("decoding configz: %v\n%s", err, rec.Body)
	}
	return doc
}

// TestWatcherBeforeCRDs: a config cluster without the CRDs is an empty
// configuration, not a hang (istiod's delayed informers): the watcher
// publishes an empty snapshot at once and says in configz which kinds are
// absent; once the CRDs are installed their objects apply without a
// restart; a CRD deleted drops its kind's objects.
func TestWatcherBeforeCRDs(t *testing.T) {
	cfg := testutil.StartAPIServer(t, &envtest.Environment{})
	f := &fixture{t: t, c: newClient(t, cfg)}
	f.start(cfg, nil)
	testutil.Eventually(t, timeout, poll, func() error {
		if !f.w.Synced() {
			return fmt.Errorf("not synced without CRDs")
		}
		return nil
	})
	if got := f.configz().AbsentKinds; !slices.Equal(got, slices.Sorted(slices.Values(istioconfig.Kinds))) {
		t.Errorf("absent kinds %v, want every kind", got)
	}

	crds, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{crdDir}, ErrorIfPathMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	f.create(virtualService("reviews", []any{"reviews"}, []any{route("reviews", nil)}))
	testutil.Eventually(t, timeout, poll, func() error {
		if s, _ := f.snapshot(); s.Host(reviews).VirtualService == nil {
			return fmt.Errorf("reviews not applied")
		}
		return nil
	})
	gatewayAPI := []string{"GRPCRoute", "GatewayClass", "HTTPRoute", "KubernetesGateway", "ReferenceGrant", "TLSRoute"}
	if got := f.configz().AbsentKinds; !slices.Equal(got, gatewayAPI) {
		t.Errorf("absent kinds %v after Istio's CRDs were installed, want the Gateway API's %v", got, gatewayAPI)
	}

	// The VirtualService CRD deleted: its objects go, the kind is absent.
	if len(crds) == 0 {
		t.Fatal("no CRD installed")
	}
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	crd.SetName("virtualservices.networking.istio.io")
	if err := f.c.Delete(t.Context(), crd); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, timeout, poll, func() error {
		if s, _ := f.snapshot(); s.Host(reviews).VirtualService != nil {
			return fmt.Errorf("reviews still applied after its CRD was deleted")
		}
		if got := f.configz().AbsentKinds; !slices.Contains(got, "VirtualService") || len(got) != len(gatewayAPI)+1 {
			return fmt.Errorf("absent kinds %v, want VirtualService besides the Gateway API's", got)
		}
		return nil
	})
}

func TestNewNeedsConfig(t *testing.T) {
	if _, err := hubconfig.New(hubconfig.Options{}); err == nil {
		t.Error("New without Config: no error")
	}
}

// TestWatcherWarnings: a VirtualService naming a Gateway that does not
// exist stays applied, and says so in its status, in /debug/configz and in
// meshfed_config_objects_with_warnings; creating the Gateway clears it.
func TestWatcherWarnings(t *testing.T) {
	cfg := startAPIServer(t)
	f := &fixture{t: t, c: newClient(t, cfg)}
	vs := object("v1", "VirtualService", "edge", map[string]any{
		"hosts":    []any{"edge.example.com"},
		"gateways": []any{"public"},
		"http":     []any{map[string]any{"route": []any{route("reviews", nil)}}},
	})
	f.create(vs)
	f.start(cfg, nil)
	testutil.Eventually(t, timeout, poll, f.reconciled("VirtualService", "edge", "True", hubconfig.ReasonAccepted,
		"spec.gateways[0]: Gateway demo/public does not exist"))
	doc := f.configz()
	if len(doc.Objects) != 1 || len(doc.Objects[0].Warnings) != 1 || doc.Objects[0].State != debugdoc.ConfigApplied {
		t.Errorf("configz %+v", doc.Objects)
	}
	warned := func(n int) error {
		mfs, err := f.reg.Gather()
		if err != nil {
			return err
		}
		for _, mf := range mfs {
			if mf.GetName() != "meshfed_config_objects_with_warnings" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == "VirtualService" {
					if got := int(m.GetGauge().GetValue()); got != n {
						return fmt.Errorf("VirtualServices with warnings: %d, want %d", got, n)
					}
					return nil
				}
			}
		}
		return fmt.Errorf("no meshfed_config_objects_with_warnings{kind=VirtualService}")
	}
	if err := warned(1); err != nil {
		t.Error(err)
	}
	f.create(object("v1", "Gateway", "public", map[string]any{
		"selector": map[string]any{"istio": "ingressgateway"},
		"servers":  []any{map[string]any{"port": map[string]any{"number": int64(80), "name": "http", "protocol": "HTTP"}, "hosts": []any{"*"}}},
	}))
	testutil.Eventually(t, timeout, poll, func() error {
		if o := f.configz().Objects; len(o) != 2 || len(o[1].Warnings) != 0 {
			return fmt.Errorf("configz %+v", o)
		}
		return warned(0)
	})
}
