// Package agent is a small workload agent: it obtains a workload
// certificate from an Istio-compatible CA (the hub's, or istiod's) and
// keeps it fresh on disk, in place of istio-agent for tests and demos.
//
// Walk-through: Run dials the CA over TLS (verified with Options.CARoots),
// makes a new ECDSA P-256 key and a CSR, and calls
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
// The package imports nothing of the hub: the CA is reached only through
// the Istio API.
package agent
