package xds

import (
	"maps"
	"slices"
	"sync"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/meshfed/meshfed/hub/credentials"
	"github.com/meshfed/meshfed/hub/xds/xdsstatus"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsgen"
)

// Credentials reads the Kubernetes Secrets that proxies name by
// credentialName (credentials.Watcher). Its methods are safe for
// concurrent use; a changed callback must not block.
type Credentials interface {
	Subscribe(ref credentials.Ref, changed func()) (unsubscribe func())
	Get(ref credentials.Ref) (data map[string][]byte, synced bool, err error)
}

// Reasons a credential an Envoy node asks for is not served
// (meshfed_xds_credentials_refused_total).
const (
	// credentialUnauthenticated: the stream proved no identity (the
	// plaintext port): Secrets are served only to an authenticated
	// proxy, for its own namespace.
	credentialUnauthenticated = "unauthenticated"
	// credentialOtherNamespace: kubernetes://<ns>/<name> of a namespace
	// that is not the proxy's.
	credentialOtherNamespace = "other_namespace"
	// credentialUnreadable: the Secret is missing, lacks the keys, holds
	// a certificate and key that do not parse, or cannot be read.
	credentialUnreadable = "unreadable"
)

var credentialReasons = []string{credentialUnauthenticated, credentialOtherNamespace, credentialUnreadable}

// nodeCredentials are the SDS secrets (kubernetes://...) of one Envoy
// node, made from the Secrets of its namespace in its cluster and held in
// the node's secret cache while one of its streams asks for them. A
// Secret that changes is written again at once: a rotated certificate
// reaches Envoy without a restart.
type nodeCredentials struct {
	s         *Server
	cache     *versioned
	cluster   model.ClusterID
	namespace string

	mu sync.Mutex // guards names and closed
	// names are the SDS names asked for, each with the unsubscribe of
	// its Secrets' watches; nil for a name refused.
	names  map[string]func()
	closed bool
}

func newNodeCredentials(s *Server, l *xdsstatus.Ledger, cluster model.ClusterID, namespace string) *nodeCredentials {
	return &nodeCredentials{s: s, cache: newCache(l, resourcev3.SecretType, nil),
		cluster: cluster, namespace: namespace, names: map[string]func(){}}
}

// want makes the names a stream of the node subscribes to the ones
// served: it starts watching the Secrets of new names (or refuses them,
// counted and logged at a bounded rate) and stops those of names no longer
// asked for. authenticated says the stream proved an identity (whose
// namespace checkNode held against the node's).
func (nc *nodeCredentials) want(subscribed map[string]struct{}, authenticated bool) {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if nc.closed {
		return
	}
	var gone []string
	for name, unsubscribe := range nc.names {
		if _, ok := subscribed[name]; !ok {
			if unsubscribe != nil {
				unsubscribe()
			}
			delete(nc.names, name)
			gone = append(gone, name)
			nc.report(name, "")
		}
	}
	if len(gone) > 0 {
		// Updating only fails for a nil resource.
		_ = nc.cache.UpdateResources(nil, gone)
	}
	for _, name := range slices.Sorted(maps.Keys(subscribed)) {
		if _, ok := nc.names[name]; ok {
			continue
		}
		ref, ok := xdsgen.ParseCredentialName(name)
		if !ok {
			continue // not a credential: unserved, as any unknown name
		}
		switch {
		case !authenticated:
			why := "the stream is not authenticated: credentials are served on the authenticated port only"
			nc.refuse(name, credentialUnauthenticated, why)
			nc.report(name, why)
			nc.names[name] = nil
			continue
		case ref.Namespace != "" && ref.Namespace != nc.namespace:
			why := "the proxy's namespace is " + nc.namespace + ": it may read only its own Secrets"
			nc.refuse(name, credentialOtherNamespace, why)
			nc.report(name, why)
			nc.names[name] = nil
			continue
		}
		var unsubs []func()
		for _, secret := range ref.Secrets() {
			unsubs = append(unsubs, nc.s.opts.Credentials.Subscribe(nc.ref(secret), func() { nc.refresh(name, ref) }))
		}
		nc.names[name] = func() {
			for _, u := range unsubs {
				u()
			}
		}
	}
}

func (nc *nodeCredentials) ref(secret string) credentials.Ref {
	return credentials.Ref{Cluster: nc.cluster, Namespace: nc.namespace, Name: secret}
}

// refresh writes name's secret as its Secrets are now, or removes it when
// they cannot make one (counted, logged at a bounded rate). It runs on
// a Secret's watch goroutine.
func (nc *nodeCredentials) refresh(name string, ref xdsgen.CredentialRef) {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if _, asked := nc.names[name]; !asked || nc.closed {
		return
	}
	var watchErr error
	synced := true
	secret, err := xdsgen.CredentialSecret(name, ref, func(secret string) (map[string][]byte, bool) {
		data, ok, err := nc.s.opts.Credentials.Get(nc.ref(secret))
		if err != nil && watchErr == nil {
			watchErr = err
		}
		synced = synced && ok
		return data, data != nil
	})
	switch {
	case !synced && watchErr == nil:
		return // not listed yet: the first list calls again
	case watchErr != nil:
		err = watchErr
	}
	if err != nil {
		nc.refuse(name, credentialUnreadable, err.Error())
		_ = nc.cache.UpdateResources(nil, []string{name})
		nc.report(name, err.Error())
		return
	}
	_ = nc.cache.UpdateResources(map[string]types.Resource{name: secret}, nil)
	nc.report(name, "")
}

// report records name's problem ("" for none) for GatewayWarnings.
func (nc *nodeCredentials) report(name, problem string) {
	if nc.s.credentialReports.set(nc, name, problem) {
		nc.s.signalGatewayChecks()
	}
}

// refuse counts and logs (at a bounded rate) a credential not served.
func (nc *nodeCredentials) refuse(name, reason, why string) {
	nc.s.metrics.credentialsRefused.WithLabelValues(reason).Inc()
	if nc.s.unservedLog.AllowN(nc.s.clk.Now(), 1) {
		nc.s.opts.Log.Info("credential not served", "cluster", nc.cluster, "namespace", nc.namespace,
			"name", name, "reason", reason, "error", why)
	}
}

// close stops every watch of the node's credentials: its last stream
// closed.
func (nc *nodeCredentials) close() {
	if nc.s.credentialReports.forget(nc) {
		nc.s.signalGatewayChecks()
	}
	nc.mu.Lock()
	defer nc.mu.Unlock()
	nc.closed = true
	for _, unsubscribe := range nc.names {
		if unsubscribe != nil {
			unsubscribe()
		}
	}
	nc.names = nil
}
