package ca

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KeySource gives the signing keys in use now. *Keys is a fixed source;
// *KeyStore follows the CA Secrets of the config cluster.
type KeySource interface {
	Current() *Keys
}

// KeyStoreOptions configure a KeyStore. DefaultKeyStoreOptions gives the
// defaults of everything but Client and Namespace.
type KeyStoreOptions struct {
	// Client reads and watches the CA Secrets of the config cluster; it
	// needs get, list and watch on PluginSecret and SelfSignedSecret and,
	// on first start, create. Required.
	Client client.WithWatch
	// Namespace holds the Secrets. Required.
	Namespace string
	// Keys describe the self-signed root created on first start.
	Keys KeyOptions
	// MaxLeafTTL is the longest lifetime of a leaf the CA signs
	// (ServerOptions.MaxTTL): a root dropped from root-cert.pem stays
	// trusted this long after the last leaf under it was signed. Default
	// 24h.
	MaxLeafTTL time.Duration
	// RetireGrace is added to MaxLeafTTL for the skew between the clocks,
	// and between the reloads, of the replicas. Default one minute.
	RetireGrace time.Duration
	// Resync re-reads the Secrets this often even without a watch event.
	// Default one minute.
	Resync time.Duration
	// OnRotate is called by Run after the keys changed, one call at a
	// time, in order. It may be nil.
	OnRotate func(Rotation)
	// Clock dates the keys' validation and the retirements. Default the
	// real clock.
	Clock clock.PassiveClock
	// Metrics registers meshfed_ca_key_reloads_total; nil skips it.
	Metrics prometheus.Registerer
	Log     logr.Logger
}

// DefaultKeyStoreOptions returns the defaults of KeyStoreOptions.
func DefaultKeyStoreOptions() KeyStoreOptions {
	return KeyStoreOptions{
		MaxLeafTTL:  24 * time.Hour,
		RetireGrace: time.Minute,
		Resync:      time.Minute,
		Clock:       clock.RealClock{},
		Log:         logr.Discard(),
	}
}

func (o KeyStoreOptions) withDefaults() KeyStoreOptions {
	d := DefaultKeyStoreOptions()
	if o.MaxLeafTTL == 0 {
		o.MaxLeafTTL = d.MaxLeafTTL
	}
	if o.RetireGrace == 0 {
		o.RetireGrace = d.RetireGrace
	}
	if o.Resync == 0 {
		o.Resync = d.Resync
	}
	if o.Clock == nil {
		o.Clock = d.Clock
	}
	if o.Log.GetSink() == nil {
		o.Log = d.Log
	}
	return o
}

// Rotation is a change of the signing keys, as the trust bundle must follow
// it.
type Rotation struct {
	Old, New *Keys
	// Added are the fingerprints of the roots New trusts and Old did not:
	// they join the trust bundle at once.
	Added []string
	// Retired are the roots Old trusted and New does not. Each stays in
	// the trust bundle until its leaves have expired.
	Retired []Retirement
}

// Retirement is the end of trust in one root.
type Retirement struct {
	Fingerprint string
	// At is when the root may leave the trust bundle: the time the CA
	// last signed under it, plus MaxLeafTTL and RetireGrace.
	At time.Time
}

// Key reload results, the values of meshfed_ca_key_reloads_total's label
// "result".
const (
	reloadRotated   = "rotated"
	reloadUnchanged = "unchanged"
	reloadRefused   = "refused"
)

// KeyStore holds the CA's signing keys and follows the config cluster's CA
// Secrets, so an operator rotates the root without restarting the hub, in
// Istio's three steps:
//
//  1. add the new root to root-cert.pem of cacerts (the new root joins the
//     trust bundle; the CA still signs with the old keys);
//  2. replace ca-cert.pem and ca-key.pem with the new CA (new leaves chain
//     to the new root; old leaves still verify with the old one);
//  3. remove the old root from root-cert.pem. The KeyStore then keeps the
//     old root in the trust bundle until every leaf it signed under it has
//     expired: it remembers when it stopped signing under each root, and
//     the Rotation names the time (Retirement.At) after which the root may
//     go. So the steps may follow each other as fast as the operator
//     likes: no handshake fails on a leaf whose root left too early.
//
// A Secret that fails validation (a CA that does not chain to the new
// roots, a deleted Secret, a broken PEM) is refused with an error that
// names it, counted, and the keys in use stay. Safe for concurrent use.
type KeyStore struct {
	opts    KeyStoreOptions
	current atomic.Pointer[Keys]
	reloads *prometheus.CounterVec

	mu sync.Mutex // serializes Reload; guards stopped
	// stopped holds, per root fingerprint, when this process last signed
	// under that root, for roots it no longer signs under.
	stopped map[string]time.Time
}

// NewKeyStore loads the keys (LoadOrCreateKeys: cacerts, else
// istio-ca-secret, created when absent) and returns a KeyStore serving
// them; Run follows later changes.
func NewKeyStore(ctx context.Context, opts KeyStoreOptions) (*KeyStore, error) {
	if opts.Client == nil || opts.Namespace == "" {
		return nil, errors.New("ca: KeyStoreOptions.Client and Namespace are required")
	}
	opts = opts.withDefaults()
	keys, err := LoadOrCreateKeys(ctx, opts.Client, opts.Namespace, opts.Clock.Now(), opts.Keys)
	if err != nil {
		return nil, err
	}
	s := &KeyStore{
		opts: opts,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_ca_key_reloads_total",
			Help: "Reloads of the CA Secrets that found a change, by result: rotated (new keys in use) or refused (invalid; the keys in use stay).",
		}, []string{"result"}),
		stopped: map[string]time.Time{},
	}
	for _, r := range []string{reloadRotated, reloadRefused} {
		s.reloads.WithLabelValues(r)
	}
	if opts.Metrics != nil {
		if err := opts.Metrics.Register(s.reloads); err != nil {
			return nil, fmt.Errorf("ca: metrics: %w", err)
		}
	}
	s.current.Store(keys)
	return s, nil
}

// Current returns the keys in use.
func (s *KeyStore) Current() *Keys { return s.current.Load() }

// Run watches the CA Secrets and reloads the keys on every change, and
// every Resync, until ctx ends.
func (s *KeyStore) Run(ctx context.Context) error {
	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, name := range []string{PluginSecret, SelfSignedSecret} {
		wg.Go(func() { s.watch(ctx, name, poke) })
	}
	resync := time.NewTicker(s.opts.Resync)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-resync.C:
		}
		if _, err := s.Reload(ctx); err != nil && ctx.Err() == nil {
			s.opts.Log.Error(err, "CA secret refused; the CA keeps signing with the keys in use", "keys", s.Current().Source())
		}
	}
}

// watch pokes on every event of Secret name, and on every (re)start of the
// watch, since events may have been missed while it was down.
func (s *KeyStore) watch(ctx context.Context, name string, poke func()) {
	const minBackoff, maxBackoff = time.Second, 30 * time.Second
	backoff := minBackoff
	for ctx.Err() == nil {
		w, err := s.opts.Client.Watch(ctx, &corev1.SecretList{},
			client.InNamespace(s.opts.Namespace), client.MatchingFields{"metadata.name": name})
		if err != nil {
			s.opts.Log.V(1).Info("watching a CA secret failed", "secret", name, "retryIn", backoff, "err", err.Error())
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		backoff = minBackoff
		poke()
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				break
			}
			poke()
		}
		w.Stop()
	}
}

// Reload reads the CA Secrets and, when they changed and are valid, puts
// the new keys in use and calls OnRotate. It returns whether the keys
// changed. An invalid or missing Secret is an error wrapping
// ErrInvalidCASecret or ErrKeysUnavailable, and the keys in use stay.
func (s *KeyStore) Reload(ctx context.Context) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.Current()
	next, err := s.read(ctx, old)
	if err != nil {
		s.reloads.WithLabelValues(reloadRefused).Inc()
		return false, err
	}
	if next.Equal(old) {
		return false, nil
	}
	now := s.opts.Clock.Now()
	rot := s.rotation(old, next, now)
	s.current.Store(next)
	s.reloads.WithLabelValues(reloadRotated).Inc()
	log := s.opts.Log.WithValues("keys", next.Source())
	log.Info("CA keys rotated", "signingCA", next.CA().Cert.Subject.String(),
		"signingRoots", next.SigningRoots(), "addedRoots", rot.Added, "retiredRoots", len(rot.Retired))
	for _, fp := range next.SigningRoots() {
		if !slices.Contains(old.RootFingerprints(), fp) {
			// Step 2 taken before step 1 had reached the workloads: peers
			// that do not know the root yet refuse the new leaves.
			log.Info("warning: the CA now signs under a root that was not trusted before this change; add a new root to root-cert.pem, and let it spread, before signing with it", "root", fp)
		}
	}
	if s.opts.OnRotate != nil {
		s.opts.OnRotate(rot)
	}
	return true, nil
}

// read loads the keys from the Secret that cur came from: cacerts when it
// exists, else istio-ca-secret. Unlike LoadOrCreateKeys it creates nothing
// and does not fall back from one Secret to the other when the Secret in
// use was deleted: a different root appearing at once would split the
// fleet's trust, so a deleted Secret is refused until a restart.
func (s *KeyStore) read(ctx context.Context, cur *Keys) (*Keys, error) {
	ns, now := s.opts.Namespace, s.opts.Clock.Now()
	plugin := client.ObjectKey{Namespace: ns, Name: PluginSecret}
	var sec corev1.Secret
	switch err := s.opts.Client.Get(ctx, plugin, &sec); {
	case err == nil:
		return keysFromSecret(&sec, now)
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%w: reading %s: %w", ErrKeysUnavailable, plugin, err)
	case cur.Source() == plugin.String():
		return nil, fmt.Errorf("%w: %s was deleted; the CA keeps the keys it loaded from it (a restart falls back to %s)", ErrInvalidCASecret, plugin, SelfSignedSecret)
	}
	self := client.ObjectKey{Namespace: ns, Name: SelfSignedSecret}
	switch err := s.opts.Client.Get(ctx, self, &sec); {
	case err == nil:
		return keysFromSecret(&sec, now)
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%w: %s was deleted; the CA keeps the keys it loaded from it (a restart creates a new root)", ErrInvalidCASecret, self)
	default:
		return nil, fmt.Errorf("%w: reading %s: %w", ErrKeysUnavailable, self, err)
	}
}

// rotation works out what the trust bundle must do for old -> next at now,
// and records the roots the CA stops signing under. Called with mu held.
func (s *KeyStore) rotation(old, next *Keys, now time.Time) Rotation {
	for _, fp := range old.SigningRoots() {
		if !slices.Contains(next.SigningRoots(), fp) {
			s.stopped[fp] = now
		}
	}
	for _, fp := range next.SigningRoots() {
		delete(s.stopped, fp) // signing under it again
	}
	rot := Rotation{Old: old, New: next}
	oldRoots, newRoots := old.RootFingerprints(), next.RootFingerprints()
	for _, fp := range newRoots {
		if !slices.Contains(oldRoots, fp) {
			rot.Added = append(rot.Added, fp)
		}
	}
	for _, fp := range oldRoots {
		if slices.Contains(newRoots, fp) {
			continue
		}
		// When this process never signed under the root it cannot know
		// whether an earlier one did: count from now.
		last, ok := s.stopped[fp]
		if !ok {
			last = now
		}
		rot.Retired = append(rot.Retired, Retirement{Fingerprint: fp, At: last.Add(s.opts.MaxLeafTTL + s.opts.RetireGrace)})
	}
	return rot
}
