package inject

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshfed/meshfed/spoke/webhook"
)

// ConfigSource gives the injection configuration in force, or nil before
// one is loaded. Current is called for every request, concurrently, and
// must not block.
type ConfigSource interface {
	Current() *Config
}

// Namespaces gives the labels of a namespace. Labels is called for every
// request that reaches the namespace check, concurrently; it should answer
// from a cache (see NamespaceCache).
type Namespaces interface {
	Labels(ctx context.Context, name string) (map[string]string, error)
}

// Options configure an Injector.
type Options struct {
	// Config is where the current configuration comes from. Required.
	Config ConfigSource
	// Namespaces gives namespace labels for the defensive check. Required.
	Namespaces Namespaces
	Log        logr.Logger
}

// Injector is the mutating admission webhook for Pods. It answers from the
// configuration in memory and the namespace cache only, never calling the
// hub, so injection keeps working while the hub is unreachable.
type Injector struct {
	opts Options
}

// New returns an Injector.
func New(opts Options) *Injector { return &Injector{opts: opts} }

var podKind = metav1.GroupVersionKind{Group: "", Version: "v1", Kind: "Pod"}

// Admit injects a Pod being created, when Required says so.
func (i *Injector) Admit(ctx context.Context, req *admissionv1.AdmissionRequest) webhook.Response {
	if req.Kind != podKind {
		return webhook.Fail(http.StatusBadRequest, fmt.Errorf("inject: expected a v1 Pod, got %s", gvkString(req.Kind)))
	}
	if req.SubResource != "" || req.Operation != admissionv1.Create {
		return webhook.Allow("only the creation of pods is mutated")
	}
	if len(req.Object.Raw) == 0 {
		return webhook.Fail(http.StatusBadRequest, errors.New("inject: request carries no object"))
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return webhook.Fail(http.StatusBadRequest, fmt.Errorf("%w: %w", ErrInvalidPod, err))
	}
	if Injected(&pod) {
		return webhook.Allow("already injected")
	}
	ns := req.Namespace
	if ns == "" {
		ns = pod.Namespace
	}
	nsLabels, err := i.opts.Namespaces.Labels(ctx, ns)
	if err != nil {
		return webhook.Fail(http.StatusServiceUnavailable, fmt.Errorf("inject: labels of namespace %s: %w", ns, err))
	}
	cfg := i.opts.Config.Current()
	policy := PolicyEnabled
	if cfg != nil {
		policy = cfg.Policy()
	}
	if ok, why := Required(&pod, ns, nsLabels, policy); !ok {
		return webhook.Allow(why)
	}
	if cfg == nil {
		// Refuse rather than admit a Pod without its sidecar: it would
		// run outside the mesh unnoticed.
		return webhook.Fail(http.StatusServiceUnavailable, errors.New("inject: no injection configuration loaded yet"))
	}
	patch, err := cfg.Patch(req.Object.Raw, ns)
	switch {
	case errors.Is(err, ErrUnknownTemplate):
		return webhook.Deny(http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
	case err != nil:
		return webhook.Fail(http.StatusInternalServerError, err)
	}
	i.opts.Log.V(1).Info("injecting", "namespace", ns, "pod", podName(&pod))
	return webhook.Patch(patch)
}

func gvkString(k metav1.GroupVersionKind) string {
	if k.Group == "" {
		return k.Version + " " + k.Kind
	}
	return k.Group + "/" + k.Version + " " + k.Kind
}

func podName(p *corev1.Pod) string {
	if p.Name != "" {
		return p.Name
	}
	return p.GenerateName + "*"
}
