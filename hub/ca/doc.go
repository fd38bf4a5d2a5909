// Package ca is the hub's certificate authority: it signs workload
// certificates for every proxy of the fleet through Istio's certificate API,
// istio.v1.auth.IstioCertificateService/CreateCertificate
// (istio.io/api/security/v1alpha1), so istio-agent and anything else that
// speaks to istiod's CA can speak to the hub.
//
// Walk-through of one request:
//
//	workload in cluster-2 ──CreateCertificate(CSR)──► Server
//	  metadata: authorization: Bearer <token>, ClusterID: cluster-2
//	                                                  │
//	Authenticator ──TokenReview(token, audiences)──► cluster-2's apiserver
//	  (cached briefly by SHA-256(token) and cluster)  │ system:serviceaccount:<ns>:<sa>
//	                                                  ▼
//	Keys.CA (pkg/pki) signs the CSR's public key for
//	  spiffe://<trust-domain>/ns/<ns>/sa/<sa>  ──► [leaf, intermediates..., roots]
//
// The parts:
//
//   - Keys (keys.go) is the signing CA, read from the config cluster: Istio's
//     plug-in Secret "cacerts" when an operator provides one, else a
//     self-signed root that the first replica creates in Secret
//     "istio-ca-secret" and every other replica reads, so all replicas sign
//     with the same root.
//   - KeyStore (keystore.go) keeps those keys current: it watches both
//     Secrets and swaps the keys when an operator rotates the root in
//     Istio's three steps (add the new root, sign with it, drop the old
//     one). Each change is a Rotation: roots to add to the federated trust
//     bundle at once, and roots to retire once every leaf signed under them
//     has expired (MaxLeafTTL after the CA last signed under them). A
//     Secret that would break trust is refused and the keys in use stay.
//     A new CA whose root is younger than RootSpread is staged until the
//     root has spread. Retirements (retiring.go) are also kept in ConfigMap
//     meshfed-ca-retiring, for a fleet that restarts as a whole before they
//     are due.
//   - Authenticator (authn.go) proves who the caller is. A token is only
//     meaningful to the cluster that issued it, so it is reviewed by the
//     apiserver of the cluster the caller names in its ClusterID metadata,
//     reached through the remote secret's credentials (ClusterConfigs).
//     The apiserver checks signature, expiry, audience and that the service
//     account and any bound object still exist.
//   - Server (server.go) reads the metadata, authenticates, parses the CSR
//     with pki.ParseCSR and signs with pki.CA.SignCSR. The identity in the
//     certificate comes from the reviewed token only; whatever the CSR
//     claims is ignored, as Istio's CA does. Errors are sentinel values of
//     this package up to the wire, where they become gRPC codes:
//     Unauthenticated for every authentication failure (with the cause in
//     the message), InvalidArgument for a bad CSR, Unavailable when a
//     remote apiserver cannot be asked.
//
// The package reads no environment and no globals; clocks are injected
// (k8s.io/utils/clock), for the dates and for the waits alike (the
// KeyStore's resync, the end of a staged rotation, its watch's retry
// backoff), so certificate lifetimes, cache expiry and rotation timing are
// testable without waiting. Trust domains are pki.TrustDomain values.
package ca
