package inject

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/template"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Keys of the injection ConfigMap, as in Istio's istio-sidecar-injector.
const (
	// ConfigKey holds the YAML of ConfigFile: policy, default templates
	// and the templates themselves.
	ConfigKey = "config"
	// ValuesKey holds the values (YAML or JSON) the templates see as
	// .Values.
	ValuesKey = "values"
)

// Names of the built-in templates.
const (
	// TemplateSidecar is an Envoy sidecar with traffic redirection.
	TemplateSidecar = "sidecar"
	// TemplateGRPCAgent is proxyless gRPC: a bootstrap for grpc-go and an
	// agent that fetches certificates.
	TemplateGRPCAgent = "grpc-agent"
	// TemplateGateway is an Envoy gateway: pilot-agent `proxy router`
	// in the Pod's istio-proxy container, no traffic redirection.
	TemplateGateway = "gateway"
)

// Errors of this package.
var (
	// ErrInvalidConfig: the injection configuration cannot be used.
	ErrInvalidConfig = errors.New("inject: invalid injection configuration")
	// ErrUnknownTemplate: a Pod asked for a template the configuration
	// does not have.
	ErrUnknownTemplate = errors.New("inject: unknown template")
	// ErrInvalidPod: the object to inject is not a Pod.
	ErrInvalidPod = errors.New("inject: invalid pod")
	// ErrRender: a template failed for this Pod.
	ErrRender = errors.New("inject: rendering template")
)

// Policy is the namespace-level default, as Istio's injection policy.
type Policy string

const (
	// PolicyEnabled injects every Pod the webhook is called for (its
	// namespace is labelled istio-injection=enabled, or the Pod opts in)
	// unless the Pod opts out.
	PolicyEnabled Policy = "enabled"
	// PolicyDisabled injects only Pods that opt in with
	// sidecar.istio.io/inject=true.
	PolicyDisabled Policy = "disabled"
)

// ConfigFile is the document under ConfigKey.
type ConfigFile struct {
	// Policy defaults to PolicyEnabled.
	Policy Policy `json:"policy,omitempty"`
	// DefaultTemplates are applied when a Pod names none in
	// inject.istio.io/templates; empty means [sidecar].
	DefaultTemplates []string `json:"defaultTemplates,omitempty"`
	// Templates maps a name to a Go text/template whose output is YAML: a
	// fragment of a Pod (metadata.labels, metadata.annotations, spec),
	// merged into the Pod like a strategic merge patch.
	Templates map[string]string `json:"templates"`
}

// Config is a parsed injection configuration: compiled templates and
// values. It is immutable once built and safe for concurrent use.
type Config struct {
	policy    Policy
	defaults  []string
	values    map[string]any
	templates map[string]*template.Template
}

//go:embed templates/*.yaml
var builtin embed.FS

// BuiltinTemplates returns meshfed's templates by name: TemplateSidecar,
// TemplateGRPCAgent and TemplateGateway. The spoke chart ships the same files (a test in e2e
// keeps them equal); the running webhook uses whatever its ConfigMap holds.
func BuiltinTemplates() map[string]string {
	out := map[string]string{}
	for _, name := range []string{TemplateSidecar, TemplateGRPCAgent, TemplateGateway} {
		b, err := builtin.ReadFile("templates/" + name + ".yaml")
		if err != nil {
			panic(fmt.Sprintf("inject: embedded template %s: %v", name, err)) // a build defect
		}
		out[name] = string(b)
	}
	return out
}

// ParseConfigMap parses the data of an injection ConfigMap (keys ConfigKey
// and ValuesKey). Every template is rendered once for a sample Pod, so a
// template or values that cannot produce a valid Pod fragment are refused
// here, when the ConfigMap is loaded, not when a Pod is created.
func ParseConfigMap(data map[string]string) (*Config, error) {
	raw, ok := data[ConfigKey]
	if !ok {
		return nil, fmt.Errorf("%w: key %q missing", ErrInvalidConfig, ConfigKey)
	}
	var file ConfigFile
	if err := yaml.UnmarshalStrict([]byte(raw), &file); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, ConfigKey, err)
	}
	values := map[string]any{}
	if v := strings.TrimSpace(data[ValuesKey]); v != "" {
		if err := yaml.Unmarshal([]byte(v), &values); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, ValuesKey, err)
		}
	}
	return NewConfig(file, values)
}

// NewConfig compiles file's templates with values and checks each against
// a sample Pod (see ParseConfigMap).
func NewConfig(file ConfigFile, values map[string]any) (*Config, error) {
	c := &Config{policy: file.Policy, defaults: slices.Clone(file.DefaultTemplates),
		values: values, templates: map[string]*template.Template{}}
	switch c.policy {
	case "":
		c.policy = PolicyEnabled
	case PolicyEnabled, PolicyDisabled:
	default:
		return nil, fmt.Errorf("%w: policy %q: want %q or %q", ErrInvalidConfig, c.policy, PolicyEnabled, PolicyDisabled)
	}
	if len(c.defaults) == 0 {
		c.defaults = []string{TemplateSidecar}
	}
	if c.values == nil {
		c.values = map[string]any{}
	}
	if len(file.Templates) == 0 {
		return nil, fmt.Errorf("%w: no templates", ErrInvalidConfig)
	}
	for _, name := range slices.Sorted(maps.Keys(file.Templates)) {
		if name == "" || strings.ContainsAny(name, ", \t") {
			return nil, fmt.Errorf("%w: template name %q", ErrInvalidConfig, name)
		}
		t, err := template.New(name).Funcs(funcs).Option("missingkey=error").Parse(file.Templates[name])
		if err != nil {
			return nil, fmt.Errorf("%w: template %s: %w", ErrInvalidConfig, name, err)
		}
		c.templates[name] = t
	}
	for _, d := range c.defaults {
		if c.templates[d] == nil {
			return nil, fmt.Errorf("%w: default template %q is not defined", ErrInvalidConfig, d)
		}
	}
	sample := samplePod()
	for _, name := range c.Templates() {
		if _, err := c.render(name, sample.ObjectMeta, sample.Spec); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	return c, nil
}

// Policy returns the injection policy.
func (c *Config) Policy() Policy { return c.policy }

// DefaultTemplates returns the templates applied when a Pod names none.
func (c *Config) DefaultTemplates() []string { return slices.Clone(c.defaults) }

// Templates returns the names of the templates, sorted.
func (c *Config) Templates() []string { return slices.Sorted(maps.Keys(c.templates)) }

// TemplateData is what a template sees.
type TemplateData struct {
	// ObjectMeta of the Pod, with the namespace of the request filled in
	// (a Pod being created may not carry it yet).
	ObjectMeta metav1.ObjectMeta
	// Spec of the Pod before injection.
	Spec corev1.PodSpec
	// Values from the ConfigMap's ValuesKey.
	Values map[string]any
}

// render executes template name for a Pod and returns its output as a JSON
// patch document, checked to be a Pod fragment without unknown fields.
func (c *Config) render(name string, meta metav1.ObjectMeta, spec corev1.PodSpec) ([]byte, error) {
	t := c.templates[name]
	if t == nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownTemplate, name)
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, TemplateData{ObjectMeta: meta, Spec: spec, Values: c.values}); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrRender, name, err)
	}
	js, err := yaml.YAMLToJSON(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("%w %s: output is not YAML: %w", ErrRender, name, err)
	}
	var frag struct {
		Metadata struct {
			Labels      map[string]string `json:"labels,omitempty"`
			Annotations map[string]string `json:"annotations,omitempty"`
		} `json:"metadata"`
		Spec corev1.PodSpec `json:"spec"`
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&frag); err != nil {
		return nil, fmt.Errorf("%w %s: output is not a Pod fragment (metadata.labels, metadata.annotations, spec): %w", ErrRender, name, err)
	}
	var doc map[string]any
	if err := json.Unmarshal(js, &doc); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrRender, name, err)
	}
	// Templates add and merge; a null would delete a field of the Pod.
	return json.Marshal(dropNulls(doc))
}

// dropNulls removes null values from maps, recursively.
func dropNulls(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if e == nil {
				delete(x, k)
				continue
			}
			x[k] = dropNulls(e)
		}
	case []any:
		for i, e := range x {
			x[i] = dropNulls(e)
		}
	}
	return v
}

// samplePod is what templates are checked against when a configuration is
// loaded.
func samplePod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sample", Namespace: "default", Labels: map[string]string{"app": "sample"}},
		Spec: corev1.PodSpec{
			ServiceAccountName: "default",
			Containers:         []corev1.Container{{Name: "app", Image: "sample"}},
		},
	}
}

// funcs are the functions templates may call, beyond text/template's own.
var funcs = template.FuncMap{
	// toJSON renders v as JSON, which is also a valid YAML scalar or
	// flow collection: use it for every string that comes from values
	// or the Pod, so no value can change the YAML's structure.
	"toJSON": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	// dict builds a map from key, value pairs.
	"dict": func(kv ...any) (map[string]any, error) {
		if len(kv)%2 != 0 {
			return nil, errors.New("dict: odd number of arguments")
		}
		m := make(map[string]any, len(kv)/2)
		for i := 0; i < len(kv); i += 2 {
			k, ok := kv[i].(string)
			if !ok {
				return nil, fmt.Errorf("dict: key %v is not a string", kv[i])
			}
			m[k] = kv[i+1]
		}
		return m, nil
	},
	// valueOr looks up a dotted path in a map (values, labels) and
	// returns def when it is missing, null or "".
	"valueOr": valueOr,
	// labelOr is the value of label key in labels (a label key may have
	// dots, which valueOr would read as a path), or def when it is unset
	// or empty.
	"labelOr": func(labels map[string]string, key string, def any) any {
		if v := labels[key]; v != "" {
			return v
		}
		return def
	},
	// canonicalName is the Pod's service name as Istio derives it from
	// its labels, or "".
	"canonicalName": canonicalName,
	// containerNames joins the names of containers with commas.
	"containerNames": func(cs []corev1.Container) string {
		names := make([]string, len(cs))
		for i, c := range cs {
			names[i] = c.Name
		}
		return strings.Join(names, ",")
	},
}

func valueOr(m any, path string, def any) any {
	var cur any = m
	for _, key := range strings.Split(path, ".") {
		switch x := cur.(type) {
		case map[string]any:
			cur = x[key]
		case map[string]string:
			s, ok := x[key]
			if !ok {
				return def
			}
			cur = s
		default:
			return def
		}
	}
	if cur == nil || cur == "" {
		return def
	}
	return cur
}

func canonicalName(meta metav1.ObjectMeta) string {
	for _, l := range []string{"service.istio.io/canonical-name", "app.kubernetes.io/name", "app"} {
		if v := meta.Labels[l]; v != "" {
			return v
		}
	}
	return ""
}
