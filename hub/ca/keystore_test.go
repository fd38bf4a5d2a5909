package ca_test

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pb "istio.io/api/security/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/hub/ca"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// rootCA is a self-signed root used directly as a plug-in signing CA.
type rootCA struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func newRootCA(t *testing.T, cn string, now time.Time) rootCA {
	c, k := selfSigned(t, cn, now)
	return rootCA{c, k}
}

// putCACerts writes Secret cacerts of ns: signing CA signer, roots.
func putCACerts(t *testing.T, c *remoteCluster, ns string, signer rootCA, roots ...rootCA) {
	t.Helper()
	var rootsPEM []byte
	for _, r := range roots {
		rootsPEM = append(rootsPEM, pemCert(r.cert)...)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: ca.PluginSecret, Namespace: ns}}
	data := map[string][]byte{ca.KeyCACert: pemCert(signer.cert), ca.KeyCAKey: pkcs8(t, signer.key), ca.KeyRootCert: rootsPEM}
	err := c.ctrl.Get(t.Context(), client.ObjectKeyFromObject(sec), sec)
	switch {
	case err == nil:
		sec.Data = data
		err = c.ctrl.Update(t.Context(), sec)
	default:
		sec.Data = data
		err = c.ctrl.Create(t.Context(), sec)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func fp(c *x509.Certificate) string { return ca.Fingerprint(c) }

// The three steps of a root rotation, each one a reload of cacerts: the
// new root is added, then signs, then the old root is dropped and retires
// MaxLeafTTL+RetireGrace after the CA last signed under it (not after it
// was dropped). Invalid Secrets on the way are refused and change nothing.
func TestKeyStoreRotationSteps(t *testing.T) {
	c := startFleet(t).cluster("cluster-1")
	createNamespace(t, c, "rotate")
	t0 := time.Now()
	clk := clocktesting.NewFakeClock(t0)
	// The new root expires later than the old one, as it would.
	oldCA, newCA := newRootCA(t, "old root", t0), newRootCA(t, "new root", t0.Add(30*time.Minute))
	putCACerts(t, c, "rotate", oldCA, oldCA)

	reg := prometheus.NewRegistry()
	var rotations []ca.Rotation
	const ttl, grace = time.Hour, time.Minute
	store, err := ca.NewKeyStore(t.Context(), ca.KeyStoreOptions{
		Client: c.ctrl, Namespace: "rotate", MaxLeafTTL: ttl, RetireGrace: grace, Clock: clk, Metrics: reg,
		OnRotate: func(_ context.Context, r ca.Rotation) { rotations = append(rotations, r) },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.NewServer(ca.ServerOptions{Keys: store, Authenticator: fixedIdentity{}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	reload := func(wantChanged bool) {
		t.Helper()
		changed, err := store.Reload(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if changed != wantChanged {
			t.Fatalf("Reload changed = %v, want %v", changed, wantChanged)
		}
	}
	issuerOf := func() (leafIssuer, servingIssuer string) {
		t.Helper()
		csr, _ := newCSR(t, nil, nil)
		resp, err := srv.CreateCertificate(incoming("cluster-1", "token"), &pb.IstioCertificateRequest{Csr: string(csr)})
		if err != nil {
			t.Fatal(err)
		}
		leaf, mid, roots := parseChain(t, resp.CertChain)
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: mid, CurrentTime: clk.Now(),
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Fatalf("leaf does not verify with the roots sent with it: %v", err)
		}
		serving, err := srv.TLSConfig().GetCertificate(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		sc, err := x509.ParseCertificate(serving.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.Issuer.CommonName, sc.Issuer.CommonName
	}
	if l, s := issuerOf(); l != "old root" || s != "old root" {
		t.Fatalf("before the rotation: leaf by %q, serving certificate by %q", l, s)
	}
	if got, want := gaugeValue(t, reg, "meshfed_ca_root_cert_expiry_timestamp_seconds"), float64(oldCA.cert.NotAfter.Unix()); got != want {
		t.Fatalf("root expiry metric %v, want the old root's %v", got, want)
	}
	reload(false)

	// Step 1: the new root is trusted, the old CA still signs.
	clk.SetTime(t0.Add(10 * time.Minute))
	putCACerts(t, c, "rotate", oldCA, oldCA, newCA)
	reload(true)
	if r := rotations[len(rotations)-1]; !slices.Equal(r.Added, []string{fp(newCA.cert)}) || len(r.Retired) != 0 {
		t.Fatalf("step 1 rotation: added %v, retired %v", r.Added, r.Retired)
	}
	if l, _ := issuerOf(); l != "old root" {
		t.Fatalf("step 1: leaf signed by %q", l)
	}

	// A CA that chains to none of its roots is refused; the keys stay.
	clk.SetTime(t0.Add(15 * time.Minute))
	stray := newRootCA(t, "stray", t0)
	putCACerts(t, c, "rotate", stray, newCA)
	if _, err := store.Reload(t.Context()); !errors.Is(err, ca.ErrInvalidCASecret) {
		t.Fatalf("Reload of a CA outside its roots: %v, want ErrInvalidCASecret", err)
	}
	if got := reloads(t, reg, "refused"); got != 1 {
		t.Fatalf("refused reloads = %v", got)
	}

	// Step 2: the new CA signs; the serving certificate follows at once.
	stopped := t0.Add(20 * time.Minute)
	clk.SetTime(stopped)
	putCACerts(t, c, "rotate", newCA, newCA, oldCA)
	reload(true)
	if r := rotations[len(rotations)-1]; len(r.Added) != 0 || len(r.Retired) != 0 {
		t.Fatalf("step 2 rotation: added %v, retired %v", r.Added, r.Retired)
	}
	if l, s := issuerOf(); l != "new root" || s != "new root" {
		t.Fatalf("step 2: leaf by %q, serving certificate by %q", l, s)
	}
	if got, want := gaugeValue(t, reg, "meshfed_ca_root_cert_expiry_timestamp_seconds"), float64(newCA.cert.NotAfter.Unix()); got != want {
		t.Fatalf("root expiry metric %v, want the new root's %v", got, want)
	}

	// Step 3, much later: the old root retires counting from step 2.
	clk.SetTime(t0.Add(50 * time.Minute))
	putCACerts(t, c, "rotate", newCA, newCA)
	reload(true)
	r := rotations[len(rotations)-1]
	if len(r.Retired) != 1 || r.Retired[0].Fingerprint != fp(oldCA.cert) {
		t.Fatalf("step 3 retired %v, want the old root", r.Retired)
	}
	if want := stopped.Add(ttl + grace); !r.Retired[0].At.Equal(want) {
		t.Fatalf("old root retires at %v, want %v (last signed + MaxLeafTTL + grace)", r.Retired[0].At, want)
	}
	if got := store.Current().RootFingerprints(); !slices.Equal(got, []string{fp(newCA.cert)}) {
		t.Fatalf("roots after step 3: %v", got)
	}
	if got := reloads(t, reg, "rotated"); got != 3 {
		t.Fatalf("rotated reloads = %v, want 3", got)
	}

	// A deleted cacerts is refused: the CA keeps signing with its keys
	// rather than fall back to another root.
	if err := c.ctrl.Delete(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: ca.PluginSecret, Namespace: "rotate"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Reload(t.Context()); !errors.Is(err, ca.ErrInvalidCASecret) {
		t.Fatalf("Reload after deleting cacerts: %v", err)
	}
	if l, _ := issuerOf(); l != "new root" {
		t.Fatalf("after cacerts was deleted: leaf by %q", l)
	}
}

// A root dropped that the CA never signed under in this process retires a
// full MaxLeafTTL+grace from the drop: an earlier process may have used it.
func TestKeyStoreRetiresUnknownRootsFromNow(t *testing.T) {
	c := startFleet(t).cluster("cluster-1")
	createNamespace(t, c, "rotate-unknown")
	t0 := time.Now()
	clk := clocktesting.NewFakeClock(t0)
	a, b := newRootCA(t, "a", t0), newRootCA(t, "b", t0)
	putCACerts(t, c, "rotate-unknown", a, a, b)
	var got []ca.Retirement
	store, err := ca.NewKeyStore(t.Context(), ca.KeyStoreOptions{
		Client: c.ctrl, Namespace: "rotate-unknown", MaxLeafTTL: time.Hour, RetireGrace: time.Second, Clock: clk,
		OnRotate: func(_ context.Context, r ca.Rotation) { got = append(got, r.Retired...) },
	})
	if err != nil {
		t.Fatal(err)
	}
	clk.SetTime(t0.Add(time.Minute))
	putCACerts(t, c, "rotate-unknown", a, a)
	if _, err := store.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Fingerprint != fp(b.cert) || !got[0].At.Equal(t0.Add(time.Minute+time.Hour+time.Second)) {
		t.Fatalf("retired %+v", got)
	}
}

// Run follows the Secret through its watch: an update is in use without a
// call to Reload, well before the resync period.
func TestKeyStoreRunFollowsTheSecret(t *testing.T) {
	c := startFleet(t).cluster("cluster-1")
	createNamespace(t, c, "rotate-watch")
	now := time.Now()
	a, b := newRootCA(t, "a", now), newRootCA(t, "b", now)
	putCACerts(t, c, "rotate-watch", a, a)
	rotated := make(chan ca.Rotation, 4)
	store, err := ca.NewKeyStore(t.Context(), ca.KeyStoreOptions{
		Client: c.ctrl, Namespace: "rotate-watch", Resync: time.Hour,
		OnRotate: func(_ context.Context, r ca.Rotation) { rotated <- r },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- store.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	putCACerts(t, c, "rotate-watch", a, a, b)
	select {
	case r := <-rotated:
		if !slices.Equal(r.Added, []string{fp(b.cert)}) {
			t.Fatalf("added %v", r.Added)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the update of cacerts was not picked up by the watch")
	}
	if got := store.Current().RootFingerprints(); len(got) != 2 {
		t.Fatalf("roots in use: %v", got)
	}
}

// The response's roots are the CA's own and the federated bundle's, each
// once: a workload trusts other trust domains and roots mid-rotation.
func TestResponseCarriesTheTrustBundle(t *testing.T) {
	now := time.Now()
	own, other := newRootCA(t, "own", now), newRootCA(t, "other domain", now)
	keys, err := ca.KeysFromPEM(pemCert(own.cert), pkcs8(t, own.key), nil, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	bundle := append(pemCert(other.cert), pemCert(own.cert)...)
	srv, err := ca.NewServer(ca.ServerOptions{Keys: keys, Authenticator: fixedIdentity{},
		TrustBundle: func() []byte { return bundle }})
	if err != nil {
		t.Fatal(err)
	}
	csr, _ := newCSR(t, nil, nil)
	resp, err := srv.CreateCertificate(incoming("cluster-1", "token"), &pb.IstioCertificateRequest{Csr: string(csr)})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range parseCertsT(t, resp.CertChain[len(resp.CertChain)-1]) {
		names = append(names, r.Subject.CommonName)
	}
	if !slices.Equal(names, []string{"own", "other domain"}) {
		t.Fatalf("roots in the response: %v, want own then the bundle's other root, each once", names)
	}
}

// reloads reads meshfed_ca_key_reloads_total{result}.
func reloads(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	return metricValue(t, reg, "meshfed_ca_key_reloads_total", result)
}

// gaugeValue reads the single gauge name of reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return metricValue(t, reg, name, "")
}

// metricValue reads the counter or gauge name of reg; with result set, the
// one labelled result=result.
func metricValue(t *testing.T, reg *prometheus.Registry, name, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labelled := result == ""
			for _, l := range m.GetLabel() {
				labelled = labelled || l.GetName() == "result" && l.GetValue() == result
			}
			if !labelled {
				continue
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s{result=%q}", name, result)
	return 0
}

func parseCertsT(t *testing.T, s string) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	rest := []byte(s)
	for {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return out
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
}

// A cacerts that replaces CA and root in one edit is staged: the new root
// is trusted at once, the old CA signs until the new root has been trusted
// for RootSpread, and only then does the old root start to retire.
func TestKeyStoreStagesAYoungSigningRoot(t *testing.T) {
	c := startFleet(t).cluster("cluster-1")
	createNamespace(t, c, "rotate-oneshot")
	t0 := time.Now()
	clk := clocktesting.NewFakeClock(t0)
	oldCA, newCA := newRootCA(t, "old root", t0), newRootCA(t, "new root", t0)
	putCACerts(t, c, "rotate-oneshot", oldCA, oldCA)
	reg := prometheus.NewRegistry()
	var rotations []ca.Rotation
	const ttl, grace, spread = time.Hour, time.Minute, 30 * time.Second
	store, err := ca.NewKeyStore(t.Context(), ca.KeyStoreOptions{
		Client: c.ctrl, Namespace: "rotate-oneshot", MaxLeafTTL: ttl, RetireGrace: grace, RootSpread: spread,
		Clock: clk, Metrics: reg, OnRotate: func(_ context.Context, r ca.Rotation) { rotations = append(rotations, r) },
	})
	if err != nil {
		t.Fatal(err)
	}
	signer := func() string { return store.Current().CA().Cert.Subject.CommonName }

	edit := t0.Add(time.Minute)
	clk.SetTime(edit)
	putCACerts(t, c, "rotate-oneshot", newCA, newCA) // CA and root at once
	if changed, err := store.Reload(t.Context()); err != nil || !changed {
		t.Fatalf("Reload = %v, %v", changed, err)
	}
	if signer() != "old root" {
		t.Fatalf("signs with %q right after the edit, want the old CA while the new root spreads", signer())
	}
	if got := store.Current().RootFingerprints(); !slices.Contains(got, fp(newCA.cert)) || !slices.Contains(got, fp(oldCA.cert)) {
		t.Fatalf("roots while staged: %v, want both", got)
	}
	if r := rotations[len(rotations)-1]; !slices.Equal(r.Added, []string{fp(newCA.cert)}) || len(r.Retired) != 0 {
		t.Fatalf("staged rotation: added %v, retired %v", r.Added, r.Retired)
	}
	if got := store.StagedUntil(); !got.Equal(edit.Add(spread)) {
		t.Fatalf("StagedUntil = %v, want %v", got, edit.Add(spread))
	}
	clk.SetTime(edit.Add(spread / 2))
	if changed, err := store.Reload(t.Context()); err != nil || changed {
		t.Fatalf("Reload before the root spread = %v, %v; want no change", changed, err)
	}

	switched := edit.Add(spread)
	clk.SetTime(switched)
	if changed, err := store.Reload(t.Context()); err != nil || !changed {
		t.Fatalf("Reload once the root spread = %v, %v", changed, err)
	}
	if signer() != "new root" || !store.StagedUntil().IsZero() {
		t.Fatalf("after the spread: signs with %q, staged until %v", signer(), store.StagedUntil())
	}
	r := rotations[len(rotations)-1]
	if len(r.Retired) != 1 || r.Retired[0].Fingerprint != fp(oldCA.cert) || !r.Retired[0].At.Equal(switched.Add(ttl+grace)) {
		t.Fatalf("after the switch retired %+v, want the old root at %v", r.Retired, switched.Add(ttl+grace))
	}
	if got := reloads(t, reg, "staged"); got != 1 {
		t.Fatalf("staged reloads = %v, want 1", got)
	}
}

// noWatch fails every watch, so KeyStore.Run reloads only when its clock
// says so: at a resync, or when a staged signing CA is due.
type noWatch struct{ client.WithWatch }

func (noWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("watch disabled by the test")
}

type runCtxKey struct{}

// runKeyStore runs store until the test ends, under a context that carries
// runCtxKey, and waits until Run waits on clk with n timers (the resync
// ticker, one retry backoff per watched Secret, the staging timer).
func runKeyStore(t *testing.T, store *ca.KeyStore, clk *clocktesting.FakeClock, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.WithValue(t.Context(), runCtxKey{}, "run"))
	done := make(chan error, 1)
	go func() { done <- store.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	waiters(t, clk, n)
}

func waiters(t *testing.T, clk *clocktesting.FakeClock, n int) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if got := clk.Waiters(); got != n {
			return fmt.Errorf("%d timers wait on the clock, want %d", got, n)
		}
		return nil
	})
}

// Without watch events, Run reloads at each Resync of its clock, and not
// before; OnRotate gets Run's context.
func TestKeyStoreRunResyncsOnItsClock(t *testing.T) {
	c := startFleet(t).cluster("cluster-1")
	createNamespace(t, c, "rotate-resync")
	t0 := time.Now()
	clk := clocktesting.NewFakeClock(t0)
	a, b := newRootCA(t, "a", t0), newRootCA(t, "b", t0)
	putCACerts(t, c, "rotate-resync", a, a)
	rotated := make(chan ca.Rotation, 4)
	const resync = time.Minute
	store, err := ca.NewKeyStore(t.Context(), ca.KeyStoreOptions{
		Client: noWatch{c.ctrl}, Namespace: "rotate-resync", Resync: resync, Clock: clk,
		OnRotate: func(ctx context.Context, r ca.Rotation) {
			if ctx.Value(runCtxKey{}) == nil {
				t.Error("OnRotate was not called with Run's context")
			}
			rotated <- r
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	runKeyStore(t, store, clk, 3)

	putCACerts(t, c, "rotate-resync", a, a, b)
	testutil.Consistently(t, 300*time.Millisecond, 10*time.Millisecond, func() error {
		if got := store.Current().RootFingerprints(); len(got) != 1 {
			return fmt.Errorf("roots %v in use before the resync", got)
		}
		return nil
	})
	clk.Step(resync)
	select {
	case r := <-rotated:
		if !slices.Equal(r.Added, []string{fp(b.cert)}) {
			t.Fatalf("added %v at the resync, want b", r.Added)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no rotation at the resync")
	}
	if got := store.Current().RootFingerprints(); len(got) != 2 {
		t.Fatalf("roots in use after the resync: %v", got)
	}
}

// Run takes a staged signing CA into use when its clock reaches
// StagedUntil, and the old root then retires MaxLeafTTL+RetireGrace after
// that switch.
func TestKeyStoreRunSwitchesAStagedCAOnItsClock(t *testing.T) {
	c := startFleet(t).cluster("cluster-1")
	createNamespace(t, c, "rotate-staged")
	t0 := time.Now()
	clk := clocktesting.NewFakeClock(t0)
	oldCA, newCA := newRootCA(t, "old root", t0), newRootCA(t, "new root", t0)
	putCACerts(t, c, "rotate-staged", oldCA, oldCA)
	rotated := make(chan ca.Rotation, 4)
	const ttl, grace, spread, resync = time.Hour, time.Minute, 30 * time.Second, time.Hour
	store, err := ca.NewKeyStore(t.Context(), ca.KeyStoreOptions{
		Client: noWatch{c.ctrl}, Namespace: "rotate-staged", MaxLeafTTL: ttl, RetireGrace: grace,
		RootSpread: spread, Resync: resync, Clock: clk,
		OnRotate: func(_ context.Context, r ca.Rotation) { rotated <- r },
	})
	if err != nil {
		t.Fatal(err)
	}
	next := func(what string) ca.Rotation {
		t.Helper()
		select {
		case r := <-rotated:
			return r
		case <-time.After(20 * time.Second):
			t.Fatalf("no rotation %s", what)
			return ca.Rotation{}
		}
	}
	signer := func() string { return store.Current().CA().Cert.Subject.CommonName }
	runKeyStore(t, store, clk, 3)

	putCACerts(t, c, "rotate-staged", newCA, newCA) // CA and root at once
	clk.Step(resync)
	edit := clk.Now()
	if r := next("at the resync"); !slices.Equal(r.Added, []string{fp(newCA.cert)}) || len(r.Retired) != 0 {
		t.Fatalf("staged rotation: added %v, retired %v", r.Added, r.Retired)
	}
	if signer() != "old root" || !store.StagedUntil().Equal(edit.Add(spread)) {
		t.Fatalf("after the edit: signs with %q, staged until %v; want the old CA until %v", signer(), store.StagedUntil(), edit.Add(spread))
	}
	waiters(t, clk, 4) // and the staging timer

	clk.Step(spread)
	r := next("when the staging ended")
	if want := edit.Add(spread + ttl + grace); len(r.Retired) != 1 || r.Retired[0].Fingerprint != fp(oldCA.cert) || !r.Retired[0].At.Equal(want) {
		t.Fatalf("after the switch retired %+v, want the old root at %v", r.Retired, want)
	}
	if signer() != "new root" || !store.StagedUntil().IsZero() {
		t.Fatalf("after the staging: signs with %q, staged until %v", signer(), store.StagedUntil())
	}
	waiters(t, clk, 3) // no staging timer left
}
