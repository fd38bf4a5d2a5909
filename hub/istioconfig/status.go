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
		want = istioconfig.WithListenerProblems(want, warnings)
		return w.writeWith(ctx, k, e,
			func(u *unstructured.Unstructured) bool {
				seen, _ := u.Object["status"].(map[string]any)
				return apiStatusDue(k.Kind, seen, want)
			},
			func(u *unstructured.Unstructured) error { return w.patchAPI(ctx, k, u, want) })
	}
	want := e.desired(lost, warnings)
	return w.writeWith(ctx, k, e,
		func(u *unstructured.Unstructured) bool { return carriedOf(u).needsWrite(want) },
		func(u *unstructured.Unstructured) error { return w.patch(ctx, k, u, want) })
}

// writeWith patches k's status with patch, read as the cache holds it,
// while due says the object does not carry what it should; a conflict
// reads the apiserver's version and tries again, up to maxConflicts.
func (w *Watcher) writeWith(ctx context.Context, k istioconfig.Key, e *entry,
	due func(*unstructured.Unstructured) bool, patch func(*unstructured.Unstructured) error) error {
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
		if !e.sameVersion(u) || !due(u) {
			// A newer generation is its own round's business; a status
			// that is right already needs nothing.
			return nil
		}
		err = patch(u)
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
	return w.sendStatus(ctx, k, body)
}

// sendStatus sends the JSON merge patch body to k's status subresource.
func (w *Watcher) sendStatus(ctx context.Context, k istioconfig.Key, body []byte) error {
	out := &unstructured.Unstructured{}
	out.SetGroupVersionKind(gvk(k.Kind))
	out.SetNamespace(k.Namespace)
	out.SetName(k.Name)
	if err := w.client.Status().Patch(ctx, out, client.RawPatch(types.MergePatchType, body)); err != nil {
		return fmt.Errorf("istioconfig: writing the status of %s: %w", k, err)
	}
	return nil
}

// patchAPI sends the status patch of Gateway API object u to want.
func (w *Watcher) patchAPI(ctx context.Context, k istioconfig.Key, u *unstructured.Unstructured, want istioconfig.GatewayAPIStatus) error {
	body, err := apiStatusPatch(k.Kind, u, want, metav1.NewTime(w.opts.Clock.Now().UTC().Truncate(time.Second)))
	if err != nil {
		return fmt.Errorf("istioconfig: status patch of %s: %w", k, err)
	}
	return w.sendStatus(ctx, k, body)
}
