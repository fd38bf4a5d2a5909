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
	// RootSpread is how long a root must have been trusted (in the trust
	// bundle, on its way to every workload) before the CA signs leaves
	// under it. A new signing CA whose root is younger is staged: its
	// roots join at once, and the CA keeps signing with the keys in use
	// until the root is old enough. So a cacerts that replaces CA and root
	// in one edit breaks no handshake. Default one minute; negative
	// switches at once.
	RootSpread time.Duration
	// Resync re-reads the Secrets this often even without a watch event.
	// Default one minute.
	Resync time.Duration
	// OnRotate is called by Reload (so by Run) after the keys changed, one
	// call at a time, in order, with Reload's context: it ends when Run's
	// does, and it should bound any API call it makes with a timeout
	// derived from it, since Run reloads nothing while it is called. It
	// may be nil.
	OnRotate func(context.Context, Rotation)
	// Clock dates the keys' validation and the retirements, and times
	// Run's resync, the end of a staged rotation and the watch's retry
	// backoff. Default the real clock.
	Clock clock.WithTicker
	// Metrics registers meshfed_ca_key_reloads_total; nil skips it.
	Metrics prometheus.Registerer
	Log     logr.Logger
}

// DefaultKeyStoreOptions returns the defaults of KeyStoreOptions.
func DefaultKeyStoreOptions() KeyStoreOptions {
	return KeyStoreOptions{
		MaxLeafTTL:  24 * time.Hour,
		RetireGrace: time.Minute,
		RootSpread:  time.Minute,
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
	if o.RootSpread == 0 {
		o.RootSpread = d.RootSpread
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
	// PEM is the root certificate.
	PEM []byte
	// At is when the root may leave the trust bundle: the time the CA
	// last signed under it, plus MaxLeafTTL and RetireGrace.
	At time.Time
}

// Key reload results, the values of meshfed_ca_key_reloads_total's label
// "result".
const (
	reloadRotated = "rotated"
	reloadStaged  = "staged"
	reloadRefused = "refused"
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
//     go.
//
// The steps may follow each other as fast as the operator likes, even in
// one edit: a signing CA whose root has been trusted for less than
// RootSpread is staged (its roots are trusted at once, the keys in use keep
// signing) and taken into use when the root is old enough; and no root
// leaves before its leaves have expired. So no handshake fails on a leaf
// whose root a peer does not know yet, or no longer knows.
//
// A Secret that fails validation (a CA that does not chain to the new
// roots, a deleted Secret, a broken PEM) is refused with an error that
// names it, counted, and the keys in use stay. Safe for concurrent use.
type KeyStore struct {
	opts    KeyStoreOptions
	current atomic.Pointer[Keys]
	reloads *prometheus.CounterVec

	mu sync.Mutex // serializes Reload; guards the fields below
	// stopped holds, per root fingerprint, when this process last signed
	// under that root, for roots it no longer signs under.
	stopped map[string]time.Time
	// trustedSince holds, per root fingerprint in use or configured, when
	// this process first trusted it.
	trustedSince map[string]time.Time
	// stagedUntil, when set, is when a staged signing CA may be taken into
	// use: Run reloads then.
	stagedUntil time.Time
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
			Help: "Reloads of the CA Secrets that found a change, by result: rotated (new keys in use), staged (a new signing CA waits for its root to spread) or refused (invalid; the keys in use stay).",
		}, []string{"result"}),
		stopped:      map[string]time.Time{},
		trustedSince: map[string]time.Time{},
	}
	// The roots configured before this process started have had their
	// time to spread, as far as it can know.
	for _, fp := range keys.RootFingerprints() {
		s.trustedSince[fp] = opts.Clock.Now().Add(-max(opts.RootSpread, 0))
	}
	for _, r := range []string{reloadRotated, reloadStaged, reloadRefused} {
		s.reloads.WithLabelValues(r)
	}
	s.current.Store(keys)
	if opts.Metrics != nil {
		for _, c := range []prometheus.Collector{
			s.reloads,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "meshfed_ca_cert_expiry_timestamp_seconds",
				Help: "When the signing CA's certificate expires (Unix time), as Istio's citadel_server_cert_chain_expiry_timestamp.",
			}, func() float64 { return float64(s.Current().CA().Cert.NotAfter.Unix()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "meshfed_ca_root_cert_expiry_timestamp_seconds",
				Help: "When the first of the roots the CA signs under expires (Unix time), as Istio's citadel_server_root_cert_expiry_timestamp.",
			}, func() float64 { return float64(s.Current().signingRootsExpiry().Unix()) }),
		} {
			if err := opts.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("ca: metrics: %w", err)
			}
		}
	}
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
	resync := s.opts.Clock.NewTicker(s.opts.Resync)
	defer resync.Stop()
	// staged, while a signing CA is staged, fires when it may be taken
	// into use.
	var staged clock.Timer
	defer func() {
		if staged != nil {
			staged.Stop()
		}
	}()
	for {
		var stagedC <-chan time.Time
		if staged != nil {
			stagedC = staged.C()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-resync.C():
		case <-stagedC:
		}
		if _, err := s.Reload(ctx); err != nil && ctx.Err() == nil {
			s.opts.Log.Error(err, "CA secret refused; the CA keeps signing with the keys in use", "keys", s.Current().Source())
		}
		if staged != nil {
			staged.Stop()
			staged = nil
		}
		if until := s.StagedUntil(); !until.IsZero() {
			staged = s.opts.Clock.NewTimer(max(until.Sub(s.opts.Clock.Now()), 0))
		}
	}
}

// StagedUntil returns when the staged signing CA, if any, is taken into
// use (by Run, or the next Reload after it); zero when none is staged.
func (s *KeyStore) StagedUntil() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stagedUntil
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
			case <-s.opts.Clock.After(backoff):
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
// the new keys in use and calls OnRotate with ctx. It returns whether the
// keys changed. An invalid or missing Secret is an error wrapping
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
	now := s.opts.Clock.Now()
	s.noteTrusted(old, next, now)
	use, until := s.stage(old, next, now)
	if !until.IsZero() && !until.Equal(s.stagedUntil) {
		s.reloads.WithLabelValues(reloadStaged).Inc()
		s.opts.Log.Info("new signing CA staged: its roots join the trust bundle now, and the CA signs with it once they have spread",
			"signingCA", next.CA().Cert.Subject.String(), "until", until.UTC())
	}
	s.stagedUntil = until
	if use.Equal(old) {
		return false, nil
	}
	rot := s.rotation(old, use, now)
	s.current.Store(use)
	s.reloads.WithLabelValues(reloadRotated).Inc()
	s.opts.Log.Info("CA keys rotated", "keys", use.Source(), "signingCA", use.CA().Cert.Subject.String(),
		"signingRoots", use.SigningRoots(), "addedRoots", rot.Added, "retiredRoots", len(rot.Retired))
	if s.opts.OnRotate != nil {
		s.opts.OnRotate(ctx, rot)
	}
	return true, nil
}

// noteTrusted records when each root of next was first trusted, and
// forgets the roots neither old nor next holds (a root dropped and added
// again spreads again). Called with mu held.
func (s *KeyStore) noteTrusted(old, next *Keys, now time.Time) {
	keep := append(old.RootFingerprints(), next.RootFingerprints()...)
	for fp := range s.trustedSince {
		if !slices.Contains(keep, fp) {
			delete(s.trustedSince, fp)
		}
	}
	for _, fp := range next.RootFingerprints() {
		if _, ok := s.trustedSince[fp]; !ok {
			s.trustedSince[fp] = now
		}
	}
}

// stage returns the keys to use for the configured keys next at now, and
// when they may change by themselves (zero: they will not). When next's
// CA signs under a root trusted for less than RootSpread, the keys in use
// keep signing and trust next's roots too, until the last such root is
// old enough. Called with mu held.
func (s *KeyStore) stage(old, next *Keys, now time.Time) (*Keys, time.Time) {
	if s.opts.RootSpread < 0 {
		return next, time.Time{}
	}
	var until time.Time
	for _, fp := range next.SigningRoots() {
		if t := s.trustedSince[fp].Add(s.opts.RootSpread); t.After(now) && t.After(until) {
			until = t
		}
	}
	if until.IsZero() {
		return next, time.Time{}
	}
	return old.withRoots(next), until
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
		rot.Retired = append(rot.Retired, Retirement{Fingerprint: fp, PEM: old.rootPEM(fp), At: last.Add(s.opts.MaxLeafTTL + s.opts.RetireGrace)})
	}
	return rot
}
