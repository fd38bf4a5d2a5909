//go:build linux

package framework

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// testSidecar is a Sidecar as StartSidecar would make it before any I/O:
// a cluster, a Pod at 198.18.1.7, and a hub on the gateway.
func testSidecar(t *testing.T) (*Sidecar, *corev1.Pod, *corev1.Container) {
	t.Helper()
	opts := SidecarOptions{
		Cluster: &RemoteCluster{Cluster: &Cluster{name: "cluster-1"}, ID: "cluster-1"},
		Pod:     &Pod{ip: netip.MustParseAddr("198.18.1.7")},
		Hub:     &Hub{id: "hub-0", xdsAddr: "198.18.0.1:15010", opts: HubOptions{CAAddr: "198.18.0.1:15012"}},
		Name:    "echo-0", Namespace: "demo", ServiceAccount: "echo",
		PilotAgentBinary: "/bin/pilot-agent", EnvoyBinary: "/bin/envoy", BootstrapTemplate: "/bin/tmpl.json",
	}
	if err := opts.defaults(); err != nil {
		t.Fatal(err)
	}
	pod, err := injectedPod(opts)
	if err != nil {
		t.Fatal(err)
	}
	proxy := containerNamed(pod.Spec.Containers, "istio-proxy")
	if proxy == nil {
		t.Fatal("no istio-proxy container")
	}
	return &Sidecar{opts: opts, dir: "/pods/p"}, pod, proxy
}

// TestSidecarAgentEnv: the agent's environment is what the spoke's sidecar
// template renders for the Pod, resolved as the kubelet resolves it, plus
// the overrides for running without a kubelet.
func TestSidecarAgentEnv(t *testing.T) {
	s, pod, proxy := testSidecar(t)
	env, err := s.agentEnv(pod, proxy)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"POD_NAME":                     "echo-0",
		"POD_NAMESPACE":                "demo",
		"INSTANCE_IP":                  "198.18.1.7",
		"SERVICE_ACCOUNT":              "echo",
		"HOST_IP":                      "198.18.0.1",
		"ISTIO_META_CLUSTER_ID":        "cluster-1",
		"CA_ADDR":                      "istiod.istio-system.svc:15012",
		"PILOT_CERT_PROVIDER":          "istiod",
		"TRUST_DOMAIN":                 "cluster.local",
		"ISTIO_META_INTERCEPTION_MODE": "NONE", // the template says REDIRECT
		"CLOUD_PLATFORM":               "none",
	} {
		if got := lookupEnv(env, k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	var names []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		names = append(names, k)
	}
	if sorted := slices.Sorted(slices.Values(names)); len(slices.Compact(sorted)) != len(names) {
		t.Errorf("duplicate variables in %v", names)
	}

	var pc map[string]any
	if err := json.Unmarshal([]byte(lookupEnv(env, "PROXY_CONFIG")), &pc); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{
		"discoveryAddress":           "istiod.istio-system.svc:15012",
		"controlPlaneAuthPolicy":     "MUTUAL_TLS",
		"binaryPath":                 "/bin/envoy",
		"configPath":                 "/pods/p/etc/istio/proxy",
		"proxyBootstrapTemplatePath": "/bin/tmpl.json",
	} {
		if pc[k] != want {
			t.Errorf("PROXY_CONFIG %s = %v, want %v", k, pc[k], want)
		}
	}

	args := expandArgs(proxy.Args, env)
	if !slices.Equal(args[:4], []string{"proxy", "sidecar", "--domain", "demo.svc.cluster.local"}) {
		t.Errorf("args %q: want proxy sidecar --domain demo.svc.cluster.local …", args)
	}
}

// TestSidecarPlaintextOption: SidecarXDSPlaintext switches pilot-agent from
// Istio's default (mutual TLS to the CA port) to the hub's plaintext port,
// which it refuses when the hub did not open one.
func TestSidecarPlaintextOption(t *testing.T) {
	s, pod, proxy := testSidecar(t)
	s.opts.XDS = SidecarXDSPlaintext
	env, err := s.agentEnv(pod, proxy)
	if err != nil {
		t.Fatal(err)
	}
	var pc map[string]any
	if err := json.Unmarshal([]byte(lookupEnv(env, "PROXY_CONFIG")), &pc); err != nil {
		t.Fatal(err)
	}
	if pc["controlPlaneAuthPolicy"] != "NONE" || pc["discoveryAddress"] != "istiod.istio-system.svc:15010" {
		t.Errorf("PROXY_CONFIG %v: want NONE to istiod.istio-system.svc:15010", pc)
	}
	closed := s.opts
	closed.Hub = &Hub{id: "hub-1", opts: HubOptions{CAAddr: "198.18.0.1:15012"}}
	if err := closed.defaults(); err == nil {
		t.Error("SidecarXDSPlaintext accepted a hub without a plaintext port")
	}
}

func TestContainerEnvRefusesUnknownSources(t *testing.T) {
	pod := &corev1.Pod{}
	c := &corev1.Container{Name: "x", Env: []corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}}}}
	if _, err := containerEnv(c, pod); err == nil {
		t.Error("an unsupported fieldRef was accepted")
	}
	c.Env[0].ValueFrom = &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}
	if _, err := containerEnv(c, pod); err == nil {
		t.Error("a secretKeyRef was accepted")
	}
}

func TestExpand(t *testing.T) {
	env := []string{"POD_NAMESPACE=demo", "EMPTY="}
	for in, want := range map[string]string{
		"$(POD_NAMESPACE).svc.cluster.local": "demo.svc.cluster.local",
		"$(UNDEFINED)-x":                     "$(UNDEFINED)-x", // Kubernetes leaves it
		"a$(EMPTY)b":                         "ab",
		"no refs":                            "no refs",
	} {
		if got := expand(in, env); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDownwardMap(t *testing.T) {
	got := string(downwardMap(map[string]string{"b": `say "hi"`, "a": "1"}))
	if want := "a=\"1\"\nb=\"say \\\"hi\\\"\""; got != want {
		t.Errorf("downwardMap = %q, want %q", got, want)
	}
}
