package istioconfig

import (
	"encoding/json"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
	"github.com/meshfed/meshfed/pkg/model"
)

// The Gateway API's objects: decoded into their Go types (the apiserver
// has checked them against the CRDs' schemas already), translated by the
// snapshot (istioconfig.GatewayAPIStatus), and given the status the
// Gateway API defines instead of Istio's Reconciled condition: conditions
// of GatewayClasses and Gateways (and a Gateway's listeners), and the
// entry of ControllerName among a route's parents. Another controller's
// conditions and parents are kept.

// evaluateGatewayAPI decodes spec (JSON) of a Gateway API object of kind
// into e.
func evaluateGatewayAPI(e *entry, kind string, spec []byte, u *unstructured.Unstructured) *entry {
	e.apiStatus, _ = u.Object["status"].(map[string]any)
	obj, err := istioconfig.NewGatewayAPIObject(kind, e.meta, spec)
	if g, ok := obj.(*istioconfig.KubeGateway); ok {
		g.Network = u.GetLabels()[model.LabelTopologyNetwork]
	}
	e.obj = obj
	if err != nil {
		e.obj = nil
		e.reason, e.errs = ReasonUndecodable, validate.ErrorList{{Field: "spec", Detail: err.Error()}}
	}
	return e
}

// apiStatusDue reports whether seen, an object's status, differs from what
// meshfed writes of it (want), ignoring lastTransitionTime.
func apiStatusDue(kind string, seen map[string]any, want istioconfig.GatewayAPIStatus) bool {
	var cur istioconfig.GatewayAPIStatus
	if b, err := json.Marshal(seen); err == nil {
		_ = json.Unmarshal(b, &cur)
	}
	switch kind {
	case validate.KindGatewayClass, validate.KindKubeGateway:
		for _, c := range want.Conditions {
			got := metaCondition(cur.Conditions, c.Type)
			if got == nil || !sameCondition(*got, c) {
				return true
			}
		}
		if kind == validate.KindKubeGateway {
			if len(cur.Listeners) != len(want.Listeners) {
				return true
			}
			for i, l := range want.Listeners {
				g := cur.Listeners[i]
				if g.Name != l.Name || g.AttachedRoutes != l.AttachedRoutes || !equality.Semantic.DeepEqual(g.SupportedKinds, l.SupportedKinds) ||
					!sameConditions(g.Conditions, l.Conditions) {
					return true
				}
			}
		}
		return false
	}
	ours := slices.DeleteFunc(slices.Clone(cur.Parents), func(p gwv1.RouteParentStatus) bool {
		return string(p.ControllerName) != istioconfig.ControllerName
	})
	if len(ours) != len(want.Parents) {
		return true
	}
	for i, p := range want.Parents {
		if !equality.Semantic.DeepEqual(ours[i].ParentRef, p.ParentRef) || !sameConditions(ours[i].Conditions, p.Conditions) {
			return true
		}
	}
	return false
}

func metaCondition(cs []metav1.Condition, typ string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == typ {
			return &cs[i]
		}
	}
	return nil
}

func sameCondition(a, b metav1.Condition) bool {
	return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message &&
		a.ObservedGeneration == b.ObservedGeneration
}

func sameConditions(a, b []metav1.Condition) bool {
	return len(a) == len(b) && !slices.ContainsFunc(b, func(c metav1.Condition) bool {
		g := metaCondition(a, c.Type)
		return g == nil || !sameCondition(*g, c)
	})
}

// stamp sets the lastTransitionTime of each condition of want: the one
// seen when its status is the same, else now.
func stamp(want []metav1.Condition, seen []metav1.Condition, now metav1.Time) []metav1.Condition {
	out := slices.Clone(want)
	for i := range out {
		out[i].LastTransitionTime = now
		if g := metaCondition(seen, out[i].Type); g != nil && g.Status == out[i].Status && !g.LastTransitionTime.IsZero() {
			out[i].LastTransitionTime = g.LastTransitionTime
		}
	}
	return out
}

// apiStatusPatch is the JSON merge patch of u's status to want, with u's
// resourceVersion (a stale read conflicts): a GatewayClass's or Gateway's
// conditions of want's types replaced (others kept) and a Gateway's
// listeners; a route's parents of ControllerName replaced (others kept).
func apiStatusPatch(kind string, u *unstructured.Unstructured, want istioconfig.GatewayAPIStatus, now metav1.Time) ([]byte, error) {
	seen, _ := u.Object["status"].(map[string]any)
	var cur istioconfig.GatewayAPIStatus
	if b, err := json.Marshal(seen); err == nil {
		_ = json.Unmarshal(b, &cur)
	}
	status := map[string]any{}
	switch kind {
	case validate.KindGatewayClass, validate.KindKubeGateway:
		conds := slices.DeleteFunc(slices.Clone(cur.Conditions), func(c metav1.Condition) bool {
			return metaCondition(want.Conditions, c.Type) != nil
		})
		conds = append(conds, stamp(want.Conditions, cur.Conditions, now)...)
		status["conditions"] = conds
		if kind == validate.KindKubeGateway {
			ls := make([]gwv1.ListenerStatus, len(want.Listeners))
			for i, l := range want.Listeners {
				var seenConds []metav1.Condition
				for _, c := range cur.Listeners {
					if c.Name == l.Name {
						seenConds = c.Conditions
					}
				}
				l.Conditions = stamp(l.Conditions, seenConds, now)
				ls[i] = l
			}
			status["listeners"] = ls
		}
	default:
		parents := slices.DeleteFunc(slices.Clone(cur.Parents), func(p gwv1.RouteParentStatus) bool {
			return string(p.ControllerName) == istioconfig.ControllerName
		})
		for _, p := range want.Parents {
			var seenConds []metav1.Condition
			for _, c := range cur.Parents {
				if string(c.ControllerName) == istioconfig.ControllerName && equality.Semantic.DeepEqual(c.ParentRef, p.ParentRef) {
					seenConds = c.Conditions
				}
			}
			p.Conditions = stamp(p.Conditions, seenConds, now)
			parents = append(parents, p)
		}
		status["parents"] = parents
	}
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": u.GetResourceVersion()},
		"status":   status,
	})
}
