package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/meshfed/meshfed/pkg/remotesecret"
)

// remoteSecretOptions are the flags of create-remote-secret.
type remoteSecretOptions struct {
	// Kubeconfig and Context reach the workload cluster.
	Kubeconfig, Context string
	// Name is the cluster ID (the secret's data key).
	Name string
	// ServiceAccount (in SANamespace) is the hub's reader; the spoke chart
	// creates it with least RBAC.
	ServiceAccount, SANamespace string
	// TokenTTL is the lifetime of the reader token.
	TokenTTL time.Duration
	// SecretNamespace is where the hub reads remote secrets.
	SecretNamespace string
	// ApplyTo, when set, is the config cluster's kubeconfig: the secret is
	// written there instead of printed.
	ApplyTo string
	// Rotate replaces the token of an existing secret (requires ApplyTo).
	Rotate bool
}

func defaultRemoteSecretOptions() remoteSecretOptions {
	return remoteSecretOptions{
		ServiceAccount: "meshfed-reader", SANamespace: "istio-system",
		// 30 days: long enough to run unattended, short enough that a
		// leaked token dies; rotate with --rotate before it expires (the
		// hub reports credential-expiring a day ahead).
		TokenTTL:        30 * 24 * time.Hour,
		SecretNamespace: "istio-system",
	}
}

// secretName is the name istioctl gives a remote secret.
func secretName(cluster string) string { return "istio-remote-secret-" + cluster }

// createRemoteSecret requests a token for the reader service account of the
// workload cluster and builds the Istio-format remote secret around a
// kubeconfig carrying it; it prints the secret or writes it to the config
// cluster.
func createRemoteSecret(ctx context.Context, o remoteSecretOptions, stdout io.Writer) error {
	if err := remotesecret.ValidateClusterID(o.Name); err != nil {
		return fmt.Errorf("--name: %w", err)
	}
	if o.Rotate && o.ApplyTo == "" {
		return errors.New("--rotate replaces the secret in the config cluster: pass --apply-to")
	}
	loading := &clientcmd.ClientConfigLoadingRules{ExplicitPath: o.Kubeconfig}
	if o.Kubeconfig == "" {
		loading = clientcmd.NewDefaultClientConfigLoadingRules()
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, &clientcmd.ConfigOverrides{CurrentContext: o.Context})
	raw, err := cc.RawConfig()
	if err != nil {
		return fmt.Errorf("workload cluster kubeconfig: %w", err)
	}
	restCfg, err := cc.ClientConfig()
	if err != nil {
		return fmt.Errorf("workload cluster kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	secs := int64(o.TokenTTL.Seconds())
	tr, err := cs.CoreV1().ServiceAccounts(o.SANamespace).CreateToken(ctx, o.ServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs},
	}, metav1.CreateOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("service account %s/%s not found in the workload cluster: install remote-charts/spoke there first (it creates the reader with least RBAC)", o.SANamespace, o.ServiceAccount)
	}
	if err != nil {
		return fmt.Errorf("requesting a token for %s/%s: %w", o.SANamespace, o.ServiceAccount, err)
	}

	ctxName := o.Context
	if ctxName == "" {
		ctxName = raw.CurrentContext
	}
	kctx := raw.Contexts[ctxName]
	if kctx == nil || raw.Clusters[kctx.Cluster] == nil {
		return fmt.Errorf("kubeconfig context %q names no cluster", ctxName)
	}
	src := raw.Clusters[kctx.Cluster]
	kc := clientcmdapi.NewConfig()
	kc.Clusters[o.Name] = &clientcmdapi.Cluster{Server: src.Server, CertificateAuthorityData: src.CertificateAuthorityData, TLSServerName: src.TLSServerName}
	kc.AuthInfos[o.Name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts[o.Name] = &clientcmdapi.Context{Cluster: o.Name, AuthInfo: o.Name}
	kc.CurrentContext = o.Name
	kubeconfig, err := clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	if _, err := remotesecret.RESTConfig(kubeconfig); err != nil {
		return fmt.Errorf("the kubeconfig built would be refused by the hub: %w", err)
	}
	secret := &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name: secretName(o.Name), Namespace: o.SecretNamespace,
			Labels:      map[string]string{remotesecret.MultiClusterLabel: "true"},
			Annotations: map[string]string{"networking.istio.io/cluster": o.Name},
		},
		Data: map[string][]byte{o.Name: kubeconfig},
	}
	if o.ApplyTo == "" {
		out, err := yaml.Marshal(secret)
		if err != nil {
			return err
		}
		_, err = stdout.Write(out)
		return err
	}
	return applySecret(ctx, o, secret, tr.Status.ExpirationTimestamp.Time, stdout)
}

// applySecret creates the secret in the config cluster, or with --rotate
// replaces the cluster's kubeconfig in the existing one.
func applySecret(ctx context.Context, o remoteSecretOptions, secret *corev1.Secret, expires time.Time, stdout io.Writer) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", o.ApplyTo)
	if err != nil {
		return fmt.Errorf("--apply-to: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	secrets := cs.CoreV1().Secrets(o.SecretNamespace)
	existing, err := secrets.Get(ctx, secret.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && o.Rotate:
		return fmt.Errorf("--rotate: secret %s/%s does not exist; create it first", o.SecretNamespace, secret.Name)
	case apierrors.IsNotFound(err):
		if _, err := secrets.Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating %s/%s: %w", o.SecretNamespace, secret.Name, err)
		}
		fmt.Fprintf(stdout, "secret %s/%s created for cluster %s (token expires %s)\n", o.SecretNamespace, secret.Name, o.Name, expires.UTC().Format(time.RFC3339))
		return nil
	case err != nil:
		return fmt.Errorf("reading %s/%s: %w", o.SecretNamespace, secret.Name, err)
	case !o.Rotate:
		return fmt.Errorf("secret %s/%s exists; pass --rotate to replace its token", o.SecretNamespace, secret.Name)
	}
	if existing.Data == nil {
		existing.Data = map[string][]byte{}
	}
	existing.Data[o.Name] = secret.Data[o.Name]
	if _, err := secrets.Update(ctx, existing, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("rotating %s/%s: %w", o.SecretNamespace, secret.Name, err)
	}
	fmt.Fprintf(stdout, "secret %s/%s rotated for cluster %s (token expires %s)\n", o.SecretNamespace, secret.Name, o.Name, expires.UTC().Format(time.RFC3339))
	return nil
}
