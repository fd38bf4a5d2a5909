package inject

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	jsonpatch "gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// Labels and annotations, Istio's names so that existing habits and tools
// carry over.
const (
	// LabelNamespaceInjection on a namespace: "enabled" injects its Pods,
	// "disabled" never does.
	LabelNamespaceInjection = "istio-injection"
	// LabelInject on a Pod (or, legacy, annotation): "true" opts in,
	// "false" opts out. An opt-out wins over everything else.
	LabelInject = "sidecar.istio.io/inject"
	// AnnotationTemplates on a Pod: comma-separated template names,
	// applied in order, instead of the configuration's defaults.
	AnnotationTemplates = "inject.istio.io/templates"
	// AnnotationStatus marks an injected Pod; its value (JSON Status) says
	// what was added. A Pod that has it is never injected again.
	AnnotationStatus = "sidecar.istio.io/status"
)

// ignoredNamespaces are never injected, whatever their labels (as Istio).
var ignoredNamespaces = []string{"kube-system", "kube-public", "kube-node-lease"}

// Status is the value of AnnotationStatus, Istio's fields plus the
// templates applied.
type Status struct {
	InitContainers   []string `json:"initContainers"`
	Containers       []string `json:"containers"`
	Volumes          []string `json:"volumes"`
	ImagePullSecrets []string `json:"imagePullSecrets"`
	Revision         string   `json:"revision"`
	Templates        []string `json:"templates"`
}

// Required reports whether a Pod in namespace, whose labels are nsLabels,
// is to be injected under policy, and why. The rules are Istio's, in
// order:
//
//  1. Pods on the host network and Pods in kube-system, kube-public and
//     kube-node-lease are never injected.
//  2. sidecar.istio.io/inject=false, as label or annotation, opts out.
//  3. A namespace labelled istio-injection=disabled is never injected.
//  4. sidecar.istio.io/inject=true opts in.
//  5. A namespace labelled istio-injection=enabled is injected under
//     PolicyEnabled.
//
// The webhook configuration's selectors call the webhook only for Pods
// that rules 3–5 would inject; the handler applies the rules again so that
// a configuration with looser selectors does not inject by accident.
func Required(pod *corev1.Pod, namespace string, nsLabels map[string]string, policy Policy) (bool, string) {
	if pod.Spec.HostNetwork {
		return false, "pod uses the host network"
	}
	if slices.Contains(ignoredNamespaces, namespace) {
		return false, "namespace " + namespace + " is never injected"
	}
	label, hasLabel := pod.Labels[LabelInject]
	ann, hasAnn := pod.Annotations[LabelInject]
	if (hasLabel && isFalse(label)) || (hasAnn && isFalse(ann)) {
		return false, "pod opts out with " + LabelInject + "=false"
	}
	switch nsLabels[LabelNamespaceInjection] {
	case "disabled":
		return false, "namespace is labelled " + LabelNamespaceInjection + "=disabled"
	}
	if (hasLabel && isTrue(label)) || (hasAnn && isTrue(ann)) {
		return true, "pod opts in with " + LabelInject + "=true"
	}
	if nsLabels[LabelNamespaceInjection] == "enabled" {
		if policy == PolicyDisabled {
			return false, "policy is disabled and the pod does not opt in"
		}
		return true, "namespace is labelled " + LabelNamespaceInjection + "=enabled"
	}
	return false, "neither the namespace nor the pod asks for injection"
}

func isTrue(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "y", "yes", "on", "enabled":
		return true
	}
	return false
}

func isFalse(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "false", "n", "no", "off", "disabled":
		return true
	}
	return false
}

// Injected reports whether pod carries AnnotationStatus.
func Injected(pod *corev1.Pod) bool {
	_, ok := pod.Annotations[AnnotationStatus]
	return ok
}

// TemplatesFor returns the templates to apply to pod: those its
// AnnotationTemplates names, else the configuration's defaults. Unknown
// names are an error wrapping ErrUnknownTemplate.
func (c *Config) TemplatesFor(pod *corev1.Pod) ([]string, error) {
	v, ok := pod.Annotations[AnnotationTemplates]
	if !ok || strings.TrimSpace(v) == "" {
		return c.DefaultTemplates(), nil
	}
	var names []string
	for _, n := range strings.Split(v, ",") {
		n = strings.TrimSpace(n)
		if n == "" || slices.Contains(names, n) {
			continue
		}
		if c.templates[n] == nil {
			return nil, fmt.Errorf("%w: %s: %q (have %s)", ErrUnknownTemplate, AnnotationTemplates, n,
				strings.Join(c.Templates(), ", "))
		}
		names = append(names, n)
	}
	return names, nil
}

// Inject returns the JSON of the Pod whose JSON is raw after injection.
// namespace is the request's: a Pod being created may not carry one yet.
// A Pod that is already injected (AnnotationStatus) is returned as it is,
// so injecting twice changes nothing. Inject does not decide whether the
// Pod should be injected (see Required).
func (c *Config) Inject(raw []byte, namespace string) ([]byte, error) {
	var pod corev1.Pod
	if err := json.Unmarshal(raw, &pod); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidPod, err)
	}
	if Injected(&pod) {
		return raw, nil
	}
	names, err := c.TemplatesFor(&pod)
	if err != nil {
		return nil, err
	}
	meta := *pod.ObjectMeta.DeepCopy()
	if meta.Namespace == "" {
		meta.Namespace = namespace
	}
	cur := raw
	for _, name := range names {
		// Every template sees the Pod as it was, as Istio's do.
		frag, err := c.render(name, meta, pod.Spec)
		if err != nil {
			return nil, err
		}
		if cur, err = strategicpatch.StrategicMergePatch(cur, frag, corev1.Pod{}); err != nil {
			return nil, fmt.Errorf("%w %s: merging into the pod: %w", ErrRender, name, err)
		}
	}
	var out corev1.Pod
	if err := json.Unmarshal(cur, &out); err != nil {
		return nil, fmt.Errorf("%w: injected pod: %w", ErrRender, err)
	}
	st := Status{
		InitContainers: added(containerNames(pod.Spec.InitContainers), containerNames(out.Spec.InitContainers)),
		Containers:     added(containerNames(pod.Spec.Containers), containerNames(out.Spec.Containers)),
		Volumes:        added(volumeNames(pod.Spec.Volumes), volumeNames(out.Spec.Volumes)),
		Revision:       "default",
		Templates:      names,
	}
	stJSON, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	return finish(cur, st, string(stJSON))
}

// finish orders the containers and sets AnnotationStatus. Injected init
// containers go first: they set up the network and the certificates that
// other init containers may need. Injected containers go last, as Istio
// orders them, so that the application stays the Pod's first container.
func finish(podJSON []byte, st Status, status string) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(podJSON, &doc); err != nil {
		return nil, fmt.Errorf("%w: injected pod: %w", ErrRender, err)
	}
	meta, _ := doc["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		doc["metadata"] = meta
	}
	ann, _ := meta["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
		meta["annotations"] = ann
	}
	ann[AnnotationStatus] = status
	if spec, _ := doc["spec"].(map[string]any); spec != nil {
		// A strategic merge puts new list items first.
		spec["initContainers"] = injectedFirst(spec["initContainers"], st.InitContainers, true)
		spec["containers"] = injectedFirst(spec["containers"], st.Containers, false)
	}
	return json.Marshal(doc)
}

// injectedFirst reorders a list of containers (JSON) so that those named in
// injected come first (first) or last (!first), keeping relative order.
func injectedFirst(list any, injected []string, first bool) any {
	items, _ := list.([]any)
	if len(items) == 0 || len(injected) == 0 {
		return list
	}
	isInjected := func(c any) bool {
		m, _ := c.(map[string]any)
		name, _ := m["name"].(string)
		return slices.Contains(injected, name)
	}
	ours := slices.DeleteFunc(slices.Clone(items), func(c any) bool { return !isInjected(c) })
	theirs := slices.DeleteFunc(slices.Clone(items), isInjected)
	if first {
		return append(ours, theirs...)
	}
	return append(theirs, ours...)
}

// Patch returns the JSONPatch (RFC 6902) that turns the Pod raw into
// Inject(raw, namespace); "[]" when there is nothing to do.
func (c *Config) Patch(raw []byte, namespace string) ([]byte, error) {
	out, err := c.Inject(raw, namespace)
	if err != nil {
		return nil, err
	}
	ops, err := jsonpatch.CreatePatch(raw, out)
	if err != nil {
		return nil, fmt.Errorf("%w: diff: %w", ErrRender, err)
	}
	if len(ops) == 0 {
		return []byte("[]"), nil
	}
	return json.Marshal(ops)
}

func containerNames(cs []corev1.Container) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	return out
}

func volumeNames(vs []corev1.Volume) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Name
	}
	return out
}

// added returns the names in after that are not in before, in order.
func added(before, after []string) []string {
	out := []string{}
	for _, n := range after {
		if !slices.Contains(before, n) {
			out = append(out, n)
		}
	}
	return out
}
