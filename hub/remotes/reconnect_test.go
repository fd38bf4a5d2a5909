package remotes_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/hub/remotes"
	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// viaProxy returns kubeconfig with every cluster's server at addr.
func viaProxy(t *testing.T, kubeconfig []byte, addr string) []byte {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + addr
	}
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// outageFixture is the test's apiserver as remote cluster c1 behind a TCP
// proxy (cut for an outage), watched by a Provider and a Watcher that
// probe every 200 ms, c1's remote secret created with annotations.
type outageFixture struct {
	env    *env
	st     *store.Store
	status *remotes.Status
	reg    *prometheus.Registry
	proxy  *testutil.TCPProxy
	secret *corev1.Secret
}

func startOutageFixture(t *testing.T, annotations map[string]string) *outageFixture {
	t.Helper()
	f := &outageFixture{env: startEnv(t), reg: prometheus.NewRegistry()}
	f.env.create(t, workloadObjects()...)
	u, err := url.Parse(f.env.cfg.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	f.proxy = testutil.StartTCPProxy(t, u.Host)
	var cancel context.CancelFunc
	var done <-chan error
	f.st, f.status, cancel, done = hubPartsOpts(t, f.env, f.reg, func(o *remotes.WatcherOptions) {
		o.ProbeInterval = 200 * time.Millisecond
	})
	t.Cleanup(func() { cancel(); <-done })
	f.secret = remoteSecret("remotes", map[string][]byte{"c1": viaProxy(t, f.env.kubeconfig, f.proxy.Addr())})
	f.secret.Annotations = annotations
	f.env.create(t, f.secret)
	return f
}

// TestReconnectAfterOutage: a remote apiserver that goes away for long
// enough that client-go's informers back off (12 s here: their waits grow
// to about 13 s) keeps its endpoints meanwhile (keep), shows unreachable,
// and when it answers again its watches are rebuilt at once, so that a
// change made 1 s after it came back reaches the store within seconds
// rather than at the informers' next attempt. The remote is the test's
// apiserver behind a TCP proxy that is cut and restored on the same
// address.
func TestReconnectAfterOutage(t *testing.T) {
	f := startOutageFixture(t, nil)
	e, st, status, proxy := f.env, f.st, f.status, f.proxy
	endpoints := func(want int) func() error {
		return func() error {
			if ms := st.Service(echoHost); ms == nil || len(ms.Endpoints) != want {
				return fmt.Errorf("service %+v, want %d endpoints", ms, want)
			}
			return nil
		}
	}
	eventually(t, "c1 synced", endpoints(1))

	proxy.Cut()
	eventually(t, "c1 unreachable", func() error {
		if s, _ := status.Get("c1"); s.State != remotes.StateUnreachable {
			return fmt.Errorf("status %+v", s)
		}
		return nil
	})
	time.Sleep(12 * time.Second) // the outage, long enough for the informers to back off
	if err := endpoints(1)(); err != nil {
		t.Fatalf("endpoints lost during the outage: %v", err)
	}

	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	var slice discoveryv1.EndpointSlice
	if err := e.client.Get(t.Context(), client.ObjectKey{Namespace: "demo", Name: "echo-1"}, &slice); err != nil {
		t.Fatal(err)
	}
	slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
		Addresses: []string{"10.1.0.2"}, NodeName: ptr.To("n1"),
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
	})
	if err := e.client.Update(t.Context(), &slice); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	// Within 5 s: the informers left alone would try next about 13 s
	// after their previous attempt.
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, testutil.Named("the change after the outage", endpoints(2)))
	t.Logf("a change made 1 s after the apiserver came back reached the store %v later", time.Since(changed).Round(time.Millisecond))
	eventually(t, "c1 synced again", func() error {
		if s, _ := status.Get("c1"); s.State != remotes.StateSynced {
			return fmt.Errorf("status %+v", s)
		}
		return nil
	})
	if n := counterSum(t, f.reg, "meshfed_remote_cluster_reconnects_total"); n != 1 {
		t.Errorf("meshfed_remote_cluster_reconnects_total = %v, want 1", n)
	}
}

// counterSum returns the sum of the counter name's series in reg that
// carry the given label pairs (name, value, ...); all of them without.
func counterSum(t *testing.T, reg *prometheus.Registry, name string, pairs ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			matches := true
			for i := 0; i+1 < len(pairs); i += 2 {
				matches = matches && labels[pairs[i]] == pairs[i+1]
			}
			if matches {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestStaleEndpointsDropped: under drop-after=1s, a cluster unreachable
// for longer loses its endpoints (the store no longer has the service),
// shows when, and gets them back when it answers again; an invalid
// policy is refused with its cause and keeps endpoints.
func TestStaleEndpointsDropped(t *testing.T) {
	if _, err := remotes.ParseStalePolicy("drop-after=soon"); err == nil || !strings.Contains(err.Error(), remotes.AnnotationStaleEndpoints) {
		t.Errorf("invalid policy: %v", err)
	}
	for in, want := range map[string]string{"": "keep", "keep": "keep", "drop-after=90s": "drop-after=1m30s"} {
		if p, err := remotes.ParseStalePolicy(in); err != nil || p.String() != want {
			t.Errorf("ParseStalePolicy(%q) = %v, %v; want %s", in, p, err, want)
		}
	}

	f := startOutageFixture(t, map[string]string{remotes.AnnotationStaleEndpoints: "drop-after=1s"})
	e, st, status, proxy, sec := f.env, f.st, f.status, f.proxy, f.secret
	eventually(t, "c1 synced", func() error {
		if ms := st.Service(echoHost); ms == nil || len(ms.Endpoints) != 1 {
			return fmt.Errorf("service %+v", ms)
		}
		if s, _ := status.Get("c1"); s.StalePolicy.DropAfter != time.Second {
			return fmt.Errorf("status %+v, want the policy", s)
		}
		return nil
	})

	proxy.Cut()
	cut := time.Now()
	eventually(t, "c1's endpoints dropped", func() error {
		if ms := st.Service(echoHost); ms != nil && len(ms.Endpoints) > 0 {
			return fmt.Errorf("service %+v still served", ms)
		}
		if s, _ := status.Get("c1"); s.Dropped.IsZero() || s.State != remotes.StateUnreachable {
			return fmt.Errorf("status %+v", s)
		}
		return nil
	})
	t.Logf("endpoints dropped %v after the apiserver went away (drop-after=1s, probes every 200ms)", time.Since(cut).Round(10*time.Millisecond))

	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	eventually(t, "c1's endpoints back", func() error {
		if ms := st.Service(echoHost); ms == nil || len(ms.Endpoints) != 1 {
			return fmt.Errorf("service %+v", ms)
		}
		if s, _ := status.Get("c1"); !s.Dropped.IsZero() || s.State != remotes.StateSynced {
			return fmt.Errorf("status %+v", s)
		}
		return nil
	})
	t.Logf("endpoints back %v after the apiserver returned", time.Since(back).Round(10*time.Millisecond))

	// A bad policy: refused with its cause, endpoints kept.
	var cur corev1.Secret
	if err := e.client.Get(t.Context(), client.ObjectKeyFromObject(sec), &cur); err != nil {
		t.Fatal(err)
	}
	cur.Annotations[remotes.AnnotationStaleEndpoints] = "drop-after=never"
	if err := e.client.Update(t.Context(), &cur); err != nil {
		t.Fatal(err)
	}
	eventually(t, "bad policy reported", func() error {
		for _, se := range status.SecretErrors() {
			if strings.Contains(se.Error, "drop-after=never") {
				return nil
			}
		}
		return fmt.Errorf("secret errors %+v", status.SecretErrors())
	})
	if s, _ := status.Get("c1"); s.StalePolicy.DropAfter != 0 {
		t.Errorf("an invalid policy left %v in force, want keep", s.StalePolicy)
	}
}
