package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// TestFindHubThroughKubeconfig: with only a kubeconfig, meshfedctl finds a
// Ready Pod of the hub chart in -n (not one that is not Ready, being
// deleted, or of another app), asks for its monitoring port, and sends the
// kubeconfig user's token to what answers there. A real apiserver holds
// the Pods and reviews nothing here; envtest runs no kubelet, so the
// port-forward itself is not exercised: the forwarder hands the address
// of a monitoring server in this process instead.
func TestFindHubThroughKubeconfig(t *testing.T) {
	cfg := testutil.StartAPIServer(t, &envtest.Environment{})
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := t.Context()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mesh"}}, metav1.CreateOptions{})
	must(err)
	hubLabels := map[string]string{"app.kubernetes.io/name": "meshfed-hub", "app.kubernetes.io/instance": "prod"}
	pod := func(name string, labels map[string]string, ready bool, finalizer bool) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "mesh", Name: name, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "hub", Image: "hub"}}}}
		if finalizer {
			p.Finalizers = []string{"meshfed.io/test"}
		}
		p, err := cs.CoreV1().Pods("mesh").Create(ctx, p, metav1.CreateOptions{})
		must(err)
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}}
		_, err = cs.CoreV1().Pods("mesh").UpdateStatus(ctx, p, metav1.UpdateOptions{})
		must(err)
	}
	pod("meshfed-hub-a", hubLabels, false, false)
	pod("meshfed-hub-0", hubLabels, true, true) // deleted below: going away
	pod("meshfed-hub-c", hubLabels, true, false)
	pod("meshfed-hub-b", hubLabels, true, false)
	pod("istiod-0", map[string]string{"app": "istiod"}, true, false)
	must(cs.CoreV1().Pods("mesh").Delete(ctx, "meshfed-hub-0", metav1.DeleteOptions{}))

	// A person's kubeconfig: a token of mesh/ops, which may list Pods.
	_, err = cs.CoreV1().ServiceAccounts("mesh").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "ops"}}, metav1.CreateOptions{})
	must(err)
	_, err = cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "pods"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}}}}, metav1.CreateOptions{})
	must(err)
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "ops"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "pods"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "ops", Namespace: "mesh"}}}, metav1.CreateOptions{})
	must(err)
	tr, err := cs.CoreV1().ServiceAccounts("mesh").CreateToken(ctx, "ops", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	must(err)
	token := tr.Status.Token
	kubeconfig := writeKubeconfig(t, cfg, token)

	var gotAuth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		if r.URL.Path != debugdoc.RegistryzPath {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(debugdoc.Registryz{Replica: "meshfed-hub-b",
			Clusters: []debugdoc.RegistryzCluster{{ID: "cluster-1", State: debugdoc.ClusterSynced, Since: time.Unix(0, 0).UTC()}}})
	}))
	defer srv.Close()
	var forwarded []string
	forward := func(_ context.Context, _ *rest.Config, p *corev1.Pod, port int) (string, func(), error) {
		forwarded = append(forwarded, p.Name)
		if port != monitoringPort {
			t.Errorf("forwarded port %d, want the monitoring port %d", port, monitoringPort)
		}
		return strings.TrimPrefix(srv.URL, "http://"), func() {}, nil
	}

	opts, err := parseArgs([]string{"remote-clusters", "--kubeconfig", kubeconfig, "-n", "mesh", "-o", "json"}, os.Stderr)
	must(err)
	var out bytes.Buffer
	must(runCommandWith(forward)(ctx, opts, &out))
	if len(forwarded) != 1 || forwarded[0] != "meshfed-hub-b" {
		t.Errorf("forwarded to %v, want the first Ready hub Pod by name, meshfed-hub-b", forwarded)
	}
	if gotAuth != "Bearer "+token {
		t.Errorf("the monitoring port got Authorization %.20q…, want the kubeconfig user's token", gotAuth)
	}
	if !strings.Contains(out.String(), `"cluster-1"`) {
		t.Errorf("remote-clusters through the found hub:\n%s", out.String())
	}

	// No hub in the namespace: the error says where it looked and what to
	// give instead.
	opts, err = parseArgs([]string{"remote-clusters", "--kubeconfig", kubeconfig, "-n", "default"}, os.Stderr)
	must(err)
	err = runCommandWith(forward)(ctx, opts, &out)
	if err == nil || !strings.Contains(err.Error(), "no Ready hub Pod") || !strings.Contains(err.Error(), "--monitoring") {
		t.Errorf("no hub Pod in default: %v", err)
	}
}

// writeKubeconfig writes a kubeconfig of cfg's apiserver whose user is
// token, and returns its path.
func writeKubeconfig(t *testing.T, cfg *rest.Config, token string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["ops"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["ops"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "ops"}
	kc.CurrentContext = "ops"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}
