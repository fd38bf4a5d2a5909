package pki

import (
	"errors"
	"fmt"
	"net/url"
)

// TrustDomain is a SPIFFE trust domain: the host of every SPIFFE ID it
// anchors (spiffe://<trust-domain>/...), e.g. cluster.local. A typed name,
// so a trust domain is never passed where a cluster ID, a replica ID or a
// DNS name is meant.
type TrustDomain string

// DefaultTrustDomain is the trust domain of workload identities unless
// configured otherwise: Istio's default.
const DefaultTrustDomain TrustDomain = "cluster.local"

// ErrInvalidTrustDomain is wrapped by TrustDomain.Validate's errors.
var ErrInvalidTrustDomain = errors.New("pki: invalid trust domain")

// String returns the trust domain as written in a SPIFFE ID.
func (td TrustDomain) String() string { return string(td) }

// Validate applies the SPIFFE rule: 1 to 255 characters, each a lower-case
// letter, a digit, '.', '-' or '_'.
func (td TrustDomain) Validate() error {
	if td == "" || len(td) > 255 {
		return fmt.Errorf("%w: %q is empty or too long", ErrInvalidTrustDomain, string(td))
	}
	for _, r := range td {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return fmt.Errorf("%w: %q: character %q not allowed", ErrInvalidTrustDomain, string(td), r)
		}
	}
	return nil
}

// Set implements flag.Value: it validates s and keeps it.
func (td *TrustDomain) Set(s string) error {
	v := TrustDomain(s)
	if err := v.Validate(); err != nil {
		return err
	}
	*td = v
	return nil
}

// WorkloadID returns the SPIFFE ID of a Kubernetes service account in td,
// spiffe://<td>/ns/<namespace>/sa/<serviceAccount>, as Istio names
// workloads. The caller checks that namespace and serviceAccount are
// object names.
func (td TrustDomain) WorkloadID(namespace, serviceAccount string) *url.URL {
	return &url.URL{Scheme: "spiffe", Host: string(td), Path: "/ns/" + namespace + "/sa/" + serviceAccount}
}
