package debugdoc

import "github.com/meshfed/meshfed/pkg/model"

// ConfigState is what a hub replica does with an Istio config object.
type ConfigState string

// The states of an object.
const (
	// ConfigApplied: valid, and applied to every host it names.
	ConfigApplied ConfigState = "applied"
	// ConfigRejected: invalid, skipped.
	ConfigRejected ConfigState = "rejected"
	// ConfigShadowed: valid, but an older object holds at least one of its
	// hosts, where it does not apply.
	ConfigShadowed ConfigState = "shadowed"
)

// Configz is the document of /debug/configz: every Istio config object the
// replica holds, with what it does with it (hub/istioconfig builds it).
type Configz struct {
	// Synced is false until every kind whose CRD exists has listed once.
	Synced bool `json:"synced"`
	// AbsentKinds are the kinds the config cluster has no CRD for (or
	// whose CRD does not serve v1): read as empty, watched once their CRD
	// appears.
	AbsentKinds []string `json:"absentKinds,omitempty"`
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
	State ConfigState `json:"state"`
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
	// Warnings say what is wrong between this object and others (a
	// VirtualService naming a Gateway that does not exist, two Gateways
	// of the same proxies serving a port with different protocols):
	// "<field>: <what>". The object stays applied; its status condition
	// carries them as its message.
	Warnings []string `json:"warnings,omitempty"`
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
