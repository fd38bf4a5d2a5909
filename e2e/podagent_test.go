package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/agent"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/xdsnode"
	"github.com/meshfed/meshfed/spoke/inject"
)

// TestGRPCAgentPod runs meshfed-agent exactly as the spoke's grpc-agent
// injection template starts it (its arguments and environment, taken from
// a Pod the injector rendered, with the template's mount paths moved into a
// temporary directory) for a client Pod in cluster-1, with a real
// TokenRequest token and the trust bundle as the ConfigMap would hold it.
// Once the agent reports ready, a proxyless grpc-go client using the
// bootstrap it wrote reaches the hub on its authenticated port (15012)
// over mutual TLS with the workload's certificate (the hub's status shows
// that identity), calls xDS servers in cluster-2 over mTLS, and the
// servers see the Pod's SPIFFE identity. The same bootstrap with another
// namespace's certificate is refused, with the cause.
func TestGRPCAgentPod(t *testing.T) {
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: threeRegionsN(2)})
	ctx := t.Context()
	if err := f.Config().PutRemoteSecret(ctx, "remotes", f.Remotes()...); err != nil {
		t.Fatal(err)
	}
	// The CA's certificate names the address the bootstrap dials (the
	// framework passes --xds-san with the hub's listen host).
	hub := framework.StartTestHub(t, f, framework.HubOptions{Args: []string{"--xds-mtls"}})
	rootsPEM, roots := waitTrustBundle(t, hub)

	c1, c2 := f.Remote("cluster-1"), f.Remote("cluster-2")
	w := deployServing(t, c2, framework.WorkloadOptions{
		Namespace: "demo", Service: "echo", Replicas: 2,
		XDS: &framework.XDSWorkloadOptions{HubAddr: hub.CAAddr(), Certs: &framework.CertOptions{CAAddr: hub.CAAddr(), CARoots: roots}},
	})

	// The client Pod, injected by the spoke's injector with the values the
	// spoke chart would give it.
	cfg, err := inject.NewConfig(inject.ConfigFile{Templates: inject.BuiltinTemplates()}, map[string]any{
		"clusterID": string(c1.ID), "trustDomain": "cluster.local", "domainSuffix": "cluster.local",
		"discoveryAddress": hub.CAAddr(), "caAddress": hub.CAAddr(),
		"proxy": map[string]any{"image": "unused"}, "agent": map[string]any{"image": "meshfed-agent"},
	})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "client-0", Namespace: "demo",
			Labels:      map[string]string{"app": "client", "istio-locality": c1.Locality.Region},
			Annotations: map[string]string{inject.AnnotationTemplates: inject.TemplateGRPCAgent}},
		Spec: corev1.PodSpec{ServiceAccountName: "client", Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	injected, err := cfg.Inject(raw, "demo")
	if err != nil {
		t.Fatal(err)
	}
	var out corev1.Pod
	if err := json.Unmarshal(injected, &out); err != nil {
		t.Fatal(err)
	}
	var agentC *corev1.Container
	for i := range out.Spec.InitContainers {
		if out.Spec.InitContainers[i].Name == "meshfed-agent" {
			agentC = &out.Spec.InitContainers[i]
		}
	}
	if agentC == nil {
		t.Fatalf("the grpc-agent template injected no meshfed-agent container: %s", injected)
	}

	// The Pod's file system: every mount of the agent container becomes a
	// directory here, filled as the kubelet would fill it.
	root := t.TempDir()
	local := func(p string) string {
		for _, m := range agentC.VolumeMounts {
			if rest, ok := strings.CutPrefix(p, m.MountPath); ok && (rest == "" || rest[0] == '/') {
				return filepath.Join(root, m.Name, rest)
			}
		}
		return p
	}
	for _, m := range agentC.VolumeMounts {
		if err := os.MkdirAll(filepath.Join(root, m.Name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	podIP := "10.11.0.200"
	token := serviceAccountToken(t, c1, "demo", "client", framework.CertAudience)
	write := func(path string, data []byte) {
		t.Helper()
		if err := os.WriteFile(local(path), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("/var/run/secrets/tokens/istio-token", []byte(token))
	write("/var/run/secrets/istio/root-cert.pem", rootsPEM)
	write("/etc/istio/pod/labels", []byte(fmt.Sprintf("app=%q\nistio-locality=%q\n", "client", c1.Locality.Region)))

	args := []string{}
	for _, a := range agentC.Args {
		if name, val, ok := strings.Cut(a, "="); ok {
			a = name + "=" + local(val)
		}
		args = append(args, a)
	}
	free, err := framework.FreeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	readyAddr := free[0]
	// The template leaves these at the binary's defaults, which are the
	// template's mount paths; here they move with the mounts.
	args = append(args,
		"--token-file="+local("/var/run/secrets/tokens/istio-token"),
		"--ca-roots-file="+local("/var/run/secrets/istio/root-cert.pem"),
		"--pod-labels-file="+local("/etc/istio/pod/labels"),
		"--ready-addr="+readyAddr)
	env := os.Environ()
	for _, e := range agentC.Env {
		v := e.Value
		if ref := e.ValueFrom; ref != nil && ref.FieldRef != nil {
			v = map[string]string{
				"metadata.name": pod.Name, "metadata.namespace": pod.Namespace,
				"status.podIP": podIP, "spec.serviceAccountName": pod.Spec.ServiceAccountName,
			}[ref.FieldRef.FieldPath]
		}
		env = append(env, e.Name+"="+local(v))
	}
	bin, err := framework.TestAgentBinary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	actx, acancel := context.WithCancel(context.WithoutCancel(ctx))
	cmd := exec.CommandContext(actx, bin, args...)
	cmd.Env = env
	logPath := filepath.Join(root, "agent.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		acancel()
		_ = cmd.Wait()
		_ = logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("meshfed-agent log:\n%s", b)
		}
	})

	// The startup probe of the template.
	probe := agentC.StartupProbe.HTTPGet
	if probe == nil || probe.Path != "/healthz/ready" {
		t.Fatalf("startup probe %+v", agentC.StartupProbe)
	}
	testutil.Eventually(t, converge, poll, func() error {
		resp, err := http.Get("http://" + readyAddr + probe.Path)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("startup probe: %s", resp.Status)
		}
		return nil
	})
	for _, f := range []string{agent.CertChainFile, agent.KeyFile, agent.RootCertFile} {
		if _, err := os.Stat(filepath.Join(local("/var/lib/istio/data"), f)); err != nil {
			t.Errorf("certificate file: %v", err)
		}
	}

	// The application container reads the bootstrap the agent wrote.
	var bootstrapPath string
	for _, e := range out.Spec.Containers[0].Env {
		if e.Name == "GRPC_XDS_BOOTSTRAP" {
			bootstrapPath = local(e.Value)
		}
	}
	bootstrap, err := os.ReadFile(bootstrapPath)
	if err != nil {
		t.Fatalf("the application's GRPC_XDS_BOOTSTRAP: %v", err)
	}
	client := framework.NewTestXDSClient(t, framework.ClientOptions{Bootstrap: bootstrap})
	if want := xdsnode.SidecarID(podIP, pod.Name, pod.Namespace, model.DefaultDomainSuffix); client.NodeID() != want {
		t.Errorf("node ID %q, want %q", client.NodeID(), want)
	}
	conn, err := client.Dial(w.Target())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	counts := expectClusters(t, conn, 10, "cluster-2")
	const clientID = "spiffe://cluster.local/ns/demo/sa/client"
	for backend, id := range w.PeerIDs() {
		if counts[backend] > 0 && id != clientID {
			t.Errorf("%s saw client identity %q, want %q", backend, id, clientID)
		}
	}
	t.Logf("calls through the agent's bootstrap, over mTLS: %v", counts)

	// The hub holds the stream's identity: the certificate's.
	if !strings.Contains(string(bootstrap), hub.CAAddr()) || !strings.Contains(string(bootstrap), `"type": "tls"`) {
		t.Errorf("the agent's bootstrap does not dial the hub's authenticated port %s over TLS:\n%s", hub.CAAddr(), bootstrap)
	}
	testutil.Eventually(t, converge, poll, func() error {
		_, doc, err := proxyIDs(t, hub)
		if err != nil {
			return err
		}
		for _, p := range doc.Proxies {
			if p.Proxy == client.NodeID() {
				if p.Identity != clientID {
					return fmt.Errorf("proxy-status shows identity %q, want %q", p.Identity, clientID)
				}
				return nil
			}
		}
		return fmt.Errorf("proxy-status lists no %s", client.NodeID())
	})

	// meshfedctl reads the same status from the authenticated port, with
	// a token of the config cluster as istioctl sends one; without a token
	// it gets nothing there.
	configToken := serviceAccountToken(t, f.Config(), "istio-system", "default", framework.CertAudience)
	tokenFile, rootsFile := filepath.Join(root, "ctl-token"), filepath.Join(root, "ctl-roots.pem")
	if err := os.WriteFile(tokenFile, []byte(configToken), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rootsFile, rootsPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	status, err := framework.Meshfedctl(t, "proxy-status", "--hub", hub.CAAddr(), "--token-file", tokenFile, "--ca-file", rootsFile, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(status, client.NodeID()) || !strings.Contains(status, `"identity": "`+clientID+`"`) {
		t.Errorf("meshfedctl proxy-status on the authenticated port:\n%s", status)
	}
	if out, err := framework.Meshfedctl(t, "proxy-status", "--hub", hub.CAAddr(), "--timeout", "5s"); err == nil {
		t.Errorf("meshfedctl proxy-status without credentials on the authenticated port answered:\n%s", out)
	}

	// Another namespace's certificate in the same bootstrap: refused.
	otherDir := t.TempDir()
	if err := c1.Client().Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "intruder", Namespace: "default"}}); err != nil {
		t.Fatal(err)
	}
	other, err := c1.StartCertAgent(ctx, "default", "intruder", otherDir, framework.CertOptions{CAAddr: hub.CAAddr(), CARoots: roots, ServerName: "istiod.istio-system.svc"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Stop)
	forged := bytes.ReplaceAll(bootstrap, []byte(local("/var/lib/istio/data")), []byte(otherDir))
	intruder := framework.NewTestXDSClient(t, framework.ClientOptions{Bootstrap: forged})
	iconn, err := intruder.Dial(w.Target())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = iconn.Close() })
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, callErr := iconn.Call(cctx)
	cancel()
	if callErr == nil {
		t.Fatal("a client with another namespace's certificate was served")
	}
	if !strings.Contains(callErr.Error(), "namespace mismatch") {
		t.Errorf("the refusal does not say its cause: %v", callErr)
	}
	t.Logf("another namespace's certificate: %v", callErr)
	m, err := hub.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if metricValue(m, `meshfed_xds_auth_failures_total{reason="namespace_mismatch"}`) == 0 {
		t.Errorf("the refusal is not counted as namespace_mismatch:\n%s", grepLines(m, "meshfed_xds_auth_failures_total"))
	}

	// The agent's stop (the Pod's end) is clean.
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("meshfed-agent exited with %v on SIGINT", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("meshfed-agent did not stop within 10s of SIGINT")
	}
}
