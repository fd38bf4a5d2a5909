package remotes

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/pkg/remotesecret"
)

// The remote secrets are read from a cache of the provider's own, not the
// manager's, so that it can be rebuilt: client-go's reflectors back off up
// to 30 s between failed watches and are not told when the config
// cluster's apiserver returns (a secret written during an outage waited
// 11-14 s). The provider probes the config cluster as the watcher probes
// remotes (a one-item list of the remote secrets) and, when it answers
// again after failing, lists the secrets anew into a fresh cache and
// reconciles every secret it knows or finds.

// secretSource is one generation of the remote-secret cache.
type secretSource struct {
	cache  cache.Cache
	cancel context.CancelFunc
	done   chan struct{} // closed when the cache has stopped
}

// reconnectConfigKey is the queue key that asks for the secret cache to be
// rebuilt: its namespace can never be a Secret's.
var reconnectConfigKey = types.NamespacedName{Namespace: "\x00reconnect-config"}

// startSecretSource builds the remote-secret cache, starts it, registers
// the queue's handler and waits until it has listed (or ctx ends).
func (p *Provider) startSecretSource(ctx context.Context, queue workqueue.TypedRateLimitingInterface[types.NamespacedName]) (*secretSource, error) {
	opts := SecretCacheOptions(p.opts.Namespace)
	opts.Scheme, opts.Mapper, opts.HTTPClient = p.local.GetScheme(), p.local.GetRESTMapper(), p.local.GetHTTPClient()
	c, err := cache.New(p.local.GetConfig(), opts)
	if err != nil {
		return nil, fmt.Errorf("remotes: remote-secret cache: %w", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	src := &secretSource{cache: c, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(src.done)
		if err := c.Start(cctx); err != nil && cctx.Err() == nil {
			p.opts.Log.Error(err, "remote-secret cache stopped")
		}
	}()
	inf, err := c.GetInformer(cctx, &corev1.Secret{})
	if err != nil {
		src.stop()
		return nil, fmt.Errorf("remotes: watching remote secrets: %w", err)
	}
	enqueue := func(obj any) {
		if o := metaOf(obj); o != nil {
			queue.Add(types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()})
		}
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue,
	})
	if err != nil {
		src.stop()
		return nil, err
	}
	if !toolscache.WaitForCacheSync(cctx.Done(), reg.HasSynced) {
		src.stop()
		return nil, fmt.Errorf("remotes: remote secrets not listed: %w", context.Cause(cctx))
	}
	return src, nil
}

// stop ends the cache; it does not wait for it.
func (s *secretSource) stop() { s.cancel() }

// secrets returns the current remote-secret cache.
func (p *Provider) secrets() cache.Cache {
	p.sourceMu.Lock()
	defer p.sourceMu.Unlock()
	return p.source.cache
}

// reconnectConfig rebuilds the remote-secret cache after the config
// cluster answered again, and queues every secret it finds and every one
// the provider knows (a secret deleted during the outage is gone from the
// new cache: reconciling it removes its clusters).
func (p *Provider) reconnectConfig(ctx context.Context, queue workqueue.TypedRateLimitingInterface[types.NamespacedName]) {
	src, err := p.startSecretSource(ctx, queue)
	if err != nil {
		if ctx.Err() == nil {
			p.opts.Log.Error(err, "rebuilding the remote-secret cache after the config cluster's return; the old one stays")
		}
		return
	}
	p.sourceMu.Lock()
	old := p.source
	p.source = src
	p.sourceMu.Unlock()
	old.stop()
	p.opts.Status.CountConfigReconnect()
	var list corev1.SecretList
	if err := src.cache.List(ctx, &list); err == nil {
		for i := range list.Items {
			queue.Add(types.NamespacedName{Namespace: list.Items[i].Namespace, Name: list.Items[i].Name})
		}
	}
	for name := range p.entries {
		if ns, n, ok := cutSecretName(name); ok {
			queue.Add(types.NamespacedName{Namespace: ns, Name: n})
		}
	}
	p.opts.Log.Info("config cluster answers again: remote secrets listed anew", "secrets", len(list.Items))
}

// probeConfig probes the config cluster every ProbeInterval until ctx
// ends, and queues reconnectConfigKey when it answers after failing.
func (p *Provider) probeConfig(ctx context.Context, queue workqueue.TypedRateLimitingInterface[types.NamespacedName]) {
	sel, _ := metaLabelSelector(remotesecret.MultiClusterLabel + "=true")
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.opts.Clock.After(p.opts.ProbeInterval):
		}
		var list corev1.SecretList
		err := p.local.GetAPIReader().List(ctx, &list, client.InNamespace(p.opts.Namespace), client.Limit(1),
			client.MatchingLabelsSelector{Selector: sel})
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if !failing {
				p.opts.Log.Info("config cluster does not answer; remote clusters keep being served", "error", err.Error())
			}
			failing = true
		case failing:
			failing = false
			queue.Add(reconnectConfigKey)
		}
	}
}

// cutSecretName splits "<namespace>/<name>".
func cutSecretName(s string) (ns, name string, ok bool) { return strings.Cut(s, "/") }
