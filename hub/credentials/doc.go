// Package credentials reads the Kubernetes Secrets that proxies name by
// credentialName (a gateway's TLS servers, a DestinationRule's TLS
// origination) in the proxy's own cluster, and tells its subscribers when
// one changes, so that a rotated Secret reaches Envoy without a restart.
//
// A Watcher holds one watch per Secret (cluster, namespace, name) while a
// subscriber wants it, shared by all of them: a list-watch of that one
// name (a field selector on metadata.name), through the remote cluster's
// client as its remote secret defines it, whether or not this replica
// owns the cluster. So a replica watches exactly the Secrets its own
// proxies name, and a remote cluster's reader needs get, list and watch
// on Secrets only in the namespaces where gateways run.
//
// Secret data is kept in memory for the proxies and never logged: errors
// and debug documents name a Secret and its keys, never its values.
package credentials
