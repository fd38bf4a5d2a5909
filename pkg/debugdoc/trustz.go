package debugdoc

import (
	"slices"

	"github.com/meshfed/meshfed/pkg/pki"
)

// Trustz is the document of /debug/trustz: the federated trust bundle.
type Trustz struct {
	Roots []TrustzRoot `json:"roots"`
}

// TrustzRoot is one root of the bundle. Times are RFC 3339, UTC.
type TrustzRoot struct {
	TrustDomain pki.TrustDomain `json:"trustDomain"`
	// Fingerprint is the hex SHA-256 of the certificate.
	Fingerprint string `json:"fingerprint"`
	// Source is the replica that added the root.
	Source   string `json:"source"`
	NotAfter string `json:"notAfter"`
	// RetireAt is when the root leaves the bundle after a rotation; empty
	// while it is trusted until it expires.
	RetireAt string `json:"retireAt,omitempty"`
	PEM      string `json:"pem"`
}

// Has reports whether the bundle holds the root of fingerprint fp.
func (tz *Trustz) Has(fp string) bool {
	return slices.ContainsFunc(tz.Roots, func(r TrustzRoot) bool { return r.Fingerprint == fp })
}
