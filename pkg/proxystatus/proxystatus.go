package proxystatus

import (
	"time"
)

// Status is a proxy's sync state for one xDS type, with Istio's names.
type Status string

// The four states of `istioctl proxy-status`, spelled exactly as Istio does.
const (
	// StatusSynced: the proxy ACKed the last response sent.
	StatusSynced Status = "SYNCED"
	// StatusNotSent: nothing of this type was sent (or even requested).
	StatusNotSent Status = "NOT SENT"
	// StatusStale: a response was sent and not ACKed yet.
	StatusStale Status = "STALE"
	// StatusError: the proxy NACKed a response and has not ACKed one since.
	StatusError Status = "ERROR"
)

// String returns s.
func (s Status) String() string { return string(s) }

// Short names of the xDS types a table has columns for.
const (
	TypeCDS  = "cds"
	TypeLDS  = "lds"
	TypeEDS  = "eds"
	TypeRDS  = "rds"
	TypeECDS = "ecds"
	TypeSDS  = "sds"
)

// Type URLs of the xDS v3 resource types, as go-control-plane's resource
// package spells them (repeated here so this package needs no protos).
const (
	ClusterTypeURL         = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	ListenerTypeURL        = "type.googleapis.com/envoy.config.listener.v3.Listener"
	EndpointTypeURL        = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	RouteTypeURL           = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	ExtensionConfigTypeURL = "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"
	SecretTypeURL          = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
)

// TableTypes returns the short types that have a column in WriteTable, in
// column order.
func TableTypes() []string {
	return []string{TypeCDS, TypeLDS, TypeEDS, TypeRDS, TypeECDS}
}

// ShortType returns the short name of typeURL ("cds", "lds", …), or
// typeURL itself for a type without one, so that no two types share a key.
func ShortType(typeURL string) string {
	switch typeURL {
	case ClusterTypeURL:
		return TypeCDS
	case ListenerTypeURL:
		return TypeLDS
	case EndpointTypeURL:
		return TypeEDS
	case RouteTypeURL:
		return TypeRDS
	case ExtensionConfigTypeURL:
		return TypeECDS
	case SecretTypeURL:
		return TypeSDS
	}
	return typeURL
}

// TypeURL is the inverse of ShortType.
func TypeURL(short string) string {
	switch short {
	case TypeCDS:
		return ClusterTypeURL
	case TypeLDS:
		return ListenerTypeURL
	case TypeEDS:
		return EndpointTypeURL
	case TypeRDS:
		return RouteTypeURL
	case TypeECDS:
		return ExtensionConfigTypeURL
	case TypeSDS:
		return SecretTypeURL
	}
	return short
}

// TypeStatus is what one proxy was sent and acknowledged of one xDS type.
type TypeStatus struct {
	TypeURL string `json:"typeUrl"`
	// Sent and SentNonce are the version and nonce of the last response
	// sent; empty when none was.
	Sent      string `json:"sent,omitempty"`
	SentNonce string `json:"sentNonce,omitempty"`
	// Acked and AckedNonce are those of the last response the proxy ACKed.
	Acked      string `json:"acked,omitempty"`
	AckedNonce string `json:"ackedNonce,omitempty"`
	// Nack is the error detail of the last NACK; a later ACK clears it.
	Nack string `json:"nack,omitempty"`
	// NackVersion is the version the proxy rejected, when known.
	NackVersion string `json:"nackVersion,omitempty"`
	// Status is Compute's result, stored so that readers of a record that
	// travelled (JSON, CSDS, replication) need not recompute it.
	Status  Status    `json:"status"`
	SentAt  time.Time `json:"sentAt,omitzero"`
	AckedAt time.Time `json:"ackedAt,omitzero"`
	// AckedEpoch is the config epoch of the serving replica that the ACKed
	// version holds (see ConfigLedger): the proxy has, of this type, every
	// object generation that arrived at or before it. 0: nothing ACKed, or
	// a version the replica does not know.
	AckedEpoch uint64 `json:"ackedEpoch,omitempty"`
	// NackEpoch is the config epoch of the NACKed version, when known.
	NackEpoch uint64 `json:"nackEpoch,omitempty"`
}

// Compute returns the status the fields describe: NOT SENT when nothing was
// sent, ERROR when the last word from the proxy was a NACK, SYNCED when it
// ACKed the last response sent, STALE otherwise.
func (t TypeStatus) Compute() Status {
	switch {
	case t.SentNonce == "":
		return StatusNotSent
	case t.Nack != "":
		return StatusError
	case t.SentNonce == t.AckedNonce:
		return StatusSynced
	default:
		return StatusStale
	}
}

// Record is one proxy's status as one hub replica sees it. It is compact
// and JSON-serializable, so replicas can exchange it.
type Record struct {
	// Proxy is the node ID, e.g. sidecar~10.0.0.1~client.demo~demo.svc.cluster.local.
	Proxy string `json:"proxy"`
	// Name is "<pod>.<ns>" from an Istio node ID (see xdsnode.ParseID), or the
	// node ID itself when it is not one.
	Name string `json:"name,omitempty"`
	// Cluster is the proxy's CLUSTER_ID node metadata.
	Cluster string `json:"cluster,omitempty"`
	// Replica is the hub replica serving the proxy, HubVersion that
	// replica's build version.
	Replica    string `json:"replica,omitempty"`
	HubVersion string `json:"hubVersion,omitempty"`
	// Types holds a TypeStatus per subscribed type, keyed by ShortType.
	Types map[string]TypeStatus `json:"types,omitempty"`
	// Connected is when the proxy's stream opened; LastChange when anything
	// in this record last changed.
	Connected  time.Time `json:"connected,omitzero"`
	LastChange time.Time `json:"lastChange,omitzero"`
	// Version is the proxy's own version (ISTIO_VERSION metadata or the
	// node's user agent version).
	Version string `json:"version,omitempty"`
	// Namespace is the proxy's NAMESPACE node metadata.
	Namespace string `json:"namespace,omitempty"`
	// Locality is the node's locality, "<region>/<zone>/<subzone>"; empty
	// when the node gave none.
	Locality string `json:"locality,omitempty"`
	// Network is the node's NETWORK metadata; empty when it said none
	// (it is then on its cluster's network).
	Network string `json:"network,omitempty"`
	// Identity is who the proxy's stream proved to be on the hub's
	// authenticated port: its certificate's SPIFFE ID, or the
	// <namespace>/<service account> of its token; empty on the plaintext
	// port.
	Identity string `json:"identity,omitempty"`
}

// Status returns the status of the given short type; NOT SENT if the proxy
// never subscribed to it.
func (r Record) Status(short string) Status {
	ts, ok := r.Types[short]
	if !ok {
		return StatusNotSent
	}
	if ts.Status != "" {
		return ts.Status
	}
	return ts.Compute()
}

// Size approximates the bytes r takes on the wire or in memory, for
// batching replication.
func (r Record) Size() int {
	// Fixed part: two times and field overhead.
	n := 64 + len(r.Proxy) + len(r.Name) + len(r.Cluster) + len(r.Replica) + len(r.Version) +
		len(r.Namespace) + len(r.Locality)
	for k, t := range r.Types {
		n += 64 + len(k) + len(t.TypeURL) + len(t.Sent) + len(t.SentNonce) +
			len(t.Acked) + len(t.AckedNonce) + len(t.Nack) + len(t.NackVersion) + len(t.Status)
	}
	return n
}

// ConfigEpoch returns the config epoch of its replica that the proxy holds
// in full: the least AckedEpoch of the types it was sent. 0 when a type it
// was sent has no ACKed epoch, or nothing was sent.
func (r Record) ConfigEpoch() uint64 {
	var least uint64
	first := true
	for _, ts := range r.Types {
		if ts.SentNonce == "" {
			continue // asked for, never answered: it holds nothing of it
		}
		if first || ts.AckedEpoch < least {
			least, first = ts.AckedEpoch, false
		}
	}
	return least
}

// Clone returns a copy of r that shares no map with it.
func (r Record) Clone() Record {
	if r.Types != nil {
		types := make(map[string]TypeStatus, len(r.Types))
		for k, v := range r.Types {
			types[k] = v
		}
		r.Types = types
	}
	return r
}
