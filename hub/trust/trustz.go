package trust

import (
	"time"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/pki"
)

// Trustz returns the document of /debug/trustz (debugdoc.Trustz) for the
// federated trust bundle roots: never a nil list, times in RFC 3339 UTC.
func Trustz(roots []federation.Root) debugdoc.Trustz {
	out := debugdoc.Trustz{Roots: []debugdoc.TrustzRoot{}}
	for _, r := range roots {
		tr := debugdoc.TrustzRoot{
			TrustDomain: pki.TrustDomain(r.TrustDomain), Fingerprint: r.Fingerprint, Source: string(r.Source),
			NotAfter: r.NotAfter.UTC().Format(time.RFC3339), PEM: string(r.PEM),
		}
		if !r.RetireAt.IsZero() {
			tr.RetireAt = r.RetireAt.UTC().Format(time.RFC3339)
		}
		out.Roots = append(out.Roots, tr)
	}
	return out
}
