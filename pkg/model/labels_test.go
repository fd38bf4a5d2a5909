package model_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/meshfed/meshfed/pkg/model"
)

func TestLabelsInterningSharesStorage(t *testing.T) {
	// Two maps built apart, with strings of their own, as two Pods of one
	// Deployment decode.
	a := model.NewLabels(map[string]string{"app": "echo", "version": strings.Clone("v1")})
	b := model.NewLabels(map[string]string{strings.Clone("version"): "v1", "app": strings.Clone("echo")})
	if a != b || !a.Equal(b) {
		t.Fatalf("equal sets not equal: %v vs %v", a, b)
	}
	va, _ := a.Get("version")
	vb, _ := b.Get("version")
	if unsafe.StringData(va) != unsafe.StringData(vb) {
		t.Errorf("the two sets hold separate copies of their values")
	}
	if c := model.NewLabels(map[string]string{"app": "echo", "version": "v2"}); c == a {
		t.Errorf("different sets compare equal")
	}
	if model.NewLabels(nil) != (model.Labels{}) || model.NewLabels(map[string]string{}) != (model.Labels{}) {
		t.Errorf("empty sets are not the zero Labels")
	}
	if !(model.Labels{}).IsZero() || a.IsZero() {
		t.Errorf("IsZero wrong")
	}
}

func TestLabelsGetAndAll(t *testing.T) {
	in := map[string]string{"b": "2", "a": "1", "c": "", "topology.istio.io/cluster": "c1", "odd\x00key": "\x80\xff"}
	l := model.NewLabels(in)
	if l.Len() != len(in) {
		t.Errorf("Len = %d, want %d", l.Len(), len(in))
	}
	var keys []string
	for k, v := range l.All() {
		keys = append(keys, k)
		if in[k] != v {
			t.Errorf("All yields %q=%q, want %q", k, v, in[k])
		}
	}
	if got, want := strings.Join(keys, " "), "a b c odd\x00key topology.istio.io/cluster"; got != want {
		t.Errorf("All keys = %q, want %q (sorted)", got, want)
	}
	for k, want := range in {
		if v, ok := l.Get(k); !ok || v != want {
			t.Errorf("Get(%q) = %q, %v; want %q", k, v, ok, want)
		}
	}
	for _, k := range []string{"", "0", "aa", "d", "zzz"} {
		if v, ok := l.Get(k); ok {
			t.Errorf("Get(%q) = %q, true; want absent", k, v)
		}
	}
	if !maps.Equal(l.Map(), in) {
		t.Errorf("Map = %v, want %v", l.Map(), in)
	}
	if (model.Labels{}).Map() != nil {
		t.Errorf("Map of the empty set is not nil")
	}
	if got := model.NewLabels(map[string]string{"version": "v1", "app": "echo"}).String(); got != "app=echo,version=v1" {
		t.Errorf("String = %q", got)
	}
	// A long value needs a multi-byte length.
	long := strings.Repeat("x", 300)
	if v, _ := model.NewLabels(map[string]string{"k": long, "z": "1"}).Get("z"); v != "1" {
		t.Errorf("Get after a 300-byte value = %q", v)
	}
}

func TestLabelsMatch(t *testing.T) {
	l := model.NewLabels(map[string]string{"app": "echo", "version": "v1", "empty": ""})
	for _, tc := range []struct {
		sel  map[string]string
		want bool
	}{
		{nil, true},
		{map[string]string{}, true},
		{map[string]string{"version": "v1"}, true},
		{map[string]string{"version": "v1", "app": "echo"}, true},
		{map[string]string{"empty": ""}, true},
		{map[string]string{"version": "v2"}, false},
		{map[string]string{"version": "v1", "app": "other"}, false},
		{map[string]string{"missing": ""}, false}, // absent is not empty
		{map[string]string{"Version": "v1"}, false},
	} {
		if got := l.Match(tc.sel); got != tc.want {
			t.Errorf("Match(%v) = %v, want %v", tc.sel, got, tc.want)
		}
	}
	if (model.Labels{}).Match(map[string]string{"app": "echo"}) {
		t.Errorf("the empty set matches a non-empty selector")
	}
	if !(model.Labels{}).Match(nil) {
		t.Errorf("the empty set does not match the empty selector")
	}
}

func TestLabelsJSON(t *testing.T) {
	ep := model.Endpoint{Cluster: "c1", Labels: model.NewLabels(map[string]string{"version": "v1", "app": `e"cho`})}
	data, err := json.Marshal(ep)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"labels":{"app":"e\"cho","version":"v1"}`) {
		t.Errorf("labels not an object in key order: %s", data)
	}
	var back model.Endpoint
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.Labels != ep.Labels {
		t.Errorf("round trip: %v, want %v", back.Labels, ep.Labels)
	}
	// No labels: the field is left out, and null or absent reads as empty.
	data, _ = json.Marshal(model.Endpoint{Cluster: "c1"})
	if strings.Contains(string(data), "labels") {
		t.Errorf("empty labels written: %s", data)
	}
	for _, in := range []string{`{"labels":null}`, `{}`, `{"labels":{}}`} {
		var e model.Endpoint
		if err := json.Unmarshal([]byte(in), &e); err != nil || !e.Labels.IsZero() {
			t.Errorf("%s: labels %v, err %v", in, e.Labels, err)
		}
	}
	var e model.Endpoint
	if err := json.Unmarshal([]byte(`{"labels":{"a":1}}`), &e); err == nil {
		t.Errorf("a non-string label value was accepted")
	}
}

func TestEndpointEqualComparesLabels(t *testing.T) {
	a := model.Endpoint{Cluster: "c1", Labels: model.NewLabels(map[string]string{"version": "v1"})}
	b := a
	if !a.Equal(&b) {
		t.Fatalf("copies differ")
	}
	b.Labels = model.NewLabels(map[string]string{"version": "v2"})
	if a.Equal(&b) {
		t.Errorf("endpoints with different labels are equal")
	}
}

// podLabels returns the labels of a Pod of Deployment d, with strings of
// their own as an informer decodes them: the six labels an Istio-injected
// Deployment's Pods carry.
func podLabels(d int) map[string]string {
	app := fmt.Sprintf("service-%d", d)
	return map[string]string{
		strings.Clone("app"):                                 app,
		strings.Clone("version"):                             strings.Clone("v1"),
		strings.Clone("pod-template-hash"):                   fmt.Sprintf("7d%06x", d*7919),
		strings.Clone("security.istio.io/tlsMode"):           strings.Clone("istio"),
		strings.Clone("service.istio.io/canonical-name"):     strings.Clone(app),
		strings.Clone("service.istio.io/canonical-revision"): strings.Clone("v1"),
	}
}

// heapAfterGC returns the live heap.
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkLabelsMemory measures the heap that 10,000 endpoints of 5
// Deployments keep for their labels: interned Labels (one pointer per
// endpoint, one encoding per Deployment) against a map per endpoint (what
// keeping each Pod's label map, or decoding one per endpoint from a peer,
// would hold). Figures: retained-B/endpoint.
func BenchmarkLabelsMemory(b *testing.B) {
	const endpoints, sets = 10_000, 5
	b.Run("interned", func(b *testing.B) {
		var per float64
		for b.Loop() {
			before := heapAfterGC()
			eps := make([]model.Labels, endpoints)
			for i := range eps {
				eps[i] = model.NewLabels(podLabels(i % sets))
			}
			per = float64(heapAfterGC()-before) / endpoints
			runtime.KeepAlive(eps)
		}
		b.ReportMetric(per, "retained-B/endpoint")
	})
	b.Run("map", func(b *testing.B) {
		var per float64
		for b.Loop() {
			before := heapAfterGC()
			eps := make([]map[string]string, endpoints)
			for i := range eps {
				eps[i] = podLabels(i % sets)
			}
			per = float64(heapAfterGC()-before) / endpoints
			runtime.KeepAlive(eps)
		}
		b.ReportMetric(per, "retained-B/endpoint")
	})
}

// BenchmarkLabelsMatch compares a subset selector's match against interned
// Labels and against a map.
func BenchmarkLabelsMatch(b *testing.B) {
	m := podLabels(3)
	l := model.NewLabels(m)
	sel := map[string]string{"app": "service-3", "version": "v1"}
	b.Run("interned", func(b *testing.B) {
		for b.Loop() {
			if !l.Match(sel) {
				b.Fatal("no match")
			}
		}
	})
	b.Run("map", func(b *testing.B) {
		for b.Loop() {
			for k, v := range sel {
				if m[k] != v {
					b.Fatal("no match")
				}
			}
		}
	})
}

// BenchmarkNewLabels is the cost of interning a Pod's labels, paid per
// endpoint each time a watcher recomputes a shard or a peer frame arrives.
func BenchmarkNewLabels(b *testing.B) {
	m := podLabels(3)
	model.NewLabels(m)
	b.ReportAllocs()
	for b.Loop() {
		model.NewLabels(m)
	}
}

// FuzzLabelsJSON: any JSON object of strings reads as the set of its pairs,
// and writing it back reads as the very same set.
func FuzzLabelsJSON(f *testing.F) {
	f.Add([]byte(`{"app":"echo","version":"v1"}`))
	f.Add([]byte(`{"":"","\u0000":"\u00ff"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var l model.Labels
		if err := json.Unmarshal(data, &l); err != nil {
			return
		}
		var m map[string]string
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("Labels accepted what a map refuses: %s", data)
		}
		if len(m) == 0 {
			m = nil
		}
		if !maps.Equal(l.Map(), m) || l.Len() != len(m) {
			t.Fatalf("%s: labels %v, map %v", data, l.Map(), m)
		}
		for k, v := range m {
			if got, ok := l.Get(k); !ok || got != v {
				t.Fatalf("Get(%q) = %q, %v; want %q", k, got, ok, v)
			}
		}
		out, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		var back model.Labels
		if err := json.Unmarshal(out, &back); err != nil || back != l {
			t.Fatalf("%s: written as %s, read back as %v (%v)", data, out, back, err)
		}
	})
}
