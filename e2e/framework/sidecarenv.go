//go:build linux

package framework

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// The agent's environment: the kubelet's part of rendering a container
// (downward API, $(VAR) expansion) and the overrides of sidecar.go.

// agentEnv is istio-proxy's environment as the kubelet would set it, with
// the overrides for running outside a kubelet (see the top of this file).
func (s *Sidecar) agentEnv(pod *corev1.Pod, proxy *corev1.Container) ([]string, error) {
	env, err := containerEnv(proxy, pod)
	if err != nil {
		return nil, err
	}
	pc, err := s.proxyConfig(lookupEnv(env, "PROXY_CONFIG"))
	if err != nil {
		return nil, err
	}
	env = setEnv(env, "PROXY_CONFIG", pc)
	if !s.opts.Gateway {
		// A gateway intercepts nothing and its template says so.
		env = setEnv(env, xdsnode.MetadataEnv("INTERCEPTION_MODE"), "NONE")
	}
	env = setEnv(env, "CLOUD_PLATFORM", "none")
	for _, kv := range s.opts.Env {
		k, v, _ := strings.Cut(kv, "=")
		env = setEnv(env, k, v)
	}
	return env, nil
}

// proxyConfig is the template's PROXY_CONFIG with the fields that running
// here needs.
func (s *Sidecar) proxyConfig(rendered string) (string, error) {
	pc := map[string]any{}
	if rendered != "" {
		if err := json.Unmarshal([]byte(rendered), &pc); err != nil {
			return "", fmt.Errorf("framework: the template's PROXY_CONFIG: %w", err)
		}
	}
	pc["binaryPath"] = s.opts.EnvoyBinary
	pc["configPath"] = filepath.Join(s.dir, "etc/istio/proxy")
	pc["proxyBootstrapTemplatePath"] = s.opts.BootstrapTemplate
	pc["concurrency"] = 1                 // two cores for the whole fleet
	pc["terminationDrainDuration"] = "1s" // Stop within SidecarStopGrace
	pc["drainDuration"] = "1s"
	switch s.opts.XDS {
	case SidecarXDSPlaintext:
		// The template points sidecars at the TLS port (the CA's, as
		// Istio's discoveryAddress is istiod:15012); this mode takes the
		// plaintext one instead.
		pc["controlPlaneAuthPolicy"] = "NONE"
		pc["discoveryAddress"] = net.JoinHostPort(HubServiceName, addrPort(s.opts.Hub.XDSAddr()))
	case SidecarXDSTLS:
		pc["controlPlaneAuthPolicy"] = "MUTUAL_TLS"
		pc["discoveryAddress"] = net.JoinHostPort(HubServiceName, addrPort(s.opts.XDSTLSAddr))
	}
	for k, v := range s.opts.ProxyConfig {
		pc[k] = v
	}
	b, err := json.Marshal(pc)
	return string(b), err
}

// containerEnv resolves c's env against pod as the kubelet does, for the
// downward-API fields the templates use; any other source is an error, so
// that a template change is noticed here rather than silently dropped.
func containerEnv(c *corev1.Container, pod *corev1.Pod) ([]string, error) {
	fields := map[string]string{
		"metadata.name":           pod.Name,
		"metadata.namespace":      pod.Namespace,
		"spec.serviceAccountName": pod.Spec.ServiceAccountName,
		"spec.nodeName":           pod.Spec.NodeName,
		"status.podIP":            pod.Status.PodIP,
		"status.hostIP":           pod.Status.HostIP,
	}
	var env []string
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			ref := e.ValueFrom.FieldRef
			if ref == nil {
				return nil, fmt.Errorf("framework: env %s of %s: only fieldRef sources are supported", e.Name, c.Name)
			}
			var ok bool
			if v, ok = fields[ref.FieldPath]; !ok {
				return nil, fmt.Errorf("framework: env %s of %s: unsupported fieldRef %s", e.Name, c.Name, ref.FieldPath)
			}
		}
		env = setEnv(env, e.Name, expand(v, env))
	}
	return env, nil
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand replaces $(NAME) by NAME's value in env, as Kubernetes expands
// args and env values; an undefined reference stays as written.
func expand(s string, env []string) string {
	return varRef.ReplaceAllStringFunc(s, func(ref string) string {
		name := ref[2 : len(ref)-1]
		for _, kv := range env {
			if k, v, _ := strings.Cut(kv, "="); k == name {
				return v
			}
		}
		return ref
	})
}

func expandArgs(args, env []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = expand(a, env)
	}
	return out
}

func lookupEnv(env []string, key string) string {
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == key {
			return v
		}
	}
	return ""
}

// setEnv sets key in env, replacing an earlier value in place.
func setEnv(env []string, key, value string) []string {
	for i, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == key {
			env[i] = key + "=" + value
			return env
		}
	}
	return append(env, key+"="+value)
}

// downwardMap renders a map as the downward API writes labels: key="value"
// lines, sorted by key.
func downwardMap(m map[string]string) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s=%s", k, strconv.Quote(m[k]))
	}
	return b.Bytes()
}
