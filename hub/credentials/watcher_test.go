package credentials_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/meshfed/meshfed/hub/credentials"
	"github.com/meshfed/meshfed/pkg/kubegates"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
)

func TestMain(m *testing.M) {
	kubegates.DisableWatchList()
	m.Run()
}

type clusters map[model.ClusterID]*rest.Config

func (c clusters) ClusterConfig(id model.ClusterID) (*rest.Config, bool) {
	cfg, ok := c[id]
	return cfg, ok
}

// TestWatcher: a subscription to a Secret of a real apiserver sees it
// appear, change and go, each with a call of its callback; a second
// subscriber of the same Secret shares the watch and is told what is
// known at once; the watch ends with the last subscriber; a cluster the
// fleet does not have is an error, not a hang.
func TestWatcher(t *testing.T) {
	cfg := testutil.StartAPIServer(t, &envtest.Environment{})
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := t.Context()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ingress"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	w, err := credentials.New(credentials.Options{Clusters: clusters{"c1": cfg}, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ref := credentials.Ref{Cluster: "c1", Namespace: "ingress", Name: "cert"}
	var calls atomic.Int32
	unsubscribe := w.Subscribe(ref, func() { calls.Add(1) })
	state := func(want string) func() error {
		return func() error {
			data, synced, err := w.Get(ref)
			got := fmt.Sprintf("synced=%v data=%q err=%v", synced, data["tls.crt"], err)
			if !strings.Contains(got, want) {
				return fmt.Errorf("%s, want %s", got, want)
			}
			return nil
		}
	}
	// Listed, absent.
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, state(`synced=true data="" err=<nil>`))
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if calls.Load() == 0 {
			return errors.New("the first list did not call back")
		}
		return nil
	})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ingress", Name: "cert"}, Data: map[string][]byte{"tls.crt": []byte("one")}}
	if _, err := cs.CoreV1().Secrets("ingress").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Another Secret of the namespace is not watched.
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ingress", Name: "other"}, Data: map[string][]byte{"tls.crt": []byte("no")}}
	if _, err := cs.CoreV1().Secrets("ingress").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, state(`data="one"`))
	before := calls.Load()
	secret.Data["tls.crt"] = []byte("two")
	if _, err := cs.CoreV1().Secrets("ingress").Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, state(`data="two"`))
	if calls.Load() == before {
		t.Error("an update did not call back")
	}

	// A second subscriber shares the watch and hears at once.
	var second atomic.Int32
	unsubscribe2 := w.Subscribe(ref, func() { second.Add(1) })
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if second.Load() == 0 {
			return errors.New("a new subscriber of a known Secret was not told")
		}
		return nil
	})
	if got := watched(t, reg); got != 1 {
		t.Errorf("watched %v Secrets, want 1", got)
	}

	if err := cs.CoreV1().Secrets("ingress").Delete(ctx, "cert", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, state(`synced=true data="" err=<nil>`))

	unsubscribe()
	unsubscribe2()
	unsubscribe2() // idempotent
	if got := watched(t, reg); got != 0 {
		t.Errorf("watched %v Secrets after the last unsubscribe, want 0", got)
	}

	// A cluster the fleet does not have: an error, told to the subscriber.
	missing := credentials.Ref{Cluster: "nowhere", Namespace: "ingress", Name: "cert"}
	var told atomic.Int32
	defer w.Subscribe(missing, func() { told.Add(1) })()
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if _, _, err := w.Get(missing); err == nil || told.Load() == 0 {
			return fmt.Errorf("unknown cluster: err %v, told %d times", err, told.Load())
		}
		return nil
	})
}

// watched is meshfed_credentials_secrets_watched.
func watched(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "meshfed_credentials_secrets_watched" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no meshfed_credentials_secrets_watched")
	return 0
}
