// Package trust joins the hub's workload CA to the federated trust bundle.
//
// CA assembles what the CA port serves: the certificate service and its
// signing keys (hub/ca), and the trust-bundle stream of spoke shims and
// workload agents (hub/trustsvc). It is also the glue between the keys and
// the bundle, which hub/replication keeps and replicates (Bundle): at Run,
// the CA's roots join the bundle and the roots that were retiring when the
// fleet last ran are put back (the config cluster's RetiringConfigMap);
// on a key rotation, new roots join at once and dropped ones retire when
// the last leaf signed under them expires, recorded in the config cluster
// for a fleet that restarts as a whole.
//
// Trustz is the bundle's /debug/trustz document (debugdoc.Trustz).
//
// It lives apart from hub/ca because it needs hub/trustsvc, which imports
// hub/ca.
package trust
