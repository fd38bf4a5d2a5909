package xds

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/meshfed/meshfed/hub/ca"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/pki"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// Authentication and authorization errors of the streams on the
// authenticated port. Every refusal wraps one of them or one of hub/ca's
// token errors (ca.IsUnauthenticated, ca.ErrTokenReview).
var (
	// ErrNoCredentials means the caller presented neither a client
	// certificate nor an "authorization: Bearer" token.
	ErrNoCredentials = errors.New("xds: no credentials")
	// ErrBadCertificate means the client certificate does not chain to
	// the mesh roots, or names no workload (no spiffe://<td>/ns/<ns>/sa/<sa>).
	ErrBadCertificate = errors.New("xds: client certificate not of the mesh")
	// ErrNoNode means the first request of the stream carried no node, so
	// there is nothing to hold the identity against.
	ErrNoNode = errors.New("xds: no node")
	// ErrNoNamespace means the node claims no namespace: no NAMESPACE
	// metadata and no Istio node ID.
	ErrNoNamespace = errors.New("xds: node names no namespace")
	// ErrNamespaceMismatch means the node claims a namespace the caller's
	// identity is not of.
	ErrNamespaceMismatch = errors.New("xds: namespace mismatch")
	// ErrServiceAccountMismatch means the node's SERVICE_ACCOUNT is not
	// the caller's.
	ErrServiceAccountMismatch = errors.New("xds: service account mismatch")
	// ErrClusterMismatch means the token was reviewed by another cluster
	// than the node's CLUSTER_ID.
	ErrClusterMismatch = errors.New("xds: cluster mismatch")
)

// Ways a caller authenticates (Caller.Via).
const (
	ViaCertificate = "certificate"
	ViaToken       = "token"
)

// Principal is one workload identity a caller proved: a Kubernetes service
// account, in a SPIFFE trust domain when it came from a certificate.
type Principal struct {
	// TrustDomain is the SPIFFE ID's; empty for a token's identity.
	TrustDomain               pki.TrustDomain
	Namespace, ServiceAccount string
}

func (p Principal) String() string {
	if p.TrustDomain == "" {
		return p.Namespace + "/" + p.ServiceAccount
	}
	return p.TrustDomain.WorkloadID(p.Namespace, p.ServiceAccount).String()
}

// Caller is who the credentials of a stream prove the peer to be.
type Caller struct {
	// Principals are the identities proved: each SPIFFE ID of a client
	// certificate, or the one service account of a reviewed token.
	Principals []Principal
	// Cluster reviewed the token; empty for a certificate, which names no
	// cluster.
	Cluster model.ClusterID
	// Via is ViaCertificate or ViaToken.
	Via string
}

func (c Caller) String() string {
	ps := make([]string, len(c.Principals))
	for i, p := range c.Principals {
		ps[i] = p.String()
	}
	s := strings.Join(ps, ",") + " (" + c.Via
	if c.Cluster != "" {
		s += " of cluster " + c.Cluster.String()
	}
	return s + ")"
}

// Identity is the caller's principals, comma-separated: what proxy status
// shows (proxystatus.Record.Identity).
func (c Caller) Identity() string {
	ps := make([]string, len(c.Principals))
	for i, p := range c.Principals {
		ps[i] = p.String()
	}
	return strings.Join(ps, ",")
}

// checkNode decides whether caller may speak for node, as istiod does
// (pilot/pkg/xds/auth.go, checkConnectionIdentity), a little stricter:
//   - the node's namespace, its NAMESPACE metadata or else the namespace of
//     its Istio node ID (istiod's ConfigNamespace), must be the namespace
//     of one of the caller's principals; a node that claims none is
//     refused (istiod lets it through), since nothing would tie it to the
//     identity. The node ID's namespace does not count when the metadata
//     names one: istioctl's node is sidecar~<ip>~test-1.default~default...
//     (Istio's pkg/adsc defaults) with NAMESPACE istio-system, its
//     token's;
//   - when the node says SERVICE_ACCOUNT, that principal's service account
//     must be it;
//   - when a token was reviewed by a cluster and the node says CLUSTER_ID,
//     they must be the same (the node's cluster picks its endpoints'
//     priorities and names it in proxy status).
//
// It is pure: no I/O, no clock.
func checkNode(caller Caller, node *corev3.Node) error {
	if node == nil || node.GetId() == "" {
		return fmt.Errorf("%w: the first request carries no node", ErrNoNode)
	}
	md := xdsnode.MetadataOf(node.GetMetadata())
	claimed := md.Namespace
	if claimed == "" {
		if id, err := xdsnode.ParseID(node.GetId()); err == nil {
			claimed = id.Namespace
		}
	}
	if claimed == "" {
		return fmt.Errorf("%w: node %q has no %s metadata and no Istio node ID", ErrNoNamespace, node.GetId(), xdsnode.MetadataNamespace)
	}
	if caller.Cluster != "" && md.ClusterID != "" && md.ClusterID != caller.Cluster {
		return fmt.Errorf("%w: node %q claims cluster %s; the caller is %s", ErrClusterMismatch, node.GetId(), md.ClusterID, caller)
	}
	inNamespace := false
	for _, p := range caller.Principals {
		if p.Namespace != claimed {
			continue
		}
		inNamespace = true
		if md.ServiceAccount == "" || md.ServiceAccount == p.ServiceAccount {
			return nil
		}
	}
	if !inNamespace {
		return fmt.Errorf("%w: node %q claims namespace %s; the caller is %s", ErrNamespaceMismatch, node.GetId(), claimed, caller)
	}
	return fmt.Errorf("%w: node %q claims service account %s; the caller is %s", ErrServiceAccountMismatch, node.GetId(), md.ServiceAccount, caller)
}

// principalOf parses a workload SPIFFE ID, spiffe://<td>/ns/<ns>/sa/<sa>,
// the only shape of identity the mesh CA issues.
func principalOf(u *url.URL) (Principal, bool) {
	if u == nil || u.Scheme != "spiffe" || u.Opaque != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return Principal{}, false
	}
	td := pki.TrustDomain(u.Host)
	if td.Validate() != nil {
		return Principal{}, false
	}
	parts := strings.Split(u.Path, "/")
	if len(parts) != 5 || parts[0] != "" || parts[1] != "ns" || parts[3] != "sa" || parts[2] == "" || parts[4] == "" {
		return Principal{}, false
	}
	return Principal{TrustDomain: td, Namespace: parts[2], ServiceAccount: parts[4]}, true
}

// Values of meshfed_xds_auth_failures_total's label "reason": one per
// cause, so a dashboard tells a misconfigured fleet (unknown_cluster,
// wrong_audience) from an attack (namespace_mismatch, token_rejected).
const (
	reasonNoCredentials     = "no_credentials"
	reasonBadCertificate    = "bad_certificate"
	reasonUnknownCluster    = "unknown_cluster"
	reasonTokenExpired      = "token_expired"
	reasonWrongAudience     = "wrong_audience"
	reasonTokenRejected     = "token_rejected"
	reasonNotServiceAccount = "not_service_account"
	reasonReviewFailed      = "review_failed"
	reasonNoNode            = "no_node"
	reasonNoNamespace       = "no_namespace"
	reasonNamespace         = "namespace_mismatch"
	reasonServiceAccount    = "service_account_mismatch"
	reasonCluster           = "cluster_mismatch"
	reasonOther             = "other"
)

// reasons maps each cause to its label; reasonOf reads it in this order.
var reasons = []struct {
	err    error
	reason string
}{
	{ErrNoCredentials, reasonNoCredentials},
	{ca.ErrMissingCredentials, reasonNoCredentials},
	{ErrBadCertificate, reasonBadCertificate},
	{ca.ErrUnknownCluster, reasonUnknownCluster},
	{ca.ErrTokenExpired, reasonTokenExpired},
	{ca.ErrWrongAudience, reasonWrongAudience},
	{ca.ErrTokenRejected, reasonTokenRejected},
	{ca.ErrNotServiceAccount, reasonNotServiceAccount},
	{ca.ErrTokenReview, reasonReviewFailed},
	{ErrNoNode, reasonNoNode},
	{ErrNoNamespace, reasonNoNamespace},
	{ErrNamespaceMismatch, reasonNamespace},
	{ErrServiceAccountMismatch, reasonServiceAccount},
	{ErrClusterMismatch, reasonCluster},
}

// reasonOf returns the metric label of a refusal.
func reasonOf(err error) string {
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.reason
		}
	}
	return reasonOther
}

// denied reports whether err refuses an authenticated caller for what its
// node claims (PermissionDenied), as opposed to failed authentication.
func denied(err error) bool {
	for _, e := range []error{ErrNoNode, ErrNoNamespace, ErrNamespaceMismatch, ErrServiceAccountMismatch, ErrClusterMismatch} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
