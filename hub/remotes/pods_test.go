package remotes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unique"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/pkg/model"
)

// TestPodTransform: a Pod enters the Pod informer's store as a podInfo
// holding what the registry reads, keyed as client-go keys Pods; a
// tombstone's Pod too; a podInfo passes unchanged.
func TestPodTransform(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "p", ResourceVersion: "42",
			Labels:      map[string]string{"app": "echo", "version": "v1"},
			Annotations: map[string]string{"big": "dropped"}},
		Spec:   corev1.PodSpec{ServiceAccountName: "sa", NodeName: "n1", Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{PodIP: "10.0.0.1"},
	}
	out, err := podTransform(pod)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := out.(*podInfo)
	if !ok {
		t.Fatalf("transformed to %T, want *podInfo", out)
	}
	want := podInfo{name: "p", resourceVersion: "42", labels: model.NewLabels(pod.Labels),
		shared: unique.Make(podShared{namespace: "demo", serviceAccount: "sa"})}
	if *p != want {
		t.Errorf("podInfo = %+v, want %+v", *p, want)
	}
	if key, err := toolscache.DeletionHandlingMetaNamespaceKeyFunc(p); err != nil || key != "demo/p" {
		t.Errorf("key = %q, %v", key, err)
	}
	if again, _ := podTransform(p); again != p {
		t.Errorf("a podInfo transformed again: %v", again)
	}
	if c := p.DeepCopyObject().(*podInfo); c == p || *c != *p {
		t.Errorf("deep copy %p %+v of %p", c, c, p)
	}
	if p.GetObjectKind().GroupVersionKind() != (schema.GroupVersionKind{}) {
		t.Errorf("kind %v", p.GetObjectKind().GroupVersionKind())
	}

	tomb, _ := podTransform(toolscache.DeletedFinalStateUnknown{Key: "demo/p", Obj: pod})
	if got := podOf(tomb); got == nil || *got != want {
		t.Errorf("tombstone = %+v", tomb)
	}
}

// TestPodInfoHeap: a podInfo (~100 B with its name and resource version)
// costs a fraction of the stripped *corev1.Pod the cluster cache held per
// Pod before (~1.6–2 KB; 1,192 bytes for the struct alone).
func TestPodInfoHeap(t *testing.T) {
	per := retainedPerPod(5_000)
	t.Logf("retained %.0f B per Pod", per)
	if per > 200 {
		t.Errorf("a Pod in the store retains %.0f B, want at most 200", per)
	}
}

// BenchmarkPodInfoHeap measures the heap a Pod keeps in the Pod informer's
// store (its podInfo, without the store's own entry): six labels of an
// Istio-injected Deployment. Figures: retained-B/pod.
func BenchmarkPodInfoHeap(b *testing.B) {
	var per float64
	for b.Loop() {
		per = retainedPerPod(5_000)
	}
	b.ReportMetric(per, "retained-B/pod")
}

// retainedPerPod returns the live heap per podInfo of n transformed Pods,
// every string of each decoded afresh, as an apiserver's answer is.
func retainedPerPod(n int) float64 {
	newPod := func(i int) *corev1.Pod {
		s := func(v string) string { return strings.Clone(v) }
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("echo-7d9f8c-%05d", i), Namespace: s("demo"),
				ResourceVersion: fmt.Sprint(1000 + i), UID: types.UID(fmt.Sprintf("uid-%032d", i)),
				Labels: map[string]string{s("app"): s("echo"), s("version"): s("v1"), s("pod-template-hash"): s("7d9f8c"),
					s("security.istio.io/tlsMode"): s("istio"), s("service.istio.io/canonical-name"): s("echo"),
					s("service.istio.io/canonical-revision"): s("v1")},
				Annotations: map[string]string{s("sidecar.istio.io/status"): s(strings.Repeat("x", 200))}},
			Spec: corev1.PodSpec{ServiceAccountName: s("echo"), NodeName: s("node-1"),
				Containers: []corev1.Container{{Name: s("echo"), Image: s("echo:1")}}},
			Status: corev1.PodStatus{PodIP: fmt.Sprintf("10.0.%d.%d", i/256, i%256), Phase: corev1.PodRunning},
		}
	}
	before := liveHeap()
	kept := make([]any, n)
	for i := range kept {
		kept[i], _ = podTransform(newPod(i))
	}
	per := (float64(liveHeap()) - float64(before)) / float64(n)
	runtime.KeepAlive(kept)
	return per
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestPodServiceIndex: a Pod of one Service of its namespace costs one
// entry of podSvc and nothing else; a Pod of several lists each once; a
// deleted Pod's links go.
func TestPodServiceIndex(t *testing.T) {
	cw := &clusterWatch{
		podSvc:  map[string]map[string]string{},
		podMore: map[types.NamespacedName][]types.NamespacedName{},
		nodSvc:  map[string]map[types.NamespacedName]struct{}{},
	}
	nn := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "demo", Name: name} }
	a, b, c := nn("svc-a"), nn("svc-b"), nn("svc-c")
	for i := range 100 {
		cw.index(a, []types.NamespacedName{nn(fmt.Sprint("a-", i))}, []string{"n1"})
	}
	cw.index(a, []types.NamespacedName{nn("a-0")}, nil) // again: no change
	if len(cw.podSvc["demo"]) != 100 || len(cw.podMore) != 0 {
		t.Fatalf("100 Pods of one service: %d entries, %d overflows", len(cw.podSvc["demo"]), len(cw.podMore))
	}
	shared := nn("shared")
	cw.index(a, []types.NamespacedName{shared}, nil)
	cw.index(b, []types.NamespacedName{shared}, nil)
	cw.index(c, []types.NamespacedName{shared}, nil)
	cw.index(b, []types.NamespacedName{shared}, nil)
	cw.index(a, []types.NamespacedName{shared}, nil)
	if got := cw.podServices(shared, false); !slices.Equal(got, []types.NamespacedName{a, b, c}) {
		t.Errorf("services of a shared Pod: %v", got)
	}
	if got := cw.podServices(nn("a-7"), false); !slices.Equal(got, []types.NamespacedName{a}) {
		t.Errorf("services of a-7: %v", got)
	}
	if got := cw.podServices(nn("unknown"), false); got != nil {
		t.Errorf("services of an unknown Pod: %v", got)
	}
	if got := cw.podServices(shared, true); len(got) != 3 {
		t.Errorf("services of the deleted shared Pod: %v", got)
	}
	if got := cw.podServices(shared, false); got != nil || len(cw.podMore) != 0 {
		t.Errorf("a deleted Pod's links stay: %v, overflow %v", got, cw.podMore)
	}
	// A Pod backing a Service of another namespace.
	other := types.NamespacedName{Namespace: "other", Name: "svc-x"}
	cw.index(other, []types.NamespacedName{nn("a-1")}, nil)
	if got := cw.podServices(nn("a-1"), false); !slices.Equal(got, []types.NamespacedName{a, other}) {
		t.Errorf("services of a-1: %v", got)
	}
	for i := range 100 {
		cw.podServices(nn(fmt.Sprint("a-", i)), true)
	}
	if len(cw.podSvc) != 0 || len(cw.podMore) != 0 {
		t.Errorf("links left after every Pod went: %v %v", cw.podSvc, cw.podMore)
	}
}

// TestWatchErrorHandler: a failed watch (of the Pod informers as of the
// cache's) marks the cluster unreachable and is counted; a routine end of
// a watch, or one of a stopping cluster, is not.
func TestWatchErrorHandler(t *testing.T) {
	reg := prometheus.NewRegistry()
	st := NewStatus(clock.RealClock{}, reg)
	st.Set("c1", "s", StateSynced, "")
	h := watchErrorHandler("c1", st)
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	h(context.Background(), nil, io.EOF)
	h(context.Background(), nil, apierrors.NewResourceExpired("too old"))
	h(stopped, nil, errors.New("connection refused"))
	if s, _ := st.Get("c1"); s.State != StateSynced {
		t.Fatalf("a routine watch end changed the state: %+v", s)
	}
	h(context.Background(), nil, errors.New("connection refused"))
	if s, _ := st.Get("c1"); s.State != StateUnreachable || !strings.Contains(s.Error, "connection refused") {
		t.Errorf("after a failed watch: %+v", s)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var counted float64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == ReasonWatchError {
					counted += m.GetCounter().GetValue()
				}
			}
		}
	}
	if counted != 1 {
		t.Errorf("watch errors counted: %v, want 1", counted)
	}
}
