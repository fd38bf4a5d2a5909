package istioconfig

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
)

// maxConflicts bounds the immediate retries of a status patch that
// conflicts; past them the key is retried later with backoff.
const maxConflicts = 3

// writeNext writes the status of one queued key. It returns false once the
// queue has shut down. Only the writer goroutine calls it.
func (w *Watcher) writeNext(ctx context.Context) bool {
	k, quit := w.statusQ.Get()
	if quit {
		return false
	}
	defer w.statusQ.Done(k)
	if err := w.writeStatus(ctx, k); err != nil {
		if ctx.Err() == nil {
			w.log.Error(err, "writing the status of Istio config", "object", k)
			w.statusQ.AddRateLimited(k)
		}
		return true
	}
	w.statusQ.Forget(k)
	return true
}

// writeStatus patches k's status to the condition its entry should carry,
// unless it carries it already.
func (w *Watcher) writeStatus(ctx context.Context, k istioconfig.Key) error {
	w.mu.Lock()
	e, lost, warnings, snap := w.entries[k], w.lost[k], w.warningsLocked(k), w.snap
	w.mu.Unlock()
	if e == nil {
		delete(w.patchedFrom, k) // gone
		return nil
	}
	if validate.IsGatewayAPI(k.Kind) {
		want, ok := snap.GatewayAPIStatus(k)
		if !ok || e.obj == nil {
			return nil
		}
		return w.writeAPIStatus(ctx, k, e, istioconfig.WithListenerProblems(want, warnings))
	}
	want := e.desired(lost, warnings)
	u, err := w.get(ctx, w.cache, k)
	if err == nil && w.patchedFrom[k] != "" {
		if u.GetResourceVersion() == w.patchedFrom[k] {
			// The cache has not seen this writer's last patch yet; its
			// event will bring another round, which checks again.
			return nil
		}
		delete(w.patchedFrom, k)
	}
	for attempt := 0; ; attempt++ {
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if !e.sameVersion(u) || !carriedOf(u).needsWrite(want) {
			// A newer generation is its own round's business; a status
			// that is right already needs nothing.
			return nil
		}
		err = w.patch(ctx, k, u, want)
		switch {
		case err == nil:
			w.metrics.writes.WithLabelValues(WriteOK).Inc()
			w.patchedFrom[k] = u.GetResourceVersion()
			return nil
		case !apierrors.IsConflict(err) || attempt == maxConflicts:
			w.metrics.writes.WithLabelValues(WriteError).Inc()
			return err
		}
		w.metrics.writes.WithLabelValues(WriteConflict).Inc()
		u, err = w.get(ctx, w.client, k) // the apiserver's current version
	}
}

// get reads k through r (the cache, or the apiserver).
func (w *Watcher) get(ctx context.Context, r client.Reader, k istioconfig.Key) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk(k.Kind))
	if err := r.Get(ctx, client.ObjectKey{Namespace: k.Namespace, Name: k.Name}, u); err != nil {
		return nil, err
	}
	return u, nil
}

// patch sends the status patch of u. The result goes to a fresh object:
// u may be the cache's own.
func (w *Watcher) patch(ctx context.Context, k istioconfig.Key, u *unstructured.Unstructured, want condition) error {
	body, err := statusPatch(u, want, w.opts.Clock.Now().UTC().Format(time.RFC3339))
	if err != nil {
		return fmt.Errorf("istioconfig: status patch of %s: %w", k, err)
	}
	out := &unstructured.Unstructured{}
	out.SetGroupVersionKind(gvk(k.Kind))
	out.SetNamespace(k.Namespace)
	out.SetName(k.Name)
	if err := w.client.Status().Patch(ctx, out, client.RawPatch(types.MergePatchType, body)); err != nil {
		return fmt.Errorf("istioconfig: writing the status of %s: %w", k, err)
	}
	return nil
}

// writeAPIStatus patches the status of Gateway API object k to want,
// unless it carries it already; as writeStatus does for Istio's kinds.
func (w *Watcher) writeAPIStatus(ctx context.Context, k istioconfig.Key, e *entry, want istioconfig.GatewayAPIStatus) error {
	u, err := w.get(ctx, w.cache, k)
	if err == nil && w.patchedFrom[k] != "" {
		if u.GetResourceVersion() == w.patchedFrom[k] {
			return nil // the cache has not seen the last patch yet
		}
		delete(w.patchedFrom, k)
	}
	for attempt := 0; ; attempt++ {
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		seen, _ := u.Object["status"].(map[string]any)
		if !e.sameVersion(u) || !apiStatusDue(k.Kind, seen, want) {
			return nil
		}
		body, perr := apiStatusPatch(k.Kind, u, want, metav1.NewTime(w.opts.Clock.Now().UTC().Truncate(time.Second)))
		if perr != nil {
			return fmt.Errorf("istioconfig: status patch of %s: %w", k, perr)
		}
		out := &unstructured.Unstructured{}
		out.SetGroupVersionKind(gvk(k.Kind))
		out.SetNamespace(k.Namespace)
		out.SetName(k.Name)
		err = w.client.Status().Patch(ctx, out, client.RawPatch(types.MergePatchType, body))
		switch {
		case err == nil:
			w.metrics.writes.WithLabelValues(WriteOK).Inc()
			w.patchedFrom[k] = u.GetResourceVersion()
			return nil
		case !apierrors.IsConflict(err) || attempt == maxConflicts:
			w.metrics.writes.WithLabelValues(WriteError).Inc()
			return fmt.Errorf("istioconfig: status of %s: %w", k, err)
		}
		w.metrics.writes.WithLabelValues(WriteConflict).Inc()
		u, err = w.get(ctx, w.client, k)
	}
}
