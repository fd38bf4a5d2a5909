package inject_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshfed/meshfed/spoke/inject"
)

// testValues are the values the spoke chart writes, for cluster-1.
func testValues() map[string]any {
	return map[string]any{
		"clusterID":        "cluster-1",
		"network":          "network-1",
		"trustDomain":      "cluster.local",
		"domainSuffix":     "cluster.local",
		"discoveryAddress": "hub.meshfed.example:15010",
		"caAddress":        "hub.meshfed.example:15012",
		"proxy":            map[string]any{"image": "docker.io/istio/proxyv2:1.28.0"},
		"agent":            map[string]any{"image": "ghcr.io/meshfed/meshfed-agent:0.1.0"},
	}
}

func testConfig(t testing.TB) *inject.Config {
	t.Helper()
	cfg, err := inject.NewConfig(inject.ConfigFile{Templates: inject.BuiltinTemplates()}, testValues())
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func appPod(mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: "echo-", Labels: map[string]string{"app": "echo"}},
		Spec: corev1.PodSpec{
			ServiceAccountName: "echo",
			Containers: []corev1.Container{{
				Name: "echo", Image: "echo:1",
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				Env:   []corev1.EnvVar{{Name: "GREETING", Value: "hi"}},
			}},
		},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func podJSON(t testing.TB, p *corev1.Pod) []byte {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// applyPatch applies a JSONPatch with an implementation independent of the
// one that made it, and decodes the result.
func applyPatch(t testing.TB, raw, patch []byte) (*corev1.Pod, []byte) {
	t.Helper()
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatalf("decoding patch %s: %v", patch, err)
	}
	out, err := p.Apply(raw)
	if err != nil {
		t.Fatalf("applying patch %s: %v", patch, err)
	}
	var pod corev1.Pod
	if err := json.Unmarshal(out, &pod); err != nil {
		t.Fatal(err)
	}
	return &pod, out
}

func container(cs []corev1.Container, name string) *corev1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

func env(c *corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

func names[T any](items []T, name func(T) string) []string {
	var out []string
	for _, it := range items {
		out = append(out, name(it))
	}
	return out
}

func containerNames(cs []corev1.Container) []string {
	return names(cs, func(c corev1.Container) string { return c.Name })
}

func status(t testing.TB, p *corev1.Pod) inject.Status {
	t.Helper()
	v, ok := p.Annotations[inject.AnnotationStatus]
	if !ok {
		t.Fatalf("no %s annotation", inject.AnnotationStatus)
	}
	var st inject.Status
	if err := json.Unmarshal([]byte(v), &st); err != nil {
		t.Fatalf("status annotation %q: %v", v, err)
	}
	return st
}

func TestInjectSidecar(t *testing.T) {
	cfg := testConfig(t)
	raw := podJSON(t, appPod(func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "setup:1"}}
	}))
	patch, err := cfg.Patch(raw, "demo")
	if err != nil {
		t.Fatal(err)
	}
	pod, _ := applyPatch(t, raw, patch)

	if got, want := containerNames(pod.Spec.Containers), []string{"echo", "istio-proxy"}; !slices.Equal(got, want) {
		t.Errorf("containers %v, want %v", got, want)
	}
	if got, want := containerNames(pod.Spec.InitContainers), []string{"istio-init", "setup"}; !slices.Equal(got, want) {
		t.Errorf("init containers %v, want %v (injected first)", got, want)
	}
	proxy := container(pod.Spec.Containers, "istio-proxy")
	for name, want := range map[string]string{
		"ISTIO_META_CLUSTER_ID":     "cluster-1",
		"ISTIO_META_NETWORK":        "network-1",
		"TRUST_DOMAIN":              "cluster.local",
		"CA_ADDR":                   "hub.meshfed.example:15012",
		"PROXY_CONFIG":              `{"discoveryAddress":"hub.meshfed.example:15012"}`,
		"ISTIO_META_APP_CONTAINERS": "echo",
		"ISTIO_META_WORKLOAD_NAME":  "echo",
	} {
		if got, ok := env(proxy, name); !ok || got != want {
			t.Errorf("istio-proxy env %s = %q (set %v), want %q", name, got, ok, want)
		}
	}
	// A Pod that says its network is on it, whatever the cluster's.
	own := podJSON(t, appPod(func(p *corev1.Pod) { p.Labels["topology.istio.io/network"] = "network-9" }))
	ownPatch, err := cfg.Patch(own, "demo")
	if err != nil {
		t.Fatal(err)
	}
	ownPod, _ := applyPatch(t, own, ownPatch)
	if got, _ := env(container(ownPod.Spec.Containers, "istio-proxy"), "ISTIO_META_NETWORK"); got != "network-9" {
		t.Errorf("a Pod labelled with its network gets ISTIO_META_NETWORK %q, want network-9", got)
	}
	if proxy.Image != "docker.io/istio/proxyv2:1.28.0" {
		t.Errorf("istio-proxy image %q", proxy.Image)
	}
	if got := proxy.Args[3]; got != "$(POD_NAMESPACE).svc.cluster.local" {
		t.Errorf("--domain %q", got)
	}
	// The application is left as it was.
	if app := container(pod.Spec.Containers, "echo"); !reflect.DeepEqual(*app, appPod().Spec.Containers[0]) {
		t.Errorf("application container changed: %+v", *app)
	}
	if pod.Annotations["kubectl.kubernetes.io/default-container"] != "echo" {
		t.Errorf("annotations %v", pod.Annotations)
	}
	if pod.Labels["security.istio.io/tlsMode"] != "istio" || pod.Labels["app"] != "echo" {
		t.Errorf("labels %v", pod.Labels)
	}
	st := status(t, pod)
	if !slices.Equal(st.Containers, []string{"istio-proxy"}) || !slices.Equal(st.InitContainers, []string{"istio-init"}) ||
		!slices.Equal(st.Templates, []string{"sidecar"}) || !slices.Contains(st.Volumes, "istiod-ca-cert") {
		t.Errorf("status %+v", st)
	}
	for _, v := range []string{"workload-socket", "istio-envoy", "istio-data", "istio-podinfo", "istio-token", "istiod-ca-cert"} {
		if !slices.Contains(names(pod.Spec.Volumes, func(v corev1.Volume) string { return v.Name }), v) {
			t.Errorf("volume %s missing", v)
		}
	}
}

func TestInjectGRPCAgent(t *testing.T) {
	cfg := testConfig(t)
	raw := podJSON(t, appPod(func(p *corev1.Pod) {
		p.Annotations = map[string]string{inject.AnnotationTemplates: "grpc-agent"}
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "helper", Image: "helper:1"})
	}))
	patch, err := cfg.Patch(raw, "demo")
	if err != nil {
		t.Fatal(err)
	}
	pod, _ := applyPatch(t, raw, patch)
	if container(pod.Spec.Containers, "istio-proxy") != nil {
		t.Error("grpc-agent injected an Envoy sidecar")
	}
	for _, c := range pod.Spec.Containers {
		if v, _ := env(&c, "GRPC_XDS_BOOTSTRAP"); v != "/etc/istio/proxy/grpc-bootstrap.json" {
			t.Errorf("container %s: GRPC_XDS_BOOTSTRAP = %q", c.Name, v)
		}
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == "istio-xds" && m.MountPath == "/etc/istio/proxy"
		}) {
			t.Errorf("container %s does not mount the bootstrap volume: %v", c.Name, c.VolumeMounts)
		}
	}
	if v, _ := env(container(pod.Spec.Containers, "echo"), "GREETING"); v != "hi" {
		t.Errorf("application env lost: GREETING=%q", v)
	}
	agent := container(pod.Spec.InitContainers, "meshfed-agent")
	if agent == nil || agent.Image != "ghcr.io/meshfed/meshfed-agent:0.1.0" {
		t.Fatalf("agent %+v", agent)
	}
	if agent.RestartPolicy == nil || *agent.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("agent is not a native sidecar: restartPolicy %v", agent.RestartPolicy)
	}
	if v, _ := env(agent, "ISTIO_META_CLUSTER_ID"); v != "cluster-1" {
		t.Errorf("agent CLUSTER_ID %q", v)
	}
	// The agent's bootstrap dials the hub's authenticated port (its CA
	// address, the default) over mutual TLS, never the plaintext one.
	if !slices.Contains(agent.Args, "--ca-address=hub.meshfed.example:15012") ||
		slices.ContainsFunc(agent.Args, func(a string) bool { return strings.HasPrefix(a, "--discovery-address") || a == "--xds-plaintext" }) {
		t.Errorf("agent args %v", agent.Args)
	}
	st := status(t, pod)
	if !slices.Equal(st.InitContainers, []string{"meshfed-agent"}) || len(st.Containers) != 0 ||
		!slices.Contains(st.Volumes, "istio-xds") {
		t.Errorf("status %+v", st)
	}
}

func TestTemplateSelection(t *testing.T) {
	cfg := testConfig(t)
	for _, tc := range []struct {
		annotation string // "" = none
		want       []string
		err        error
	}{
		{"", []string{"sidecar"}, nil},
		{"grpc-agent", []string{"grpc-agent"}, nil},
		{" sidecar , grpc-agent,sidecar", []string{"sidecar", "grpc-agent"}, nil},
		{"envoy", nil, inject.ErrUnknownTemplate},
		{"sidecar,,nope", nil, inject.ErrUnknownTemplate},
	} {
		p := appPod()
		if tc.annotation != "" {
			p.Annotations = map[string]string{inject.AnnotationTemplates: tc.annotation}
		}
		got, err := cfg.TemplatesFor(p)
		if !errors.Is(err, tc.err) || !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %v, %v; want %v, %v", tc.annotation, got, err, tc.want, tc.err)
		}
	}
	// Both templates together: an Envoy and the gRPC bootstrap.
	raw := podJSON(t, appPod(func(p *corev1.Pod) {
		p.Annotations = map[string]string{inject.AnnotationTemplates: "sidecar,grpc-agent"}
	}))
	patch, err := cfg.Patch(raw, "demo")
	if err != nil {
		t.Fatal(err)
	}
	pod, _ := applyPatch(t, raw, patch)
	if container(pod.Spec.Containers, "istio-proxy") == nil || container(pod.Spec.InitContainers, "meshfed-agent") == nil {
		t.Errorf("containers %v, init %v", containerNames(pod.Spec.Containers), containerNames(pod.Spec.InitContainers))
	}
	// Default templates come from the configuration.
	grpcDefault, err := inject.NewConfig(inject.ConfigFile{
		Templates: inject.BuiltinTemplates(), DefaultTemplates: []string{"grpc-agent"},
	}, testValues())
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := grpcDefault.TemplatesFor(appPod()); !slices.Equal(got, []string{"grpc-agent"}) {
		t.Errorf("defaults %v", got)
	}
}

func TestInjectIsIdempotent(t *testing.T) {
	cfg := testConfig(t)
	for _, tmpl := range []string{"sidecar", "grpc-agent", "sidecar,grpc-agent"} {
		raw := podJSON(t, appPod(func(p *corev1.Pod) {
			p.Annotations = map[string]string{inject.AnnotationTemplates: tmpl}
		}))
		once, err := cfg.Inject(raw, "demo")
		if err != nil {
			t.Fatal(err)
		}
		patch, err := cfg.Patch(raw, "demo")
		if err != nil {
			t.Fatal(err)
		}
		// The patch turns the Pod into exactly what Inject returns.
		_, patched := applyPatch(t, raw, patch)
		if !jsonpatch.Equal(patched, once) {
			t.Errorf("%s: patched pod differs from injected pod:\n%s\n%s", tmpl, patched, once)
		}
		twice, err := cfg.Inject(once, "demo")
		if err != nil {
			t.Fatal(err)
		}
		if string(twice) != string(once) {
			t.Errorf("%s: second injection changed the pod", tmpl)
		}
		if again, err := cfg.Patch(once, "demo"); err != nil || string(again) != "[]" {
			t.Errorf("%s: second patch %s, %v; want []", tmpl, again, err)
		}
	}
}

func TestRequired(t *testing.T) {
	enabled := map[string]string{inject.LabelNamespaceInjection: "enabled"}
	disabled := map[string]string{inject.LabelNamespaceInjection: "disabled"}
	label := func(v string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Labels[inject.LabelInject] = v }
	}
	annotate := func(v string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Annotations = map[string]string{inject.LabelInject: v} }
	}
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		ns     string
		labels map[string]string
		policy inject.Policy
		want   bool
	}{
		{"namespace enabled", appPod(), "demo", enabled, inject.PolicyEnabled, true},
		{"namespace unlabelled", appPod(), "demo", nil, inject.PolicyEnabled, false},
		{"pod opts in", appPod(label("true")), "demo", nil, inject.PolicyEnabled, true},
		{"pod opts in by annotation", appPod(annotate("true")), "demo", nil, inject.PolicyEnabled, true},
		{"pod opts out in enabled namespace", appPod(label("false")), "demo", enabled, inject.PolicyEnabled, false},
		{"annotation opts out", appPod(annotate("false")), "demo", enabled, inject.PolicyEnabled, false},
		{"opt-out wins over opt-in", appPod(label("true"), annotate("false")), "demo", enabled, inject.PolicyEnabled, false},
		{"namespace disabled beats opt-in", appPod(label("true")), "demo", disabled, inject.PolicyEnabled, false},
		{"policy disabled", appPod(), "demo", enabled, inject.PolicyDisabled, false},
		{"policy disabled, opt-in", appPod(label("true")), "demo", enabled, inject.PolicyDisabled, true},
		{"host network", appPod(func(p *corev1.Pod) { p.Spec.HostNetwork = true }), "demo", enabled, inject.PolicyEnabled, false},
		{"kube-system", appPod(label("true")), "kube-system", enabled, inject.PolicyEnabled, false},
	} {
		if got, why := inject.Required(tc.pod, tc.ns, tc.labels, tc.policy); got != tc.want || why == "" {
			t.Errorf("%s: Required = %v (%s), want %v", tc.name, got, why, tc.want)
		}
	}
}

func TestParseConfigMap(t *testing.T) {
	values, err := yaml.Marshal(testValues())
	if err != nil {
		t.Fatal(err)
	}
	good := func() map[string]string {
		cfg, err := yaml.Marshal(inject.ConfigFile{Policy: inject.PolicyEnabled, Templates: inject.BuiltinTemplates()})
		if err != nil {
			t.Fatal(err)
		}
		return map[string]string{inject.ConfigKey: string(cfg), inject.ValuesKey: string(values)}
	}
	cfg, err := inject.ParseConfigMap(good())
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Templates(); !slices.Equal(got, []string{"gateway", "grpc-agent", "sidecar"}) {
		t.Errorf("templates %v", got)
	}
	// Values may be JSON, as Istio writes them.
	js, _ := json.Marshal(testValues())
	data := good()
	data[inject.ValuesKey] = string(js)
	if _, err := inject.ParseConfigMap(data); err != nil {
		t.Errorf("JSON values: %v", err)
	}

	withTemplate := func(body string) map[string]string {
		d := good()
		d[inject.ConfigKey] = "templates:\n  sidecar: |\n" + indent(body, "    ")
		return d
	}
	for _, tc := range []struct {
		name string
		data map[string]string
		want string
	}{
		{"no config key", map[string]string{inject.ValuesKey: "{}"}, `key "config" missing`},
		{"config not YAML", map[string]string{inject.ConfigKey: "templates: ["}, "config"},
		{"unknown config field", map[string]string{inject.ConfigKey: "templatez: {}"}, "templatez"},
		{"no templates", map[string]string{inject.ConfigKey: "policy: enabled"}, "no templates"},
		{"bad policy", map[string]string{inject.ConfigKey: "policy: sometimes\ntemplates: {sidecar: 'spec: {}'}"}, "policy"},
		{"default not defined", map[string]string{inject.ConfigKey: "defaultTemplates: [envoy]\ntemplates: {sidecar: 'spec: {}'}"}, `"envoy"`},
		{"values not YAML", func() map[string]string { d := good(); d[inject.ValuesKey] = "a: ["; return d }(), "values"},
		{"template syntax", withTemplate("spec: {{ .Values.x "), "template sidecar"},
		{"template output not a pod", withTemplate("spec:\n  containerz: []\n"), "containerz"},
		{"template output wrong type", withTemplate("spec:\n  containers: 3\n"), "Pod fragment"},
		{"missing value", withTemplate("spec:\n  containers:\n  - name: x\n    image: {{ .Values.nope }}\n"), "nope"},
	} {
		_, err := inject.ParseConfigMap(tc.data)
		if !errors.Is(err, inject.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want ErrInvalidConfig mentioning %q", tc.name, err, tc.want)
		}
	}
}

func indent(s, pre string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = pre + lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}

func TestTemplatesCannotDeleteFields(t *testing.T) {
	// A null in a template's output would make the merge delete a field;
	// it is dropped instead.
	cfg, err := inject.NewConfig(inject.ConfigFile{Templates: map[string]string{
		"sidecar": "spec:\n  containers: null\n  volumes:\n  - name: extra\n    emptyDir: {}\n",
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw := podJSON(t, appPod())
	out, err := cfg.Inject(raw, "demo")
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := json.Unmarshal(out, &pod); err != nil {
		t.Fatal(err)
	}
	if len(pod.Spec.Containers) != 1 || len(pod.Spec.Volumes) != 1 {
		t.Errorf("containers %v volumes %v", containerNames(pod.Spec.Containers), pod.Spec.Volumes)
	}
}

// FuzzParseConfigMap: whatever the injection ConfigMap's values and
// policy say (the builtin templates kept, so that no template of the
// fuzzer's runs), it is parsed or refused with ErrInvalidConfig, and a
// parsed one lists its templates.
func FuzzParseConfigMap(f *testing.F) {
	values, err := yaml.Marshal(testValues())
	if err != nil {
		f.Fatal(err)
	}
	js, err := json.Marshal(testValues())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(inject.PolicyEnabled), string(values))
	f.Add(string(inject.PolicyDisabled), string(js))
	f.Add("", "clusterID: [")
	f.Add("sometimes", "{}")
	f.Fuzz(func(t *testing.T, policy, values string) {
		cfg, err := yaml.Marshal(inject.ConfigFile{Policy: inject.Policy(policy), Templates: inject.BuiltinTemplates()})
		if err != nil {
			return
		}
		c, err := inject.ParseConfigMap(map[string]string{inject.ConfigKey: string(cfg), inject.ValuesKey: values})
		if err != nil {
			if !errors.Is(err, inject.ErrInvalidConfig) {
				t.Fatalf("refused with %v, not ErrInvalidConfig", err)
			}
			return
		}
		if len(c.Templates()) == 0 {
			t.Fatal("a parsed ConfigMap has no templates")
		}
	})
}

// TestInjectGateway: the gateway template makes the Pod's istio-proxy
// container (Istio's gateway chart names it so, image "auto") pilot-agent
// `proxy router`, with no traffic redirection and the unprivileged port
// sysctl that binding 80 and 443 as 1337 needs.
func TestInjectGateway(t *testing.T) {
	cfg := testConfig(t)
	raw := podJSON(t, appPod(func(p *corev1.Pod) {
		p.Labels = map[string]string{"istio": "ingressgateway"}
		p.Annotations = map[string]string{inject.AnnotationTemplates: inject.TemplateGateway}
		p.Spec.Containers = []corev1.Container{{Name: "istio-proxy", Image: "auto"}}
	}))
	patch, err := cfg.Patch(raw, "ingress")
	if err != nil {
		t.Fatal(err)
	}
	pod, _ := applyPatch(t, raw, patch)
	proxy := container(pod.Spec.Containers, "istio-proxy")
	if len(pod.Spec.Containers) != 1 || proxy == nil || proxy.Image != "docker.io/istio/proxyv2:1.28.0" {
		t.Fatalf("containers %+v", pod.Spec.Containers)
	}
	if len(proxy.Args) < 2 || proxy.Args[0] != "proxy" || proxy.Args[1] != "router" {
		t.Errorf("istio-proxy args %v, want proxy router ...", proxy.Args)
	}
	if len(pod.Spec.InitContainers) != 0 {
		t.Errorf("a gateway got init containers %v", pod.Spec.InitContainers)
	}
	if v, ok := env(proxy, "ISTIO_META_INTERCEPTION_MODE"); ok {
		t.Errorf("a gateway intercepts (%s)", v)
	}
	if v, _ := env(proxy, "CA_ADDR"); v != "hub.meshfed.example:15012" {
		t.Errorf("CA_ADDR %q", v)
	}
	sc := pod.Spec.SecurityContext
	if sc == nil || len(sc.Sysctls) != 1 || sc.Sysctls[0].Name != "net.ipv4.ip_unprivileged_port_start" {
		t.Errorf("pod security context %+v", sc)
	}
}
