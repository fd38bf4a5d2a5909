package remotes

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/pkg/model"
)

// AnnotationDiscoverySelector, on a remote secret, narrows what the hub
// discovers in its clusters to the namespaces whose labels match a label
// selector (e.g. "mesh=on", or
// "kubernetes.io/metadata.name in (shop,payments)"). It applies together
// with the hub-wide --discovery-selector: a namespace is discovered when it
// matches both. Absent or empty: every namespace the hub-wide selector
// allows.
const AnnotationDiscoverySelector = "meshfed.io/discovery-selector"

// AnnotationNetwork, on a remote secret, is the network of every cluster
// of the secret, as the hub's default: a cluster whose system namespace
// carries model.LabelTopologyNetwork is on that network instead, and a Pod
// carrying the label is on its own.
const AnnotationNetwork = "meshfed.io/network"

// nameLabel is the label the apiserver puts on every Namespace: its name.
const nameLabel = corev1.LabelMetadataName

// Scope is a cluster's AnnotationDiscoverySelector. The zero value is the
// whole cluster.
type Scope struct {
	// Selector matches the labels of the namespaces in scope; nil: all.
	Selector labels.Selector
	// Namespaces, when the selector names its namespaces outright
	// (kubernetes.io/metadata.name = or in), lists them, sorted: the
	// cluster's namespaced watches are then made per namespace, so the
	// apiserver sends nothing of the others. Nil otherwise.
	Namespaces []string
	// Network is the secret's AnnotationNetwork: the cluster's network
	// when its system namespace says none.
	Network model.Network
}

// ParseScope parses an AnnotationDiscoverySelector value.
func ParseScope(s string) (Scope, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Scope{}, nil
	}
	sel, err := labels.Parse(s)
	if err != nil {
		return Scope{}, fmt.Errorf("remotes: %s %q: %w", AnnotationDiscoverySelector, s, err)
	}
	if sel.Empty() {
		return Scope{}, nil
	}
	return Scope{Selector: sel, Namespaces: namedNamespaces(sel)}, nil
}

// namedNamespaces returns the namespaces sel's name requirements allow
// (their intersection), or nil when sel does not name them.
func namedNamespaces(sel labels.Selector) []string {
	reqs, _ := sel.Requirements()
	var names []string
	named := false
	for _, r := range reqs {
		if r.Key() != nameLabel {
			continue
		}
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
		default:
			continue
		}
		vals := r.Values().UnsortedList()
		if !named {
			names, named = vals, true
			continue
		}
		names = slices.DeleteFunc(names, func(n string) bool { return !slices.Contains(vals, n) })
	}
	if !named {
		return nil
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// same reports whether s and o discover the same things on the same
// network.
func (s Scope) same(o Scope) bool { return s.String() == o.String() && s.Network == o.Network }

// String is the annotation's value; "" for the whole cluster.
func (s Scope) String() string {
	if s.Selector == nil {
		return ""
	}
	return s.Selector.String()
}

// MarshalText writes String.
func (s Scope) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// matches tells whether a namespace with these labels is in scope.
func (s Scope) matches(ns labels.Set) bool { return s.Selector == nil || s.Selector.Matches(ns) }

// applyTo narrows a remote cluster's cache to the scope, on the apiserver
// side: Namespaces are listed and watched with the selector, and when the
// selector names its namespaces, the namespaced kinds are watched in those
// namespaces only. (Nodes are cluster-scoped and stay whole: endpoints of
// any namespace may run on any Node.)
func (s Scope) applyTo(o *cache.Options) {
	if s.Selector == nil {
		return
	}
	if o.ByObject == nil {
		o.ByObject = map[client.Object]cache.ByObject{}
	}
	o.ByObject[&corev1.Namespace{}] = cache.ByObject{Label: s.Selector}
	// An empty list (names that exclude each other) cannot be said to the
	// cache, which reads no namespaces as all: the selector, which matches
	// no Namespace then, keeps every object out.
	if len(s.Namespaces) > 0 {
		o.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range s.Namespaces {
			o.DefaultNamespaces[ns] = cache.Config{}
		}
	}
}
