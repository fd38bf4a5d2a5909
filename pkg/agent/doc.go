// Package agent is the workload certificate agent: it obtains a workload
// certificate from an Istio-compatible CA (the hub's, or istiod's), keeps
// it fresh on disk and keeps its roots current through the hub's trust
// bundle, in place of istio-agent for proxyless gRPC workloads. It is the
// library of meshfed-agent (spoke/cmd/meshfed-agent, through
// spoke/podagent), the native sidecar that the spoke's grpc-agent
// injection template runs beside the application; the e2e framework and
// the demo run it in-process as their workloads' agent.
//
// Walk-through: Run dials the CA over TLS (verified with Options.CARoots
// and the roots received since, see below), makes a new ECDSA P-256 key and a CSR, and calls
// IstioCertificateService/CreateCertificate with the workload's service
// account token ("authorization: Bearer ...") and its cluster ("ClusterID")
// in the metadata. It checks that the returned leaf is for its key and
// chains to the returned roots, then writes three files into Options.Dir:
//
//	cert-chain.pem  the leaf and any intermediates
//	key.pem         the private key (PKCS #8)
//	root-cert.pem   the roots to trust
//
// the names istio-agent uses, and what grpc-go's file_watcher certificate
// provider reads (certificate_file, private_key_file, ca_certificate_file).
// The three are swapped in together, as Kubernetes swaps a Secret volume:
// each generation is written into a new hidden directory and a "..data"
// symlink is renamed onto it, so a reader never sees a key from one
// generation beside a certificate from another within one file, and the
// set changes in one rename.
//
// The agent renews when a fraction of the certificate's lifetime has passed
// (half by default, as istio-agent does), with a new key each time, and
// retries failures with exponential backoff. Time comes from an injected
// clock (k8s.io/utils/clock), so renewal is testable without waiting.
//
// # Root rotation
//
// Roots change more often than a certificate's renewal lets a workload
// notice: the hub adds a new root to its federated bundle, moves its CA to
// it, and later retires the old one. So Run also keeps a
// meshfed.trust.v1.TrustBundle/Watch stream (pkg/trustapi) open on the same
// connection, authenticated like the CSR and marked x-meshfed-client: agent,
// and reconnects it with the same backoff. Whenever a bundle brings roots
// other than those on disk, the agent writes a new generation with the same
// certificate and key and the new root-cert.pem; a renewal writes the roots
// of its response. The newest roots win, whichever way they came. Writes
// are serialized, so a generation never mixes two certificates' files. A
// bundle without roots or with a root that does not parse is refused; a
// bundle under which the current certificate no longer verifies is not,
// since a root is retired only once the certificates it signed are gone. A
// CA without the service (istiod) answers Unimplemented; the agent then
// stops watching and takes its roots from CreateCertificate alone.
//
// The CA's own TLS certificate is verified against Options.CARoots and the
// latest roots of both the bundle and CreateCertificate, by a
// VerifyConnection callback rather than tls.Config.RootCAs, which cannot
// change once the connection is configured: when the hub's CA moves to a
// new root, its serving certificate moves with it, and the agent knows that
// root only from the bundle.
//
// The package imports nothing of the hub: the CA is reached only through
// the Istio API and the wire contract of pkg/trustapi.
package agent
