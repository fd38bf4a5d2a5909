package validate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// API groups of the kinds this package validates.
const (
	// Group holds the traffic kinds.
	Group = "networking.istio.io"
	// SecurityGroup holds the security kinds.
	SecurityGroup = "security.istio.io"
)

// Versions of Group that carry the kinds; all share one schema (the v1 and
// v1beta1 Go types are aliases of v1alpha3's).
var Versions = []string{"v1", "v1beta1", "v1alpha3"}

// SecurityVersions of SecurityGroup; v1's Go types are aliases of
// v1beta1's.
var SecurityVersions = []string{"v1", "v1beta1"}

// GroupOf returns the API group of kind, "" for a kind not validated here.
func GroupOf(kind string) string {
	switch kind {
	case KindPeerAuthentication, KindAuthorizationPolicy:
		return SecurityGroup
	case KindVirtualService, KindDestinationRule, KindServiceEntry, KindSidecar, KindGateway:
		return Group
	case KindGatewayClass, KindKubeGateway, KindHTTPRoute, KindGRPCRoute, KindTLSRoute, KindReferenceGrant:
		return GatewayAPIGroup
	}
	return ""
}

// VersionsOf returns the versions of kind's group that carry it.
func VersionsOf(kind string) []string {
	if GroupOf(kind) == SecurityGroup {
		return SecurityVersions
	}
	return Versions
}

// Kinds validated, with their plural resource names (what the webhook
// configuration and the hub's watches list).
const (
	KindVirtualService  = "VirtualService"
	KindDestinationRule = "DestinationRule"
	KindServiceEntry    = "ServiceEntry"
	KindSidecar         = "Sidecar"
	KindGateway         = "Gateway"

	KindPeerAuthentication  = "PeerAuthentication"
	KindAuthorizationPolicy = "AuthorizationPolicy"

	// The Kubernetes Gateway API's kinds. Its Gateway is
	// KindKubeGateway here (istiod's name for it), apart from Istio's.
	KindGatewayClass   = "GatewayClass"
	KindKubeGateway    = "KubernetesGateway"
	KindHTTPRoute      = "HTTPRoute"
	KindGRPCRoute      = "GRPCRoute"
	KindTLSRoute       = "TLSRoute"
	KindReferenceGrant = "ReferenceGrant"
)

// GatewayAPIGroup is the Kubernetes Gateway API's group.
const GatewayAPIGroup = "gateway.networking.k8s.io"

// IsGatewayAPI reports whether kind is one of the Gateway API's.
func IsGatewayAPI(kind string) bool { return GroupOf(kind) == GatewayAPIGroup }

// APIKind is the kind as the apiserver names it (KindKubeGateway is
// "Gateway"); the others are their own.
func APIKind(kind string) string {
	if kind == KindKubeGateway {
		return "Gateway"
	}
	return kind
}

// WatchedVersion is the version of kind the hub reads: v1, but v1alpha2
// for TLSRoute and v1beta1 for ReferenceGrant (their served versions in
// Gateway API v1.4's CRDs).
func WatchedVersion(kind string) string {
	switch kind {
	case KindTLSRoute:
		return "v1alpha2"
	case KindReferenceGrant:
		return "v1beta1"
	}
	return "v1"
}

// ClusterScoped reports whether kind's objects have no namespace.
func ClusterScoped(kind string) bool { return kind == KindGatewayClass }

// Resources maps each kind to its resource name.
var Resources = map[string]string{
	KindVirtualService:  "virtualservices",
	KindDestinationRule: "destinationrules",
	KindServiceEntry:    "serviceentries",
	KindSidecar:         "sidecars",
	KindGateway:         "gateways",

	KindPeerAuthentication:  "peerauthentications",
	KindAuthorizationPolicy: "authorizationpolicies",

	KindGatewayClass:   "gatewayclasses",
	KindKubeGateway:    "gateways",
	KindHTTPRoute:      "httproutes",
	KindGRPCRoute:      "grpcroutes",
	KindTLSRoute:       "tlsroutes",
	KindReferenceGrant: "referencegrants",
}

// NewSpec returns an empty spec message for kind, or nil when kind is not
// one of this package's.
func NewSpec(kind string) proto.Message {
	switch kind {
	case KindVirtualService:
		return &networking.VirtualService{}
	case KindDestinationRule:
		return &networking.DestinationRule{}
	case KindServiceEntry:
		return &networking.ServiceEntry{}
	case KindSidecar:
		return &networking.Sidecar{}
	case KindGateway:
		return &networking.Gateway{}
	case KindPeerAuthentication:
		return &security.PeerAuthentication{}
	case KindAuthorizationPolicy:
		return &security.AuthorizationPolicy{}
	}
	return nil
}

// DecodeSpec decodes the JSON of a spec of kind into its Istio message.
// Unknown fields and values of the wrong type are refused, each with its
// path (e.g. "spec.http[0].rout: unknown field"). Durations may be written
// as Go durations ("30ms", "1m30s"), as Istio accepts them, besides
// protojson's seconds form ("0.030s").
func DecodeSpec(kind string, spec []byte) (proto.Message, ErrorList) {
	msg := NewSpec(kind)
	if msg == nil {
		return nil, ErrorList{{Field: "kind", Detail: fmt.Sprintf("%q is not validated here", kind)}}
	}
	root := field.NewPath("spec")
	var doc any
	dec := json.NewDecoder(bytes.NewReader(spec))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, ErrorList{{Field: root.String(), Detail: "not JSON: " + err.Error()}}
	}
	var e errs
	doc = walk(&e, root, doc, msg.ProtoReflect().Descriptor())
	if len(e.list) > 0 {
		return nil, e.list
	}
	normalized, err := json.Marshal(doc)
	if err != nil {
		return nil, ErrorList{{Field: root.String(), Detail: err.Error()}}
	}
	if err := (protojson.UnmarshalOptions{}).Unmarshal(normalized, msg); err != nil {
		// The position refers to normalized JSON, not to what the user
		// wrote: drop it.
		detail := strings.TrimSpace(strings.TrimPrefix(err.Error(), "proto:"))
		detail = jsonPosition.ReplaceAllString(detail, "")
		return nil, ErrorList{{Field: root.String(), Detail: detail}}
	}
	return msg, nil
}

var jsonPosition = regexp.MustCompile(`^(syntax error )?\(line \d+:\d+\): `)

// walk checks doc against md and returns it normalized: it reports every
// key that names no field, every value whose JSON type cannot be the
// field's, and rewrites Go-style durations into protojson's form.
func walk(e *errs, p *field.Path, doc any, md protoreflect.MessageDescriptor) any {
	if md.FullName() == durationName {
		return normalizeDuration(e, p, doc)
	}
	if strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		// A wrapper (BoolValue, UInt32Value, ...) is written as its
		// value; Struct and the rest have JSON forms of their own.
		if strings.HasSuffix(string(md.Name()), "Value") && md.Fields().Len() == 1 {
			if vf := md.Fields().ByName("value"); vf != nil {
				return walkValue(e, p, doc, vf)
			}
		}
		return doc
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		if doc != nil {
			e.add(p, "must be an object")
		}
		return doc
	}
	fields := md.Fields()
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		fd := fields.ByJSONName(k)
		if fd == nil {
			fd = fields.ByName(protoreflect.Name(k))
		}
		if fd == nil {
			e.add(p.Child(k), "unknown field")
			continue
		}
		obj[k] = walkField(e, p.Child(k), obj[k], fd)
	}
	return obj
}

func walkField(e *errs, p *field.Path, v any, fd protoreflect.FieldDescriptor) any {
	if v == nil {
		return nil
	}
	switch {
	case fd.IsMap():
		m, ok := v.(map[string]any)
		if !ok {
			e.add(p, "must be an object")
			return v
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if m[k] == nil && !isNullValue(fd.MapValue()) {
				// protojson refuses a null element without naming it.
				e.add(p.Key(k), "must not be null")
				continue
			}
			m[k] = walkValue(e, p.Key(k), m[k], fd.MapValue())
		}
		return m
	case fd.IsList():
		l, ok := v.([]any)
		if !ok {
			e.add(p, "must be a list")
			return v
		}
		for i := range l {
			if l[i] == nil && !isNullValue(fd) {
				e.add(p.Index(i), "must not be null")
				continue
			}
			l[i] = walkValue(e, p.Index(i), l[i], fd)
		}
		return l
	}
	return walkValue(e, p, v, fd)
}

// isNullValue reports whether JSON null is a value of fd's kind:
// google.protobuf.Value (and Struct's values) only.
func isNullValue(fd protoreflect.FieldDescriptor) bool {
	return fd.Kind() == protoreflect.MessageKind && fd.Message().FullName() == "google.protobuf.Value"
}

// walkValue checks one value (a single field, or an element of a list or
// map) of fd's kind.
func walkValue(e *errs, p *field.Path, v any, fd protoreflect.FieldDescriptor) any {
	if v == nil {
		return nil
	}
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return walk(e, p, v, fd.Message())
	case protoreflect.StringKind, protoreflect.BytesKind:
		if _, ok := v.(string); !ok {
			e.add(p, "must be a string, got %s", jsonType(v))
		}
	case protoreflect.BoolKind:
		if _, ok := v.(bool); !ok {
			e.add(p, "must be true or false, got %s", jsonType(v))
		}
	case protoreflect.EnumKind:
		switch x := v.(type) {
		case json.Number:
		case string:
			if fd.Enum().Values().ByName(protoreflect.Name(x)) == nil {
				e.add(p, "unknown value %q (one of %s)", x, enumNames(fd.Enum()))
			}
		default:
			e.add(p, "must be one of %s, got %s", enumNames(fd.Enum()), jsonType(v))
		}
	default: // numbers; protojson also accepts them quoted
		switch x := v.(type) {
		case json.Number:
		case string:
			if _, err := strconv.ParseFloat(x, 64); err != nil {
				e.add(p, "must be a number, got %q", x)
			}
		default:
			e.add(p, "must be a number, got %s", jsonType(v))
		}
	}
	return v
}

const durationName = "google.protobuf.Duration"

// normalizeDuration accepts "1.5s" (protojson) and Go durations ("30ms",
// "1h2m") and returns the protojson form.
func normalizeDuration(e *errs, p *field.Path, v any) any {
	s, ok := v.(string)
	if !ok {
		e.add(p, "must be a duration such as \"5s\" or \"250ms\", got %s", jsonType(v))
		return v
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		e.add(p, "invalid duration %q (use e.g. \"5s\" or \"250ms\")", s)
		return v
	}
	b, err := protojson.Marshal(durationpb.New(d))
	if err != nil {
		e.add(p, "invalid duration %q: %v", s, err)
		return v
	}
	return json.RawMessage(b)
}

func jsonType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func enumNames(ed protoreflect.EnumDescriptor) string {
	vals := ed.Values()
	names := make([]string, vals.Len())
	for i := range names {
		names[i] = string(vals.Get(i).Name())
	}
	return strings.Join(names, ", ")
}

// Spec validates a decoded spec message.
func Spec(msg proto.Message) ErrorList {
	switch m := msg.(type) {
	case *networking.VirtualService:
		return VirtualService(m)
	case *networking.DestinationRule:
		return DestinationRule(m)
	case *networking.ServiceEntry:
		return ServiceEntry(m)
	case *networking.Sidecar:
		return Sidecar(m)
	case *networking.Gateway:
		return Gateway(m)
	case *security.PeerAuthentication:
		return PeerAuthentication(m)
	case *security.AuthorizationPolicy:
		return AuthorizationPolicy(m)
	}
	return ErrorList{{Field: "spec", Detail: fmt.Sprintf("%T is not validated here", msg)}}
}

// Object decodes and validates the JSON of a whole object of kind (its
// apiVersion, kind, metadata and spec): what an AdmissionRequest carries.
func Object(kind string, raw []byte) ErrorList {
	var obj struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return ErrorList{{Field: "<object>", Detail: "not a JSON object: " + err.Error()}}
	}
	if len(obj.Spec) == 0 || string(obj.Spec) == "null" {
		return ErrorList{{Field: "spec", Detail: "required"}}
	}
	msg, errs := DecodeSpec(kind, obj.Spec)
	if len(errs) > 0 {
		return errs
	}
	return Spec(msg)
}
