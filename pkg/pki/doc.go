// Package pki issues X.509 certificates: a certificate authority (CA) that
// signs leaves for TLS servers and clients, either with a key it makes itself
// (Issue) or for the public key of a certificate signing request (SignCSR).
//
// The package is a pure library: it reads no files, environment or clock.
// Callers pass PEM bytes in and get PEM bytes out, and every operation that
// depends on the time takes it as an argument (IssueOptions.Now), so tests
// are deterministic and the hub decides what "now" is. The only outside input
// it consumes is randomness from crypto/rand, for keys and serial numbers.
//
// Keys are ECDSA P-256 unless asked otherwise: signing one leaf with P-256
// costs about a tenth of RSA-2048 (see BenchmarkSignCSR), and the keys and
// signatures are far smaller on the wire. RSA-2048 is available
// (IssueOptions.KeyType) for peers that cannot speak ECDSA.
//
// Walk-through: the hub creates a root with NewCA (or loads one with LoadCA
// from a Secret it was given), persists it with CertPEM and KeyPEM, and then
// for every workload request parses the CSR with ParseCSR, decides the
// identity from authenticated sources (never from the CSR) and signs it with
// SignCSR. Issue makes a key and a certificate in one step, for the hub's own
// serving and peer certificates and for tests.
//
// TrustDomain names a SPIFFE trust domain wherever one is passed (the
// CA's options, the trust bundle's roots, the hub's flags): Validate
// applies the SPIFFE rule, and WorkloadID builds the
// spiffe://<trust-domain>/ns/<ns>/sa/<sa> ID of a service account, the URI
// SAN the hub's CA signs.
package pki
