package istioconfig

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
)

// Reasons an object is rejected: the reason label of
// meshfed_config_rejected_total and Configz's reason.
const (
	// ReasonUndecodable: the spec is missing, or has an unknown field or a
	// value of the wrong JSON type (validate.DecodeSpec refused it).
	ReasonUndecodable = "undecodable"
	// ReasonInvalid: the spec decodes but validate.Spec refused it.
	ReasonInvalid = "invalid"
)

// State is what the hub does with an object (the state /debug/configz
// shows).
type State = debugdoc.ConfigState

// The states of an object.
const (
	StateApplied  = debugdoc.ConfigApplied
	StateRejected = debugdoc.ConfigRejected
	StateShadowed = debugdoc.ConfigShadowed
)

// States lists every State.
var States = []State{StateApplied, StateRejected, StateShadowed}

// The Reconciled condition the hub writes in each object's status.
const (
	ConditionReconciled = "Reconciled"

	// ReasonAccepted: status True, the object is applied.
	ReasonAccepted = "Accepted"
	// ReasonConditionInvalid: status False, the object is refused.
	ReasonConditionInvalid = "Invalid"
	// ReasonShadowed: status False, an older object holds a host of it.
	ReasonShadowed = "Shadowed"
)

// maxMessage bounds a condition's message: an object with thousands of
// errors must not make its status larger than the object.
const maxMessage = 4096

// entry is what the watcher holds of one object, at one generation.
// Entries are replaced, never modified, once the loop has published them.
type entry struct {
	meta istioconfig.Meta
	uid  types.UID
	// obj is the valid object, nil when rejected. Its pointer stays the
	// same while the generation does, so snapshots compare by identity.
	obj    istioconfig.Object
	reason string // ReasonUndecodable or ReasonInvalid when rejected
	errs   validate.ErrorList
	// notes say what of a valid object a proxy kind does not get
	// (xdsgen.ConfigNotes), once per generation.
	notes []string
	// seen is the status the object carried when last read.
	seen carried
	// apiStatus is the whole status a Gateway API object carried when
	// last read (its shape is the Gateway API's, not Istio's).
	apiStatus map[string]any
}

// carried is the part of an object's status the hub compares.
type carried struct {
	// cond is the Reconciled condition, nil when there is none.
	cond *condition
	// observedGeneration is status.observedGeneration.
	observedGeneration int64
}

// condition is a Reconciled condition, lastTransitionTime aside.
type condition struct {
	Status             string
	Reason             string
	Message            string
	ObservedGeneration int64
}

// evaluate decodes and validates u, an object of kind, into an entry.
func evaluate(kind string, u *unstructured.Unstructured) *entry {
	e := &entry{
		meta: istioconfig.Meta{
			Key:        istioconfig.Key{Kind: kind, Namespace: u.GetNamespace(), Name: u.GetName()},
			Generation: u.GetGeneration(),
			Created:    u.GetCreationTimestamp().UTC(),
		},
		uid:  u.GetUID(),
		seen: carriedOf(u),
	}
	spec, ok := u.Object["spec"]
	if !ok || spec == nil {
		e.reason, e.errs = ReasonUndecodable, validate.ErrorList{{Field: "spec", Detail: "required"}}
		return e
	}
	raw, err := json.Marshal(spec)
	if err != nil { // cannot happen for what the apiserver sent as JSON
		e.reason, e.errs = ReasonUndecodable, validate.ErrorList{{Field: "spec", Detail: err.Error()}}
		return e
	}
	if validate.IsGatewayAPI(kind) {
		return evaluateGatewayAPI(e, kind, raw, u)
	}
	msg, errs := validate.DecodeSpec(kind, raw)
	if len(errs) > 0 {
		e.reason, e.errs = ReasonUndecodable, errs
		return e
	}
	if errs := validate.Spec(msg); len(errs) > 0 {
		e.reason, e.errs = ReasonInvalid, errs
		return e
	}
	switch m := msg.(type) {
	case *networking.VirtualService:
		e.obj = &istioconfig.VirtualService{Meta: e.meta, Spec: m}
	case *networking.DestinationRule:
		e.obj = &istioconfig.DestinationRule{Meta: e.meta, Spec: m}
	case *networking.Sidecar:
		e.obj = &istioconfig.Sidecar{Meta: e.meta, Spec: m}
	case *networking.Gateway:
		e.obj = &istioconfig.Gateway{Meta: e.meta, Spec: m}
	case *networking.ServiceEntry:
		e.obj = &istioconfig.ServiceEntry{Meta: e.meta, Spec: m}
	case *security.PeerAuthentication:
		e.obj = &istioconfig.PeerAuthentication{Meta: e.meta, Spec: m}
	case *security.AuthorizationPolicy:
		e.obj = &istioconfig.AuthorizationPolicy{Meta: e.meta, Spec: m}
	default:
		e.reason = ReasonUndecodable
		e.errs = validate.ErrorList{{Field: "kind", Detail: fmt.Sprintf("%s is not applied by the hub", kind)}}
	}
	return e
}

// sameVersion reports whether u is the version e was evaluated from: the
// same object (UID) at the same generation, hence the same spec.
func (e *entry) sameVersion(u *unstructured.Unstructured) bool {
	return e.uid == u.GetUID() && e.meta.Generation == u.GetGeneration()
}

// state is e's State given the hosts it lost.
func (e *entry) state(lost []istioconfig.Shadowed) State {
	switch {
	case e.obj == nil:
		return StateRejected
	case len(lost) > 0:
		return StateShadowed
	}
	return StateApplied
}

// desired is the Reconciled condition e should carry: an applied object
// with warnings (what is wrong between it and others) is Accepted with
// them as the message.
func (e *entry) desired(lost []istioconfig.Shadowed, warnings []string) condition {
	c := condition{ObservedGeneration: e.meta.Generation}
	switch e.state(lost) {
	case StateRejected:
		c.Status, c.Reason, c.Message = "False", ReasonConditionInvalid, joinBounded(errorStrings(e.errs))
	case StateShadowed:
		c.Status, c.Reason, c.Message = "False", ReasonShadowed, joinBounded(shadowStrings(lost))
	default:
		c.Status, c.Reason, c.Message = "True", ReasonAccepted, joinBounded(warnings)
	}
	return c
}

// needsWrite reports whether the status seen differs from want.
func (c carried) needsWrite(want condition) bool {
	return c.cond == nil || *c.cond != want || c.observedGeneration != want.ObservedGeneration
}

func errorStrings(errs validate.ErrorList) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = e.Error()
	}
	return out
}

func shadowStrings(lost []istioconfig.Shadowed) []string {
	out := make([]string, len(lost))
	for i, s := range lost {
		out[i] = fmt.Sprintf("host %s is held by %s, an older object", s.Host, s.By)
	}
	return out
}

// joinBounded joins parts with "; ", leaving out those past maxMessage
// bytes and saying how many.
func joinBounded(parts []string) string {
	var b strings.Builder
	for i, p := range parts {
		sep := ""
		if i > 0 {
			sep = "; "
		}
		if b.Len()+len(sep)+len(p) > maxMessage && i > 0 {
			fmt.Fprintf(&b, "; and %d more", len(parts)-i)
			break
		}
		b.WriteString(sep)
		b.WriteString(p)
	}
	return b.String()
}

// carriedOf reads the Reconciled condition and status.observedGeneration
// of u. Istio's own writers may have written integers as strings
// (protojson's int64 form): both are read.
func carriedOf(u *unstructured.Unstructured) carried {
	status, _ := u.Object["status"].(map[string]any)
	var c carried
	c.observedGeneration, _ = asInt64(status["observedGeneration"])
	if m := findCondition(status); m != nil {
		s, _ := m["status"].(string)
		r, _ := m["reason"].(string)
		msg, _ := m["message"].(string)
		g, _ := asInt64(m["observedGeneration"])
		c.cond = &condition{Status: s, Reason: r, Message: msg, ObservedGeneration: g}
	}
	return c
}

// findCondition returns the Reconciled condition of a status, or nil.
func findCondition(status map[string]any) map[string]any {
	conds, _ := status["conditions"].([]any)
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == ConditionReconciled {
			return m
		}
	}
	return nil
}

func asInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int:
		return int64(x), true
	case float64:
		return int64(x), true
	case json.Number:
		n, err := x.Int64()
		return n, err == nil
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	}
	return 0, false
}

// statusPatch is the JSON merge patch that gives u the condition want:
// status.conditions with its Reconciled entry replaced in place (or
// appended) and every other condition as it is, status.observedGeneration,
// and u's resourceVersion, so a patch of a stale read fails with a
// conflict instead of overwriting what another writer just wrote. now is
// the lastTransitionTime of a condition whose status changes (RFC 3339).
func statusPatch(u *unstructured.Unstructured, want condition, now string) ([]byte, error) {
	status, _ := u.Object["status"].(map[string]any)
	conds, _ := status["conditions"].([]any)
	next := map[string]any{
		"type":               ConditionReconciled,
		"status":             want.Status,
		"reason":             want.Reason,
		"message":            want.Message,
		"observedGeneration": want.ObservedGeneration,
		"lastTransitionTime": now,
	}
	out := make([]any, 0, len(conds)+1)
	replaced := false
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != ConditionReconciled {
			out = append(out, c)
			continue
		}
		if replaced {
			continue // a duplicate: an object has one Reconciled condition
		}
		if m["status"] == want.Status {
			if t, ok := m["lastTransitionTime"].(string); ok && t != "" {
				next["lastTransitionTime"] = t
			}
		}
		out = append(out, next)
		replaced = true
	}
	if !replaced {
		out = append(out, next)
	}
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": u.GetResourceVersion()},
		"status":   map[string]any{"conditions": out, "observedGeneration": want.ObservedGeneration},
	})
}
