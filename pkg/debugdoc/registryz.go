package debugdoc

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/meshfed/meshfed/pkg/model"
)

// ClusterState is the state of a remote cluster in Registryz.
type ClusterState string

// The states of a remote cluster, as the hub's remotes package names them.
const (
	// ClusterInvalid: its remote secret entry could not be used.
	ClusterInvalid ClusterState = "invalid"
	// ClusterSyncing: its informers are listing.
	ClusterSyncing ClusterState = "syncing"
	// ClusterSynced: its state is published and kept current.
	ClusterSynced ClusterState = "synced"
	// ClusterUnreachable: listing or watching its apiserver fails.
	ClusterUnreachable ClusterState = "unreachable"
	// ClusterTimeout: its apiserver answers but listing has not finished
	// within the sync timeout.
	ClusterTimeout ClusterState = "timeout"
	// ClusterReplicated: another replica owns it; its state arrives from
	// that replica.
	ClusterReplicated ClusterState = "replicated"
	// ClusterCredentialExpiring: served, but the token of its remote
	// secret expires soon; rotate the secret.
	ClusterCredentialExpiring ClusterState = "credential-expiring"
)

// ClusterStates lists every ClusterState.
var ClusterStates = []ClusterState{
	ClusterInvalid, ClusterSyncing, ClusterSynced, ClusterUnreachable,
	ClusterTimeout, ClusterReplicated, ClusterCredentialExpiring,
}

// Registryz is the document of /debug/registryz: every remote cluster with
// its state, the remote secrets rejected as a whole, and the merged
// services.
type Registryz struct {
	// Replica is the answering hub's replica ID.
	Replica string `json:"replica"`
	// Clusters lists every cluster named by a remote secret, sorted by ID.
	Clusters []RegistryzCluster `json:"clusters"`
	// SecretErrors lists remote secrets that yield no cluster at all.
	SecretErrors []SecretError `json:"secretErrors"`
	// Services is the merged registry, one entry per hostname.
	Services []RegistryzService `json:"services"`
	// Networks are the fleet's networks: each one's gateway addresses, and
	// the problems of the gateways (without an address, an address two
	// networks claim) and of the networks (no gateway at all); absent in a
	// fleet of one network.
	Networks *model.NetworkGateways `json:"networks,omitempty"`
	// Digest is ServicesDigest(Services): replicas that serve the same
	// merged registry show the same digest, so one look tells whether a
	// fleet has converged (after a partition, say).
	Digest string `json:"digest"`
}

// ServicesDigest returns a SHA-256 (hex, first 16 bytes) of services in a
// canonical order: services by hostname, each one's endpoints by cluster
// and address. JSON's map keys are sorted, so equal registries give equal
// digests whatever order they were built in.
func ServicesDigest(services []RegistryzService) string {
	canon := slices.Clone(services)
	slices.SortFunc(canon, func(a, b RegistryzService) int { return cmp.Compare(a.Hostname, b.Hostname) })
	for i := range canon {
		eps := slices.Clone(canon[i].Endpoints)
		slices.SortFunc(eps, func(a, b model.Endpoint) int {
			return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), a.Address.Compare(b.Address))
		})
		canon[i].Endpoints = eps
	}
	b, err := json.Marshal(canon)
	if err != nil { // every field marshals; a failure is a bug
		panic(fmt.Sprintf("debugdoc: digest of the registry: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// RegistryzCluster is one remote cluster in Registryz.
type RegistryzCluster struct {
	// ID is the cluster ID (the remote secret's data key).
	ID model.ClusterID `json:"id"`
	// Secret is the remote secret that names the cluster, "<ns>/<name>".
	Secret string `json:"secret"`
	// State is one of ClusterStates.
	State ClusterState `json:"state"`
	// Error explains an unreachable or invalid cluster.
	Error string `json:"error"`
	// Generation grows with each new version of the cluster's state that
	// the replica holds.
	Generation uint64 `json:"generation"`
	// CredentialExpiry is when the remote secret's token expires, if known.
	CredentialExpiry time.Time `json:"credentialExpiry,omitzero"`
	// Since is when the cluster entered State here.
	Since time.Time `json:"since,omitzero"`
	// StalePolicy is what becomes of its endpoints while it is
	// unreachable: "keep" or "drop-after=<duration>" (the remote secret's
	// meshfed.io/stale-endpoints annotation).
	StalePolicy string `json:"stalePolicy,omitempty"`
	// DiscoverySelector narrows what is discovered in the cluster: the
	// namespaces whose labels match it (the remote secret's
	// meshfed.io/discovery-selector annotation), besides the hub-wide
	// --discovery-selector; empty: no narrowing of its own.
	DiscoverySelector string `json:"discoverySelector,omitempty"`
	// Network is the cluster's network: its system namespace's
	// topology.istio.io/network label, else its remote secret's
	// meshfed.io/network annotation; empty when neither says one.
	Network model.Network `json:"network,omitempty"`
	// EndpointsDropped is when its endpoints were dropped under
	// StalePolicy; absent while they are served.
	EndpointsDropped time.Time `json:"endpointsDropped,omitzero"`
	// Services counts the services the cluster contributes.
	Services int `json:"services"`
	// Endpoints counts the endpoints the cluster contributes.
	Endpoints int `json:"endpoints"`
}

// SecretError is a remote secret the hub could not use at all.
type SecretError struct {
	// Secret is "<ns>/<name>".
	Secret string `json:"secret"`
	// Error says what is wrong with it.
	Error string `json:"error"`
}

// RegistryzService is one merged service, with the endpoints of every
// cluster.
type RegistryzService struct {
	Hostname  model.Hostname      `json:"hostname"`
	Ports     []model.ServicePort `json:"ports"`
	Endpoints []model.Endpoint    `json:"endpoints"`
}

// Cluster returns the entry of cluster id.
func (r *Registryz) Cluster(id model.ClusterID) (RegistryzCluster, bool) {
	for _, c := range r.Clusters {
		if c.ID == id {
			return c, true
		}
	}
	return RegistryzCluster{}, false
}

// Service returns the entry of the service with hostname h.
func (r *Registryz) Service(h model.Hostname) (RegistryzService, bool) {
	for _, s := range r.Services {
		if s.Hostname == h {
			return s, true
		}
	}
	return RegistryzService{}, false
}

// ReadyEndpoints returns the service's ready endpoints in cluster, or in
// every cluster when cluster is empty.
func (s RegistryzService) ReadyEndpoints(cluster model.ClusterID) []model.Endpoint {
	var out []model.Endpoint
	for _, e := range s.Endpoints {
		if e.Ready && (cluster == "" || e.Cluster == cluster) {
			out = append(out, e)
		}
	}
	return out
}
