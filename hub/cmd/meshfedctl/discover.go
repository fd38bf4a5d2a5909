package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// hubPodSelector selects the hub chart's Pods (its selector labels carry
// the chart's name whatever the release is called).
const hubPodSelector = "app.kubernetes.io/name=meshfed-hub"

// monitoringPort is the hub's monitoring port in its Pod (the chart's
// ports.monitoring, istiod's 15014).
const monitoringPort = 15014

// kubeconfigFlags locate the cluster the hub runs in, as kubectl's do.
type kubeconfigFlags struct {
	// Kubeconfig is a kubeconfig file; empty: $KUBECONFIG, else
	// ~/.kube/config.
	Kubeconfig string
	// Context is the kubeconfig context; empty: the current one.
	Context string
	// Namespace is where the hub chart is installed.
	Namespace string
}

// clientConfig loads the kubeconfig with kubectl's rules.
func (k kubeconfigFlags) clientConfig() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.Kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: k.Context})
}

// restConfig is the kubeconfig's cluster and user.
func (k kubeconfigFlags) restConfig() (*rest.Config, error) {
	cfg, err := k.clientConfig().ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return cfg, nil
}

// findHubPod returns a Ready Pod of the hub chart in ns, the first by name
// (so repeated calls ask the same replica while it stays Ready).
func findHubPod(ctx context.Context, cs kubernetes.Interface, ns string) (*corev1.Pod, error) {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: hubPodSelector})
	if err != nil {
		return nil, fmt.Errorf("listing hub Pods (%s) in namespace %s: %w", hubPodSelector, ns, err)
	}
	var ready []*corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; podReady(p) {
			ready = append(ready, p)
		}
	}
	if len(ready) == 0 {
		return nil, fmt.Errorf("no Ready hub Pod (%s) in namespace %s (of %d found): give -n for the hub's namespace, or --monitoring/--hub for a hub outside the cluster",
			hubPodSelector, ns, len(pods.Items))
	}
	slices.SortFunc(ready, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return ready[0], nil
}

// podReady reports whether p runs, is not going away, and is Ready.
func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// forwarder opens a local port to a port of a Pod, as kubectl
// port-forward does. The real one goes through the apiserver; tests of
// what follows discovery give their own.
type forwarder func(ctx context.Context, cfg *rest.Config, pod *corev1.Pod, port int) (addr string, stop func(), err error)

// portForward forwards an ephemeral port of 127.0.0.1 to port of pod
// through the apiserver's portforward subresource (SPDY), until stop.
func portForward(ctx context.Context, cfg *rest.Config, pod *corev1.Pod, port int) (string, func(), error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", nil, err
	}
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return "", nil, err
	}
	url := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	stopCh, readyCh := make(chan struct{}), make(chan struct{})
	var errOut strings.Builder
	pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, stopCh, readyCh, io.Discard, &errOut)
	if err != nil {
		return "", nil, err
	}
	failed := make(chan error, 1)
	go func() { failed <- pf.ForwardPorts() }()
	stop := func() { close(stopCh) }
	select {
	case <-readyCh:
	case err := <-failed:
		return "", nil, fmt.Errorf("port-forward to %s/%s: %w %s", pod.Namespace, pod.Name, err, errOut.String())
	case <-ctx.Done():
		stop()
		return "", nil, ctx.Err()
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) == 0 {
		stop()
		return "", nil, errors.Join(errors.New("port-forward: no local port"), err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local))), stop, nil
}

// discoverMonitoring finds a Ready hub Pod through the kubeconfig and
// forwards a local port to its monitoring port: what --monitoring names
// when it is not given. The kubeconfig's user then authenticates the
// /debug documents, as --kubeconfig-token does.
func discoverMonitoring(ctx context.Context, k kubeconfigFlags, forward forwarder) (addr string, stop func(), err error) {
	cfg, err := k.restConfig()
	if err != nil {
		return "", nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", nil, err
	}
	ns := k.Namespace
	if ns == "" {
		ns, _, _ = k.clientConfig().Namespace()
	}
	pod, err := findHubPod(ctx, cs, ns)
	if err != nil {
		return "", nil, err
	}
	addr, stop, err = forward(ctx, cfg, pod, monitoringPort)
	if err != nil {
		return "", nil, fmt.Errorf("hub Pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return addr, stop, nil
}
