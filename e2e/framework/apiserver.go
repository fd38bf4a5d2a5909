package framework

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"k8s.io/client-go/discovery"
)

// Watches counts the WATCH requests the cluster's apiserver is serving now
// for resource (e.g. "endpointslices"), from its own
// apiserver_longrunning_requests metric: the apiserver's word, not the
// hub's. The apiserver's own loopback watches are included; compare with a
// count taken before the hubs start.
func (c *Cluster) Watches(ctx context.Context, resource string) (int, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(c.RESTConfig())
	if err != nil {
		return 0, err
	}
	body, err := dc.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("framework: %s: reading apiserver metrics: %w", c.name, err)
	}
	total := 0
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_longrunning_requests{") ||
			!strings.Contains(line, `verb="WATCH"`) || !strings.Contains(line, `resource="`+resource+`"`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("framework: %s: bad metric line %q", c.name, line)
		}
		total += int(v)
	}
	return total, sc.Err()
}

// TokenKubeconfig returns a kubeconfig for this cluster whose credential is
// a TokenRequest token of service account sa in kube-system, valid for
// ttl, bound to the cluster-admin role — the shape of a remote secret that
// `istioctl create-remote-secret` writes.
func (c *Cluster) TokenKubeconfig(ctx context.Context, sa string, ttl time.Duration) ([]byte, error) {
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return nil, err
	}
	_, err = cs.CoreV1().ServiceAccounts("kube-system").Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("framework: service account %s: %w", sa, err)
	}
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: "kube-system"}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("framework: binding %s: %w", sa, err)
	}
	secs := int64(ttl.Seconds())
	tr, err := cs.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("framework: token for %s: %w", sa, err)
	}
	cfg, err := clientcmd.Load(c.kubeconfig)
	if err != nil {
		return nil, err
	}
	for name := range cfg.AuthInfos {
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	}
	return clientcmd.Write(*cfg)
}
