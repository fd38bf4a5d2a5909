package ca_test

import (
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/hub/ca"
)

// Retiring roots kept in the config cluster: replicas saving at once all
// end recorded, the later RetireAt of a root wins, entries past their time
// are dropped, and a damaged entry does not hide the others.
func TestRetirements(t *testing.T) {
	c := startFleet(t).cluster("cluster-1")
	createNamespace(t, c, "retiring")
	store := ca.Retirements{Client: c.ctrl, Namespace: "retiring"}
	now := time.Now().Truncate(time.Second)
	if got, err := store.Load(t.Context(), now); err != nil || len(got) != 0 {
		t.Fatalf("Load without the ConfigMap = %v, %v", got, err)
	}

	roots := make([]rootCA, 4)
	for i := range roots {
		roots[i] = newRootCA(t, "retiring", now)
	}
	// Four replicas record a root each, at once (create races, then
	// update conflicts).
	var wg sync.WaitGroup
	errs := make([]error, len(roots))
	for i, r := range roots {
		wg.Go(func() {
			errs[i] = store.Save(t.Context(), []ca.RetiringRoot{{Fingerprint: fp(r.cert), PEM: pemCert(r.cert), RetireAt: now.Add(time.Hour)}}, now)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
	}
	got, err := store.Load(t.Context(), now)
	if err != nil || len(got) != len(roots) {
		t.Fatalf("Load = %d roots, %v; want %d", len(got), err, len(roots))
	}

	// A later RetireAt wins over an earlier one, whatever the order; a
	// root past its time is dropped at the next save.
	late := now.Add(2 * time.Hour)
	if err := store.Save(t.Context(), []ca.RetiringRoot{{Fingerprint: fp(roots[0].cert), PEM: pemCert(roots[0].cert), RetireAt: late}}, now); err != nil {
		t.Fatal(err)
	}
	if err := store.Save(t.Context(), []ca.RetiringRoot{{Fingerprint: fp(roots[0].cert), PEM: pemCert(roots[0].cert), RetireAt: now.Add(time.Minute)}}, now); err != nil {
		t.Fatal(err)
	}
	if err := store.Save(t.Context(), []ca.RetiringRoot{{Fingerprint: fp(roots[1].cert), PEM: pemCert(roots[1].cert), RetireAt: now.Add(time.Second)}}, now.Add(90*time.Minute)); err != nil {
		t.Fatal(err)
	}
	got, err = store.Load(t.Context(), now.Add(90*time.Minute))
	if err != nil || len(got) != 1 || got[0].Fingerprint != fp(roots[0].cert) || !got[0].RetireAt.Equal(late) {
		t.Fatalf("after 90 minutes: %+v, %v; want only the root retiring at %v", got, err, late)
	}

	// A damaged entry is reported; the others still load.
	var cm corev1.ConfigMap
	if err := c.ctrl.Get(t.Context(), client.ObjectKey{Namespace: "retiring", Name: ca.RetiringConfigMap}, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["broken"] = "{not json"
	if err := c.ctrl.Update(t.Context(), &cm); err != nil {
		t.Fatal(err)
	}
	got, err = store.Load(t.Context(), now)
	if err == nil || len(got) != 1 {
		t.Fatalf("Load with a damaged entry = %d roots, %v; want 1 and an error", len(got), err)
	}
}
