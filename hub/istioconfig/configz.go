package istioconfig

import (
	"cmp"
	"slices"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
	"github.com/meshfed/meshfed/pkg/model"
)

// ConfigzName is the document's name under /debug/ (the key of the hub's
// monitoring.Options.Debug).
const ConfigzName = "configz"

// Configz is the document of /debug/configz: every Istio config object the
// replica holds, with what it does with it. Its types import nothing of the
// hub, so that they can move to pkg/debugdoc with the other documents.
type Configz struct {
	// Synced is false until both kinds have listed once.
	Synced bool `json:"synced"`
	// Generation counts the snapshots published (1 for the first): it
	// grows with each change of an applied object.
	Generation uint64 `json:"generation"`
	// Objects lists every object, sorted by kind, namespace and name.
	Objects []ConfigzObject `json:"objects"`
}

// ConfigzObject is one object in Configz.
type ConfigzObject struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Generation is the metadata.generation held.
	Generation int64 `json:"generation"`
	// State is applied, rejected or shadowed.
	State State `json:"state"`
	// Reason says why a rejected object was (undecodable, invalid).
	Reason string `json:"reason,omitempty"`
	// Errors are a rejected object's problems, by field path.
	Errors []ConfigzError `json:"errors,omitempty"`
	// ShadowedBy lists the hosts a shadowed object lost, each with the
	// older object that holds it.
	ShadowedBy []ConfigzShadow `json:"shadowedBy,omitempty"`
	// Notes say what of an applied object a proxy kind does not get, and
	// why: "<field>: <reason> (<proxy kind>)".
	Notes []string `json:"notes,omitempty"`
}

// ConfigzError is one field's problem.
type ConfigzError struct {
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

// ConfigzShadow is one host lost to an older object.
type ConfigzShadow struct {
	Host model.Hostname `json:"host"`
	// By is the object that holds the host.
	By ConfigzKey `json:"by"`
}

// ConfigzKey names an object.
type ConfigzKey struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// Object returns the entry of kind/namespace/name.
func (c Configz) Object(kind, namespace, name string) (ConfigzObject, bool) {
	for _, o := range c.Objects {
		if o.Kind == kind && o.Namespace == namespace && o.Name == name {
			return o, true
		}
	}
	return ConfigzObject{}, false
}

// Configz returns the /debug/configz document.
func (w *Watcher) Configz() Configz {
	w.mu.Lock()
	doc := Configz{Synced: w.synced, Generation: w.gen, Objects: make([]ConfigzObject, 0, len(w.entries))}
	for k, e := range w.entries {
		doc.Objects = append(doc.Objects, configzObject(k, e, w.lost[k]))
	}
	w.mu.Unlock()
	slices.SortFunc(doc.Objects, func(a, b ConfigzObject) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return doc
}

func configzObject(k istioconfig.Key, e *entry, lost []istioconfig.Shadowed) ConfigzObject {
	o := ConfigzObject{
		Kind: k.Kind, Namespace: k.Namespace, Name: k.Name,
		Generation: e.meta.Generation, State: e.state(lost), Reason: e.reason,
		Errors: configzErrors(e.errs), Notes: e.notes,
	}
	for _, s := range lost {
		o.ShadowedBy = append(o.ShadowedBy, ConfigzShadow{Host: s.Host, By: ConfigzKey(s.By)})
	}
	return o
}

func configzErrors(errs validate.ErrorList) []ConfigzError {
	var out []ConfigzError
	for _, e := range errs {
		out = append(out, ConfigzError{Field: e.Field, Detail: e.Detail})
	}
	return out
}
