package istioconfig

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
)

func vsObject(spec any, status map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	if spec != nil {
		u.Object["spec"] = spec
	}
	if status != nil {
		u.Object["status"] = status
	}
	u.SetAPIVersion("networking.istio.io/v1")
	u.SetKind("VirtualService")
	u.SetNamespace("demo")
	u.SetName("reviews")
	u.SetUID("uid-1")
	u.SetGeneration(3)
	u.SetResourceVersion("42")
	u.SetCreationTimestamp(metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
	return u
}

func TestEvaluate(t *testing.T) {
	valid := map[string]any{
		"hosts": []any{"reviews"},
		"http":  []any{map[string]any{"route": []any{map[string]any{"destination": map[string]any{"host": "reviews"}}}}},
	}
	for _, tc := range []struct {
		name   string
		spec   any
		reason string
		field  string
	}{
		{name: "valid", spec: valid},
		{name: "no spec", reason: ReasonUndecodable, field: "spec"},
		{name: "unknown field", spec: map[string]any{"hosts": []any{"reviews"}, "htp": []any{}}, reason: ReasonUndecodable, field: "spec.htp"},
		{name: "wrong type", spec: map[string]any{"hosts": "reviews"}, reason: ReasonUndecodable, field: "spec.hosts"},
		{name: "invalid", spec: map[string]any{"hosts": []any{"reviews"},
			"http": []any{map[string]any{"route": []any{map[string]any{"destination": map[string]any{}}}}}},
			reason: ReasonInvalid, field: "spec.http[0].route[0].destination.host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := evaluate(validate.KindVirtualService, vsObject(tc.spec, nil))
			wantMeta := istioconfig.Meta{
				Key:        istioconfig.Key{Kind: "VirtualService", Namespace: "demo", Name: "reviews"},
				Generation: 3, Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
			}
			if !reflect.DeepEqual(e.meta, wantMeta) || e.uid != "uid-1" {
				t.Errorf("meta %+v uid %q", e.meta, e.uid)
			}
			if tc.reason == "" {
				vs, ok := e.obj.(*istioconfig.VirtualService)
				if !ok || vs.Meta != wantMeta || vs.Spec.GetHosts()[0] != "reviews" || len(e.errs) != 0 {
					t.Fatalf("valid object: %+v, errors %v", e.obj, e.errs)
				}
				return
			}
			if e.obj != nil || e.reason != tc.reason || len(e.errs) == 0 || e.errs[0].Field != tc.field {
				t.Errorf("got obj %v reason %q errors %v; want reason %q at %s", e.obj, e.reason, e.errs, tc.reason, tc.field)
			}
		})
	}
}

func TestDesired(t *testing.T) {
	rejected := &entry{meta: istioconfig.Meta{Generation: 4}, reason: ReasonInvalid,
		errs: validate.ErrorList{{Field: "spec.a", Detail: "required"}, {Field: "spec.b", Detail: "bad"}}}
	applied := &entry{meta: istioconfig.Meta{Generation: 2}, obj: &istioconfig.VirtualService{}}
	lost := []istioconfig.Shadowed{{Host: "reviews.demo.svc.cluster.local",
		By: istioconfig.Key{Kind: "VirtualService", Namespace: "demo", Name: "old"}}}
	for _, tc := range []struct {
		name     string
		e        *entry
		lost     []istioconfig.Shadowed
		warnings []string
		state    State
		want     condition
	}{
		{"rejected", rejected, nil, nil, StateRejected,
			condition{"False", ReasonConditionInvalid, "spec.a: required; spec.b: bad", 4}},
		{"applied", applied, nil, nil, StateApplied, condition{"True", ReasonAccepted, "", 2}},
		{"applied with warnings", applied, nil, []string{"spec.gateways[0]: x", "spec.gateways[1]: y"}, StateApplied,
			condition{"True", ReasonAccepted, "spec.gateways[0]: x; spec.gateways[1]: y", 2}},
		{"shadowed", applied, lost, nil, StateShadowed, condition{"False", ReasonShadowed,
			"host reviews.demo.svc.cluster.local is held by VirtualService/demo/old, an older object", 2}},
	} {
		if s := tc.e.state(tc.lost); s != tc.state {
			t.Errorf("%s: state %s, want %s", tc.name, s, tc.state)
		}
		if got := tc.e.desired(tc.lost, tc.warnings); got != tc.want {
			t.Errorf("%s: desired %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestNeedsWrite(t *testing.T) {
	want := condition{"True", ReasonAccepted, "", 2}
	for _, tc := range []struct {
		name string
		seen carried
		need bool
	}{
		{"none", carried{}, true},
		{"same", carried{cond: &condition{"True", ReasonAccepted, "", 2}, observedGeneration: 2}, false},
		{"old generation", carried{cond: &condition{"True", ReasonAccepted, "", 1}, observedGeneration: 2}, true},
		{"top-level generation", carried{cond: &condition{"True", ReasonAccepted, "", 2}, observedGeneration: 1}, true},
		{"other message", carried{cond: &condition{"True", ReasonAccepted, "x", 2}, observedGeneration: 2}, true},
	} {
		if got := tc.seen.needsWrite(want); got != tc.need {
			t.Errorf("%s: needsWrite %v, want %v", tc.name, got, tc.need)
		}
	}
}

// TestCarriedOf reads integers in every form a writer may have used,
// Istio's protojson strings among them.
func TestCarriedOf(t *testing.T) {
	u := vsObject(map[string]any{}, map[string]any{
		"observedGeneration": "3",
		"conditions": []any{
			map[string]any{"type": "Other", "status": "False"},
			map[string]any{"type": "Reconciled", "status": "True", "reason": "Accepted", "message": "m", "observedGeneration": int64(3)},
		},
	})
	got := carriedOf(u)
	want := carried{cond: &condition{"True", "Accepted", "m", 3}, observedGeneration: 3}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("carriedOf = %+v (%+v), want %+v", got, got.cond, want)
	}
	if c := carriedOf(vsObject(map[string]any{}, nil)); c.cond != nil || c.observedGeneration != 0 {
		t.Errorf("no status: %+v", c)
	}
}

func TestStatusPatch(t *testing.T) {
	other := map[string]any{"type": "Other", "status": "True"}
	old := map[string]any{"type": "Reconciled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
	dupe := map[string]any{"type": "Reconciled", "status": "False"}
	status := map[string]any{"validationMessages": []any{"keep"}, "conditions": []any{old, other, dupe}}
	const now = "2026-02-02T00:00:00Z"

	decode := func(b []byte) map[string]any {
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	// Same status: the transition time stays; the condition stays first;
	// the duplicate goes; validationMessages is not in the patch at all.
	b, err := statusPatch(vsObject(map[string]any{}, status), condition{"True", ReasonAccepted, "", 3}, now)
	if err != nil {
		t.Fatal(err)
	}
	want := decode([]byte(`{"metadata":{"resourceVersion":"42"},"status":{"observedGeneration":3,"conditions":[
		{"type":"Reconciled","status":"True","reason":"Accepted","message":"","observedGeneration":3,"lastTransitionTime":"2026-01-01T00:00:00Z"},
		{"type":"Other","status":"True"}]}}`))
	if got := decode(b); !reflect.DeepEqual(got, want) {
		t.Errorf("patch\n%s\nwant\n%v", b, want)
	}
	// A flip stamps now.
	b, _ = statusPatch(vsObject(map[string]any{}, status), condition{"False", ReasonConditionInvalid, "spec: x", 3}, now)
	if !strings.Contains(string(b), `"lastTransitionTime":"`+now+`"`) {
		t.Errorf("flipped condition keeps its old transition time: %s", b)
	}
	// No status yet: the condition is appended.
	b, _ = statusPatch(vsObject(map[string]any{}, nil), condition{"True", ReasonAccepted, "", 1}, now)
	got := decode(b)["status"].(map[string]any)["conditions"].([]any)
	if len(got) != 1 || got[0].(map[string]any)["lastTransitionTime"] != now {
		t.Errorf("first condition: %s", b)
	}
}

func TestJoinBounded(t *testing.T) {
	if got := joinBounded([]string{"a", "b"}); got != "a; b" {
		t.Errorf("joinBounded = %q", got)
	}
	long := strings.Repeat("x", maxMessage/2-10) // two fit, a third does not
	got := joinBounded([]string{long, long, long, "y"})
	if len(got) > maxMessage+32 || !strings.HasSuffix(got, "; and 2 more") {
		t.Errorf("joinBounded of long parts: %d bytes, ends %q", len(got), got[len(got)-20:])
	}
}
