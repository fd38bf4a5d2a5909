package ca

import (
	"net/url"
	"strings"

	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/pki"
)

// DefaultTrustDomain is the SPIFFE trust domain of workload identities
// unless configured otherwise: Istio's default.
const DefaultTrustDomain = pki.DefaultTrustDomain

// saUserPrefix starts the user name Kubernetes gives a service account's
// token: system:serviceaccount:<namespace>:<name>.
const saUserPrefix = "system:serviceaccount:"

// Identity is an authenticated workload: a Kubernetes service account of a
// remote cluster.
type Identity struct {
	// Cluster issued the token and reviewed it.
	Cluster model.ClusterID
	// Namespace and ServiceAccount name the service account.
	Namespace, ServiceAccount string
}

func (id Identity) String() string {
	return id.Cluster.String() + "/" + id.Namespace + "/" + id.ServiceAccount
}

// SPIFFEID returns the identity's SPIFFE ID in trustDomain,
// spiffe://<trust-domain>/ns/<ns>/sa/<sa>. The cluster is not part of it:
// the same service account in two clusters is one identity, as in Istio.
func (id Identity) SPIFFEID(trustDomain pki.TrustDomain) *url.URL {
	return trustDomain.WorkloadID(id.Namespace, id.ServiceAccount)
}

// identityFromUser parses a service account's user name.
func identityFromUser(cluster model.ClusterID, user string) (Identity, bool) {
	rest, ok := strings.CutPrefix(user, saUserPrefix)
	if !ok {
		return Identity{}, false
	}
	ns, sa, ok := strings.Cut(rest, ":")
	if !ok || ns == "" || sa == "" || strings.Contains(sa, ":") || !validName(ns) || !validName(sa) {
		return Identity{}, false
	}
	return Identity{Cluster: cluster, Namespace: ns, ServiceAccount: sa}, true
}

// validName accepts Kubernetes object names (DNS subdomains) and nothing
// that could change the meaning of a SPIFFE path.
func validName(s string) bool {
	if len(s) > 253 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}
