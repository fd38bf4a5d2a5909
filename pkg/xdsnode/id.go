package xdsnode

import (
	"errors"
	"fmt"
	"strings"
)

// Proxy types, the first field of a node ID.
const (
	// TypeSidecar is a workload's proxy: an Envoy sidecar or a proxyless
	// gRPC application.
	TypeSidecar = "sidecar"
	// TypeRouter is a gateway.
	TypeRouter = "router"
)

// separator separates the fields of a node ID.
const separator = "~"

// ErrInvalidID is returned by ParseID for a node ID that is not of Istio's
// shape.
var ErrInvalidID = errors.New("xdsnode: not an Istio node ID")

// ID is an Istio node ID, <type>~<ip>~<pod>.<ns>~<ns>.svc.<domain suffix>.
type ID struct {
	// Type is the proxy type, e.g. TypeSidecar. Never empty in a parsed ID.
	Type string
	// IP is the proxy's IP address as the proxy wrote it (not checked; may
	// be empty).
	IP string
	// Name is "<pod>.<namespace>". Never empty in a parsed ID.
	Name string
	// Namespace is the proxy's namespace: the first label of DNSDomain, or
	// when that is empty the part of Name after its last dot. Never empty
	// in a parsed ID.
	Namespace string
	// DNSDomain is "<namespace>.svc.<domain suffix>"; may be empty.
	DNSDomain string
}

// SidecarID returns the node ID of a Pod's proxy as Istio's proxies form
// it: sidecar~<ip>~<pod>.<namespace>~<namespace>.svc.<domainSuffix>.
func SidecarID(ip, pod, namespace, domainSuffix string) string {
	return ID{
		Type: TypeSidecar, IP: ip, Name: pod + "." + namespace,
		Namespace: namespace, DNSDomain: namespace + ".svc." + domainSuffix,
	}.String()
}

// String joins the fields into a node ID: ParseID(id.String()) == id for
// every parsed id.
func (id ID) String() string {
	return id.Type + separator + id.IP + separator + id.Name + separator + id.DNSDomain
}

// ParseID splits an Istio node ID. It fails with ErrInvalidID unless s has
// exactly four "~"-separated fields with a type, a name and a namespace
// (from the DNS domain, or from the name when the domain is empty).
func ParseID(s string) (ID, error) {
	parts := strings.Split(s, separator)
	if len(parts) != 4 {
		return ID{}, fmt.Errorf("%w: %q has %d fields, want 4", ErrInvalidID, s, len(parts))
	}
	id := ID{Type: parts[0], IP: parts[1], Name: parts[2], DNSDomain: parts[3]}
	if id.Type == "" || id.Name == "" {
		return ID{}, fmt.Errorf("%w: %q has no type or no name", ErrInvalidID, s)
	}
	if id.DNSDomain != "" {
		id.Namespace, _, _ = strings.Cut(id.DNSDomain, ".")
	} else if i := strings.LastIndexByte(id.Name, '.'); i >= 0 {
		id.Namespace = id.Name[i+1:]
	}
	if id.Namespace == "" {
		return ID{}, fmt.Errorf("%w: %q has no namespace", ErrInvalidID, s)
	}
	return id, nil
}

// NameOf returns the name to show for node ID s: "<pod>.<ns>" for an Istio
// node ID, s itself otherwise.
func NameOf(s string) string {
	if id, err := ParseID(s); err == nil {
		return id.Name
	}
	return s
}

// NameField returns the part that every Istio node ID whose name is name
// contains ("~<name>~"), to find a proxy's node by its "<pod>.<ns>" name.
func NameField(name string) string { return separator + name + separator }
