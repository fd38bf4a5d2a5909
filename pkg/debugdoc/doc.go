// Package debugdoc declares the JSON documents a hub replica serves under
// /debug/ on its monitoring address, once for the hub that writes them and
// for meshfedctl, the e2e framework and any other reader. It holds types,
// their paths and small lookups; no I/O.
//
// The documents:
//
//	/debug/registryz     Registryz: remote clusters, rejected secrets, merged services
//	/debug/federationz   Federationz: live members, owners and state version per cluster
//	/debug/trustz        Trustz: the federated trust bundle, each root with its PEM
//	/debug/spokez        Spokez: every spoke of the fleet and the replicas holding its streams
//	/debug/proxystatusz  proxystatus.JSONDocument: every proxy's sync status
//	/debug/clusterz      Clusterz: the remote clusters in istiod's shape, for istioctl remote-clusters
//
// A hub without federation serves no federationz, and one without the CA no
// trustz or spokez (404): readers treat those as optional.
package debugdoc
