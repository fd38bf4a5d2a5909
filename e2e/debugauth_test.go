package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/hub/ca"
	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// statusOf GETs url with the bearer token (none when empty) and returns
// the status code.
func statusOf(ctx context.Context, url, token string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// TestDebugAuth is issue #31's "Must show" of the monitoring port: without
// credentials the /debug documents, the console's pages and pprof answer
// 401 (a browser is sent to sign in); with a token of a user the config
// cluster's RBAC does not let get fleet.meshfed.io, 403; with an allowed
// user's token, 200, through meshfedctl and through the console's sign-in
// in headless Chromium, which then navigates every view on its session
// cookie. /metrics, /healthz and /readyz stay open.
func TestDebugAuth(t *testing.T) {
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: threeRegionsN(1)})
	ctx := t.Context()
	if err := f.Config().PutRemoteSecret(ctx, "remotes", f.Remotes()...); err != nil {
		t.Fatal(err)
	}
	hub := framework.StartTestHub(t, f, framework.HubOptions{DebugAuth: true})
	bindFleetReader(t, f, "reader")
	reader, nobody := serviceAccountToken(t, f.Config(), "ops", "reader"), serviceAccountToken(t, f.Config(), "ops", "nobody")

	base := hub.MonitoringURL()
	guarded := []string{"/debug/registryz", "/debug/configz", "/debug/trustz", "/debug/pprof/", "/", "/ui/clusters", "/ui/proxies"}
	for _, p := range guarded {
		for token, want := range map[string]int{"": http.StatusUnauthorized, "not-a-token": http.StatusUnauthorized,
			nobody: http.StatusForbidden, reader: http.StatusOK} {
			testutil.Eventually(t, converge, poll, func() error {
				got, err := statusOf(ctx, base+p, token)
				if err != nil {
					return err
				}
				if got != want {
					return fmt.Errorf("GET %s with token %.8q…: %d, want %d", p, token, got, want)
				}
				return nil
			})
		}
	}
	for _, p := range []string{"/metrics", "/healthz", "/readyz"} {
		if got, err := statusOf(ctx, base+p, ""); err != nil || got != http.StatusOK {
			t.Errorf("GET %s without credentials: %d %v, want 200", p, got, err)
		}
	}
	m, err := hub.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, result := range []string{"allowed", "unauthenticated", "denied"} {
		if metricValue(m, fmt.Sprintf(`meshfed_debug_requests_total{result=%q}`, result)) == 0 {
			t.Errorf("no %s request counted:\n%s", result, grepLines(m, "meshfed_debug"))
		}
	}

	// meshfedctl with the token, and without.
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(reader), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := framework.Meshfedctl(t, "remote-clusters", "--monitoring", base, "--token-file", tokenFile); err != nil || !strings.Contains(out, "cluster-1") {
		t.Errorf("meshfedctl remote-clusters with a reader's token: %v\n%s", err, out)
	}
	if _, err := framework.Meshfedctl(t, "remote-clusters", "--monitoring", base); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("meshfedctl remote-clusters without a token: %v, want 401", err)
	}

	// A person: the console sends the browser to sign in, takes the token
	// once, and every view then answers on the session cookie.
	browser := framework.StartTestBrowser(t)
	tab := framework.NewTestTab(t, browser)
	if err := tab.Navigate(ctx, base+"/ui/clusters"); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.Text(ctx, "#token"); err != nil {
		t.Fatalf("no sign-in form for a browser without a session: %v", err)
	}
	var submitted bool
	if err := tab.Eval(ctx, fmt.Sprintf(`(document.querySelector('#token').value = %q, document.querySelector('form').submit(), true)`, reader), &submitted); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, converge, poll, func() error {
		_, err := tab.Text(ctx, "#live")
		return err
	})
	for _, p := range []string{"/", "/ui/clusters", "/ui/clusters/cluster-1", "/ui/proxies", "/ui/replicas", "/ui/trust", "/ui/config", "/ui/explain"} {
		if err := tab.Navigate(ctx, base+p); err != nil {
			t.Fatal(err)
		}
		if _, err := tab.Text(ctx, "#live"); err != nil {
			t.Errorf("%s after signing in is no console page: %v", p, err)
		}
	}
	var cookieSeen bool
	if err := tab.Eval(ctx, `document.cookie.includes("meshfed_session")`, &cookieSeen); err != nil {
		t.Fatal(err)
	}
	if cookieSeen {
		t.Error("the session cookie is readable by the page's JavaScript: it must be HttpOnly")
	}

	// What the hub was given never comes out: not the tokens it reviewed,
	// not the credentials of the remote secret's kubeconfig, in its log or
	// in the documents a reader gets.
	secrets := map[string]string{"the reader's token": reader, "the other token": nobody}
	kc, err := clientcmd.Load(f.Remotes()[0].HubKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	for name, a := range kc.AuthInfos {
		for what, v := range map[string][]byte{"client key": a.ClientKeyData, "token": []byte(a.Token)} {
			if len(v) > 0 {
				secrets["the remote secret's "+what+" of "+name] = strings.TrimSpace(string(v))
			}
		}
	}
	if len(secrets) < 3 {
		t.Fatal("the remote secret's kubeconfig holds no credential to look for")
	}
	logs, err := hub.Logs()
	if err != nil {
		t.Fatal(err)
	}
	places := map[string]string{"the hub's log": logs}
	for _, p := range []string{debugdoc.RegistryzPath, debugdoc.FederationzPath, debugdoc.TrustzPath, debugdoc.SpokezPath,
		debugdoc.ProxyStatusPath, debugdoc.ClusterzPath, debugdoc.ConfigzPath, debugdoc.ConfigStatusPath} {
		body, err := bodyOf(ctx, base+p, reader)
		if err != nil {
			t.Fatal(err)
		}
		places[p] = body
	}
	for place, text := range places {
		for what, secret := range secrets {
			if len(secret) >= 16 && strings.Contains(text, secret) {
				t.Errorf("%s holds %s", place, what)
			}
		}
	}
}

// bodyOf GETs url with the bearer token and returns the body of a 200.
func bodyOf(ctx context.Context, url, token string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}

// bindFleetReader creates the hub chart's ClusterRole meshfed-fleet-reader
// in the config cluster and binds it to service account ops/sa.
func bindFleetReader(t *testing.T, f *framework.Fleet, sa string) {
	t.Helper()
	ctx := t.Context()
	if err := f.Config().EnsureServiceAccount(ctx, "ops", sa); err != nil {
		t.Fatal(err)
	}
	c := f.Config().Client()
	if err := c.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "meshfed-fleet-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"meshfed.io"}, Resources: []string{"fleet"}, Verbs: []string{"get"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "ops-" + sa},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "meshfed-fleet-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: "ops"}}}); err != nil {
		t.Fatal(err)
	}
}

// caRootsOf waits for the CA secret the hub keeps in the config cluster
// and returns its root, as a workload's mounted roots.
func caRootsOf(t *testing.T, f *framework.Fleet) *x509.CertPool {
	t.Helper()
	roots := x509.NewCertPool()
	testutil.Eventually(t, converge, poll, func() error {
		var sec corev1.Secret
		if err := f.Config().Client().Get(t.Context(), client.ObjectKey{Namespace: framework.RemoteSecretNamespace, Name: ca.SelfSignedSecret}, &sec); err != nil {
			return err
		}
		if !roots.AppendCertsFromPEM(sec.Data[ca.KeyCACert]) {
			return fmt.Errorf("secret %s has no root in %s", ca.SelfSignedSecret, ca.KeyCACert)
		}
		return nil
	})
	return roots
}

// TestDebugClientCertificates: a hub serving its monitoring port over TLS
// (--monitoring-tls) lets a mesh client certificate of an identity that
// --debug-identities lists read /debug documents without a token; another
// mesh identity is refused (403), no credentials at all are 401, and a
// reader's token still works beside certificates.
func TestDebugClientCertificates(t *testing.T) {
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: threeRegionsN(1)})
	ctx := t.Context()
	r := f.Remotes()[0]
	if err := f.Config().PutRemoteSecret(ctx, "remotes", r); err != nil {
		t.Fatal(err)
	}
	const monitor = "spiffe://cluster.local/ns/ops/sa/monitor"
	hub := framework.StartTestHub(t, f, framework.HubOptions{DebugAuth: true, MonitoringTLS: true,
		Args: []string{"--debug-identities=" + monitor}})
	if !strings.HasPrefix(hub.MonitoringURL(), "https://") {
		t.Fatalf("monitoring URL %s is not https", hub.MonitoringURL())
	}
	// The mesh roots, as a workload mounts them: the CA's, which the
	// monitoring port's certificate chains to too.
	roots := caRootsOf(t, f)
	agent := func(sa string) *framework.CertAgent {
		if err := r.EnsureServiceAccount(ctx, "ops", sa); err != nil {
			t.Fatal(err)
		}
		actx, cancel := context.WithTimeout(ctx, converge)
		defer cancel()
		a, err := r.StartCertAgent(actx, "ops", sa, t.TempDir(), framework.CertOptions{CAAddr: hub.CAAddr(), CARoots: roots})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(a.Stop)
		return a
	}
	get := func(a *framework.CertAgent, token string) (int, error) {
		cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if a != nil {
			cert, err := a.Certificate()
			if err != nil {
				return 0, err
			}
			cfg.Certificates = []tls.Certificate{*cert}
		}
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
		defer client.CloseIdleConnections()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, hub.MonitoringURL()+"/debug/registryz", nil)
		if err != nil {
			return 0, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	bindFleetReader(t, f, "reader")
	reader := serviceAccountToken(t, f.Config(), "ops", "reader")
	for name, c := range map[string]struct {
		agent *framework.CertAgent
		token string
		want  int
	}{
		"the listed identity": {agent("monitor"), "", http.StatusOK},
		"another identity":    {agent("intruder"), "", http.StatusForbidden},
		"no credentials":      {nil, "", http.StatusUnauthorized},
		"a reader's token":    {nil, reader, http.StatusOK},
	} {
		testutil.Eventually(t, converge, poll, func() error {
			got, err := get(c.agent, c.token)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if got != c.want {
				return fmt.Errorf("%s: GET /debug/registryz over TLS answered %d, want %d", name, got, c.want)
			}
			return nil
		})
	}
}
